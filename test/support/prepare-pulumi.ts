import { execFileSync } from "node:child_process";
import path from "node:path";
import { repoRoot, testHost, virshUri } from "./test-host";

let prepared = false;

/**
 * What every project driving the real Pulumi CLI needs, done once per vitest
 * run however many global setups ask: dist/ built and the package linked for
 * the repo's own programs (scripts/prepare-examples) and the CLI built
 * (scripts/pulumi-cli) unless `npm test` already did both (KVMP_PREPARED=1),
 * and QEMU's capabilities probed once (the first define on a fresh daemon
 * probes them, which can outlast an RPC deadline). Fails loudly.
 */
export function preparePulumi(): void {
  if (prepared) return;
  if (process.env.KVMP_PREPARED !== "1") {
    execFileSync(path.join(repoRoot, "scripts/prepare-examples"), { stdio: "inherit" });
    execFileSync(path.join(repoRoot, "scripts/pulumi-cli"), ["build"], { stdio: "inherit" });
  }
  execFileSync("virsh", ["-q", "-c", virshUri(testHost()), "domcapabilities", "--virttype", "qemu"], {
    stdio: "ignore",
    timeout: 300_000,
  });
  prepared = true;
}
