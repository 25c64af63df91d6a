/**
 * A stack of the test program (test/pulumi/programs/pair) on the test
 * hosts, for the fleet figures: made with a cold image cache, each Pulumi
 * command timed (wall and CPU) and its libvirt calls counted from the
 * provider's trace file, and everything it made removed again. Also the
 * helpers the virsh reference shares (timing, images, cleaning a host).
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { parseImage } from "../provider/kvm/config/image";
import { ImageCache } from "../provider/kvm/host/image-cache";
import { Failures } from "../provider/kvm/validation";
import { Libvirt, LibvirtConnection } from "../provider/libvirt";
import { UnixSocketTransport } from "../provider/transport/unix";
import { benchDir, cpuTicks, libvirtdPid, log, repoRoot, type TestHost, TICKS_PER_SECOND } from "./common";

/** A test host as scripts/test-host describes it (host.json), with the fields this part needs. */
export interface FleetHost extends TestHost {
  network: string;
}

/** Libvirt calls of one Pulumi command, from the trace file. */
export interface CallCounts {
  total: number;
  /** Of which the connection handshake (auth list, open, close): per host and process, not per proxy. */
  handshake: number;
  byCall: Record<string, number>;
  /** Image uploads (virStorageVolUpload into a kvmp-image-* volume) per host key. */
  imageUploadsByHost: Record<string, number>;
}

export interface Timed {
  seconds: number;
  calls: CallCounts;
  /** CPU seconds of the Pulumi CLI and everything it ran (our provider included). */
  cpuSeconds?: number;
  /** CPU seconds libvirtd of the first host used meanwhile (other tenants' calls included). */
  libvirtdCpuSeconds?: number;
}

/** Names of everything the fleet figures make start with this. */
export const PREFIX = "kvmpb-f";
const HANDSHAKE = new Set(["virAuthList", "virConnectOpen", "virConnectClose"]);

let pulumiEnvCache: NodeJS.ProcessEnv | undefined;

/** The environment `scripts/pulumi-cli env` exports, plus a passphrase-less secrets provider. */
function pulumiEnv(): NodeJS.ProcessEnv {
  if (pulumiEnvCache) return pulumiEnvCache;
  const out = execFileSync(
    "bash",
    [
      "-c",
      'eval "$(scripts/pulumi-cli env --no-build)" && node -e "console.log(JSON.stringify(process.env))"',
    ],
    { cwd: repoRoot, encoding: "utf8" },
  );
  pulumiEnvCache = {
    ...(JSON.parse(out) as NodeJS.ProcessEnv),
    PULUMI_CONFIG_PASSPHRASE: "",
    PULUMI_SKIP_UPDATE_CHECK: "true",
  };
  delete pulumiEnvCache.KVMP_LOG;
  delete pulumiEnvCache.KVMP_TRACE_FILE;
  return pulumiEnvCache;
}

/** Wall time of a command, and the CPU its whole process tree used (bash `times`). */
interface TimedRun {
  seconds: number;
  cpuSeconds: number;
}

/**
 * Runs a command to completion, timed from spawn to exit; rejects with its
 * output on failure. It runs under bash, whose `times` reports the user+sys
 * CPU of every waited-for descendant: for Pulumi, the CLI, the language host,
 * the program and our provider process, but not libvirtd or qemu.
 */
export function timed(
  cmd: string,
  args: string[],
  opts: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<TimedRun> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const script = '"$@" >&2; rc=$?; times; exit $rc';
    const child = spawn("bash", ["-c", script, "bash", cmd, ...args], {
      cwd: opts.cwd,
      env: opts.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let output = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on("data", (c: Buffer) => {
      output += c.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      // Second line of `times`: the children's user and system time, e.g. "0m1.234s 0m0.567s".
      const children = stdout.trim().split("\n")[1] ?? "";
      const cpuSeconds = [...children.matchAll(/(\d+)m([\d.]+)s/g)].reduce(
        (sum, m) => sum + Number(m[1]) * 60 + Number(m[2]),
        0,
      );
      if (code === 0) resolve({ seconds, cpuSeconds });
      else reject(new Error(`${cmd} ${args.join(" ")} exited with ${code}:\n${output.slice(-4000)}`));
    });
  });
}

/** user+sys seconds of the running qemu processes of our domains (names start with `prefix`). */
export function qemuCpuSeconds(prefix: string): number {
  let ticks = 0;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (!cmdline.includes("qemu-system") || !cmdline.includes(`guest=${prefix}`)) continue;
      ticks += cpuTicks(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return ticks / TICKS_PER_SECOND;
}

/** Counts the trace lines of one command (see provider/libvirt/trace.ts for their form). */
export function countCalls(trace: string): CallCounts {
  const counts: CallCounts = { total: 0, handshake: 0, byCall: {}, imageUploadsByHost: {} };
  for (const line of trace.split("\n")) {
    const m = /^rpc=(\S+) host=(\S+)(.*)$/.exec(line);
    if (!m) continue;
    const [, call, hostKey, rest] = m as unknown as [string, string, string, string];
    counts.total += 1;
    if (HANDSHAKE.has(call)) counts.handshake += 1;
    counts.byCall[call] = (counts.byCall[call] ?? 0) + 1;
    if (call === "virStorageVolUpload" && / vol=[^/\s]+\/kvmp-image-/.test(rest))
      counts.imageUploadsByHost[hostKey] = (counts.imageUploadsByHost[hostKey] ?? 0) + 1;
  }
  return counts;
}

export function readHost(dir: string): FleetHost {
  return JSON.parse(readFileSync(path.join(dir, "host.json"), "utf8")) as FleetHost;
}

function hostEntry(h: FleetHost): Record<string, unknown> {
  return {
    uri: `ssh://${h.sshUser}@${h.address}:${h.sshPort}`,
    privateKeyPath: h.sshKeyPath,
    knownHostsPath: h.knownHostsPath,
    domainType: "qemu",
    pool: h.poolName,
    network: h.network,
  };
}

/** One admin connection per host, over its unix socket: cleanup and the reference's set-up. */
async function withLibvirt<T>(h: FleetHost, fn: (lv: Libvirt) => Promise<T>): Promise<T> {
  const conn = new LibvirtConnection({ transport: new UnixSocketTransport(h.socketPath) });
  try {
    return await fn(new Libvirt(conn));
  } finally {
    await conn.close();
  }
}

/** Removes every domain and volume this part made (named kvmpb-f*, or cached from our images). */
export async function cleanHost(h: FleetHost, imageVolumes: ReadonlySet<string>): Promise<void> {
  await withLibvirt(h, async (lv) => {
    for (const d of await lv.connectListAllDomains(0)) {
      if (!d.name.startsWith(PREFIX)) continue;
      await lv.domainDestroy(d).catch(() => undefined);
      await lv.domainUndefineFlags(d, 0).catch(() => undefined);
    }
    const pool = await lv.storagePoolLookupByName(h.poolName);
    await lv.storagePoolRefresh(pool, 0).catch(() => undefined);
    for (const v of await lv.storagePoolListAllVolumes(pool)) {
      if (v.name.startsWith(PREFIX) || imageVolumes.has(v.name.replace(/\.partial$/, "")))
        await lv.storageVolDelete(v, 0).catch(() => undefined);
    }
  });
}

/** The image cache's volume for an image file, as the provider names it from the stack config. */
function imageVolumeName(file: string): string {
  const f = new Failures();
  const img = parseImage(undefined, { url: file, firmware: "bios" }, f);
  f.throwIfAny();
  return ImageCache.volumeName(img as NonNullable<typeof img>);
}

let serial = 0;

/** A number for a folder of its own. */
export function nextSerial(): number {
  return ++serial;
}

export function makeImage(dir: string): string {
  const file = path.join(dir, `image-${++serial}.qcow2`);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", file, "64M"]);
  return file;
}

/** A stack of the test program, made and configured; its commands are timed and counted. */
export interface FleetStack {
  /** Runs `pulumi <args>` on the stack: wall time, CPU and libvirt calls (trace file `<name>.trace`). */
  step(name: string, args: string[]): Promise<Timed>;
  /** `pulumi stack export`. */
  exportState(): string;
  /** Removes what the stack made on the hosts, and its folder. */
  close(): Promise<void>;
}

/**
 * A fresh stack of `proxies` KvmProxy resources spread round-robin over
 * `hosts`, with an image file of its own (a cold cache); `hostSettings` go
 * into every host's entry (e.g. a capacity).
 */
export async function fleetStack(
  proxies: number,
  hosts: FleetHost[],
  tag: string,
  hostSettings: Record<string, unknown> = {},
): Promise<FleetStack> {
  const dir = path.join(benchDir, "fleet", `${tag}-${process.pid}-${nextSerial()}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(path.join(dir, ".backend"), { recursive: true });
  const image = makeImage(dir);
  const imageVolumes = new Set([imageVolumeName(image)]);
  const env = { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${path.join(dir, ".backend")}` };
  writeFileSync(
    path.join(dir, "Pulumi.yaml"),
    YAML.stringify({
      name: "kvmpb-fleet",
      runtime: { name: "nodejs", options: { typescript: false } },
      main: path.relative(dir, path.join(repoRoot, "test/pulumi/programs/pair")),
    }),
  );
  const stack = "bench";
  await timed("pulumi", ["stack", "init", stack, "--non-interactive"], { cwd: dir, env });
  const keys = hosts.map((_, i) => `h${i + 1}`);
  const proxyArgs = { image: "img", healthCheck: false, waitForIp: false, memoryMiB: 128, diskGiB: 1 };
  writeFileSync(
    path.join(dir, `Pulumi.${stack}.yaml`),
    YAML.stringify({
      config: {
        "kvm:hosts": Object.fromEntries(hosts.map((h, i) => [keys[i], { ...hostEntry(h), ...hostSettings }])),
        "kvm:images": { img: { url: image, firmware: "bios" } },
        "pair:proxies": Object.fromEntries(
          Array.from({ length: proxies }, (_, i) => [
            `${PREFIX}${proxies}-${i + 1}`,
            { host: keys[i % keys.length], ...proxyArgs },
          ]),
        ),
      },
    }),
  );

  const step = async (name: string, args: string[]): Promise<Timed> => {
    const traceFile = path.join(dir, `${name}.trace`);
    const daemon = libvirtdPid();
    const daemonBefore = cpuTicks(daemon);
    const { seconds, cpuSeconds } = await timed(
      "pulumi",
      [...args, "--stack", stack, "--non-interactive", "--color", "never"],
      { cwd: dir, env: { ...env, KVMP_TRACE_FILE: traceFile } },
    );
    const libvirtdCpuSeconds = (cpuTicks(daemon) - daemonBefore) / TICKS_PER_SECOND;
    let trace = "";
    try {
      trace = readFileSync(traceFile, "utf8");
    } catch {
      // No call at all: no file.
    }
    const calls = countCalls(trace);
    log(
      `fleet ${tag}: ${name} ${seconds.toFixed(1)} s, ${calls.total} libvirt calls, CPU ${cpuSeconds.toFixed(1)} s ours + ${libvirtdCpuSeconds.toFixed(1)} s libvirtd`,
    );
    return { seconds, calls, cpuSeconds, libvirtdCpuSeconds };
  };
  const exportState = () =>
    execFileSync("pulumi", ["stack", "export", "--stack", stack], {
      cwd: dir,
      env,
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
  const close = async () => {
    for (const h of hosts) await cleanHost(h, imageVolumes);
    rmSync(dir, { recursive: true, force: true });
  };
  return { step, exportState, close };
}
