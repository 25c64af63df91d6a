import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { preparePulumi } from "../support/prepare-pulumi";
import { repoRoot } from "../support/test-host";

/**
 * Prepares what the `pulumi` project needs beyond the test host (which
 * test/support/global-setup.ts starts first): the CLI and the package
 * (preparePulumi) and the tiny test image. Fails loudly when any is missing.
 */
export default function setup(): void {
  preparePulumi();
  const images = path.join(repoRoot, ".state/pulumi-e2e/images");
  mkdirSync(images, { recursive: true });
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", path.join(images, "empty.qcow2"), "64M"]);
}
