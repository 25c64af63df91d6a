/**
 * A ProxyFleet's size (provider/program/proxy-fleet.ts): an integer from 0
 * to MAX_FLEET_SIZE, refused otherwise by the constructor both doors use
 * (the KvmProxy class's program, the plugin's Construct) before the
 * component or any member registers.
 */
import { describe, expect, it } from "vitest";
import { fleetArgs } from "../../../provider/plugin/construct";
import { PluginKvmProxy } from "../../../provider/plugin/plugin-kvm-proxy";
import { fleetSizeProblem, MAX_FLEET_SIZE, ProxyFleet } from "../../../provider/program/proxy-fleet";

const REFUSED: [string, unknown, RegExp][] = [
  ["one over the maximum", MAX_FLEET_SIZE + 1, /got 1001$/],
  ["a billion", 1e9, /got 1000000000$/],
  ["infinity", Number.POSITIVE_INFINITY, /got Infinity$/],
  ["negative", -1, /got -1$/],
  ["a fraction", 2.5, /got 2\.5$/],
  ["NaN", Number.NaN, /got NaN$/],
  ["a string", "3", /got string$/],
  ["absent", undefined, /got undefined$/],
];

describe("fleetSizeProblem", () => {
  it.each([0, 1, 7, MAX_FLEET_SIZE])("accepts %d", (size) => {
    expect(fleetSizeProblem(size)).toBeUndefined();
  });

  it.each(REFUSED)("refuses %s", (_what, size, got) => {
    expect(fleetSizeProblem(size)).toMatch(
      /^size must be an integer from 0 to 1000 \(a larger fleet is several fleets\)/,
    );
    expect(fleetSizeProblem(size)).toMatch(got);
  });
});

describe("the ProxyFleet constructor refuses a size before anything registers", () => {
  const doors: [string, (size: unknown) => unknown][] = [
    [
      "the program's (dynamic KvmProxy members)",
      (size) => new ProxyFleet("f", { size, hosts: ["lab"], proxy: { image: "x" } } as never),
    ],
    [
      "the plugin's Construct (its own KvmProxy members)",
      (size) =>
        new ProxyFleet(
          "f",
          fleetArgs({ size, hosts: ["lab"], proxy: { image: "x" } }, []),
          {},
          (member, args, opts) => new PluginKvmProxy(member, args, opts),
        ),
    ],
  ];
  // Sizes that end, whatever the code does: a billion members would fill the worker's memory first.
  const sizes: unknown[] = [MAX_FLEET_SIZE + 1, -1, 2.5, "3"];
  it.each(doors.flatMap(([door, make]) => sizes.map((size) => [door, size, make] as const)))(
    "%s: %j",
    (_door, size, make) => {
      expect(() => make(size)).toThrow(/^ProxyFleet f: size must be an integer from 0 to 1000/);
    },
  );
});
