import { describe, expect, it } from "vitest";
import type { ManagedDomain, Verdict } from "../../../provider/gc/classify";
import { formatAge, formatJson, formatProblems, formatTable, formatText } from "../../../provider/gc/report";
import type { GcReport, Row } from "../../../provider/gc/sweep";
import { sampleMetadata } from "../kvm/fixtures";

function row(name: string, verdict: Verdict, reason: string, project = "infra"): Row {
  const domain: ManagedDomain = {
    host: "lab",
    name,
    uuid: `u-${name}`,
    providerId: `kvm://lab/${name}`,
    metadata: sampleMetadata({
      owner: {
        project,
        stack: "prod",
        urn: `urn:pulumi:prod::${project}::pulumi-nodejs:dynamic:KvmProxy::${name}`,
      },
    }),
  };
  return { domain, verdict, reason, ageMs: 3_725_000 };
}

function report(rows: Row[], deleteRequested = false): GcReport {
  return {
    project: "infra",
    stack: "prod",
    hosts: ["lab"],
    minAgeMs: 900_000,
    deleteRequested,
    rows,
    builders: [],
    problems: [],
  };
}

describe("formatAge", () => {
  it.each([
    [0, "0s"],
    [59_999, "59s"],
    [61_000, "1m1s"],
    [3_725_000, "1h2m"],
    [90_000_000, "1d1h"],
    [900_000, "15m"],
    [7_200_000, "2h"],
    [-9_000, "-9s"],
  ])("%d ms is %s", (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});

describe("formatTable", () => {
  it("aligns columns and leaves no trailing spaces", () => {
    expect(
      formatTable(
        ["A", "BB"],
        [
          ["long", "x"],
          ["s", ""],
        ],
      ),
    ).toBe("A     BB\nlong  x\ns");
  });
});

describe("formatText", () => {
  const rows = [
    row("gone-1", "orphan", "stack no longer exists"),
    row("kept-1", "held", "held"),
    row("new-1", "too-young", "younger than the minimum age; URN not in stack prod"),
    row("other-1", "other-project", "belongs to project crawler", "crawler"),
  ];

  it("shows orphans, unknowns and young orphans; held and other projects only count", () => {
    const text = formatText(report(rows));
    const lines = text.split("\n");
    expect(lines[0]).toMatch(/^HOST\s+DOMAIN\s+STACK\s+URN\s+AGE\s+STATUS\s+REASON$/);
    expect(lines[1]).toMatch(
      /^lab\s+gone-1\s+prod\s+urn:\S+::gone-1\s+1h2m\s+orphan\s+stack no longer exists$/,
    );
    expect(lines[2]).toMatch(/^lab\s+new-1\s+.*too-young/);
    expect(text).not.toContain("kept-1");
    expect(text).not.toContain("other-1");
    expect(text).toContain(
      "4 managed VMs on 1 host (project infra, hosts from stack prod): 1 orphan, 1 held, 0 unknown, 1 younger than 15m, 1 of other projects.",
    );
    expect(text).toContain("Dry run: nothing deleted. Rerun with --delete to delete it.");
  });

  it("reports each deletion", () => {
    const gone = row("gone-1", "orphan", "stack no longer exists");
    gone.deleted = { volumesRemoved: ["gone-1-root.qcow2", "gone-1-seed.iso"] };
    const text = formatText(report([gone, row("gone-2", "orphan", "URN not in stack prod")], true));
    expect(text).toMatch(/gone-1\s.*\sdeleted\s+stack no longer exists/);
    expect(text).toContain("deleted lab/gone-1 and volumes gone-1-root.qcow2, gone-1-seed.iso");
    expect(text).toContain("Deleted 1 of 2 orphans.");
    expect(text).not.toContain("Dry run");
  });

  it("prints only the summary when nothing is worth a row", () => {
    expect(formatText(report([row("kept-1", "held", "held")]))).toBe(
      "1 managed VM on 1 host (project infra, hosts from stack prod): 0 orphans, 1 held, 0 unknown, 0 younger than 15m, 0 of other projects.\n",
    );
  });
});

describe("formatJson and formatProblems", () => {
  it("lists every domain with its verdict, and the problems", () => {
    const r = report([row("gone-1", "orphan", "stack no longer exists"), row("kept-1", "held", "held")]);
    r.problems.push({ scope: "host", subject: "edge", message: "connection refused" });
    const doc = JSON.parse(formatJson(r));
    expect(doc.domains.map((d: { domain: string; verdict: string }) => [d.domain, d.verdict])).toEqual([
      ["gone-1", "orphan"],
      ["kept-1", "held"],
    ]);
    expect(doc.domains[0]).toMatchObject({
      host: "lab",
      providerId: "kvm://lab/gone-1",
      project: "infra",
      stack: "prod",
      ageSeconds: 3725,
      createdAt: "2026-09-04T14:04:00.000Z",
    });
    expect(doc.minAgeSeconds).toBe(900);
    expect(doc.problems).toEqual([{ scope: "host", subject: "edge", message: "connection refused" }]);
    expect(formatProblems(r.problems)).toBe("error: host edge: connection refused\n");
  });
});

describe("leftover bake builders", () => {
  const builder = "kvmp-bake-0123456789abcdef";
  it.each([
    [
      "listed, with how to remove them",
      [{ host: "lab", name: builder }],
      `leftover bake builder lab/${builder}: a bake cut short left it; --delete removes it and its seed`,
    ],
    [
      "removed by --delete, with its seed",
      [{ host: "lab", name: builder, removed: [builder, `${builder}-seed.iso`] }],
      `removed leftover bake builder lab/${builder} (and ${builder}-seed.iso)`,
    ],
  ])("are %s in the text", (_, builders, line) => {
    expect(formatText({ ...report([]), builders }).split("\n")).toContain(line);
  });

  it("are in the JSON document", () => {
    const builders = [{ host: "lab", name: builder }];
    expect(JSON.parse(formatJson({ ...report([]), builders })).builders).toEqual(builders);
  });
});
