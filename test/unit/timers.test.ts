/**
 * The one rule for every timer's delay (provider/timers.ts): Node honours
 * up to 2^31-1 ms and fires anything larger after 1 ms, so a delay is
 * clamped to that maximum; under 1 ms, negative or NaN fires at once.
 * vitest's fake timers read delays as Node does (past the maximum: 1 ms),
 * so they show what a timer set with such a delay would do.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { every, later, MAX_TIMER_MS, sleep, timerDelay } from "../../provider/timers";

const DAY_MS = 86_400_000;

describe("a timer's delay", () => {
  it.each([
    ["1 s", 1_000, 1_000],
    ["24 h", DAY_MS, DAY_MS],
    ["2^31-2", MAX_TIMER_MS - 1, MAX_TIMER_MS - 1],
    ["2^31-1, the largest Node honours", MAX_TIMER_MS, MAX_TIMER_MS],
    ["2^31", MAX_TIMER_MS, MAX_TIMER_MS + 1],
    ["30 days", MAX_TIMER_MS, 30 * DAY_MS],
    ["Infinity", MAX_TIMER_MS, Number.POSITIVE_INFINITY],
    ["1 ms", 1, 1],
    ["half a millisecond", 1, 0.5],
    ["0", 1, 0],
    ["negative", 1, -5_000],
    ["-Infinity", 1, Number.NEGATIVE_INFINITY],
    ["NaN", 1, Number.NaN],
  ])("of %s is %d ms", (_what, expected, ms) => {
    expect(timerDelay(ms)).toBe(expected);
  });
});

describe("timers set with a delay past Node's maximum", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it.each([
    ["later", later],
    ["every", every],
  ])("%s: 30 days does not fire after a second, and fires by the maximum", async (_name, set) => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
    let fired = 0;
    const timer = set(() => {
      fired++;
    }, 30 * DAY_MS);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(fired).toBe(0);
    await vi.advanceTimersByTimeAsync(MAX_TIMER_MS - 1_000);
    expect(fired).toBe(1);
    clearTimeout(timer);
    clearInterval(timer);
  });

  it("sleep: 30 days is still sleeping after a second, and ends early with the abort's reason", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const abort = new AbortController();
    let outcome: unknown = "sleeping";
    sleep(30 * DAY_MS, abort.signal).then(
      () => {
        outcome = "woke";
      },
      (reason: unknown) => {
        outcome = reason;
      },
    );
    await vi.advanceTimersByTimeAsync(1_000);
    expect(outcome).toBe("sleeping");
    abort.abort("cancelled");
    await vi.advanceTimersByTimeAsync(0);
    expect(outcome).toBe("cancelled");
  });
});
