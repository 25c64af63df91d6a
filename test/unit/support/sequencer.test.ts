/**
 * The order the suite's files start in (test/support/sequencer.ts): the lead
 * files before all others, then project by project in the order given, each
 * project's named files ahead of its others.
 */
import { describe, expect, it } from "vitest";
import { inStartOrder, type StartOrder } from "../../support/sequencer";

const ORDER: StartOrder = {
  lead: ["test/guest/long.test.ts"],
  projects: ["libvirtd", "pulumi", "guest"],
  first: ["test/guest/stock.test.ts", "test/pulumi/slow.test.ts"],
};

/** The files in the order they would start, given in vitest's order. */
function started(files: [string, string][]): string[] {
  return inStartOrder(ORDER, files, ([file, project]) => ({ file, project })).map(([file]) => file);
}

describe("inStartOrder", () => {
  it.each<[string, [string, string][], string[]]>([
    [
      "the lead file first, then the projects in order, each one's named files first",
      [
        ["test/guest/other.test.ts", "guest"],
        ["test/guest/stock.test.ts", "guest"],
        ["test/pulumi/a.test.ts", "pulumi"],
        ["test/pulumi/slow.test.ts", "pulumi"],
        ["test/libvirtd/b.test.ts", "libvirtd"],
        ["test/guest/long.test.ts", "guest"],
      ],
      [
        "test/guest/long.test.ts",
        "test/libvirtd/b.test.ts",
        "test/pulumi/slow.test.ts",
        "test/pulumi/a.test.ts",
        "test/guest/stock.test.ts",
        "test/guest/other.test.ts",
      ],
    ],
    [
      "a project not named starts last, files otherwise in vitest's order",
      [
        ["test/unit/x.test.ts", "unit"],
        ["test/libvirtd/c.test.ts", "libvirtd"],
        ["test/libvirtd/b.test.ts", "libvirtd"],
      ],
      ["test/libvirtd/c.test.ts", "test/libvirtd/b.test.ts", "test/unit/x.test.ts"],
    ],
  ])("%s", (_what, files, expected) => {
    expect(started(files)).toEqual(expected);
  });
});
