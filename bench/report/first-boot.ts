/** Figure 8 (the first boot a user gets: stock image vs test image vs baked image) in the report. */
import type { FirstBootResults } from "../first-boot";
import { fmt, type Row, yesNo } from "./table";

/**
 * 8a: time to a ready proxy, stock vs test image; 8b: package bytes each
 * first boot fetched; 8c: a proxy from the baked stock image vs from the
 * stock image (goal at most 0.5×); 8d: package bytes per baked proxy, and
 * the bake's own.
 */
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
    ...bakedRows(r, stock),
  ];
}

function bakedRows(r: FirstBootResults, stock: FirstBootResults["runs"][number]): Row[] {
  const baked = r.runs.find((x) => x.image === "baked");
  if (baked === undefined || r.bake === undefined) return [];
  const ratio = baked.readyMs / stock.readyMs;
  return [
    {
      figure: `8c. time from create to a ready proxy from the stock ${stock.suite} image baked on the host (bake done: ${fmt(r.bake.ms / 1000, 1)} s, once per host and recipe) vs from the stock image`,
      ours: `${fmt(baked.readyMs / 1000, 1)} s`,
      reference: `${fmt(stock.readyMs / 1000, 1)} s`,
      ratio: `${fmt(ratio, 2)}×`,
      goal: "≤ 0.50×",
      met: yesNo(ratio <= 0.5),
    },
    {
      figure: "8d. package bytes one first boot fetched from the baked image (the bake fetched them once)",
      ours: `${fmt(baked.fetchedBytes / 1e6, 1)} MB`,
      reference: `${fmt(r.bake.fetchedBytes / 1e6, 1)} MB in ${r.bake.fetchedFiles} packages for the bake`,
      ratio: "—",
      goal: "none per proxy",
      met: yesNo(baked.fetchedBytes === 0),
    },
  ];
}
