/** The report's "Running it" section: how to run the benchmark, and the knob table rendered from bench/knobs.ts. */
import { type Knob, knobs } from "../knobs";

/** A markdown table cell: a `|` in the text would end the cell. */
const cell = (text: string): string => text.replace(/\|/g, "\\|");

export function knobTable(table: Readonly<Record<string, Knob<unknown>>> = knobs): string {
  const lines = ["| variable | default | meaning |", "|---|---|---|"];
  for (const k of Object.values(table)) lines.push(`| ${k.name} | ${cell(k.shown)} | ${cell(k.meaning)} |`);
  return lines.join("\n");
}

export function runningSection(): string {
  return [
    "## Running it",
    "",
    "`npm run bench` starts the test host if needed (`scripts/test-host start`) and a private second",
    "test host for the two-host fleet (stopped again at the end), compiles `bench/`",
    "with `tsc -p bench/tsconfig.json` into `dist-bench/` (gitignored), runs it with node, and rewrites this",
    "file; raw samples go to `.state/bench/results.json`. `KVMP_BENCH_RENDER_ONLY=1 npm run bench`",
    "measures nothing and needs no test host: it rewrites this file from the last raw results and",
    "`bench/notes.md` (after editing the notes, or the report's code). Environment knobs (`bench/knobs.ts`):",
    "",
    knobTable(),
    "",
  ].join("\n");
}
