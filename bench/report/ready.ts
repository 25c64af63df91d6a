/** Figure 6 (time to ready on a real guest) in the report: its summary rows. */
import type { ReadyResults } from "../ready";
import { fmt, type Row, yesNo } from "./table";

/** Figure 6: one row per real-guest run for our share, one for each notice delay. */
export function readyRows(r: ReadyResults): Row[] {
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
