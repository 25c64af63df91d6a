/**
 * The machine's speed `npm test` prints before and after the tests
 * (scripts/cpu-reference): one line naming the moment, with the CPU-seconds
 * a fixed workload took, so two runs' times are compared beside it.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";
import { expect, it } from "vitest";

it("prints one line: the label and the CPU-seconds of its fixed workload", () => {
  const out = execFileSync(path.resolve(__dirname, "../../../scripts/cpu-reference"), ["before"], {
    encoding: "utf8",
    timeout: 60_000,
  });
  const m = /^cpu reference before: (\d+\.\d\d) CPU-s for a fixed workload \(lower is faster\)\n$/.exec(out);
  expect(m, out).not.toBeNull();
  expect(Number(m?.[1])).toBeGreaterThan(0);
});
