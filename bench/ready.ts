/**
 * Figure 6: time to ready on a real guest, split into our
 * time and the guest's, and the delay between the guest having an address (or
 * a listening squid) and our create noticing it.
 *
 * One run is what the provider's create does for a KvmProxy without a proxy
 * block (squid on 3128 for the private ranges) and the default health check
 * (a request squid answers itself, from the squid this setup names): get, create (image
 * cache, overlay, seed build and upload, define, start), get, waitForIp,
 * waitHealthy, at the provider's own poll interval (KvmProxyRuntime.pollMs).
 * The Pulumi engine's own start-up is not part of it.
 *
 * Beside it an observer on a second libvirt connection asks every
 * OBSERVE_MS for the agent's and the lease's addresses and, once there is an
 * address, probes squid as the health check does: the first answers it sees are when
 * the guest was ready, so "notice delay" = when create saw it − when the
 * observer saw it (resolution OBSERVE_MS).
 *
 * The health check and the observer connect to the guest, which is only
 * allowed inside the test host's network namespace: {@link benchReady} runs
 * this file there (`ip netns exec`) and reads the JSON it prints.
 *
 * Runs (KVMP_BENCH_READY_RUNS, default 2): the first with an image URL the
 * pool has not seen (cache miss: the image is uploaded), the next ones with
 * the same URL (cache hit). Booting under TCG takes minutes on 2 shared cores.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, symlinkSync } from "node:fs";
import path from "node:path";
import { parseConfig } from "../provider/kvm/config/host-config";
import { type ImageConfig, parseImage } from "../provider/kvm/config/image";
import { firstRoutableIpv4 } from "../provider/kvm/domain/states";
import { CallTracer, type TraceRecord } from "../provider/kvm/host/call-tracer";
import { HostPool } from "../provider/kvm/host/hosts";
import { ImageCache } from "../provider/kvm/host/image-cache";
import { KvmOperations } from "../provider/kvm/host/operations";
import { squidName } from "../provider/kvm/proxy/setup";
import { Failures } from "../provider/kvm/validation";
import { InterfaceAddressSource } from "../provider/libvirt/constants";
import type { Libvirt } from "../provider/libvirt/libvirt";
import type { Domain } from "../provider/libvirt/types";
import { probeOnce, waitHealthy } from "../provider/probes/health-check";
import { defaultUserData } from "../provider/resource/default-user-data";
import { KvmProxyRuntime } from "../provider/resource/provider";
import { host, runInNamespace, type TestHost } from "./common";
import { guestProxySpec, PROXY_PORT, SETUP } from "./guest-proxy";
import { readKnobs } from "./knobs";

// The knobs through their table, not common.ts: this file also runs on its own inside the namespace.
const config = readKnobs(process.env);
const repoRoot = config.root;
const OBSERVE_MS = 200;
const DEADLINE_MS = 20 * 60_000;
/** The health check's target at `ip`. */
const probeAt = (ip: string) => ({ ip, proxyPort: PROXY_PORT, squidName: squidName(SETUP) });
const PREFIX = "kvmpb-ready-";

/** Milliseconds of one run; every "at" is since the run started (create's first call). */
export interface ReadyRun {
  imageCache: "miss" | "hit";
  firmware: "uefi" | "bios";
  /** Our share, from the libvirt calls create made (sum of their durations per kind). */
  ours: {
    createMs: number;
    imageMs: number;
    overlayMs: number;
    seedMs: number;
    defineMs: number;
    startMs: number;
    /** createMs minus the calls above: lookups, local work (seed ISO, XML), gaps. */
    otherMs: number;
  };
  /** When virDomainCreate returned: the guest runs from here. */
  startedAt: number;
  /** First address the observer saw, per source (undefined: never). */
  observedLeaseAt?: number;
  observedAgentAt?: number;
  /** First TCP connect to squid the observer saw succeed. */
  observedSquidAt?: number;
  /** When waitForIp returned, and the source it named. */
  noticedIpAt: number;
  noticedIpSource?: string;
  /** When waitHealthy returned: the proxy is healthy, create is done. */
  healthyAt: number;
  /** Guest's share: from start to the first address, then to squid answering (observer's times). */
  guest: { bootToIpMs?: number; ipToSquidMs?: number };
  /** noticedIpAt − the observer's first address (either source) and − its first agent address. */
  ipNoticeDelayMs?: number;
  agentNoticeDelayMs?: number;
  /** healthyAt − observedSquidAt. */
  healthNoticeDelayMs?: number;
  /** libvirt calls create made between start and waitForIp returning, and per second of that wait. */
  waitCalls: number;
  waitCallsPerSecond: number;
  /** ours.createMs / healthyAt. */
  ourShare: number;
}

export interface ReadyResults {
  pollMs: number;
  observeMs: number;
  runs: ReadyRun[];
}

function log(msg: string): void {
  process.stderr.write(`bench: ready: ${msg}\n`);
}

/**
 * Runs the figure inside the test host's namespace and returns its results.
 * `script` is this file compiled (default: next to the caller's module).
 */
export function benchReady(script = __filename): Promise<ReadyResults> {
  return runInNamespace<ReadyResults>(script, "ready");
}

function imageFor(url: string, sha256: string, firmware: "uefi" | "bios"): ImageConfig {
  const f = new Failures();
  const img = parseImage(undefined, { url, sha256, firmware }, f);
  f.throwIfAny();
  return img as ImageConfig;
}

/** Which part of create a traced call belongs to, from the volume or call it names. */
function kindOf(r: TraceRecord): keyof ReadyRun["ours"] | undefined {
  const text = r.fields.join(" ");
  if (text.includes("kvmp-image-")) return "imageMs";
  if (text.includes("-seed.iso")) return "seedMs";
  if (text.includes("-root.qcow2")) return "overlayMs";
  if (r.call === "virDomainDefineXML" || r.call === "virDomainSetMetadata") return "defineMs";
  if (r.call === "virDomainCreate") return "startMs";
  return undefined;
}

/** Polls agent and lease addresses, then squid, until stopped; records first sightings. */
function observe(lv: Libvirt, dom: Domain, t: () => number) {
  const seen: { lease?: number; agent?: number; squid?: number; ip?: string } = {};
  let stopped = false;
  const addr = async (source: InterfaceAddressSource): Promise<string | undefined> => {
    try {
      return firstRoutableIpv4(await lv.domainInterfaceAddresses(dom, source));
    } catch {
      return undefined;
    }
  };
  const loop = (async () => {
    while (!stopped) {
      const began = t();
      if (seen.lease === undefined) {
        const ip = await addr(InterfaceAddressSource.LEASE);
        if (ip !== undefined) {
          seen.lease = t();
          seen.ip ??= ip;
        }
      }
      if (seen.agent === undefined) {
        const ip = await addr(InterfaceAddressSource.AGENT);
        if (ip !== undefined) {
          seen.agent = t();
          seen.ip ??= ip;
        }
      }
      if (seen.ip !== undefined && seen.squid === undefined) {
        const r = await probeOnce(probeAt(seen.ip), 1_000);
        if (r.ok) seen.squid = t();
      }
      if (seen.agent !== undefined && seen.squid !== undefined) return;
      await new Promise((r) => setTimeout(r, Math.max(0, OBSERVE_MS - (t() - began))));
    }
  })();
  return {
    seen,
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

async function runOnce(
  n: number,
  image: ImageConfig,
  cache: "miss" | "hit",
  host: TestHost,
  pollMs: number,
): Promise<ReadyRun> {
  const hosts = parseConfig({
    hosts: {
      local: {
        uri: `unix://${host.socketPath}`,
        domainType: "qemu",
        pool: host.poolName,
        network: host.network,
      },
    },
  }).hosts;
  let t0 = performance.now();
  const t = () => performance.now() - t0;
  const records: { at: number; r: TraceRecord }[] = [];
  const tracer = new CallTracer({ level: 1, sink: (_line, r) => records.push({ at: t(), r }) });
  const pool = new HostPool(hosts, { tracer });
  const watcher = new HostPool(hosts, { tracer: new CallTracer({ level: 0 }) });
  const ops = new KvmOperations(pool);
  const name = `${PREFIX}${process.pid}-${n}`;
  const spec = guestProxySpec("kvmpb-ready", name, image, defaultUserData());
  let observer: ReturnType<typeof observe> | undefined;
  try {
    t0 = performance.now();
    await ops.get("local", name);
    await ops.create(spec);
    const createMs = t();
    const startRec = records.find((x) => x.r.call === "virDomainCreate");
    const startedAt = startRec?.at ?? createMs;
    const first = await ops.get("local", name);
    const dom: Domain = { name, uuid: first.uuid as string, id: -1 };
    observer = observe(watcher.libvirt("local"), dom, t);
    log(`run ${n} (${cache}): created in ${(createMs / 1000).toFixed(1)} s; waiting for the guest`);
    const callsBefore = records.length;
    const ready = await ops.waitForIp("local", name, { deadlineMs: DEADLINE_MS, pollMs });
    const noticedIpAt = t();
    const waitCalls = records.length - callsBefore;
    log(`run ${n}: IP ${ready.ipv4} (${ready.ipSource}) at ${(noticedIpAt / 1000).toFixed(1)} s`);
    await waitHealthy(probeAt(ready.ipv4 as string), DEADLINE_MS, { pollMs });
    const healthyAt = t();
    log(`run ${n}: healthy at ${(healthyAt / 1000).toFixed(1)} s`);
    await observer.stop();
    const seen = observer.seen;

    const ours = { createMs, imageMs: 0, overlayMs: 0, seedMs: 0, defineMs: 0, startMs: 0, otherMs: 0 };
    for (const { at, r } of records) {
      if (at > createMs) break;
      const k = kindOf(r);
      if (k !== undefined) ours[k] += r.durationMs;
    }
    ours.otherMs = createMs - ours.imageMs - ours.overlayMs - ours.seedMs - ours.defineMs - ours.startMs;
    const firstIp = Math.min(seen.lease ?? Number.POSITIVE_INFINITY, seen.agent ?? Number.POSITIVE_INFINITY);
    const known = (x: number) => (Number.isFinite(x) ? x : undefined);
    const waitSeconds = (noticedIpAt - createMs) / 1000;
    const run: ReadyRun = {
      imageCache: cache,
      firmware: image.firmware,
      ours,
      startedAt,
      noticedIpAt,
      healthyAt,
      guest: {},
      waitCalls,
      waitCallsPerSecond: waitCalls / waitSeconds,
      ourShare: createMs / healthyAt,
    };
    if (ready.ipSource !== undefined) run.noticedIpSource = ready.ipSource;
    if (seen.lease !== undefined) run.observedLeaseAt = seen.lease;
    if (seen.agent !== undefined) {
      run.observedAgentAt = seen.agent;
      run.agentNoticeDelayMs = noticedIpAt - seen.agent;
    }
    if (seen.squid !== undefined) {
      run.observedSquidAt = seen.squid;
      run.healthNoticeDelayMs = healthyAt - seen.squid;
    }
    const ip = known(firstIp);
    if (ip !== undefined) {
      run.ipNoticeDelayMs = noticedIpAt - ip;
      run.guest.bootToIpMs = ip - startedAt;
      if (seen.squid !== undefined) run.guest.ipToSquidMs = seen.squid - ip;
    }
    return run;
  } finally {
    await observer?.stop();
    await ops.delete("local", name).catch((e: unknown) => log(`cleanup of ${name} failed: ${String(e)}`));
    await pool.closeAll();
    await watcher.closeAll();
  }
}

async function child(): Promise<void> {
  const runs = config.readyRuns;
  const firmware = config.readyFirmware;
  const imagePath = execFileSync(path.join(repoRoot, "scripts/guest-image"), ["path"], {
    encoding: "utf8",
  }).trim();
  const sha256 = execFileSync("sha256sum", [imagePath], { encoding: "utf8" }).split(" ")[0] as string;
  // A path no earlier run used: the cache is keyed by URL, so the first run misses.
  const link = path.join(repoRoot, ".state/bench", `ready-image-${process.pid}.qcow2`);
  mkdirSync(path.dirname(link), { recursive: true });
  symlinkSync(imagePath, link);
  const image = imageFor(link, sha256, firmware);
  const pollMs = new KvmProxyRuntime().pollMs;
  const results: ReadyResults = { pollMs, observeMs: OBSERVE_MS, runs: [] };
  try {
    for (let i = 0; i < runs; i++) {
      results.runs.push(await runOnce(i + 1, image, i === 0 ? "miss" : "hit", host, pollMs));
    }
  } finally {
    rmSync(link, { force: true });
    // The image volume this bench uploaded (a URL of its own) goes again.
    try {
      execFileSync("virsh", [
        "-q",
        "-c",
        `qemu+unix:///system?socket=${host.socketPath}`,
        "vol-delete",
        "--pool",
        host.poolName,
        ImageCache.volumeName(image),
      ]);
    } catch {
      // Not created (the first run failed early) or already gone.
    }
  }
  process.stdout.write(`${JSON.stringify(results)}\n`);
}

function fail(err: unknown): never {
  process.stderr.write(
    `bench: ready failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
}

// `node ready.js` alone runs the figure and prints the results as JSON (main.ts calls benchReady).
if (require.main === module) {
  if (process.argv.includes("--child")) child().then(() => process.exit(0), fail);
  else
    benchReady().then((r) => {
      process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      process.exit(0);
    }, fail);
}
