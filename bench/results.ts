/**
 * The raw results file (KVMP_BENCH_RESULTS, default .state/bench/results.json)
 * and the report written from it with bench/notes.md. Needs no test host:
 * bench/render.ts uses this alone to re-render the report.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { Config } from "./knobs";
import { type Results, render } from "./report";

/** What results.json holds: the results, and the knobs of the run that wrote it last. */
export type Saved = Results & { config?: unknown };

export function loadResults(file: string): Saved | undefined {
  if (!existsSync(file)) return undefined;
  return JSON.parse(readFileSync(file, "utf8")) as Saved;
}

/** Writes `results` with this run's knobs (a `config` merged in from the last file is replaced). */
export function saveResults(file: string, config: Config, results: Results): void {
  const { config: _last, ...rest } = results as Saved;
  writeFileSync(file, `${JSON.stringify({ config, ...rest }, null, 2)}\n`);
}

/** Writes the report (KVMP_BENCH_OUT) from `results` and the notes (bench/notes.md; empty if missing). */
export function writeReport(results: Results, config: Pick<Config, "root" | "out">): void {
  const notesFile = path.join(config.root, "bench/notes.md");
  const notes = existsSync(notesFile) ? readFileSync(notesFile, "utf8") : "";
  writeFileSync(config.out, render(results, notes));
}

/** KVMP_BENCH_RENDER_ONLY: the report from the last saved results, nothing measured. */
export function renderSaved(config: Pick<Config, "root" | "out" | "results">): void {
  const saved = loadResults(config.results);
  if (saved === undefined)
    throw new Error(`no ${config.results} to render from: run \`npm run bench\` (or some parts of it) first`);
  writeReport(saved, config);
}
