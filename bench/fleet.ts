/**
 * Figures 3-5: fleets of KvmProxy resources through the real Pulumi CLI.
 *
 * Per fleet size N (KVMP_BENCH_FLEET, default 1,10,50) a fresh stack of the
 * test program test/pulumi/programs/pair holds N proxies on one host, and one
 * more stack holds 10 proxies over two hosts. For each: `pulumi up` (timed,
 * libvirt calls counted from the trace file, KVMP_TRACE_FILE), a no-op
 * `pulumi preview` and `pulumi refresh` (timed and counted), the state's size
 * (`pulumi stack export`), then `pulumi destroy`. Every stack uses an image
 * file of its own, so the image cache starts cold on each host and the trace
 * shows how often it was uploaded.
 *
 * Driver: the qemu driver of the test host (TCG, SeaBIOS, an empty qcow2, 128
 * MiB): the test driver cannot take a volume upload, and every create uploads
 * a seed ISO, so it cannot run the provider at all. Nothing boots; qemu idles
 * in the firmware, so the figures are our overhead plus libvirt's and qemu's
 * start-up of a domain, which the virsh reference pays as well.
 *
 * Hosts: both reached over SSH (SshTransport), as remote hypervisors are. The
 * second host is a private test host (scripts/bench starts it and passes its
 * folder in KVMP_BENCH_HOST2_DIR); without one, the same daemon serves under
 * a second key and the report says so.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { buildDomainXml } from "../provider/kvm/domain-xml";
import { ImageCache } from "../provider/kvm/host/image-cache";
import { parseImage } from "../provider/kvm/image";
import type { ProxyMetadata } from "../provider/kvm/metadata";
import { Failures } from "../provider/kvm/validation";
import { Libvirt, LibvirtConnection } from "../provider/libvirt";
import { UnixSocketTransport } from "../provider/transport/unix";
import {
  benchDir,
  config,
  cpuTicks,
  libvirtdPid,
  log,
  host as mainHost,
  repoRoot,
  type TestHost,
  TICKS_PER_SECOND,
} from "./common";

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

export interface FleetRun {
  proxies: number;
  hosts: number;
  up: Timed;
  preview: Timed;
  refresh: Timed;
  destroy: Timed;
  /** `pulumi stack export` output, bytes. */
  stateBytes: number;
  /** CPU seconds the proxies' qemu processes had used when `up` returned. */
  qemuCpuSeconds?: number;
  /** Bytes of each KvmProxy resource's JSON in the export (median over the proxies). */
  bytesPerProxy: number;
  /** Bytes of the `__provider` output (the same for every proxy). */
  providerBytes: number;
}

export interface VirshLoopRun {
  domains: number;
  transport: "ssh" | "unix";
  seconds: number;
  /** CPU seconds of the script and its virsh (and ssh) processes. */
  cpuSeconds?: number;
  libvirtdCpuSeconds?: number;
  qemuCpuSeconds?: number;
}

export interface FleetResults {
  sizes: number[];
  rounds: number;
  /** True when the second host is a daemon of its own. */
  privateSecondHost: boolean;
  runs: FleetRun[];
  reference: VirshLoopRun[];
}

const PREFIX = "kvmpb-f";
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
function timed(
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
function qemuCpuSeconds(prefix: string): number {
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

/** Counts the trace lines of one command (see provider/kvm/trace.ts for their form). */
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

function readHost(dir: string): FleetHost {
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
async function cleanHost(h: FleetHost, imageVolumes: ReadonlySet<string>): Promise<void> {
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

function makeImage(dir: string): string {
  const file = path.join(dir, `image-${++serial}.qcow2`);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", file, "64M"]);
  return file;
}

/** One stack of `proxies` KvmProxy resources spread round-robin over `hosts`. */
async function fleetRun(proxies: number, hosts: FleetHost[], tag: string): Promise<FleetRun> {
  const dir = path.join(benchDir, "fleet", `${tag}-${process.pid}-${++serial}`);
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
        "kvm:hosts": Object.fromEntries(hosts.map((h, i) => [keys[i], hostEntry(h)])),
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

  try {
    const up = await step("up", ["up", "--yes", "--skip-preview"]);
    const qemu = qemuCpuSeconds(PREFIX);
    const preview = await step("preview", ["preview", "--expect-no-changes"]);
    // --skip-preview: a plain `refresh --yes` reads everything twice (its preview, then the refresh).
    const refresh = await step("refresh", ["refresh", "--yes", "--skip-preview"]);
    const exported = execFileSync("pulumi", ["stack", "export", "--stack", stack], {
      cwd: dir,
      env,
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
    const resources = (
      JSON.parse(exported) as {
        deployment: { resources: { type: string; outputs?: Record<string, unknown> }[] };
      }
    ).deployment.resources.filter((r) => r.type === "pulumi-nodejs:dynamic:KvmProxy");
    if (resources.length !== proxies)
      throw new Error(`expected ${proxies} proxies in the state, found ${resources.length}`);
    const sizes = resources.map((r) => Buffer.byteLength(JSON.stringify(r, null, 4))).sort((a, b) => a - b);
    const providerBytes = Buffer.byteLength(String(resources[0]?.outputs?.__provider ?? ""));
    const destroy = await step("destroy", ["destroy", "--yes", "--skip-preview"]);
    return {
      proxies,
      hosts: hosts.length,
      up,
      preview,
      refresh,
      destroy,
      stateBytes: Buffer.byteLength(exported),
      qemuCpuSeconds: qemu,
      bytesPerProxy: sizes[sizes.length >> 1] as number,
      providerBytes,
    };
  } finally {
    for (const h of hosts) await cleanHost(h, imageVolumes);
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The user's alternative: a bash loop of virsh commands (vol-create-as an
 * overlay backed by the image, define, start) for `domains` domains on the
 * same daemon, timed as one script run. The domain XML is the one our
 * provider defines (same devices, a shared seed ISO); the image and seed
 * volumes are put in place before the timing starts.
 */
async function virshLoop(h: FleetHost, domains: number, transport: "ssh" | "unix"): Promise<VirshLoopRun> {
  const { sshUri, unixUri } = await import("./common");
  const dir = path.join(benchDir, "fleet", `virsh-${process.pid}-${++serial}`);
  mkdirSync(dir, { recursive: true });
  const base = `${PREFIX}ref-base.qcow2`;
  const seed = `${PREFIX}ref-seed.iso`;
  const uri = transport === "ssh" ? sshUri() : unixUri();
  try {
    const image = makeImage(dir);
    const iso = path.join(dir, "seed.iso");
    writeFileSync(path.join(dir, "user-data"), "#cloud-config\n");
    writeFileSync(path.join(dir, "meta-data"), "instance-id: ref\n");
    execFileSync("genisoimage", [
      "-quiet",
      "-output",
      iso,
      "-volid",
      "cidata",
      "-joliet",
      "-rock",
      path.join(dir, "user-data"),
      path.join(dir, "meta-data"),
    ]);
    const virsh = (...args: string[]) =>
      execFileSync("virsh", ["-q", "-c", unixUri(), ...args], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      });
    // Raw and 1 byte, as the image cache does: an upload does not truncate, and the pool re-probes the format.
    for (const [name, file] of [
      [base, image],
      [seed, iso],
    ] as const) {
      virsh("vol-create-as", h.poolName, name, "1", "--format", "raw");
      virsh("vol-upload", "--pool", h.poolName, name, file);
    }
    virsh("pool-refresh", h.poolName);
    const basePath = virsh("vol-path", "--pool", h.poolName, base).trim();
    const seedPath = virsh("vol-path", "--pool", h.poolName, seed).trim();
    const poolPath = path.dirname(basePath);
    const metadata: ProxyMetadata = {
      owner: { project: "bench", stack: "virsh", urn: "urn:bench" },
      image: { ref: "img", url: image, format: "qcow2" },
      specHash: "0".repeat(64),
      createdAt: new Date().toISOString(),
      proxyPort: 3128,
      diskGiB: 1,
      tags: {},
    };
    const names = Array.from({ length: domains }, (_, i) => `${PREFIX}ref-${i + 1}`);
    for (const name of names) {
      writeFileSync(
        path.join(dir, `${name}.xml`),
        buildDomainXml({
          name,
          domainType: "qemu",
          memoryMiB: 128,
          vcpus: 1,
          firmware: "bios",
          diskPath: path.join(poolPath, `${name}-root.qcow2`),
          seedPath,
          nic: { kind: "network", network: h.network },
          metadata,
        }),
      );
    }
    const script = [
      "set -euo pipefail",
      `for n in ${names.join(" ")}; do`,
      `  virsh -q -c '${uri}' vol-create-as ${h.poolName} "$n-root.qcow2" 1G --format qcow2 --backing-vol '${basePath}' --backing-vol-format qcow2 >/dev/null`,
      `  virsh -q -c '${uri}' define '${dir}'/"$n".xml >/dev/null`,
      `  virsh -q -c '${uri}' start "$n" >/dev/null`,
      "done",
    ].join("\n");
    writeFileSync(path.join(dir, "loop.sh"), script);
    const daemon = libvirtdPid();
    const daemonBefore = cpuTicks(daemon);
    const { seconds, cpuSeconds } = await timed("bash", [path.join(dir, "loop.sh")], {
      cwd: dir,
      env: process.env,
    });
    const libvirtdCpuSeconds = (cpuTicks(daemon) - daemonBefore) / TICKS_PER_SECOND;
    const qemu = qemuCpuSeconds(`${PREFIX}ref-`);
    log(`fleet virsh loop, ${transport}: ${domains} domains in ${seconds.toFixed(1)} s`);
    return { domains, transport, seconds, cpuSeconds, libvirtdCpuSeconds, qemuCpuSeconds: qemu };
  } finally {
    await cleanHost(h, new Set());
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchFleet(): Promise<FleetResults> {
  const h1 = readHost(mainHost.stateDir) as FleetHost;
  const h2dir = config.host2Dir;
  const h2 = h2dir ? readHost(h2dir) : h1;
  if (!h2dir) log("fleet: no KVMP_BENCH_HOST2_DIR; the second host key points at the same daemon");
  await cleanHost(h1, new Set());
  if (h2 !== h1) await cleanHost(h2, new Set());
  const runs: FleetRun[] = [];
  const reference: VirshLoopRun[] = [];
  // Untimed: the first Pulumi run after a while reads the CLI, plugins and node_modules from disk.
  await fleetRun(1, [h1], "warm-up");
  for (let round = 0; round < config.fleetRounds; round++) {
    // Alternate the order so no size always runs on a fresher (or more loaded) machine.
    const sizes = round % 2 === 0 ? config.fleet : [...config.fleet].reverse();
    for (const n of sizes) runs.push(await fleetRun(n, [h1], `n${n}`));
    runs.push(await fleetRun(10, [h1, h2], "two-hosts"));
    reference.push(await virshLoop(h1, 10, "ssh"));
    reference.push(await virshLoop(h1, 10, "unix"));
  }
  return {
    sizes: config.fleet,
    rounds: config.fleetRounds,
    privateSecondHost: h2 !== h1,
    runs,
    reference,
  };
}
