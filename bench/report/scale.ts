/** Figure 7 (upload time against size) in the report: its summary rows and its section. */
import type { ScaleContender, ScaleResults } from "../scale";
import { median } from "../stats";
import type { UploadContender, UploadResults } from "../upload";
import { fmt, type Row } from "./table";

export function scaleRows(sc: ScaleResults, u: UploadResults | undefined): Row[] {
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

/** virsh's time minus its no-transfer run: at or below 0 the transfer is lost in its start-up noise. */
const net = (x: number): string => (x > 0 ? fmt(x, 3) : "≈ 0 (in the set-up noise)");

export function scaleSection(sc: ScaleResults, u: UploadResults | undefined): string {
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
