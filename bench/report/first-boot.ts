/** Figure 8 (the first boot a user gets: stock image vs test image) in the report. */
import type { FirstBootResults } from "../first-boot";
import { fmt, type Row, yesNo } from "./table";

/** 8a: time to a ready proxy, stock vs test image; 8b: package bytes each first boot fetched. */
export function firstBootRows(r: FirstBootResults): Row[] {
  const test = r.runs.find((x) => x.image === "test");
  const stock = r.runs.find((x) => x.image === "stock");
  if (test === undefined || stock === undefined) return [];
  return [
    {
      figure: `8a. time from create to a ready proxy (cloud-init done, health check passed), stock ${stock.suite} image installing squid and the agent from a mirror vs the test image that has them`,
      ours: `${fmt(stock.readyMs / 1000, 1)} s`,
      reference: `${fmt(test.readyMs / 1000, 1)} s`,
      ratio: `${fmt(stock.readyMs / test.readyMs, 2)}×`,
      goal: "known (no goal: what the first boot costs)",
      met: "—",
    },
    {
      figure: "8b. package bytes one first boot fetched (stock image; the test image fetched none)",
      ours: `${fmt(stock.fetchedBytes / 1e6, 1)} MB in ${stock.fetchedFiles} packages`,
      reference: `${fmt(test.fetchedBytes / 1e6, 1)} MB`,
      ratio: "—",
      goal: "none for the test image",
      met: yesNo(test.fetchedBytes === 0),
    },
  ];
}
