/**
 * The stock guest images (scripts/guest-image, variant stock) and their
 * package mirrors (scripts/guest-mirror), which first-boot.test.ts boots and
 * serves. Both scripts cache by recipe and build one at a time under a lock,
 * so whoever asks second waits for the build in flight and finds its result.
 *
 * The guest project's setup starts building them in the background as the run
 * begins: the builds (a debootstrap and a package download per release) then
 * overlap the groups that run before the guests instead of delaying the
 * first-boot file. That file still asks for them itself, so a background
 * build that failed is retried there and fails loudly.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, openSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "../support/test-host";

/** The Debian suites first-boot.test.ts boots stock images of (its releases name them from here). */
export const STOCK_SUITES = ["bookworm", "trixie"] as const;

/** The stock image of `suite`: its path (building it when the recipe's image is missing). */
export function buildStock(suite: string): string {
  const out = execFileSync(path.join(repoRoot, "scripts/guest-image"), ["build"], {
    encoding: "utf8",
    env: { ...process.env, KVMP_GUEST_VARIANT: "stock", KVMP_GUEST_SUITE: suite },
    stdio: ["ignore", "pipe", "inherit"],
    timeout: 30 * 60_000,
  });
  const image = out.trim().split("\n").pop() ?? "";
  if (!existsSync(image) || !existsSync(`${image}.dpkg-status`))
    throw new Error(`no stock image for ${suite}: ${out}`);
  return image;
}

/** The folder of the package mirror for `suite`'s stock image (making it when missing). */
export function buildMirror(suite: string, image: string): string {
  return execFileSync(path.join(repoRoot, "scripts/guest-mirror"), ["build", suite, `${image}.dpkg-status`], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    timeout: 20 * 60_000,
  })
    .trim()
    .split("\n")
    .pop() as string;
}

/**
 * Starts building every stock image and its mirror in a process group of its
 * own, its output in `.state/images/stock-prebuild.log`. The returned function
 * ends the builds still running (the scripts build in temporary folders, so an
 * ended build leaves nothing a later one would trust).
 */
export function prebuildStock(): () => void {
  const log = openSync(path.join(repoRoot, ".state/images/stock-prebuild.log"), "w");
  const script = STOCK_SUITES.map(
    (s) =>
      `image=$(KVMP_GUEST_VARIANT=stock KVMP_GUEST_SUITE=${s} scripts/guest-image build | tail -n 1) && ` +
      `scripts/guest-mirror build ${s} "$image.dpkg-status"`,
  ).join("\n");
  const child: ChildProcess = spawn("bash", ["-c", script], {
    cwd: repoRoot,
    detached: true,
    stdio: ["ignore", log, log],
  });
  child.unref();
  return () => {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      // Already gone.
    }
  };
}
