/** Figure 1 (RPC lookups) in the report: its summary rows and its section. */
import type { RpcResults } from "../rpc";
import { median, minMax, pairedRatio } from "../stats";
import { fmt, type Row, range, yesNo } from "./table";

/** One clock tick of libvirtd's CPU counters in µs (USER_HZ 100, common.ts's TICKS_PER_SECOND). */
const TICK_US = 10_000;

export function rpcRows(r: RpcResults, cpus: number): Row[] {
  const rate = (k: keyof RpcResults["samples"]): number[] => r.samples[k].map((s) => s.callsPerSecond);
  const rows: Row[] = [];
  const add = (
    figure: string,
    ours: keyof RpcResults["samples"],
    ref: keyof RpcResults["samples"],
    goal?: number,
  ) => {
    // Results of runs before a contender existed lack it.
    if (!r.samples[ours]?.length) return;
    const ratio = pairedRatio(rate(ours), rate(ref)).median;
    rows.push({
      figure,
      ours: `${fmt(median(rate(ours)))} calls/s`,
      reference: `${fmt(median(rate(ref)))} calls/s`,
      ratio: `${fmt(ratio, 2)}×`,
      goal: goal === undefined ? "info" : `≥ ${fmt(goal, 1)}×`,
      met: goal === undefined ? "—" : yesNo(ratio >= goal),
    });
  };
  add("1a. lookups, unix, sequential (vs C client sequential)", "oursUnixSeq", "pyUnixSeq", 1);
  add("1a. lookups, SSH, sequential (vs C client over qemu+ssh)", "oursSshSeq", "pySshSeq", 1);
  add(`1b. lookups, unix, ${r.depth} in flight (vs C client sequential)`, "oursUnixPipe", "pyUnixSeq", 2);
  add(`1b. lookups, SSH, ${r.depth} in flight (vs C client over qemu+ssh)`, "oursSshPipe", "pySshSeq", 2);
  add("1d. lookups, OpenSSH transport, sequential (vs C client over qemu+ssh)", "oursOpensshSeq", "pySshSeq");
  add(
    `1d. lookups, OpenSSH transport, ${r.depth} in flight (vs C client over qemu+ssh)`,
    "oursOpensshPipe",
    "pySshSeq",
  );
  // Both processes share the machine's cores: the rate at which they would use them all up.
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

export function rpcSection(r: RpcResults, cpus: number): string {
  const names: [keyof RpcResults["samples"], string][] = [
    ["oursUnixSeq", "ours, unix, sequential"],
    ["oursUnixPipe", `ours, unix, ${r.depth} in flight`],
    ["pyUnixSeq", "python3-libvirt, unix, sequential"],
    ["oursSshSeq", "ours, SSH stream-local, sequential"],
    ["oursSshPipe", `ours, SSH stream-local, ${r.depth} in flight`],
    ["pySshSeq", "python3-libvirt, qemu+ssh, sequential"],
    ["oursOpensshSeq", "ours, OpenSSH transport, sequential"],
    ["oursOpensshPipe", `ours, OpenSSH transport, ${r.depth} in flight`],
  ];
  const lines = [
    "| contender | calls/s median | calls/s min–max | µs/call | libvirtd CPU µs/call | client CPU µs/call |",
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (const [k, label] of names) {
    const s = r.samples[k];
    if (!s?.length) continue;
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
    "untimed lookups once per process so V8 has compiled the hot paths; see Findings). The C client is",
    "python3-libvirt (Debian's, via /usr/bin/python3), which times its own loop so interpreter start-up and",
    "connection set-up are outside the timing, as for ours. Ours over SSH is SshTransport (ssh2,",
    "`direct-streamlocal` channel to libvirtd's socket); the C client's is `qemu+ssh` (OpenSSH,",
    "virt-ssh-helper on the remote side). The pipelined run keeps " +
      `${r.depth} calls outstanding on the one connection.`,
    `${r.rounds} rounds; in each, all six contenders ran once, in an order rotated by one per round.`,
    "Ratios in the table are medians of per-round ratios (a round pairs runs made seconds apart).",
    "libvirtd CPU per call is the growth of utime+stime in `/proc/<libvirtd pid>/stat` over the timed",
    `calls, divided by the calls (one 10 ms tick is ${fmt(TICK_US / r.lookups, 1)} µs per call over ${fmt(r.lookups)} calls). Client CPU is`,
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
    "libvirtd is the test host's daemon: its CPU counters include the calls of any other client it served",
    "meanwhile (see Findings), so the per-call figures above are upper bounds and the least contaminated",
    "round (the minimum) is the best estimate.",
    "",
    `Ceiling: while ours ran ${r.depth} calls in flight over the unix socket, libvirtd spent at least ` +
      `${fmt(daemonPipe, 1)} µs of CPU per call (median over rounds ${fmt(daemonPipeMed, 1)}; at least ` +
      `${fmt(daemonSeq, 1)} µs under the sequential C client) and our process ${fmt(clientPipe, 1)} µs ` +
      `(median). The daemon is multi-threaded, so one connection is not held to one core; the two ` +
      `processes together could at best fill the machine's ${cpus} cores, i.e. ${fmt((cpus * 1e6) / (daemonPipeMed + clientPipe))} ` +
      `calls/s at the median costs (row 1c). Ours reached ${fmt(ratePipe)} calls/s (median), libvirtd ` +
      `then using about ${fmt((ratePipe * daemonPipeMed) / 1e6, 2)} cores.`,
    "",
  ].join("\n");
}
