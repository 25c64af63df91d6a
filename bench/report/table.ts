/** The table machinery of the report: a row of the summary table, number formats, the table. */

export interface Row {
  figure: string;
  ours: string;
  reference: string;
  ratio: string;
  goal: string;
  met: string;
}

export const fmt = (x: number, digits = 0): string =>
  x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
export const range = ([lo, hi]: [number, number], digits = 0): string =>
  `${fmt(lo, digits)}–${fmt(hi, digits)}`;
export const yesNo = (ok: boolean): string => (ok ? "yes" : "**no**");

export function table(rows: Row[]): string {
  const lines = ["| figure | ours | reference | ratio | goal | met |", "|---|---:|---:|---:|---|---|"];
  for (const r of rows)
    lines.push(`| ${r.figure} | ${r.ours} | ${r.reference} | ${r.ratio} | ${r.goal} | ${r.met} |`);
  return lines.join("\n");
}
