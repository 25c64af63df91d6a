/**
 * The tests' waiting primitive (test/support/wait-until.ts): it fails on a
 * stall of the progress it reads or at its ceiling, never while the progress
 * moves, and its error names what it waited for, the last progress and how
 * long since it changed. A fake clock: each sleep advances it.
 */
import { describe, expect, it } from "vitest";
import { done, pending, type WaitClock, WaitTimeout, waitUntil, watchWhile } from "../../support/wait-until";

/** A clock whose sleeps return at once, advancing its time; `at` runs callbacks when time passes a mark. */
function fakeClock(): WaitClock & { t: number; at: (ms: number, f: () => void) => void } {
  const marks: { ms: number; f: () => void }[] = [];
  const clock = {
    t: 0,
    now: () => clock.t,
    sleep: async (ms: number) => {
      clock.t += ms;
      for (const m of marks.splice(0)) {
        if (clock.t >= m.ms) m.f();
        else marks.push(m);
      }
    },
    at: (ms: number, f: () => void) => {
      marks.push({ ms, f });
    },
  };
  return clock;
}

describe("waitUntil", () => {
  it("returns the check's value once it is done", async () => {
    const clock = fakeClock();
    let polls = 0;
    const v = await waitUntil({
      what: "three polls",
      check: () => (++polls === 3 ? done("there") : pending()),
      progress: () => 0,
      stallMs: 60_000,
      ceilingMs: 600_000,
      pollMs: 1_000,
      clock,
    });
    expect(v).toBe("there");
    expect(polls).toBe(3);
    expect(clock.t).toBe(2_000);
  });

  it("goes on past the stall limit for as long as the progress changes", async () => {
    const clock = fakeClock();
    // Done at 30 minutes; the progress moves every 50 s, under a 60 s stall limit.
    const v = await waitUntil({
      what: "a slow but moving guest",
      check: () => (clock.t >= 30 * 60_000 ? done(clock.t) : pending()),
      progress: () => Math.floor(clock.t / 50_000),
      stallMs: 60_000,
      ceilingMs: 60 * 60_000,
      pollMs: 5_000,
      clock,
    });
    expect(v).toBe(30 * 60_000);
  });

  it("fails when the progress stops changing for stallMs, naming what it waited for and the last progress", async () => {
    const clock = fakeClock();
    const err = await waitUntil({
      what: "squid answers 204 through the proxy",
      check: () => pending("000"),
      // Moves until 100 s, then stays at stage "modules-final".
      progress: () => (clock.t < 100_000 ? `init ${clock.t}` : "modules-final"),
      stallMs: 60_000,
      ceilingMs: 3_600_000,
      pollMs: 10_000,
      clock,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WaitTimeout);
    const t = err as WaitTimeout;
    expect(t.reason).toBe("stalled");
    expect(t.what).toBe("squid answers 204 through the proxy");
    expect(t.lastProgress).toBe("modules-final");
    expect(t.sinceChangeMs).toBe(60_000);
    expect(clock.t).toBe(160_000);
    expect(t.message).toBe(
      "gave up waiting for squid answers 204 through the proxy: no progress for 60 s (stall limit 60 s), " +
        "after 160 s; last progress: modules-final; last seen instead: 000",
    );
  });

  it("fails at the ceiling even while the progress still changes", async () => {
    const clock = fakeClock();
    const err = (await waitUntil({
      what: "a guest that prints forever",
      check: () => pending(),
      progress: () => clock.t,
      stallMs: 60_000,
      ceilingMs: 600_000,
      pollMs: 10_000,
      clock,
    }).catch((e: unknown) => e)) as WaitTimeout;
    expect(err.reason).toBe("ceiling");
    expect(clock.t).toBe(600_000);
    expect(err.message).toMatch(/^gave up waiting for a guest that prints forever: ceiling of 600 s reached/);
    expect(err.message).toContain("last progress: 600000");
  });

  it("counts a progress reader that throws as no change, and names its error", async () => {
    const clock = fakeClock();
    const err = (await waitUntil({
      what: "the agent",
      check: () => pending(),
      progress: () => {
        if (clock.t >= 20_000) throw new Error("guest agent: no reply");
        return clock.t;
      },
      stallMs: 30_000,
      ceilingMs: 600_000,
      pollMs: 10_000,
      clock,
    }).catch((e: unknown) => e)) as WaitTimeout;
    expect(err.reason).toBe("stalled");
    expect(err.lastProgress).toBe("10000");
    expect(err.message).toContain("the progress reader last failed: guest agent: no reply");
  });

  it("lets a check's throw through at once", async () => {
    const clock = fakeClock();
    await expect(
      waitUntil({
        what: "x",
        check: () => {
          throw new Error("permanent");
        },
        progress: () => 0,
        stallMs: 1,
        ceilingMs: 1,
        clock,
      }),
    ).rejects.toThrow("permanent");
  });
});

describe("watchWhile", () => {
  it("returns the task's result when it ends while the progress moves", async () => {
    const clock = fakeClock();
    const v = await watchWhile(
      () =>
        new Promise<string>((resolve) => {
          clock.at(200_000, () => resolve("created"));
        }),
      {
        what: "the create",
        progress: () => Math.floor(clock.t / 20_000),
        stallMs: 60_000,
        ceilingMs: 3_600_000,
        pollMs: 5_000,
        clock,
      },
    );
    expect(v).toBe("created");
  });

  it("returns as soon as the task ends, without waiting for a progress read under way", async () => {
    let finish: (v: string) => void = () => {};
    const task = new Promise<string>((resolve) => {
      finish = resolve;
    });
    let reads = 0;
    const v = await watchWhile(() => task, {
      what: "the up",
      progress: () => {
        reads++;
        finish("returned");
        return new Promise<never>(() => {}); // a read that never ends
      },
      stallMs: 60_000,
      ceilingMs: 600_000,
      clock: fakeClock(),
    });
    expect(v).toBe("returned");
    expect(reads).toBe(1);
  });

  it("lets the task's own error through", async () => {
    await expect(
      watchWhile(() => Promise.reject(new Error("define failed")), {
        what: "the create",
        progress: () => 0,
        stallMs: 60_000,
        ceilingMs: 600_000,
        clock: fakeClock(),
      }),
    ).rejects.toThrow("define failed");
  });

  it("aborts the task's signal and fails when the progress stalls", async () => {
    const clock = fakeClock();
    let aborted: unknown;
    const err = (await watchWhile(
      (signal) =>
        new Promise<never>(() => {
          signal.addEventListener("abort", () => {
            aborted = signal.reason;
          });
        }),
      {
        what: "cloud-init status --wait",
        progress: () => "modules-config",
        stallMs: 120_000,
        ceilingMs: 3_600_000,
        pollMs: 10_000,
        clock,
      },
    ).catch((e: unknown) => e)) as WaitTimeout;
    expect(err).toBeInstanceOf(WaitTimeout);
    expect(err.reason).toBe("stalled");
    expect(aborted).toBe(err);
    expect(err.message).toContain("gave up waiting for cloud-init status --wait: no progress for 120 s");
    expect(err.message).toContain("last progress: modules-config");
  });
});
