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
 * Stacks: bench/fleet-stack.ts. Also: 10 proxies on a host with
 * `concurrentCreates: 2` under `--parallel 20`, against 2 and 4 (the waves).
 *
 * Hosts: both reached over SSH (SshTransport), as remote hypervisors are. The
 * second host is a private test host (scripts/bench starts it and passes its
 * folder in KVMP_BENCH_HOST2_DIR); without one, the same daemon serves under
 * a second key and the report says so.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { buildDomainXml } from "../provider/kvm/domain/domain-xml";
import type { ProxyMetadata } from "../provider/kvm/domain/metadata";
import { shorthandNic } from "../provider/kvm/network/nic";
import { decodeNics } from "../provider/kvm/network/nic-rules";
import { benchDir, config, cpuTicks, libvirtdPid, log, host as mainHost, TICKS_PER_SECOND } from "./common";
import {
  cleanHost,
  type FleetHost,
  fleetStack,
  makeImage,
  nextSerial,
  PREFIX,
  qemuCpuSeconds,
  readHost,
  type Timed,
  timed,
} from "./fleet-stack";

export type { CallCounts, FleetHost, Timed } from "./fleet-stack";

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
  /** `up` with the host's creates throttled (absent in results older than the figure). */
  throttled?: ThrottledRun[];
}

/** One `up` of `proxies` on one host taking `concurrentCreates` creates at once, under `--parallel`. */
export interface ThrottledRun {
  proxies: number;
  concurrentCreates: number;
  parallel: number;
  seconds: number;
}

/** The throttle of figure 3e, and the stack sizes it runs: one and two waves to measure a wave, and 10. */
const THROTTLE = { concurrentCreates: 2, parallel: 20, sizes: [2, 4, 10] };

/** `up` (timed) and `destroy` of a stack whose host takes THROTTLE.concurrentCreates creates at once. */
async function throttledRun(proxies: number, h: FleetHost): Promise<ThrottledRun> {
  const { concurrentCreates, parallel } = THROTTLE;
  const stack = await fleetStack(proxies, [h], `cc${proxies}`, { capacity: { concurrentCreates } });
  try {
    const up = await stack.step("up", ["up", "--yes", "--skip-preview", "--parallel", String(parallel)]);
    await stack.step("destroy", ["destroy", "--yes", "--skip-preview"]);
    return { proxies, concurrentCreates, parallel, seconds: up.seconds };
  } finally {
    await stack.close();
  }
}

/** One stack of `proxies` KvmProxy resources spread round-robin over `hosts`: up, preview, refresh, export, destroy. */
async function fleetRun(proxies: number, hosts: FleetHost[], tag: string): Promise<FleetRun> {
  const { step, exportState, close } = await fleetStack(proxies, hosts, tag);
  try {
    const up = await step("up", ["up", "--yes", "--skip-preview"]);
    const qemu = qemuCpuSeconds(PREFIX);
    const preview = await step("preview", ["preview", "--expect-no-changes"]);
    // --skip-preview: a plain `refresh --yes` reads everything twice (its preview, then the refresh).
    const refresh = await step("refresh", ["refresh", "--yes", "--skip-preview"]);
    const exported = exportState();
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
    await close();
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
  const dir = path.join(benchDir, "fleet", `virsh-${process.pid}-${nextSerial()}`);
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
          nics: decodeNics([shorthandNic({ kind: "network", network: h.network }, undefined)]),
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
  const throttled: ThrottledRun[] = [];
  // Untimed: the first Pulumi run after a while reads the CLI, plugins and node_modules from disk.
  await fleetRun(1, [h1], "warm-up");
  for (let round = 0; round < config.fleetRounds; round++) {
    // Alternate the order so no size always runs on a fresher (or more loaded) machine.
    const sizes = round % 2 === 0 ? config.fleet : [...config.fleet].reverse();
    for (const n of sizes) runs.push(await fleetRun(n, [h1], `n${n}`));
    runs.push(await fleetRun(10, [h1, h2], "two-hosts"));
    reference.push(await virshLoop(h1, 10, "ssh"));
    reference.push(await virshLoop(h1, 10, "unix"));
    const throttleSizes = round % 2 === 0 ? THROTTLE.sizes : [...THROTTLE.sizes].reverse();
    for (const n of throttleSizes) throttled.push(await throttledRun(n, h1));
  }
  return {
    sizes: config.fleet,
    rounds: config.fleetRounds,
    privateSecondHost: h2 !== h1,
    runs,
    reference,
    throttled,
  };
}
