/** Turns the measurements into docs/benchmarks.md. */
import { median, minMax, pairedRatio } from "./common";
import type { RpcResults } from "./rpc";
import type { UploadContender, UploadResults } from "./upload";

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

export function render(
  env: Environment,
  rpc: RpcResults | undefined,
  upload: UploadResults | undefined,
  notes: string,
): string {
  const rows = [...(rpc ? rpcRows(rpc, env.cpus) : []), ...(upload ? uploadRows(upload) : [])];
  const load = env.loadSamples.length
    ? `1-minute load sampled during the run: min ${fmt(Math.min(...env.loadSamples), 2)}, median ${fmt(median(env.loadSamples), 2)}, max ${fmt(Math.max(...env.loadSamples), 2)}`
    : "";
  return [
    "# Benchmarks",
    "",
    "Generated by `npm run bench` (`scripts/bench`); do not edit by hand: the text between the table",
    'and the figure sections ("Findings") comes from `bench/notes.md`.',
    "",
    `Run: ${env.startedAt} to ${env.finishedAt} (${fmt(env.durationSeconds)} s) on ${env.cpus} CPUs; node ${env.node},`,
    `libvirt ${env.libvirt}, ${env.openssh}, ssh2 ${env.ssh2}. The daemon is the test host's libvirtd`,
    "(`scripts/test-host`), reached through its unix socket and through sshd in its network namespace.",
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
    "## Running it",
    "",
    "`npm run bench` starts the test host if needed (`scripts/test-host start`), compiles `bench/`",
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
    "| KVMP_BENCH_ONLY | all | `rpc` or `upload` to run one figure |",
    "| KVMP_BENCH_OUT | docs/benchmarks.md | where the report goes |",
    "| KVMP_BENCH_RENDER_ONLY | unset | `1`: measure nothing, rewrite the report from `.state/bench/results.json` |",
    "",
  ].join("\n");
}
