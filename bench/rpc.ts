/**
 * Figure 1: virDomainLookupByName calls per second on one connection.
 *
 * Contenders, alternated within each round (order rotated per round), each on a
 * fresh connection with a warm-up before the timed calls:
 *   ours, unix socket and SSH (stream-local channel): sequential and `depth` in flight;
 *   ours over the OpenSSH transport (the system's ssh forwarding a local socket): the same;
 *   python3-libvirt (libvirt's C client), unix socket and qemu+ssh: sequential.
 * Around every timed part libvirtd's own CPU (utime + stime) is read, giving the
 * daemon's CPU per call: the ceiling any client on one connection can reach.
 */
import path from "node:path";
import { isLibvirtError, type Libvirt } from "../provider/libvirt";
import type { Transport } from "../provider/transport/types";
import {
  config,
  connect,
  cpuTicks,
  libvirtdPid,
  log,
  opensshTransport,
  repoRoot,
  rotate,
  run,
  sshTransport,
  sshUri,
  TICKS_PER_SECOND,
  unixTransport,
  unixUri,
} from "./common";

export const LOOKUP_DOMAIN = "kvmpb-lookup";

const DOMAIN_XML = `<domain type='qemu'>
  <name>${LOOKUP_DOMAIN}</name>
  <memory unit='MiB'>32</memory>
  <os><type arch='x86_64'>hvm</type></os>
</domain>`;

export interface Sample {
  callsPerSecond: number;
  /** libvirtd CPU per call in µs. */
  daemonUsPerCall: number;
  /** The client process's CPU per call in µs. */
  clientUsPerCall: number;
}

export type RpcContender =
  | "oursUnixSeq"
  | "oursUnixPipe"
  | "oursSshSeq"
  | "oursSshPipe"
  | "oursOpensshSeq"
  | "oursOpensshPipe"
  | "pyUnixSeq"
  | "pySshSeq";

export interface RpcResults {
  rounds: number;
  lookups: number;
  depth: number;
  samples: Record<RpcContender, Sample[]>;
}

/** Defines the (never started) domain the lookups look up, unless it exists. */
export async function ensureLookupDomain(): Promise<void> {
  const { conn, lv } = connect(unixTransport);
  try {
    await lv.domainLookupByName(LOOKUP_DOMAIN);
  } catch (err) {
    if (!isLibvirtError(err)) throw err;
    await lv.domainDefineXml(DOMAIN_XML);
  } finally {
    await conn.close();
  }
}

export async function removeLookupDomain(): Promise<void> {
  const { conn, lv } = connect(unixTransport);
  try {
    await lv.domainUndefineFlags(await lv.domainLookupByName(LOOKUP_DOMAIN));
  } catch {
    // Already gone.
  } finally {
    await conn.close();
  }
}

async function sequential(lv: Libvirt, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await lv.domainLookupByName(LOOKUP_DOMAIN);
}

/** Keeps `depth` calls in flight until n have been issued. */
async function pipelined(lv: Libvirt, n: number, depth: number): Promise<void> {
  let issued = 0;
  const worker = async (): Promise<void> => {
    while (issued < n) {
      issued++;
      await lv.domainLookupByName(LOOKUP_DOMAIN);
    }
  };
  await Promise.all(Array.from({ length: Math.min(depth, n) }, worker));
}

async function ours(make: () => Transport, depth: number): Promise<Sample> {
  const { conn, lv } = connect(make);
  const pid = libvirtdPid();
  try {
    await sequential(lv, config.warmup);
    const t0 = cpuTicks(pid);
    const c0 = process.cpuUsage();
    const start = process.hrtime.bigint();
    if (depth === 1) await sequential(lv, config.lookups);
    else await pipelined(lv, config.lookups, depth);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const c = process.cpuUsage(c0);
    const ticks = cpuTicks(pid) - t0;
    return {
      callsPerSecond: config.lookups / seconds,
      daemonUsPerCall: ((ticks / TICKS_PER_SECOND) * 1e6) / config.lookups,
      clientUsPerCall: (c.user + c.system) / config.lookups,
    };
  } finally {
    await conn.close();
  }
}

async function python(uri: string): Promise<Sample> {
  const script = path.join(repoRoot, "bench/reference/lookups.py");
  const args = [
    script,
    uri,
    LOOKUP_DOMAIN,
    String(config.lookups),
    String(config.warmup),
    String(libvirtdPid()),
  ];
  const { stdout } = await run("/usr/bin/python3", args);
  const r = JSON.parse(stdout) as {
    seconds: number;
    calls: number;
    daemonTicks: number;
    clientCpuSeconds: number;
  };
  return {
    callsPerSecond: r.calls / r.seconds,
    daemonUsPerCall: ((r.daemonTicks / TICKS_PER_SECOND) * 1e6) / r.calls,
    clientUsPerCall: (r.clientCpuSeconds * 1e6) / r.calls,
  };
}

/**
 * Untimed calls before the first round, so V8 has compiled the hot paths (the
 * first ~10,000 calls of a fresh process run at half speed) and ssh2's too.
 */
async function warmProcess(): Promise<void> {
  for (const make of [unixTransport, sshTransport, opensshTransport]) {
    const { conn, lv } = connect(make);
    try {
      await sequential(lv, config.processWarmup);
      await pipelined(lv, config.processWarmup, config.depth);
    } finally {
      await conn.close();
    }
  }
}

export async function benchRpc(): Promise<RpcResults> {
  await ensureLookupDomain();
  log(`rpc: warming up (${config.processWarmup} sequential and pipelined lookups per transport)`);
  await warmProcess();
  const contenders: [RpcContender, () => Promise<Sample>][] = [
    ["oursUnixSeq", () => ours(unixTransport, 1)],
    ["pyUnixSeq", () => python(unixUri())],
    ["oursUnixPipe", () => ours(unixTransport, config.depth)],
    ["oursSshSeq", () => ours(sshTransport, 1)],
    ["pySshSeq", () => python(sshUri())],
    ["oursSshPipe", () => ours(sshTransport, config.depth)],
    ["oursOpensshSeq", () => ours(opensshTransport, 1)],
    ["oursOpensshPipe", () => ours(opensshTransport, config.depth)],
  ];
  const samples = Object.fromEntries(contenders.map(([name]) => [name, [] as Sample[]])) as Record<
    RpcContender,
    Sample[]
  >;
  for (let round = 0; round < config.rounds; round++) {
    for (const [name, runOne] of rotate(contenders, round)) {
      const s = await runOne();
      samples[name].push(s);
      log(
        `rpc round ${round + 1}/${config.rounds} ${name}: ${Math.round(s.callsPerSecond)} calls/s, ` +
          `libvirtd ${s.daemonUsPerCall.toFixed(1)} µs/call, client ${s.clientUsPerCall.toFixed(1)} µs/call`,
      );
    }
  }
  await removeLookupDomain();
  return { rounds: config.rounds, lookups: config.lookups, depth: config.depth, samples };
}
