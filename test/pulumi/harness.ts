import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { parseImage } from "../../provider/kvm/config/image";
import { METADATA_NAMESPACE } from "../../provider/kvm/domain/metadata";
import { perVmVolumeNames } from "../../provider/kvm/domain/names";
import { ImageCache } from "../../provider/kvm/host/image-cache";
import { Failures } from "../../provider/kvm/validation";
import { repoRoot, type TestHost, virshUri } from "../support/test-host";

/** Where every workspace lives: inside the repo, so programs resolve its node_modules. */
export const E2E_ROOT = path.join(repoRoot, ".state/pulumi-e2e");
export const TEST_IMAGE = path.join(E2E_ROOT, "images/empty.qcow2");

/** The engine's own lines that print property values at -v=7 and above (secret ones included). */
export const ENGINE_PROPERTY_DUMP =
  /"msg":"(Marshaling property for RPC|Unmarshaling property for RPC|Planner decided )/;

let cliEnv: NodeJS.ProcessEnv | undefined;

/** The environment `scripts/pulumi-cli env` exports. Throws (loudly) when the CLI is missing. */
export function pulumiEnv(): NodeJS.ProcessEnv {
  if (cliEnv !== undefined) return cliEnv;
  const out = execFileSync(
    "bash",
    [
      "-c",
      'eval "$(scripts/pulumi-cli env --no-build)" && node -e "console.log(JSON.stringify(process.env))"',
    ],
    { cwd: repoRoot, encoding: "utf8" },
  );
  const env = JSON.parse(out) as NodeJS.ProcessEnv;
  const bin = path.join(repoRoot, ".tools/pulumi/bin");
  for (const exe of [
    "pulumi",
    "pulumi-language-nodejs",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-language-go",
    "pulumi-language-yaml",
    "pulumi-resource-pulumi-nodejs",
    "kvmproxy-schema",
  ]) {
    if (!existsSync(path.join(bin, exe))) {
      throw new Error(`the Pulumi CLI is missing (${bin}/${exe}); run scripts/pulumi-cli build`);
    }
  }
  cliEnv = { ...env, PULUMI_CONFIG_PASSPHRASE: "", PULUMI_SKIP_UPDATE_CHECK: "true" };
  return cliEnv;
}

/** A tool (not the CLI) in the CLI's environment: its exit code and everything it printed. */
export function runTool(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = pulumiEnv()) {
  const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8", timeout: 600_000 });
  if (r.error !== undefined) throw r.error;
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout and stderr together. */
  output: string;
}

let seq = 0;

/** A Pulumi project folder with its own file:// backend and one stack. */
export class Workspace {
  readonly dir: string;
  readonly stack: string;
  readonly backend: string;
  /** The project's name (Pulumi.yaml), which the backend files its stacks under. */
  readonly project: string;
  /** Added to the CLI's environment on every run (e.g. PULUMI_DEBUG_COMMANDS for --event-log). */
  extraEnv: NodeJS.ProcessEnv = {};

  /**
   * `program`: either files to write ({"index.js": "..."}), or `{ main }`, a
   * folder (relative to the repo) the Pulumi.yaml points at.
   */
  constructor(
    tag: string,
    project: { name: string; typescript?: boolean; main?: string; files?: Record<string, string> },
    /** The folder the workspace is made in (default {@link E2E_ROOT}, inside the repo). */
    root: string = E2E_ROOT,
  ) {
    seq += 1;
    this.stack = `t${process.pid}x${seq}`;
    this.dir = path.join(root, `${tag}-${process.pid}-${seq}`);
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(this.dir, { recursive: true });
    this.project = project.name;
    this.backend = path.join(this.dir, ".backend");
    mkdirSync(this.backend);
    const yaml: Record<string, unknown> = {
      name: project.name,
      runtime: { name: "nodejs", options: { typescript: project.typescript ?? false } },
    };
    if (project.main !== undefined) {
      yaml.main = path.relative(this.dir, path.join(repoRoot, project.main));
    }
    writeFileSync(path.join(this.dir, "Pulumi.yaml"), YAML.stringify(yaml));
    for (const [name, text] of Object.entries(project.files ?? {}))
      writeFileSync(path.join(this.dir, name), text);
    if (project.files !== undefined && !("package.json" in project.files)) {
      writeFileSync(
        path.join(this.dir, "package.json"),
        JSON.stringify({ name: project.name, private: true, main: "index.js" }),
      );
    }
    this.mustRun("stack", "init");
  }

  run(...args: string[]): RunResult {
    return this.runWithInput(undefined, ...args);
  }

  runWithInput(input: string | undefined, ...args: string[]): RunResult {
    const r = spawnSync("pulumi", [...args, "--stack", this.stack, "--non-interactive", "--color", "never"], {
      cwd: this.dir,
      ...(input !== undefined ? { input } : {}),
      // PWD as this path names it: Pulumi's getcwd otherwise resolves a symlinked .state (a git worktree
      // sharing the main checkout's) and runs that checkout's program and dist/.
      env: { ...pulumiEnv(), PWD: this.dir, PULUMI_BACKEND_URL: `file://${this.backend}`, ...this.extraEnv },
      encoding: "utf8",
      timeout: 600_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    if (r.error) throw r.error;
    return {
      code: r.status ?? -1,
      stdout: r.stdout,
      stderr: r.stderr,
      output: `${r.stdout}\n${r.stderr}`,
    };
  }

  /**
   * Runs the CLI without blocking this process: tests that host something
   * the provider talks to (a wire relay) must keep serving meanwhile, which
   * the synchronous {@link run} would prevent. `env` adds to the CLI's;
   * `started` gets the CLI's process (to interrupt it).
   */
  runAsync(
    args: string[],
    env: NodeJS.ProcessEnv = {},
    started?: (cli: ChildProcess) => void,
  ): Promise<RunResult> {
    return new Promise((resolve, reject) => {
      const child = spawn(
        "pulumi",
        [...args, "--stack", this.stack, "--non-interactive", "--color", "never"],
        {
          cwd: this.dir,
          env: {
            ...pulumiEnv(),
            PWD: this.dir,
            PULUMI_BACKEND_URL: `file://${this.backend}`,
            ...this.extraEnv,
            ...env,
          },
        },
      );
      started?.(child);
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (b: Buffer) => {
        stdout += b.toString();
      });
      child.stderr.on("data", (b: Buffer) => {
        stderr += b.toString();
      });
      child.on("error", reject);
      child.on("close", (code) =>
        resolve({ code: code ?? -1, stdout, stderr, output: `${stdout}\n${stderr}` }),
      );
    });
  }

  /** Runs and throws with the whole output unless the exit code is 0. */
  mustRun(...args: string[]): RunResult {
    const r = this.run(...args);
    if (r.code !== 0) throw new Error(`pulumi ${args.join(" ")} exited ${r.code}:\n${r.output}`);
    return r;
  }

  up(): RunResult {
    return this.mustRun("up", "--yes", "--skip-preview");
  }

  destroy(): RunResult {
    return this.mustRun("destroy", "--yes", "--skip-preview");
  }

  /** Merges `config` (full keys such as `kvm:hosts`) into the stack's config file. */
  setConfig(config: Record<string, unknown>): void {
    const file = path.join(this.dir, `Pulumi.${this.stack}.yaml`);
    const doc = existsSync(file)
      ? ((YAML.parse(readFileSync(file, "utf8")) as Record<string, unknown>) ?? {})
      : {};
    doc.config = { ...((doc.config as Record<string, unknown>) ?? {}), ...config };
    writeFileSync(file, YAML.stringify(doc));
  }

  /** Sets a secret config value, passed on stdin (never on a command line). */
  setSecret(key: string, value: string): void {
    const r = this.runWithInput(value, "config", "set", "--secret", "--raw", key);
    if (r.code !== 0) throw new Error(`pulumi config set --secret ${key} exited ${r.code}`);
  }

  outputs(): Record<string, unknown> {
    return JSON.parse(this.mustRun("stack", "output", "--json", "--show-secrets").stdout) as Record<
      string,
      unknown
    >;
  }

  /** The steps `pulumi preview --json` plans: each one's op (create, update, replace, same...) and URN. */
  previewSteps(): { op: string; urn: string }[] {
    const r = this.mustRun("preview", "--json");
    return ((JSON.parse(r.stdout) as { steps?: { op: string; urn: string }[] }).steps ?? []).map((st) => ({
      op: st.op,
      urn: st.urn,
    }));
  }

  /**
   * The raw checkpoint text (secrets stay encrypted): the file backend's
   * file as the engine last wrote it, with no CLI run. Until an update or
   * destroy has written its `latest` deployment (`stack init` writes the
   * file without it), `pulumi stack export`.
   */
  stateText(): string {
    try {
      const { text, latest } = this.checkpoint();
      if (latest !== undefined) return text;
    } catch {
      // not written yet
    }
    return this.mustRun("stack", "export").stdout;
  }

  /** The stack's last deployment (the checkpoint's `latest`, as `pulumi stack export` calls `deployment`). */
  state(): { resources: StateResource[] } {
    const parsed = JSON.parse(this.stateText()) as {
      deployment?: { resources?: StateResource[] };
      checkpoint?: { latest?: { resources?: StateResource[] } };
    };
    return { resources: (parsed.checkpoint?.latest ?? parsed.deployment)?.resources ?? [] };
  }

  proxies(): StateResource[] {
    return (this.state().resources ?? []).filter((r) => r.type === "pulumi-nodejs:dynamic:KvmProxy");
  }

  /**
   * The file backend's checkpoint of the stack, read without the CLI: its
   * text and its `latest` deployment (absent until an update or destroy
   * wrote one). The engine writes a new file and renames it into place, so
   * a read never sees half a file. Throws when the file cannot be read.
   */
  private checkpoint(): {
    text: string;
    latest?: { resources?: StateResource[]; pending_operations?: unknown[] };
  } {
    const file = path.join(this.backend, ".pulumi/stacks", this.project, `${this.stack}.json`);
    const text = readFileSync(file, "utf8");
    const parsed = JSON.parse(text) as {
      checkpoint?: { latest?: { resources?: StateResource[]; pending_operations?: unknown[] } };
    };
    return parsed.checkpoint?.latest === undefined ? { text } : { text, latest: parsed.checkpoint.latest };
  }

  /**
   * Whether the stack's checkpoint records nothing: no resource and no
   * pending operation. A file that is missing or cannot be read counts as
   * holding something.
   */
  holdsNothing(): boolean {
    try {
      const { latest } = this.checkpoint();
      return (latest?.resources ?? []).length === 0 && (latest?.pending_operations ?? []).length === 0;
    } catch {
      return false;
    }
  }

  /** Best-effort cleanup of whatever the stack still holds (no CLI run when it holds nothing). */
  cleanup(): void {
    if (this.holdsNothing()) return;
    try {
      this.run("destroy", "--yes", "--skip-preview");
    } catch {
      // reported by the test's own assertions
    }
  }
}

/** Deletes a cached image volume from the test host's pool, and its partial download if one was left. */
export function deleteCachedImage(host: TestHost, volume: string): void {
  for (const v of [volume, `${volume}.partial`]) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
}

/** Destroys each workspace's stack, then removes by hand what its stack still owns on the host (a failed test's leftovers). */
export function cleanUpWorkspaces(host: TestHost, workspaces: readonly Workspace[]): void {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
}

export interface StateResource {
  urn: string;
  type: string;
  id?: string;
  inputs?: Record<string, unknown>;
  outputs?: Record<string, unknown>;
}

export function virsh(host: TestHost, ...args: string[]): string {
  return execFileSync("virsh", ["-q", "-c", virshUri(host), ...args], {
    encoding: "utf8",
    timeout: 120_000,
    stdio: ["ignore", "pipe", "pipe"],
  });
}

export function virshQuiet(host: TestHost, ...args: string[]): void {
  try {
    virsh(host, ...args);
  } catch {
    // already gone
  }
}

export function allDomains(host: TestHost): string[] {
  return virsh(host, "list", "--all", "--name")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
}

/** Our metadata of a domain, or undefined when it has none (or is gone). */
export function metadataOf(host: TestHost, name: string): string | undefined {
  try {
    return virsh(host, "metadata", name, METADATA_NAMESPACE);
  } catch {
    return undefined;
  }
}

/** Domains whose metadata names `stack` as owner. */
export function domainsOfStack(host: TestHost, stack: string): string[] {
  return allDomains(host)
    .filter((d) => metadataOf(host, d)?.includes(`stack="${stack}"`) === true)
    .sort();
}

export function poolVolumes(host: TestHost): string[] {
  return virsh(host, "vol-list", host.poolName)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n !== "");
}

/**
 * The per-VM volumes of domain `name` among `volumes`: `<name>-<owner tag>-root.qcow2`
 * and `-seed.iso` (names.ts), or the untagged names of older VMs.
 */
export function perVmVolumesOf(volumes: readonly string[], name: string): string[] {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const re = new RegExp(`^${escaped}(-[0-9a-f]{8})?-(root\\.qcow2|seed\\.iso)$`);
  return volumes.filter((v) => re.test(v)).sort();
}

/** The per-VM volumes domain `name` was created with: tagged with the owner URN its metadata names. */
export function vmVolumeNames(host: TestHost, name: string): string[] {
  const urn = /\burn="([^"]+)"/.exec(metadataOf(host, name) ?? "")?.[1];
  if (urn === undefined) throw new Error(`domain ${name} has no owner in its metadata`);
  return perVmVolumeNames(name, urn);
}

/** Removes a domain and its per-VM volumes by hand (cleanup, and "deleted out of band"). */
export function removeByHand(host: TestHost, name: string): void {
  virshQuiet(host, "destroy", name);
  virshQuiet(host, "undefine", "--nvram", name);
  virshQuiet(host, "undefine", name);
  for (const v of perVmVolumesOf(poolVolumes(host), name)) {
    virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
  }
}

/** `kvm:*` config pointing at the test host: `local` over the unix socket, `remote` over SSH. */
/**
 * `kvm:hosts` with one host, `local`, reached through a wire relay's socket
 * (test/support/wire-relay.ts) in front of the test host's libvirtd.
 */
export function relayHostsConfig(
  host: TestHost,
  socketPath: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    local: {
      uri: `unix://${socketPath}`,
      domainType: "qemu",
      pool: host.poolName,
      network: host.network,
      ...extra,
    },
  };
}

export function hostsConfig(
  host: TestHost,
  which: ("local" | "remote")[] = ["local"],
): Record<string, unknown> {
  const common = { domainType: "qemu", pool: host.poolName, network: host.network };
  const hosts: Record<string, unknown> = {};
  if (which.includes("local")) hosts.local = { uri: `unix://${host.socketPath}`, ...common };
  if (which.includes("remote")) {
    hosts.remote = {
      uri: `ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
      knownHostsPath: host.knownHostsPath,
      ...common,
    };
  }
  return {
    "kvm:hosts": hosts,
    "kvm:images": { tiny: { url: TEST_IMAGE, firmware: "bios" } },
  };
}

/** Arguments every test proxy gets: nothing here boots an OS, so no IP and no health check. */
export const TEST_PROXY_ARGS = { healthCheck: false, waitForIp: false, memoryMiB: 128, diskGiB: 1 };

/** The image cache's volume for an image as the stack config gives it (`kvm:images.<key>`), as the provider names it. */
export function cacheVolumeOfImage(config: Readonly<Record<string, unknown>>): string {
  const f = new Failures();
  const img = parseImage(undefined, config, f);
  f.throwIfAny();
  return ImageCache.volumeName(img as NonNullable<typeof img>);
}

/** The image cache's volume for a local image file (bios), as the provider names it from the stack config. */
export function cacheVolumeOf(file: string): string {
  return cacheVolumeOfImage({ url: file, firmware: "bios" });
}

/** One engine event of `--event-log` or `--json` (only what the tests read). */
interface EngineEvent {
  diagnosticEvent?: { urn?: string; message?: string; severity?: string; ephemeral?: boolean };
  resourcePreEvent?: { metadata: { op: string; urn: string; keys?: string[] } };
}

/** The engine events in `text`, one JSON object per line (other lines, such as stderr's in an output, skipped). */
function engineEvents(text: string): EngineEvent[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as EngineEvent];
      } catch {
        return [];
      }
    });
}

/**
 * The diagnostics the provider sent for KvmProxy resources, read from a file
 * `pulumi ... --event-log <file>` wrote (the CLI needs PULUMI_DEBUG_COMMANDS=true
 * for that flag): status lines (`ephemeral`) and lasting ones, in order.
 */
export function proxyDiagnostics(
  eventLog: string,
): { urn: string; message: string; severity: string; ephemeral: boolean }[] {
  return engineEvents(readFileSync(eventLog, "utf8"))
    .map((e) => e.diagnosticEvent)
    .filter(
      (d): d is NonNullable<EngineEvent["diagnosticEvent"]> =>
        d?.urn?.includes("::pulumi-nodejs:dynamic:KvmProxy::") === true,
    )
    .map((d) => ({
      urn: d.urn as string,
      message: (d.message ?? "").trimEnd(),
      severity: d.severity ?? "",
      ephemeral: d.ephemeral === true,
    }));
}

/**
 * Why a CLI run failed, for an assertion's message: with `--json`, every
 * error and warning diagnostic the engine printed (the step events around
 * them hold whole serialized programs and would push them out of a tail);
 * then stderr's and stdout's last lines (the output's, when not kept apart).
 */
export function failureText(r: {
  code: number | null;
  stdout?: string;
  stderr?: string;
  output: string;
}): string {
  const diagnostics = engineEvents(r.output).flatMap(({ diagnosticEvent: d }) =>
    d !== undefined && (d.severity === "error" || d.severity === "warning")
      ? [`${d.severity} ${d.urn ?? ""}: ${(d.message ?? "").trimEnd()}`]
      : [],
  );
  return [
    `exit ${r.code}`,
    ...diagnostics,
    ...(r.stderr === undefined ? [] : [`stderr: ${r.stderr.slice(-2000)}`]),
    r.stderr === undefined
      ? `output's end: ${r.output.slice(-2000)}`
      : `stdout's end: ${(r.stdout ?? "").slice(-2000)}`,
  ].join("\n");
}

/** One step the engine began, from `pulumi up --json`: op, URN, and the keys named as forcing a replace. */
export interface EngineStep {
  op: string;
  urn: string;
  keys: string[];
}

/** The steps in `pulumi up --json` output, in the order the engine began them. */
export function engineSteps(stdout: string): EngineStep[] {
  return engineEvents(stdout)
    .flatMap((e) => (e.resourcePreEvent === undefined ? [] : [e.resourcePreEvent.metadata]))
    .map(({ op, urn, keys }) => ({ op, urn, keys: keys ?? [] }));
}

/** A member's steps in `up --json` output, in order, each with the keys its replace names: `replace(retire)`. */
export function stepsOf(stdout: string, member: string): string[] {
  return engineSteps(stdout)
    .filter((s) => s.urn.endsWith(`::${member}`))
    .map((s) => `${s.op}${s.keys.length > 0 ? `(${s.keys.join(",")})` : ""}`);
}

/** The steps of a replacement made before its predecessor is deleted, forced by `key`. */
export const MAKE_BEFORE_BREAK = (key: string) => [
  `create-replacement(${key})`,
  `replace(${key})`,
  "delete-replaced",
];

/** The steps of a replacement that collides with its predecessor (a fixed name, MAC or address), forced by `key`. */
export const DELETE_FIRST = (key: string) => [
  "delete-replaced",
  `replace(${key})`,
  `create-replacement(${key})`,
];

/** The built `pulumi-kvm-proxy <args>`, run from the repo root against `ws`'s backend: exit code and output. */
export function packageCli(ws: Workspace, args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [path.join(repoRoot, "dist/provider/cli/main.js"), ...args], {
    cwd: repoRoot,
    env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` },
    encoding: "utf8",
    timeout: 300_000,
  });
  if (r.error) throw r.error;
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
