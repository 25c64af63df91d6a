/**
 * The guest images (scripts/guest-image): the test image every booted-guest
 * file boots, and the stock images with their package mirrors
 * (scripts/guest-mirror) that first-boot.test.ts boots and serves. Both
 * scripts cache by recipe in the machine's cache, shared by every checkout
 * (a fresh clone finds what an earlier run built), and build one at a time
 * under a lock, so whoever asks second waits for the build in flight and
 * finds its result.
 *
 * The guest project's setup starts building all of them in the background as
 * the run begins, the test image first: the builds (a debootstrap per image
 * and a package download per release) then overlap the groups that run before
 * the guests instead of delaying the whole run. Each guest file still asks for
 * its image itself (`testImage`, `buildStock`), which waits for the build in
 * flight, or retries one that failed and fails loudly.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, openSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { sha256File } from "../support/sha256-file";
import { repoRoot } from "../support/test-host";
import type { GuestEnv } from "./support";

/** The Debian suites first-boot.test.ts boots stock images of (its releases name them from here). */
export const STOCK_SUITES = ["bookworm", "trixie"] as const;

const SCRIPT = path.join(repoRoot, "scripts/guest-image");

/** Where the test image is or will be once built (`scripts/guest-image where`: no build). */
export function testImagePath(): string {
  return execFileSync(SCRIPT, ["where"], { encoding: "utf8" }).trim();
}

/**
 * The test image's URL inside the namespace for one test file: the image server ignores the query,
 * so each file's URL keys a cache volume of its own on the host, which no other file (running at
 * the same time) uploads or deletes, and which the file deletes at its end.
 */
export function testImageUrlFor(env: GuestEnv, file: string): string {
  return `${env.imageUrlInNetns}?for=${file}`;
}

/**
 * The test image, built (waiting for the build in flight), and its SHA-256;
 * it must be downloadable from the root namespace (a loud failure now rather
 * than a mysterious boot later).
 */
export async function testImage(env: GuestEnv): Promise<{ path: string; sha256: string }> {
  const image = build({});
  if (path.basename(image) !== path.basename(new URL(env.imageUrlFromRoot).pathname)) {
    throw new Error(`the test image built is ${image}, but the setup serves ${env.imageUrlFromRoot}`);
  }
  await expectServed(env.imageUrlFromRoot);
  return { path: image, sha256: await sha256File(image) };
}

function expectServed(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "HEAD", timeout: 30_000 }, (res) => {
      res.resume();
      if (res.statusCode === 200) resolve();
      else reject(new Error(`${url} answered ${res.statusCode}`));
    });
    req.once("timeout", () => req.destroy(new Error(`${url}: no answer`)));
    req.once("error", reject);
    req.end();
  });
}

/** The stock image of `suite`: its path (building it when the recipe's image is missing). */
export function buildStock(suite: string): string {
  const image = build({ KVMP_GUEST_VARIANT: "stock", KVMP_GUEST_SUITE: suite });
  if (!existsSync(`${image}.dpkg-status`)) throw new Error(`no dpkg status beside the stock image ${image}`);
  return image;
}

function build(env: Record<string, string>): string {
  let out: string;
  try {
    out = execFileSync(SCRIPT, ["build"], {
      encoding: "utf8",
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit"],
      timeout: 30 * 60_000,
    });
  } catch (err) {
    throw new Error(
      `scripts/guest-image build (${JSON.stringify(env)}) failed, so no guest can boot (see .state/prebuild-images.log and the build logs beside the images): ${
        err instanceof Error ? err.message : String(err)
      }`,
    );
  }
  const image = out.trim().split("\n").pop() ?? "";
  if (!image.endsWith(".qcow2") || !existsSync(image)) {
    throw new Error(`scripts/guest-image build printed ${JSON.stringify(out)}, not an image path`);
  }
  return image;
}

/**
 * A mirror access log's lines for the Recommends it holds (scripts/guest-mirror fetches them) that
 * the provider's installs leave out: GLib's (the MIME database, its libxml2 and ICU, translations,
 * xdg-user-dirs), which the agent's GLib would otherwise bring.
 */
export const UNFETCHED_RECOMMENDS =
  /^200 \/(\.\/)?(libglib2\.0-data|shared-mime-info|xdg-user-dirs|libxml2|libicu[0-9]+)_[^ ]+\.deb$/m;

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
 * A stock image's user-data with the mirror at `hostPort` as its only package
 * source (what it takes, written out in docs/guides/images.md), `bootcmd` lines after
 * the first.
 */
export function mirrorUserData(hostPort: string, bootcmd: readonly string[] = []): string {
  return [
    "#cloud-config",
    "bootcmd:",
    // A genericcloud image keeps its sources in deb822 form, which cloud-init's apt module leaves alone.
    "  - [rm, -f, /etc/apt/sources.list.d/debian.sources]",
    ...bootcmd,
    "apt:",
    "  preserve_sources_list: false",
    "  sources_list: |",
    `    deb [trusted=yes] http://${hostPort}/ ./`,
    "",
  ].join("\n");
}

/**
 * Starts building the test image, then every stock image and its mirror, in a
 * process group of its own, its output in `.state/prebuild-images.log`. The
 * returned function ends the builds still running (the scripts build in
 * temporary folders, so an ended build leaves nothing a later one would trust).
 */
export function prebuildImages(): () => void {
  mkdirSync(path.join(repoRoot, ".state"), { recursive: true });
  const log = openSync(path.join(repoRoot, ".state/prebuild-images.log"), "w");
  const script = [
    "scripts/guest-image build",
    ...STOCK_SUITES.map(
      (s) =>
        `image=$(KVMP_GUEST_VARIANT=stock KVMP_GUEST_SUITE=${s} scripts/guest-image build | tail -n 1) && ` +
        `scripts/guest-mirror build ${s} "$image.dpkg-status"`,
    ),
  ].join("\n");
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
