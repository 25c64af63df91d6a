import { describe, expect, it } from "vitest";
import { failedTooLong, replaceAfterOf, withFailingSince } from "../../../provider/resource/failing-health";
import type { ProxyHealth } from "../../../provider/resource/outputs";
import { decodeState } from "../../../provider/resource/recorded-state";

const T0 = "2026-12-07T10:00:00.000Z";
const T1 = "2026-12-07T10:05:00.000Z";
const T2 = "2026-12-07T10:10:00.000Z";
const ok = (at: string): ProxyHealth => ({ ok: true, checkedAt: at });
const failing = (at: string, since?: string): ProxyHealth => ({
  ok: false,
  checkedAt: at,
  reason: "connection refused",
  ...(since !== undefined ? { failingSince: since } : {}),
});

describe("since when a proxy fails, as each probe's record keeps it", () => {
  it.each<[string, ProxyHealth | undefined, ProxyHealth, ProxyHealth]>([
    ["a first failure starts it", undefined, failing(T1), failing(T1, T1)],
    ["a failure after a success starts it anew", ok(T0), failing(T1), failing(T1, T1)],
    ["a failure after a failure keeps its start", failing(T1, T0), failing(T2), failing(T2, T0)],
    ["an older record without a start: its probe's time", failing(T0), failing(T2), failing(T2, T0)],
    ["a success drops it", failing(T1, T0), ok(T2), ok(T2)],
    ["a success stays without one", ok(T0), { ...ok(T1), failingSince: T0 }, ok(T1)],
  ])("%s", (_what, previous, next, recorded) => {
    expect(withFailingSince(previous, next)).toEqual(recorded);
  });
});

describe("replaced at this up for failing too long", () => {
  const at = (iso: string) => Date.parse(iso);
  const state = (s: Record<string, unknown>) => decodeState({ name: "edge", ...s });

  it.each<[string, Record<string, unknown>, number | undefined, string, boolean]>([
    ["degraded past the threshold", { state: "degraded", health: failing(T2, T0) }, 600, T2, true],
    ["exactly at the threshold", { state: "degraded", health: failing(T1, T0) }, 300, T1, true],
    ["degraded, not long enough", { state: "degraded", health: failing(T1, T0) }, 600, T1, false],
    ["no replaceAfter", { state: "degraded", health: failing(T2, T0) }, undefined, T2, false],
    ["healthy", { state: "running", health: ok(T2) }, 60, T2, false],
    [
      "stopped: started again in place, not replaced",
      { state: "stopped", health: failing(T2, T0) },
      60,
      T2,
      false,
    ],
    ["an older record: from its last probe", { state: "degraded", health: failing(T0) }, 600, T2, true],
    ["no health recorded", { state: "degraded" }, 60, T2, false],
  ])("%s", (_what, s, replaceAfter, now, replaced) => {
    const why = failedTooLong(state(s), replaceAfter, at(now));
    expect(why !== undefined).toBe(replaced);
  });

  it("says since when, for how long, the threshold and the last reason", () => {
    expect(failedTooLong(state({ state: "degraded", health: failing(T2, T0) }), 600, at(T2))).toBe(
      `replacing: failing its health check since ${T0} (10 min), over its healthCheck.replaceAfter of 10 min: connection refused`,
    );
  });

  it.each<[unknown, number | undefined]>([
    [{ replaceAfter: 900 }, 900],
    [{}, undefined],
    [false, undefined],
    [undefined, undefined],
  ])("replaceAfter of %j: %j", (hc, seconds) => {
    expect(replaceAfterOf(hc)).toBe(seconds);
  });
});
