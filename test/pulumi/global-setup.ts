import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { repoRoot, testHost, virshUri } from "../support/test-host";

/**
 * Prepares what the `pulumi` project needs beyond the test host (which
 * test/support/global-setup.ts starts first): dist/ built and
 * `require("pulumi-kvm-proxy")` resolvable (scripts/prepare-examples), the
 * Pulumi CLI built (scripts/pulumi-cli; a no-op when cached), QEMU's
 * capabilities probed once (the first define on a fresh daemon probes them,
 * which can outlast an RPC deadline), and the tiny test image. Fails loudly
 * when any of it is missing.
 */
export default function setup(): void {
  execFileSync(path.join(repoRoot, "scripts/prepare-examples"), { stdio: "inherit" });
  execFileSync(path.join(repoRoot, "scripts/pulumi-cli"), ["build"], { stdio: "inherit" });
  const host = testHost();
  execFileSync("virsh", ["-q", "-c", virshUri(host), "domcapabilities", "--virttype", "qemu"], {
    stdio: "ignore",
    timeout: 300_000,
  });
  const images = path.join(repoRoot, ".state/pulumi-e2e/images");
  mkdirSync(images, { recursive: true });
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", path.join(images, "empty.qcow2"), "64M"]);
}
