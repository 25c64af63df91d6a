/**
 * Every timer the provider sets, in every layer, and the one rule for its
 * delay. Nothing else in provider/ calls setTimeout or setInterval
 * (test/unit/architecture.test.ts holds that); a socket's own idle timer
 * takes its delay from {@link timerDelay}.
 *
 * Node honours delays up to 2^31-1 ms (about 24.8 days) and replaces a
 * larger one by 1 ms, with a warning: a deadline of 30 days fired at once.
 * The rule:
 *
 * - A delay above {@link MAX_TIMER_MS}, Infinity included, is clamped to
 *   it: the timer fires 24.8 days on, which for one provider run is never.
 *   The deadlines users give stay far below it: `timeouts.create` and
 *   `timeouts.delete` at most 24 h (check.ts, MAX_TIMEOUT_SECONDS), and the
 *   engine's customTimeouts, which bypass check, capped to the same 24 h
 *   with a warning on the resource (check.ts `engineTimeout`, applied by
 *   the plugin).
 * - A delay under 1 ms, negative, or NaN fires at once: 1 ms, as Node
 *   reads them (and for a socket's idle timer too, where 0 would mean
 *   none). A NaN is a bug upstream; a wait that ends at once fails where
 *   one that never ends would hang `pulumi up`.
 */

/** The largest delay Node's timers honour, ms: 2^31-1, about 24.8 days. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a timer takes it (see the module header): within 1..MAX_TIMER_MS. */
export function timerDelay(ms: number): number {
  if (Number.isNaN(ms) || ms < 1) return 1;
  return Math.min(ms, MAX_TIMER_MS);
}

/** `fn` once, `ms` from now (clamped by {@link timerDelay}). */
export function later(fn: () => void, ms: number): NodeJS.Timeout {
  return setTimeout(fn, timerDelay(ms));
}

/** `fn` every `ms` (clamped by {@link timerDelay}). */
export function every(fn: () => void, ms: number): NodeJS.Timeout {
  return setInterval(fn, timerDelay(ms));
}

/** A wait of `ms` (clamped) that ends early, rejecting with its reason, when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = later(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
