/** Turns the measurements into docs/benchmarks.md. */

import { median, minMax, pairedRatio } from "./common";
import type { FleetResults, FleetRun, Timed } from "./fleet";
import type { ReadyResults } from "./ready";
import type { RpcResults } from "./rpc";
import type { ScaleContender, ScaleResults } from "./scale";
import type { UploadContender, UploadResults } from "./upload";

export type Part = "rpc" | "upload" | "scale" | "fleet" | "ready";

/** Everything a report is made from (what results.json holds). */
export interface Results {
  env: Environment;
  rpc?: RpcResults;
  upload?: UploadResults;
  scale?: ScaleResults;
  fleet?: FleetResults;
  ready?: ReadyResults;
  /** When each part last ran (parts merge across partial runs). */
  ranAt?: Partial<Record<Part, string>>;
}

export interface Environment {
  startedAt: string;
  finishedAt: string;
  durationSeconds: number;
  loadBefore: string;
  loadAfter: string;
  loadSamples: number[];
  cpus: number;
  node: string;
  libvirt: string;
  openssh: string;
  ssh2: string;
  otherProcesses: string;
}

interface Row {
  figure: string;
  ours: string;
  reference: string;
  ratio: string;
  goal: string;
  met: string;
}

const fmt = (x: number, digits = 0): string =>
  x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
const range = ([lo, hi]: [number, number], digits = 0): string => `${fmt(lo, digits)}–${fmt(hi, digits)}`;
const yesNo = (ok: boolean): string => (ok ? "yes" : "**no**");

function rpcRows(r: RpcResults, cpus: number): Row[] {
  const rate = (k: keyof RpcResults["samples"]): number[] => r.samples[k].map((s) => s.callsPerSecond);
  const rows: Row[] = [];
  const add = (
    figure: string,
    ours: keyof RpcResults["samples"],
    ref: keyof RpcResults["samples"],
    goal: number,
  ) => {
    const ratio = pairedRatio(rate(ours), rate(ref)).median;
    rows.push({
      figure,
      ours: `${fmt(median(rate(ours)))} calls/s`,
      reference: `${fmt(median(rate(ref)))} calls/s`,
      ratio: `${fmt(ratio, 2)}×`,
      goal: `≥ ${fmt(goal, 1)}×`,
      met: yesNo(ratio >= goal),
    });
  };
  add("1a. lookups, unix, sequential (vs C client sequential)", "oursUnixSeq", "pyUnixSeq", 1);
  add("1a. lookups, SSH, sequential (vs C client over qemu+ssh)", "oursSshSeq", "pySshSeq", 1);
  add(`1b. lookups, unix, ${r.depth} in flight (vs C client sequential)`, "oursUnixPipe", "pyUnixSeq", 2);
  add(`1b. lookups, SSH, ${r.depth} in flight (vs C client over qemu+ssh)`, "oursSshPipe", "pySshSeq", 2);
  // Both processes share the 2 cores: the rate at which they would use them all up.
  const ceiling = r.samples.oursUnixPipe.map((s) => (cpus * 1e6) / (s.daemonUsPerCall + s.clientUsPerCall));
  rows.push({
    figure: `1c. unix, ${r.depth} in flight vs the CPU ceiling (${cpus} cores / (libvirtd + our CPU per call))`,
    ours: `${fmt(median(rate("oursUnixPipe")))} calls/s`,
    reference: `${fmt(median(ceiling))} calls/s`,
    ratio: `${fmt(pairedRatio(rate("oursUnixPipe"), ceiling).median, 2)}×`,
    goal: "info",
    met: "—",
  });
  return rows;
}

function uploadRows(u: UploadResults): Row[] {
  const mbs = (k: UploadContender): number[] => u.samples[k].map((s) => s.mbPerSecond);
  const rows: Row[] = [];
  const add = (figure: string, ours: UploadContender, ref: UploadContender, goal?: number) => {
    const ratio = pairedRatio(mbs(ours), mbs(ref)).median;
    rows.push({
      figure,
      ours: `${fmt(median(mbs(ours)))} MB/s`,
      reference: `${fmt(median(mbs(ref)))} MB/s`,
      ratio: `${fmt(ratio, 2)}×`,
      goal: goal === undefined ? "info" : `≥ ${fmt(goal, 2)}×`,
      met: goal === undefined ? "—" : yesNo(ratio >= goal),
    });
  };
  const gib = fmt(u.bytes / 2 ** 30, u.bytes % 2 ** 30 ? 2 : 0);
  add(`2a. upload ${gib} GiB, SSH (vs virsh vol-upload, qemu+ssh)`, "oursSsh", "virshSsh", 2);
  add(`2b. upload ${gib} GiB, SSH (vs bare ssh2 channel, cat > /dev/null)`, "oursSsh", "ssh2Bare", 0.9);
  add(`2c. upload ${gib} GiB, SSH (vs OpenSSH aes128-gcm, cat > /dev/null)`, "oursSsh", "opensshGcm");
  add(`2d. upload ${gib} GiB, unix (vs virsh vol-upload, unix)`, "oursUnix", "virshUnix");
  add(`2f. upload ${gib} GiB, SSH, 64 KiB reads (vs virsh vol-upload, qemu+ssh)`, "oursSsh64k", "virshSsh");
  add(`2f. upload ${gib} GiB, SSH, 64 KiB reads (vs bare ssh2 channel)`, "oursSsh64k", "ssh2Bare");
  add(`2f. upload ${gib} GiB, unix, 64 KiB reads (vs virsh vol-upload, unix)`, "oursUnix64k", "virshUnix");
  const rss = u.samples.oursSsh.map((s) => (s.rssGrowth ?? 0) / 2 ** 20);
  rows.push({
    figure: "2e. peak RSS growth during the SSH upload (worst round)",
    ours: `${fmt(Math.max(...rss), 1)} MiB`,
    reference: "—",
    ratio: "—",
    goal: "< 64 MiB",
    met: yesNo(Math.max(...rss) < 64),
  });
  return rows;
}

function table(rows: Row[]): string {
  const lines = ["| figure | ours | reference | ratio | goal | met |", "|---|---:|---:|---:|---|---|"];
  for (const r of rows)
    lines.push(`| ${r.figure} | ${r.ours} | ${r.reference} | ${r.ratio} | ${r.goal} | ${r.met} |`);
  return lines.join("\n");
}

function rpcSection(r: RpcResults, cpus: number): string {
  const names: [keyof RpcResults["samples"], string][] = [
    ["oursUnixSeq", "ours, unix, sequential"],
    ["oursUnixPipe", `ours, unix, ${r.depth} in flight`],
    ["pyUnixSeq", "python3-libvirt, unix, sequential"],
    ["oursSshSeq", "ours, SSH stream-local, sequential"],
    ["oursSshPipe", `ours, SSH stream-local, ${r.depth} in flight`],
    ["pySshSeq", "python3-libvirt, qemu+ssh, sequential"],
  ];
  const lines = [
    "| contender | calls/s median | calls/s min–max | µs/call | libvirtd CPU µs/call | client CPU µs/call |",
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (const [k, label] of names) {
    const s = r.samples[k];
    const rates = s.map((x) => x.callsPerSecond);
    lines.push(
      `| ${label} | ${fmt(median(rates))} | ${range(minMax(rates))} | ${fmt(1e6 / median(rates), 1)} | ` +
        `${fmt(median(s.map((x) => x.daemonUsPerCall)), 1)} | ${fmt(median(s.map((x) => x.clientUsPerCall)), 1)} |`,
    );
  }
  const ratioLine = (
    label: string,
    a: keyof RpcResults["samples"],
    b: keyof RpcResults["samples"],
  ): string => {
    const p = pairedRatio(
      r.samples[a].map((x) => x.callsPerSecond),
      r.samples[b].map((x) => x.callsPerSecond),
    );
    return `- ${label}: median ${fmt(p.median, 2)}×, per-round range ${range(p.range, 2)}`;
  };
  const daemonPipe = Math.min(...r.samples.oursUnixPipe.map((x) => x.daemonUsPerCall));
  const daemonPipeMed = median(r.samples.oursUnixPipe.map((x) => x.daemonUsPerCall));
  const ratePipe = median(r.samples.oursUnixPipe.map((x) => x.callsPerSecond));
  const daemonSeq = Math.min(...r.samples.pyUnixSeq.map((x) => x.daemonUsPerCall));
  const clientPipe = median(r.samples.oursUnixPipe.map((x) => x.clientUsPerCall));
  return [
    "## 1. RPC: domain lookups per second on one connection",
    "",
    `Method: \`bench/rpc.ts\` and \`bench/reference/lookups.py\`. One never-started domain (\`kvmpb-lookup\`,`,
    "defined on `qemu:///system` for the run, undefined after) is looked up by name",
    `(virDomainLookupByName) ${fmt(r.lookups)} times per contender per round, on one fresh connection`,
    "per contender and round, after an untimed warm-up on that connection (and, for ours, after",
    "untimed lookups once per process so V8 has compiled the hot paths: a fresh process runs its first",
    "~10,000 calls at about half speed). The C client is",
    "python3-libvirt (Debian's, via /usr/bin/python3), which times its own loop so interpreter start-up and",
    "connection set-up are outside the timing, as for ours. Ours over SSH is SshTransport (ssh2,",
    "`direct-streamlocal` channel to libvirtd's socket); the C client's is `qemu+ssh` (OpenSSH,",
    "virt-ssh-helper on the remote side). The pipelined run keeps " +
      `${r.depth} calls outstanding on the one connection.`,
    `${r.rounds} rounds; in each, all six contenders ran once, in an order rotated by one per round.`,
    "Ratios in the table are medians of per-round ratios (a round pairs runs made seconds apart).",
    "libvirtd CPU per call is the growth of utime+stime in `/proc/<libvirtd pid>/stat` over the timed",
    "calls, divided by the calls (10 ms tick resolution: about ±1% at these run lengths). Client CPU is",
    "`process.cpuUsage()` for ours and `os.times()` for python (which includes the interpreter's cost).",
    "",
    ...lines,
    "",
    "Spread of the paired ratios:",
    ratioLine("ours unix sequential / C unix sequential", "oursUnixSeq", "pyUnixSeq"),
    ratioLine("ours SSH sequential / C qemu+ssh sequential", "oursSshSeq", "pySshSeq"),
    ratioLine(`ours unix ${r.depth} in flight / C unix sequential`, "oursUnixPipe", "pyUnixSeq"),
    ratioLine(`ours SSH ${r.depth} in flight / C qemu+ssh sequential`, "oursSshPipe", "pySshSeq"),
    "",
    "libvirtd is the test host's daemon, which other engineers' test suites were calling at the same",
    "time: its CPU counters include their calls, so the per-call figures above are upper bounds and the",
    "least contaminated round (the minimum) is the best estimate.",
    "",
    `Ceiling: while ours ran ${r.depth} calls in flight over the unix socket, libvirtd spent at least ` +
      `${fmt(daemonPipe, 1)} µs of CPU per call (median over rounds ${fmt(daemonPipeMed, 1)}; at least ` +
      `${fmt(daemonSeq, 1)} µs under the sequential C client) and our process ${fmt(clientPipe, 1)} µs ` +
      `(median). The daemon is multi-threaded, so one connection is not held to one core; the two ` +
      `processes together could at best fill the machine's ${cpus} cores, i.e. ${fmt((cpus * 1e6) / (daemonPipeMed + clientPipe))} ` +
      `calls/s at the median costs (row 1c). Ours reached ${fmt(ratePipe)} calls/s (median), libvirtd ` +
      `then using about ${fmt((ratePipe * daemonPipeMed) / 1e6, 2)} cores, on a machine whose other tenants kept ` +
      "the load average well above 2.",
    "",
  ].join("\n");
}

function uploadSection(u: UploadResults): string {
  const names: [UploadContender, string][] = [
    ["oursSsh", "ours, SshTransport (stream-local)"],
    ["virshSsh", "virsh vol-upload, qemu+ssh"],
    ["ssh2Bare", "bare ssh2 exec channel, cat > /dev/null"],
    ["opensshGcm", "OpenSSH -c aes128-gcm, cat > /dev/null"],
    ["oursUnix", "ours, unix socket"],
    ["virshUnix", "virsh vol-upload, unix socket"],
    ["oursSsh64k", "ours, SshTransport, 64 KiB reads"],
    ["oursUnix64k", "ours, unix socket, 64 KiB reads"],
  ];
  const lines = [
    "| contender | MB/s median | MB/s min–max | seconds median | set-up subtracted (s, median) |",
    "|---|---:|---:|---:|---:|",
  ];
  for (const [k, label] of names) {
    const s = u.samples[k];
    const mbs = s.map((x) => x.mbPerSecond);
    const over = s.map((x) => x.overheadSeconds).filter((x): x is number => x !== undefined);
    lines.push(
      `| ${label} | ${fmt(median(mbs))} | ${range(minMax(mbs))} | ${fmt(median(s.map((x) => x.seconds)), 2)} | ` +
        `${over.length ? fmt(median(over), 2) : "—"} |`,
    );
  }
  const ratioLine = (label: string, a: UploadContender, b: UploadContender): string => {
    const p = pairedRatio(
      u.samples[a].map((x) => x.mbPerSecond),
      u.samples[b].map((x) => x.mbPerSecond),
    );
    return `- ${label}: median ${fmt(p.median, 2)}×, per-round range ${range(p.range, 2)}`;
  };
  const rss = (k: UploadContender): string =>
    u.samples[k].map((x) => fmt((x.rssGrowth ?? 0) / 2 ** 20, 1)).join(", ");
  return [
    "## 2. Upload: MB/s into the pool",
    "",
    `Method: \`bench/upload.ts\`. One file of ${fmt(u.bytes)} pseudo-random bytes, generated once in`,
    "`.state/bench/` and read through once before the rounds (so every contender reads it from the page",
    "cache), is streamed by every contender. MB = 10^6 bytes. Ours is `Libvirt.storageVolUpload(vol,",
    `fs.createReadStream(file, { highWaterMark: ${fmt(u.readChunk)} }))\` into a fresh raw volume of the pool,`,
    `packets of ${u.chunkSize ? `${fmt(u.chunkSize)} bytes (KVMP_BENCH_UPLOAD_CHUNK)` : "the library default (256 KiB)"},`,
    "timed from the call to libvirtd's confirmation on an already open connection. virsh and OpenSSH run",
    "as processes timed from spawn to exit, minus the median of three runs of the same command without",
    "the transfer in the same round (`virsh vol-info` on the same volume with the same URI; `ssh host",
    "true`), which removes connection set-up and the remote shell's start-up. The bare ssh2 channel",
    "is an ssh2 Client with the same key and host key check, timed from the exec channel being open",
    `to the remote \`cat\` exiting; ssh2 negotiated \`${u.cipher}\`. Each uploaded volume is deleted right after`,
    `its upload. ${u.rounds} rounds, all eight contenders per round, order rotated by one per round.`,
    u.pool === "memory"
      ? "Every contender that writes a volume writes it into a transient dir pool on tmpfs (`/dev/shm`), so the figure measures the pipe (client, SSH, libvirtd), not the disk; the bare ssh2 and OpenSSH contenders write to `/dev/null`. `KVMP_BENCH_UPLOAD_POOL=disk` uses the test host's pool on disk instead."
      : "The volumes are in the test host's pool, on disk (each 1 GiB leaves dirty pages that the kernel writes back during the next contender's turn; see Findings).",
    'The rows marked "64 KiB reads" run ours again with Node\'s default read size, which is what',
    "a caller gets from a plain `fs.createReadStream(path)` (see Findings).",
    "Ratios are medians of per-round ratios.",
    "",
    ...lines,
    "",
    "Spread of the paired ratios:",
    ratioLine("ours SSH / virsh qemu+ssh", "oursSsh", "virshSsh"),
    ratioLine("ours SSH / bare ssh2 channel", "oursSsh", "ssh2Bare"),
    ratioLine("ours SSH / OpenSSH aes128-gcm", "oursSsh", "opensshGcm"),
    ratioLine("ours unix / virsh unix", "oursUnix", "virshUnix"),
    ratioLine("ours SSH, 64 KiB reads / virsh qemu+ssh", "oursSsh64k", "virshSsh"),
    ratioLine("ours SSH, 64 KiB reads / bare ssh2", "oursSsh64k", "ssh2Bare"),
    ratioLine("ours unix, 64 KiB reads / virsh unix", "oursUnix64k", "virshUnix"),
    ratioLine("ours SSH, 1 MiB reads / 64 KiB reads", "oursSsh", "oursSsh64k"),
    ratioLine("ours unix, 1 MiB reads / 64 KiB reads", "oursUnix", "oursUnix64k"),
    "",
    "Peak RSS growth of our process (sampled every 50 ms from just before the upload call, after a",
    `forced GC), MiB per round: SSH ${rss("oursSsh")}; unix ${rss("oursUnix")}; SSH with 64 KiB reads`,
    `${rss("oursSsh64k")}; unix with 64 KiB reads ${rss("oursUnix64k")}.`,
    "",
  ].join("\n");
}

/** Runs of one fleet shape (proxies × hosts), over the rounds. */
function runsOf(f: FleetResults, proxies: number, hosts: number): FleetRun[] {
  return f.runs.filter((r) => r.proxies === proxies && r.hosts === hosts);
}

const med = (runs: FleetRun[], pick: (r: FleetRun) => number): number => median(runs.map(pick));
/** Calls per proxy, the connection handshake (per host and process) left out. */
const perProxyCalls = (runs: FleetRun[], pick: (r: FleetRun) => Timed): number =>
  med(runs, (r) => (pick(r).calls.total - (pick(r).calls.handshake ?? 0)) / r.proxies);
const maxUploads = (f: FleetResults): number =>
  Math.max(...f.runs.flatMap((r) => Object.values(r.up.calls.imageUploadsByHost)));
const minUploads = (f: FleetResults): number =>
  Math.min(
    ...f.runs.flatMap((r) =>
      r.hosts === 0
        ? []
        : Array.from({ length: r.hosts }, (_, i) => r.up.calls.imageUploadsByHost[`h${i + 1}`] ?? 0),
    ),
  );

function fleetRows(f: FleetResults): Row[] {
  const rows: Row[] = [];
  const sizes = [...f.sizes].sort((a, b) => a - b);
  const small = sizes[0] as number;
  const big = sizes[sizes.length - 1] as number;
  const one = runsOf(f, small, 1);
  const many = runsOf(f, big, 1);
  const ten = runsOf(f, 10, 1);
  const two = runsOf(f, 10, 2);
  const upMany = med(many, (r) => r.up.seconds);
  const upOne = med(one, (r) => r.up.seconds);
  const upRatio = upMany / upOne;
  rows.push({
    figure: `3a. \`pulumi up\`, ${big} proxies vs ${small}, one host`,
    ours: `${fmt(upMany, 1)} s`,
    reference: `${fmt(upOne, 1)} s`,
    ratio: `${fmt(upRatio, 2)}×`,
    goal: "≤ 3×",
    met: yesNo(upRatio <= 3),
  });
  // The same comparison for the CPU of Pulumi's processes and ours alone (qemu and libvirtd left out).
  const cpuOne = med(one, (r) => r.up.cpuSeconds ?? Number.NaN);
  const cpuMany = med(many, (r) => r.up.cpuSeconds ?? Number.NaN);
  if (!Number.isNaN(cpuOne) && !Number.isNaN(cpuMany)) {
    rows.push({
      figure: `3a. CPU of Pulumi's processes and our provider during \`up\`, ${big} proxies vs ${small} (our overhead alone)`,
      ours: `${fmt(cpuMany, 1)} s`,
      reference: `${fmt(cpuOne, 1)} s`,
      ratio: `${fmt(cpuMany / cpuOne, 2)}×`,
      goal: "≤ 3×",
      met: yesNo(cpuMany / cpuOne <= 3),
    });
  }
  const lo = minUploads(f);
  const hi = maxUploads(f);
  rows.push({
    figure: "3b. image uploads per host, cold cache (every fleet run)",
    ours: lo === hi ? `${hi}` : `${lo}–${hi}`,
    reference: "—",
    ratio: "—",
    goal: "1",
    met: yesNo(lo === 1 && hi === 1),
  });
  if (two.length && ten.length) {
    const upTwo = med(two, (x) => x.up.seconds);
    const upTen = med(ten, (x) => x.up.seconds);
    rows.push({
      figure: `3c. \`pulumi up\`, 10 proxies over 2 hosts vs 10 on one${f.privateSecondHost ? "" : " (same daemon under 2 keys)"}`,
      ours: `${fmt(upTwo, 1)} s`,
      reference: `${fmt(upTen, 1)} s`,
      ratio: `${fmt(upTwo / upTen, 2)}×`,
      goal: "info",
      met: "—",
    });
  }
  for (const transport of ["ssh", "unix"] as const) {
    const ref = f.reference.filter((x) => x.transport === transport && x.domains === 10);
    if (!ref.length || !ten.length) continue;
    const refS = median(ref.map((x) => x.seconds));
    const ours = med(ten, (x) => x.up.seconds);
    rows.push({
      figure: `3d. 10 proxies: \`pulumi up\` over SSH vs a bash loop of virsh (vol-create-as, define, start) over ${transport === "ssh" ? "qemu+ssh" : "the unix socket"}`,
      ours: `${fmt(ours, 1)} s`,
      reference: `${fmt(refS, 1)} s`,
      ratio: `${fmt(ours / refS, 2)}×`,
      goal: "info",
      met: "—",
    });
  }
  const previewCalls = Math.max(...f.runs.map((r) => r.preview.calls.total));
  rows.push({
    figure: "4a. no-op `pulumi preview`: libvirt calls (most in any run)",
    ours: `${previewCalls}`,
    reference: "—",
    ratio: "—",
    goal: "0",
    met: yesNo(previewCalls === 0),
  });
  const refreshPer = Math.max(...f.runs.map((r) => perProxyCalls([r], (x) => x.refresh)));
  const refreshPerBig = perProxyCalls(many, (r) => r.refresh);
  const handshakes = Math.max(...f.runs.map((r) => (r.refresh.calls.handshake ?? 0) / r.hosts));
  rows.push({
    figure: `4b. \`pulumi refresh\` of unchanged proxies: libvirt calls per proxy, ${big} proxies (worst run in brackets; plus ${handshakes} handshake calls per host)`,
    ours: `${fmt(refreshPerBig, 2)} (${fmt(refreshPer, 2)})`,
    reference: "—",
    ratio: "—",
    goal: "≤ 3",
    met: yesNo(refreshPer <= 3),
  });
  for (const [label, pick] of [
    ["4c. no-op `pulumi preview`", (r: FleetRun) => r.preview.seconds],
    ["4d. `pulumi refresh --skip-preview`", (r: FleetRun) => r.refresh.seconds],
  ] as const) {
    const r = med(many, pick) / med(one, pick);
    rows.push({
      figure: `${label}, ${big} proxies vs ${small}`,
      ours: `${fmt(med(many, pick), 1)} s`,
      reference: `${fmt(med(one, pick), 1)} s`,
      ratio: `${fmt(r, 2)}×`,
      goal: "info",
      met: "—",
    });
  }
  const providerMax = Math.max(...f.runs.map((r) => r.providerBytes));
  rows.push({
    figure: "5a. `__provider` in the state, bytes",
    ours: fmt(providerMax),
    reference: "—",
    ratio: "—",
    goal: "< 4,096",
    met: yesNo(providerMax < 4096),
  });
  if (two.length && ten.length) {
    const a = med(ten, (r) => r.providerBytes);
    const b = med(two, (r) => r.providerBytes);
    rows.push({
      figure: "5b. `__provider` bytes, 2 hosts configured vs 1",
      ours: fmt(b),
      reference: fmt(a),
      ratio: `${fmt(b / a, 2)}×`,
      goal: "no growth",
      met: yesNo(b <= a),
    });
  }
  rows.push({
    figure: `5c. state bytes per proxy (one KvmProxy in \`pulumi stack export\`, ${big} proxies)`,
    ours: fmt(med(many, (r) => r.bytesPerProxy)),
    reference: "—",
    ratio: "—",
    goal: "info",
    met: "—",
  });
  return rows;
}

function scaleRows(sc: ScaleResults, u: UploadResults | undefined): Row[] {
  const pts = scalePoints(sc, u);
  if (pts.length < 2) return [];
  const first = pts[0] as ScaleRow;
  const last = pts[pts.length - 1] as ScaleRow;
  const rows: Row[] = [];
  for (const [k, label] of [
    ["oursUnix", "unix"],
    ["oursSsh", "SSH"],
  ] as const) {
    const grow = last[k] / first[k];
    rows.push({
      figure: `7. our upload over ${label}: time at ${mib(last.bytes)} vs ${mib(first.bytes)} (${fmt(last.bytes / first.bytes)}× the bytes)`,
      ours: `${fmt(last[k], 2)} s`,
      reference: `${fmt(first[k], 3)} s`,
      ratio: `${fmt(grow, 0)}×`,
      goal: "info (linear)",
      met: "—",
    });
  }
  return rows;
}

const mib = (bytes: number): string =>
  bytes >= 2 ** 30 ? `${fmt(bytes / 2 ** 30)} GiB` : `${fmt(bytes / 2 ** 20)} MiB`;

interface ScaleRow {
  bytes: number;
  oursUnix: number;
  virshUnix: number;
  oursSsh: number;
  virshSsh: number;
}

/** Median seconds per contender and size; figure 2's run adds its size as the last point. */
function scalePoints(sc: ScaleResults, u: UploadResults | undefined): ScaleRow[] {
  const pts: ScaleRow[] = sc.points.map((p) => {
    const m = (k: ScaleContender) => median(p.samples[k].map((x) => x.seconds));
    return {
      bytes: p.bytes,
      oursUnix: m("oursUnix"),
      virshUnix: m("virshUnix"),
      oursSsh: m("oursSsh"),
      virshSsh: m("virshSsh"),
    };
  });
  if (u && !pts.some((p) => p.bytes === u.bytes)) {
    const m = (k: UploadContender) => median(u.samples[k].map((x) => x.seconds));
    pts.push({
      bytes: u.bytes,
      oursUnix: m("oursUnix"),
      virshUnix: m("virshUnix"),
      oursSsh: m("oursSsh"),
      virshSsh: m("virshSsh"),
    });
  }
  return pts.sort((a, b) => a.bytes - b.bytes);
}

const cpu = (ours: number, daemon: number, qemu: number): string =>
  [ours, daemon, qemu].map((x) => (Number.isNaN(x) ? "?" : fmt(x, 1))).join(" / ");

function fleetSection(f: FleetResults): string {
  const shapes = [...new Set(f.runs.map((r) => `${r.proxies}x${r.hosts}`))].map((k) => {
    const [p, h] = k.split("x").map(Number) as [number, number];
    return runsOf(f, p, h);
  });
  shapes.sort(
    (a, b) =>
      (a[0] as FleetRun).hosts - (b[0] as FleetRun).hosts ||
      (a[0] as FleetRun).proxies - (b[0] as FleetRun).proxies,
  );
  const lines = [
    "| proxies | hosts | up s | up s per proxy | up CPU s: Pulumi + provider / libvirtd / qemu | up calls per proxy | image uploads per host | preview s | preview calls | refresh s | refresh calls per proxy (+ handshake) | destroy s | state bytes | bytes per proxy | `__provider` bytes |",
    "|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const runs of shapes) {
    const r0 = runs[0] as FleetRun;
    const uploads = runs
      .map((r) =>
        Array.from({ length: r.hosts }, (_, i) => r.up.calls.imageUploadsByHost[`h${i + 1}`] ?? 0).join("+"),
      )
      .join(", ");
    const cells = [
      `${r0.proxies}`,
      `${r0.hosts}`,
      fmt(
        med(runs, (r) => r.up.seconds),
        1,
      ),
      fmt(
        med(runs, (r) => r.up.seconds / r.proxies),
        2,
      ),
      cpu(
        med(runs, (r) => r.up.cpuSeconds ?? Number.NaN),
        med(runs, (r) => r.up.libvirtdCpuSeconds ?? Number.NaN),
        med(runs, (r) => r.qemuCpuSeconds ?? Number.NaN),
      ),
      fmt(
        perProxyCalls(runs, (r) => r.up),
        1,
      ),
      uploads,
      fmt(
        med(runs, (r) => r.preview.seconds),
        1,
      ),
      fmt(med(runs, (r) => r.preview.calls.total)),
      fmt(
        med(runs, (r) => r.refresh.seconds),
        1,
      ),
      `${fmt(
        perProxyCalls(runs, (r) => r.refresh),
        2,
      )} (+${fmt(med(runs, (r) => r.refresh.calls.handshake ?? 0))})`,
      fmt(
        med(runs, (r) => r.destroy.seconds),
        1,
      ),
      fmt(med(runs, (r) => r.stateBytes)),
      fmt(med(runs, (r) => r.bytesPerProxy)),
      fmt(med(runs, (r) => r.providerBytes)),
    ];
    lines.push(`| ${cells.join(" | ")} |`);
  }
  const refLines = [
    "| reference | domains | seconds (median) | seconds per domain | CPU s: script + virsh / libvirtd / qemu |",
    "|---|---:|---:|---:|---|",
  ];
  for (const t of ["ssh", "unix"] as const) {
    const ref = f.reference.filter((x) => x.transport === t);
    if (!ref.length) continue;
    const s = median(ref.map((x) => x.seconds));
    const n = (ref[0] as { domains: number }).domains;
    refLines.push(
      `| bash loop of virsh, ${t === "ssh" ? "qemu+ssh" : "unix socket"} | ${n} | ${fmt(s, 1)} | ${fmt(s / n, 2)} | ` +
        `${cpu(
          median(ref.map((x) => x.cpuSeconds ?? Number.NaN)),
          median(ref.map((x) => x.libvirtdCpuSeconds ?? Number.NaN)),
          median(ref.map((x) => x.qemuCpuSeconds ?? Number.NaN)),
        )} |`,
    );
  }
  const biggest = f.runs.filter((r) => r.hosts === 1).sort((a, b) => b.proxies - a.proxies)[0];
  const breakdown = (t: Timed, n: number): string =>
    Object.entries(t.calls.byCall)
      .sort((a, b) => b[1] - a[1])
      .map(([c, k]) => `${c} ${fmt(k / n, 2)}`)
      .join(", ");
  return [
    "## 3-5. Fleets through the Pulumi CLI: wall time, libvirt calls, state",
    "",
    "Method: `bench/fleet.ts`. Each row is a fresh stack of the test program `test/pulumi/programs/pair`",
    "(one KvmProxy per entry of its stack config) run by the real Pulumi CLI (`.tools/pulumi`, default",
    "`--parallel`), with a file backend. Every stack gets an image file of its own (an empty 64 MiB qcow2,",
    "about 200 KB), so each host's image cache starts cold. Proxies: 128 MiB, BIOS, `waitForIp: false`,",
    "`healthCheck: false`, hosts reached over SSH (SshTransport). The driver is the test host's qemu driver",
    "(TCG): the test driver cannot take a volume upload, and every create uploads a seed ISO, so the",
    "provider cannot run on it at all. Nothing boots; qemu idles in SeaBIOS. Steps, each timed from spawn",
    "to exit of the CLI: `up --yes --skip-preview`, `preview --expect-no-changes`, `refresh --yes",
    "--skip-preview` (a plain `refresh --yes` previews first and so reads every proxy twice), `stack",
    "export`, `destroy --yes --skip-preview`. Libvirt calls are counted from the provider's trace",
    "(`KVMP_TRACE_FILE`, one line per call); calls per proxy leave out the connection handshake",
    "(virAuthList and virConnectOpen, once per host and provider process), shown apart. Bytes per proxy: one KvmProxy",
    "resource of the export as JSON (median over the stack's proxies).",
    `${f.rounds} round(s); sizes alternate order between rounds. The second host is ` +
      (f.privateSecondHost
        ? "a private test host (its own libvirtd, sshd and pool in its own network namespace)."
        : "**the same daemon under a second key** (no private host was available)."),
    "",
    ...lines,
    "",
    "The user's alternative, in the same run and against the same daemon: a bash loop running, per domain,",
    "`virsh vol-create-as` (a 1 GiB qcow2 overlay backed by the image), `virsh define` (the domain XML our",
    "provider defines, with a shared seed ISO) and `virsh start`; image and seed were put in place before",
    "the timing. Each virsh is a process of its own, as in a shell script.",
    "",
    ...refLines,
    "",
    ...(biggest
      ? [
          `Libvirt calls per proxy of \`up\` with ${biggest.proxies} proxies: ${breakdown(biggest.up, biggest.proxies)}.`,
          `Of \`refresh\`: ${breakdown(biggest.refresh, biggest.proxies)}.`,
          `Of \`destroy\`: ${breakdown(biggest.destroy, biggest.proxies)}.`,
          "",
        ]
      : []),
  ].join("\n");
}

/** virsh's time minus its no-transfer run: at or below 0 the transfer is lost in its start-up noise. */
const net = (x: number): string => (x > 0 ? fmt(x, 3) : "≈ 0 (in the set-up noise)");

function scaleSection(sc: ScaleResults, u: UploadResults | undefined): string {
  const pts = scalePoints(sc, u);
  const lines = [
    "| size | ours unix s | virsh unix s | ours SSH s | virsh qemu+ssh s | ours unix MB/s | ours SSH MB/s |",
    "|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const p of pts) {
    lines.push(
      `| ${mib(p.bytes)} | ${fmt(p.oursUnix, 3)} | ${net(p.virshUnix)} | ${fmt(p.oursSsh, 3)} | ${net(p.virshSsh)} | ` +
        `${fmt(p.bytes / 1e6 / p.oursUnix)} | ${fmt(p.bytes / 1e6 / p.oursSsh)} |`,
    );
  }
  return [
    "## 7. Upload time against image size",
    "",
    `Method: \`bench/scale.ts\`, timed as in section 2 (ours from the call to libvirtd's confirmation on an`,
    "open connection, 1 MiB reads; virsh from spawn to exit minus its no-transfer run), at the sizes of",
    `\`KVMP_BENCH_SCALE_MIB\`, ${sc.rounds} rounds each, medians; the largest size is section 2's run.`,
    "",
    ...lines,
    "",
  ].join("\n");
}

/** Figure 6: one row per real-guest run for our share, one for each notice delay. */
function readyRows(r: ReadyResults): Row[] {
  const rows: Row[] = [];
  for (const run of r.runs) {
    const label = `image cache ${run.imageCache}, ${run.firmware}`;
    rows.push({
      figure: `6a. time to a healthy proxy on a real guest (${label}): our create vs the whole`,
      ours: `${fmt(run.ours.createMs / 1000, 2)} s`,
      reference: `${fmt(run.healthyAt / 1000, 1)} s`,
      ratio: `${fmt(run.ourShare * 100, 2)} %`,
      goal: "< 5 %",
      met: yesNo(run.ourShare < 0.05),
    });
    if (run.ipNoticeDelayMs !== undefined) {
      rows.push({
        figure: `6b. delay between the guest having an IP and create noticing it (${label})`,
        ours: `${fmt(Math.max(0, run.ipNoticeDelayMs) / 1000, 2)} s`,
        reference: `observer every ${r.observeMs} ms`,
        ratio: "—",
        goal: "< 2 s",
        met: yesNo(run.ipNoticeDelayMs < 2000),
      });
    }
    if (run.healthNoticeDelayMs !== undefined) {
      rows.push({
        figure: `6c. delay between squid answering and create noticing it (${label})`,
        ours: `${fmt(Math.max(0, run.healthNoticeDelayMs) / 1000, 2)} s`,
        reference: `observer every ${r.observeMs} ms`,
        ratio: "—",
        goal: "< 2 s",
        met: yesNo(run.healthNoticeDelayMs < 2000),
      });
    }
  }
  return rows;
}

export function render(results: Results, notes: string): string {
  const { env, rpc, upload, scale, fleet, ready } = results;
  const rows = [
    ...(rpc ? rpcRows(rpc, env.cpus) : []),
    ...(upload ? uploadRows(upload) : []),
    ...(fleet ? fleetRows(fleet) : []),
    ...(scale ? scaleRows(scale, upload) : []),
    ...(ready ? readyRows(ready) : []),
  ];
  const load = env.loadSamples.length
    ? `1-minute load sampled during the run: min ${fmt(Math.min(...env.loadSamples), 2)}, median ${fmt(median(env.loadSamples), 2)}, max ${fmt(Math.max(...env.loadSamples), 2)}`
    : "";
  const ranAt = Object.entries(results.ranAt ?? {});
  return [
    "# Benchmarks",
    "",
    "Generated by `npm run bench` (`scripts/bench`); do not edit by hand: the text between the table",
    'and the figure sections ("Findings") comes from `bench/notes.md`.',
    "",
    `Run: ${env.startedAt} to ${env.finishedAt} (${fmt(env.durationSeconds)} s) on ${env.cpus} CPUs; node ${env.node},`,
    `libvirt ${env.libvirt}, ${env.openssh}, ssh2 ${env.ssh2}. The daemon is the test host's libvirtd`,
    "(`scripts/test-host`), reached through its unix socket and through sshd in its network namespace.",
    ...(ranAt.length ? [`Parts finished at: ${ranAt.map(([k, v]) => `${k} ${v}`).join(", ")}.`] : []),
    "",
    `**The machine was shared** with other engineers' builds and tests while this ran: load average ${env.loadBefore}`,
    `at the start and ${env.loadAfter} at the end; ${load}. ${env.otherProcesses}`,
    "Absolute figures on these machines swing about 2× between runs; only the ratios, measured",
    "alternately in the same run against the same daemon, are meant to be compared.",
    "",
    table(rows),
    "",
    notes.trim(),
    "",
    ...(rpc ? [rpcSection(rpc, env.cpus)] : []),
    ...(upload ? [uploadSection(upload)] : []),
    ...(fleet ? [fleetSection(fleet)] : []),
    ...(scale ? [scaleSection(scale, upload)] : []),
    "## Running it",
    "",
    "`npm run bench` starts the test host if needed (`scripts/test-host start`) and a private second",
    "test host for the two-host fleet (stopped again at the end), compiles `bench/`",
    "with `tsc -p bench/tsconfig.json` into `dist-bench/` (gitignored), runs it with node, and rewrites this",
    "file; raw samples go to `.state/bench/results.json`. Environment knobs:",
    "",
    "| variable | default | meaning |",
    "|---|---|---|",
    "| KVMP_BENCH_ROUNDS | 5 | rounds of the RPC figure |",
    "| KVMP_BENCH_LOOKUPS | 10000 | timed lookups per contender per round |",
    "| KVMP_BENCH_WARMUP | 1000 | untimed lookups before them |",
    "| KVMP_BENCH_PROCESS_WARMUP | 10000 | untimed lookups per transport and mode before the first round |",
    "| KVMP_BENCH_DEPTH | 64 | calls in flight for the pipelined runs |",
    "| KVMP_BENCH_UPLOAD_ROUNDS | 5 | rounds of the upload figure |",
    "| KVMP_BENCH_UPLOAD_MIB | 1024 | size of the uploaded file |",
    "| KVMP_BENCH_UPLOAD_CHUNK | library default | bytes per STREAM packet for our upload |",
    "| KVMP_BENCH_READ_CHUNK | 1048576 | highWaterMark of the file read streams (ours, bare ssh2) |",
    "| KVMP_BENCH_FLEET | 1,10,50 | fleet sizes (proxies on one host); 10 over 2 hosts always runs |",
    "| KVMP_BENCH_FLEET_ROUNDS | 2 | rounds of the fleet figures (after one untimed warm-up stack) |",
    "| KVMP_BENCH_SCALE_MIB | 1,64,256 | upload sizes of the scaling figure (plus section 2's) |",
    "| KVMP_BENCH_SCALE_ROUNDS | 3 | rounds per size of the scaling figure |",
    "| KVMP_BENCH_ONLY | all | a comma list of `rpc`, `upload`, `scale`, `fleet`, `ready`: run only those; the others keep their last results. `ready` (figure 6: real guests booted under TCG, about 10 minutes) runs only when named |",
    "| KVMP_BENCH_OUT | docs/benchmarks.md | where the report goes |",
    "| KVMP_BENCH_RESULTS | .state/bench/results.json | the raw results, merged across partial runs |",
    "| KVMP_BENCH_RENDER_ONLY | unset | `1`: measure nothing, rewrite the report from the raw results |",
    "| KVMP_BENCH_HOST2_DIR | set by scripts/bench | state folder of the second test host; unset: the same daemon under a second key |",
    "",
  ].join("\n");
}
