/**
 * The table `npm test` ends with (scripts/suite-times): where a run spent
 * its time, per group (the vitest project of a file, by its folder under
 * test/) and the five longest files, from vitest's JSON report, also one
 * written by another checkout (a fresh clone).
 */
import { createRequire } from "node:module";
import path from "node:path";
import { describe, expect, it } from "vitest";

const { suiteTimes, render } = createRequire(__filename)(
  path.resolve(__dirname, "../../../scripts/suite-times"),
) as {
  suiteTimes: (
    report: unknown,
    root: string,
  ) => {
    groups: { group: string; from: number; to: number; files: number; seconds: number }[];
    longest: { file: string; seconds: number }[];
  };
  render: (t: unknown) => string;
};

const ROOT = "/work/main";
/** A report's entry for `file`, from `from` to `to` seconds after the run began. */
const at = (name: string, from: number, to: number) => ({
  name,
  startTime: 1_000_000 + from * 1000,
  endTime: 1_000_000 + to * 1000,
});

const REPORT = {
  testResults: [
    at(`${ROOT}/test/libvirtd/a.test.ts`, 0, 100),
    at(`${ROOT}/test/libvirtd/b.test.ts`, 10, 400),
    at(`${ROOT}/test/pulumi/c.test.ts`, 380, 1000),
    at(`${ROOT}/test/unit/d.test.ts`, 1000, 1060),
    at("/tmp/fresh.x/main/test/guest/e.test.ts", 1060, 2000),
    at("/tmp/fresh.x/main/test/guest/f.test.ts", 1061, 1900),
    { name: `${ROOT}/test/unit/never-ran.test.ts` },
  ],
};

describe("where the time went", () => {
  const t = suiteTimes(REPORT, ROOT);

  it.each([
    ["libvirtd", 0, 400, 2, 490],
    ["pulumi", 380, 1000, 1, 620],
    ["unit", 1000, 1060, 1, 60],
    ["guest", 1060, 2000, 2, 940 + 839],
  ])("group %s: from %i s to %i s, %i files, %i s summed", (group, from, to, files, seconds) => {
    expect(t.groups.find((g) => g.group === group)).toEqual({ group, from, to, files, seconds });
  });

  it("orders the groups by their start, and leaves out files that never ran", () => {
    expect(t.groups.map((g) => g.group)).toEqual(["libvirtd", "pulumi", "unit", "guest"]);
    expect(t.groups.reduce((n, g) => n + g.files, 0)).toBe(6);
  });

  it("lists the five longest files, longest first, by their path from test/ (another checkout's too)", () => {
    expect(t.longest.map((f) => [f.file, f.seconds])).toEqual([
      ["test/guest/e.test.ts", 940],
      ["test/guest/f.test.ts", 839],
      ["test/pulumi/c.test.ts", 620],
      ["test/libvirtd/b.test.ts", 390],
      ["test/libvirtd/a.test.ts", 100],
    ]);
  });

  it("renders the run's span and every row in minutes", () => {
    const text = render(t);
    expect(text).toMatch(/^where the time went \(vitest 33\.3 min\):/);
    expect(text).toMatch(/guest\s+17\.7 min\s+33\.3 min\s+2\s+29\.6 min/);
    expect(text).toMatch(/15\.7 min {2}test\/guest\/e\.test\.ts/);
  });
});
