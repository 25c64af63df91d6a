/**
 * docs/getting-started.md followed literally. Its shell blocks run in order,
 * in one bash, as a new reader's shell would: in an empty home of their own
 * (the hypervisor's known_hosts line and the SSH key in `~/.ssh`, nothing
 * else), mounted over root's home in a mount namespace of the run's own (the
 * tools that find home by the user database, not $HOME, as Pulumi's local
 * backend does, find it there too, and nothing reaches the machine's),
 * inside the test host's network namespace, that is on the hypervisor,
 * where the guide says to run a first try. What the test adds, and only
 * there, is the site: after step 1 the variables name the test host, its pool
 * and network, the test image and a target inside the namespace; and the
 * guide's install line, which npm runs offline from the machine's npm cache:
 * the test reaches no registry (test/support/npm-offline.ts), and the cache
 * holds what the repository's `npm ci` put there, the packages
 * package-lock.json pins. So the line takes the tarball `npm pack` makes of
 * this checkout in place of `pulumi-kvm-proxy`, and each other package at the
 * version the lock pins, within the guide's range (a range alone names the
 * registry's newest match, whose tarball the cache may lack); and right
 * before it the reader's folder gets the lock npm installs from offline (the
 * repository's, with the tarball's entry: without it npm would resolve the
 * dependencies' ranges to their newest matches too). It must end as the
 * guide's expected output shows: each proxy refuses a request without the
 * credentials and forwards one with them; then its clean-up leaves no VM; and
 * the reader's install placed nothing the lock does not pin.
 */
import { spawn } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  allDomains,
  cacheVolumeOfImage,
  deleteCachedImage,
  domainsOfStack,
  metadataOf,
  pulumiEnv,
} from "../pulumi/harness";
import { lockedVersions, NO_REGISTRY_ENV, offlineLock, unpinnedPackages } from "../support/npm-offline";
import { pack } from "../support/pack";
import { repoRoot, type TestHost, testHost } from "../support/test-host";
import { watchWhile } from "../support/wait-until";
import { testImage, testImageUrlFor } from "./images";
import {
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  testHostLibvirt,
} from "./support";

const env = inject("guest");
const GUIDE = path.join(repoRoot, "docs/getting-started.md");
/** The guide's install command, and the package the test installs from the tarball instead. */
const INSTALL = "npm install pulumi-kvm-proxy ";
const PACKAGE = "pulumi-kvm-proxy";

interface Block {
  lang: string;
  body: string;
  /** The `##` heading the block sits under. */
  section: string;
}

/** The fenced blocks of a Markdown text, in order, with their sections. */
function blocksOf(markdown: string): Block[] {
  const blocks: Block[] = [];
  let section = "";
  let open: { lang: string; lines: string[] } | undefined;
  for (const line of markdown.split("\n")) {
    const fence = /^```(\w*)\s*$/.exec(line);
    if (open !== undefined) {
      if (fence !== null && fence[1] === "") {
        blocks.push({ lang: open.lang, body: open.lines.join("\n"), section });
        open = undefined;
      } else open.lines.push(line);
    } else if (fence !== null) open = { lang: fence[1] ?? "", lines: [] };
    else if (line.startsWith("## ")) section = line.slice(3).trim();
  }
  return blocks;
}

/** A pattern for the guide's expected check lines: any proxy address, any 2xx from the target. */
function checkLinePattern(expected: string): RegExp {
  const escaped = expected.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(
    `^${escaped.replace(/http:\/\/\d+\\\.\d+\\\.\d+\\\.\d+:/, "http://[0-9.]+:").replace(/with: 200$/, "with: 2\\d\\d")}$`,
  );
}

const guideText = readFileSync(GUIDE, "utf8");
const blocks = blocksOf(guideText);
const shell = blocks.filter((b) => b.lang === "sh");
const cleanUp = shell.filter((b) => b.section === "Clean up");
const steps = shell.filter((b) => b.section !== "Clean up");
const expectedCheck = blocks.filter((b) => b.lang === "text" && b.section.startsWith("6."));

/** The project and stack the guide makes, its folder and its package.json's name, as its text names them. */
const GUIDE_OWNER = (() => {
  const project = /^name: (\S+)$/m.exec(guideText)?.[1];
  const stack = /pulumi stack init (\S+)/.exec(guideText)?.[1];
  const folder = /^mkdir (\S+) && cd \1$/m.exec(guideText)?.[1];
  const pkg = /^cat > package\.json <<'EOF'\n(.*)\nEOF$/m.exec(guideText)?.[1];
  if (project === undefined || stack === undefined || folder === undefined || pkg === undefined) {
    throw new Error(`${GUIDE} names no project, stack, project folder or package.json`);
  }
  return { project, stack, folder, packageName: (JSON.parse(pkg) as { name: string }).name };
})();

let host: TestHost;
let dir: string;
let home: string;
let domainsBefore: Set<string>;
let site = "";
let tarball = "";
/** The lock the reader's folder gets right before the guide's install line. */
let readerLock = "";

/**
 * The VMs the guide's stack owns, by their metadata: other files boot guests
 * of their own meanwhile, and a VM left by an earlier run is not this one's.
 */
function guideDomains(): string[] {
  return domainsOfStack(host, GUIDE_OWNER.stack).filter(
    (d) =>
      !domainsBefore.has(d) && metadataOf(host, d)?.includes(`project="${GUIDE_OWNER.project}"`) === true,
  );
}

/**
 * Runs a bash script on the hypervisor (in the namespace) as the reader's
 * shell; its output whatever the exit. `watch` receives its output as it
 * comes; an abort of `signal` interrupts the script's process group (SIGINT:
 * the Pulumi CLI cancels gracefully).
 */
function runAsReader(
  script: string,
  name: string,
  options: { onOutput?: (bytes: number) => void; signal?: AbortSignal } = {},
): Promise<{ code: number; output: string }> {
  const file = path.join(dir, `${name}.sh`);
  writeFileSync(file, script);
  return new Promise((resolve, reject) => {
    // The machine's npm cache stays visible under the reader's home (the bind before the home's own).
    const mounts = [
      `mount --bind ${NPM_CACHE} ${home}/.npm`,
      `mount --rbind ${home} ${os.homedir()}`,
      `cd ${path.join(dir, "work")}`,
      `exec bash ${file}`,
    ].join(" && ");
    const child = spawn(
      "ip",
      ["netns", "exec", env.netns, "unshare", "--mount", "--propagation", "private", "sh", "-c", mounts],
      {
        cwd: path.join(dir, "work"),
        env: {
          PATH: pulumiEnv().PATH,
          HOME: os.homedir(),
          LANG: "C.UTF-8",
          // The machine's npm cache, as the repository's `npm ci` filled it; no registry.
          npm_config_cache: path.join(os.homedir(), ".npm"),
          ...NO_REGISTRY_ENV,
          PULUMI_SKIP_UPDATE_CHECK: "true",
          PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: "true",
        },
        stdio: ["ignore", "pipe", "pipe"],
        // A process group of its own, which an abort interrupts whole.
        detached: options.signal !== undefined,
      },
    );
    let output = "";
    const more = (d: Buffer) => {
      output += d.toString();
      options.onOutput?.(output.length);
    };
    child.stdout.on("data", more);
    child.stderr.on("data", more);
    const interrupt = () => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGINT");
    };
    options.signal?.addEventListener("abort", interrupt, { once: true });
    child.once("error", reject);
    child.once("close", (code) => {
      options.signal?.removeEventListener("abort", interrupt);
      resolve({ code: code ?? -1, output });
    });
  });
}

/** The npm cache the reader's install reads from. */
const NPM_CACHE = path.join(os.homedir(), ".npm");

/**
 * A word of the guide's install line as the reader's npm takes it offline:
 * the package from the tarball, each other at the version the lock pins
 * (which the guide's range, if it names one, must match: a major, or the exact version).
 */
function offlineWord(word: string): string {
  if (word === PACKAGE) return tarball;
  if (word.startsWith("-")) return word;
  const at = word.lastIndexOf("@");
  const name = at > 0 ? word.slice(0, at) : word;
  const range = at > 0 ? word.slice(at + 1) : "";
  const pinned = lockedVersions(name)[name] ?? "";
  if (range !== "" && pinned !== range && !pinned.startsWith(`${range}.`)) {
    throw new Error(
      `the guide installs ${word}; package-lock.json pins ${name} ${pinned}, out of that range`,
    );
  }
  return `${name}@${pinned}`;
}

/** The guide's install line, as the reader's shell runs it offline: after the lock, each word as {@link offlineWord}. */
function offlineInstall(line: string): string {
  const words = line.slice("npm install ".length).split(" ");
  return [`cp ${readerLock} package-lock.json`, `npm install ${words.map(offlineWord).join(" ")}`].join("\n");
}

/** The script of the guide's steps: step 1, the site, then the rest, the install line run offline. */
function stepsScript(): string {
  const [first, ...rest] = steps;
  const lines = rest.flatMap((b) => b.body.split("\n"));
  const installs = lines.filter((l) => l.startsWith(INSTALL));
  expect(installs, `the guide installs with "${INSTALL.trim()}" once`).toHaveLength(1);
  return [
    "set -euo pipefail",
    first?.body ?? "",
    site,
    ...lines.map((l) => (l.startsWith(INSTALL) ? offlineInstall(l) : l)),
  ].join("\n");
}

beforeAll(async () => {
  // The reader's home is mounted over this user's: the checkout must not be under it.
  expect(path.relative(os.homedir(), repoRoot).startsWith(".."), `${repoRoot} is under ${os.homedir()}`).toBe(
    true,
  );
  await testImage(env);
  host = testHost();
  dir = mkdtempSync(path.join(os.tmpdir(), "kvmpt-getting-started-"));
  home = path.join(dir, "home");
  mkdirSync(path.join(home, ".ssh"), { recursive: true, mode: 0o700 });
  mkdirSync(path.join(home, ".npm"));
  mkdirSync(NPM_CACHE, { recursive: true });
  mkdirSync(path.join(dir, "work"));
  copyFileSync(host.knownHostsPath, path.join(home, ".ssh/known_hosts"));
  copyFileSync(host.sshKeyPath, path.join(home, ".ssh/id_ed25519"));
  chmodSync(path.join(home, ".ssh/id_ed25519"), 0o600);
  tarball = pack(path.join(dir, "pack"));
  // The lock of the reader's folder as the guide's package.json starts it: no dependencies yet.
  readerLock = path.join(dir, "reader-lock.json");
  writeFileSync(
    readerLock,
    offlineLock(
      path.join(dir, "work", GUIDE_OWNER.folder),
      { name: GUIDE_OWNER.packageName },
      { [PACKAGE]: tarball },
    ),
  );
  site = [
    "# The site: the test host and what it serves inside its namespace.",
    `export KVM_URI=ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
    "export KVM_DOMAIN_TYPE=qemu",
    `export KVM_POOL=${host.poolName} KVM_NETWORK=${host.network}`,
    `export IMAGE_URL=${imageUrl()}`,
    `export CHECK_URL=${env.targetUrl}`,
  ].join("\n");
  domainsBefore = new Set(allDomains(host));
});

const imageUrl = () => testImageUrlFor(env, "getting-started");

afterAll(async () => {
  // A run that stopped half-way still has its stack: the guide's clean-up, in the same shell state.
  if (dir === undefined || domainsBefore === undefined) return;
  if (guideDomains().length > 0) {
    const passphrase = /export PULUMI_CONFIG_PASSPHRASE=.*/.exec(stepsScript())?.[0] ?? "";
    await runAsReader(
      [`cd ${GUIDE_OWNER.folder}`, passphrase, ...cleanUp.map((b) => b.body)].join("\n"),
      "afterall",
    );
  }
  // The guide's clean-up leaves the cached image, as a user's would: it goes here.
  deleteCachedImage(host, cacheVolumeOfImage({ url: imageUrl() }));
  rmSync(dir, { recursive: true, force: true });
});

describe("the getting-started guide, followed literally", () => {
  it("is six numbered steps of shell, an expected check output, and a clean-up", () => {
    const numbered = [...new Set(steps.map((b) => b.section))];
    numbered.forEach((section, i) => {
      expect(section).toMatch(new RegExp(`^${i + 1}\\. `));
    });
    expect(numbered.length).toBeLessThanOrEqual(6);
    expect(numbered.length).toBeGreaterThanOrEqual(5);
    expect(steps[0]?.body).toMatch(/^export KVM_URI=/m);
    expect(expectedCheck).toHaveLength(1);
    expect(cleanUp).toHaveLength(1);
  });

  it(
    "ends with both proxies answering as its expected output shows, and its clean-up leaves no VM",
    async () => {
      // Watched: the run's output and the guide's VMs (named by the run); a stall fails it, not a guess of its time.
      let outputBytes = 0;
      const libvirt = testHostLibvirt(host);
      const watched = new Map<string, GuestProgress>();
      const run = await watchWhile(
        (signal) =>
          runAsReader([stepsScript(), ...cleanUp.map((b) => b.body)].join("\n"), "guide", {
            onOutput: (n) => {
              outputBytes = n;
            },
            signal,
          }),
        {
          what: "the guide's steps and clean-up to finish",
          progress: async () => ({
            outputBytes,
            guests: await Promise.all(
              guideDomains().map((d) => {
                const g = watched.get(d) ?? new GuestProgress(libvirt.lv, d);
                watched.set(d, g);
                return g.read();
              }),
            ),
          }),
          stallMs: GUEST_STALL_MS,
          ceilingMs: GUEST_CEILING_MS,
          // Each look lists the stack's VMs through virsh: not too often.
          pollMs: 15_000,
        },
      ).finally(() => libvirt.close());
      const expected = (expectedCheck[0]?.body ?? "").split("\n").filter((l) => l !== "");
      const seen = run.output.split("\n").filter((l) => / without credentials: /.test(l));
      // Two proxies, each line in the guide's shape: 407 without credentials, the target's 2xx with them.
      expect(expected).toHaveLength(2);
      expect(seen, `the guide's run printed:\n${run.output}`).toHaveLength(expected.length);
      seen.forEach((line, i) => {
        expect(line).toMatch(checkLinePattern(expected[i] ?? ""));
      });
      expect(run.code, `the guide's run printed:\n${run.output}`).toBe(0);
      expect(run.output).toMatch(/The resources in the stack have been deleted|Resources:\s+- 3 deleted/);
      expect(guideDomains()).toEqual([]);
      // What a machine whose npm cache only `npm ci` filled has: the same run would work there.
      expect(unpinnedPackages(path.join(dir, "work", GUIDE_OWNER.folder))).toEqual([]);
    },
    GUEST_TEST_TIMEOUT_MS,
  );
});
