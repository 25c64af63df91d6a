/**
 * Entry point of `KVMP_BENCH_RENDER_ONLY=1 npm run bench` (scripts/bench runs
 * this instead of main.ts and starts no test host): rewrites the report
 * (KVMP_BENCH_OUT) from the last saved results (KVMP_BENCH_RESULTS) and
 * bench/notes.md, measuring nothing. Imports neither common.ts nor the
 * figures, so it reads no test host's facts.
 */
import { readKnobs } from "./knobs";
import { renderSaved } from "./results";

try {
  const config = readKnobs(process.env);
  renderSaved(config);
  process.stderr.write(`bench: re-rendered ${config.out} from ${config.results}\n`);
} catch (err) {
  console.error(err);
  process.exit(1);
}
