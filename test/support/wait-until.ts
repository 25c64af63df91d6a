/**
 * How a test waits for something slow (a guest booting under TCG beside
 * others): not by a guess of how long a loaded machine takes, but for as long
 * as the thing waited on makes progress.
 *
 * A wait names what it waits for, a `check` that says whether it is there,
 * and a `progress` reader: a value read at each poll (cloud-init's stage, the
 * serial console's length, whether the guest agent answers). It fails when
 * that value has not changed for `stallMs`, or at `ceilingMs`, a safety net
 * far above a normal run. Its error names what it waited for, the last
 * progress seen and how long ago it changed.
 *
 * Pure logic over an injectable clock, so the unit tests drive it without
 * real time.
 */

/** Time as a wait sees it. */
export interface WaitClock {
  /** Milliseconds on a monotonic clock. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const realClock: WaitClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise<void>((r) => setTimeout(r, ms)),
};

/** What one look at the awaited thing found. */
export type CheckResult<T> = { done: true; value: T } | { done: false; seen?: string };

/** The awaited thing is there, with this value. */
export function done<T>(value: T): CheckResult<T> {
  return { done: true, value };
}

/** Not yet; `seen` says what was there instead (named in the error). */
export function pending<T>(seen?: string): CheckResult<T> {
  return seen === undefined ? { done: false } : { done: false, seen };
}

/** How a wait measures progress and when it gives up. */
export interface WaitBounds {
  /** What is waited for, in words: the error starts with it. */
  what: string;
  /**
   * Reads where the work stands now (any JSON value); a change from the
   * previous reading is progress. A reader that throws leaves the last
   * reading as it was (and its message is named in the error).
   */
  progress: () => Promise<unknown> | unknown;
  /** Fail when the progress has not changed for this long. */
  stallMs: number;
  /** Fail after this long whatever the progress: a safety net, far above a normal run. */
  ceilingMs: number;
  /** Pause between polls (default 3 s). */
  pollMs?: number;
  clock?: WaitClock;
}

export interface WaitUntilOptions<T> extends WaitBounds {
  /** Looks once; a throw fails the wait at once (a probe that may fail must catch and return pending). */
  check: () => Promise<CheckResult<T>> | CheckResult<T>;
}

/** A wait that ended without what it waited for. */
export class WaitTimeout extends Error {
  constructor(
    message: string,
    readonly what: string,
    readonly reason: "stalled" | "ceiling",
    readonly lastProgress: string,
    readonly sinceChangeMs: number,
  ) {
    super(message);
    this.name = "WaitTimeout";
  }
}

/** Seconds, one decimal. */
function secs(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

function show(v: unknown): string {
  if (v === undefined) return "(none read)";
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** Follows the progress of one wait; says when it stalled or hit its ceiling. */
class ProgressWatch {
  private readonly clock: WaitClock;
  private readonly start: number;
  private lastChange: number;
  private last: string | undefined;
  private readError: string | undefined;
  /** What the awaited thing showed instead, at the last look. */
  seen: string | undefined;

  constructor(private readonly b: WaitBounds) {
    this.clock = b.clock ?? realClock;
    this.start = this.clock.now();
    this.lastChange = this.start;
  }

  async read(): Promise<void> {
    let value: unknown;
    try {
      value = await this.b.progress();
      this.readError = undefined;
    } catch (err) {
      this.readError = err instanceof Error ? err.message : String(err);
      return;
    }
    const text = show(value);
    if (text !== this.last) {
      this.last = text;
      this.lastChange = this.clock.now();
    }
  }

  /** The error to end the wait with now, or undefined while it may go on. */
  verdict(): WaitTimeout | undefined {
    const now = this.clock.now();
    const quiet = now - this.lastChange;
    const waited = now - this.start;
    let reason: "stalled" | "ceiling";
    if (waited >= this.b.ceilingMs) reason = "ceiling";
    else if (quiet >= this.b.stallMs) reason = "stalled";
    else return undefined;
    const last = this.last ?? "(none read)";
    const head =
      reason === "stalled"
        ? `no progress for ${secs(quiet)} (stall limit ${secs(this.b.stallMs)})`
        : `ceiling of ${secs(this.b.ceilingMs)} reached, the progress last changed ${secs(quiet)} ago`;
    const parts = [
      `gave up waiting for ${this.b.what}: ${head}, after ${secs(waited)}`,
      `last progress: ${last}`,
      ...(this.seen !== undefined ? [`last seen instead: ${this.seen}`] : []),
      ...(this.readError !== undefined ? [`the progress reader last failed: ${this.readError}`] : []),
    ];
    return new WaitTimeout(parts.join("; "), this.b.what, reason, last, quiet);
  }

  sleep(): Promise<void> {
    return this.clock.sleep(this.b.pollMs ?? 3_000);
  }
}

/**
 * Polls `check` until it is done and returns its value; fails with a
 * {@link WaitTimeout} when `progress` stalls for `stallMs` or at `ceilingMs`.
 */
export async function waitUntil<T>(o: WaitUntilOptions<T>): Promise<T> {
  const watch = new ProgressWatch(o);
  for (;;) {
    const r = await o.check();
    if (r.done) return r.value;
    watch.seen = r.seen;
    await watch.read();
    const end = watch.verdict();
    if (end !== undefined) throw end;
    await watch.sleep();
  }
}

/**
 * Runs `task` (a wait of its own: a create, a command that waits in the
 * guest) while watching `progress`; when the progress stalls for `stallMs`
 * or at `ceilingMs`, aborts the task's signal and fails with a
 * {@link WaitTimeout}. The task's own result or error otherwise.
 */
export async function watchWhile<T>(task: (signal: AbortSignal) => Promise<T>, o: WaitBounds): Promise<T> {
  const watch = new ProgressWatch(o);
  const abort = new AbortController();
  let settled = false;
  const run = task(abort.signal).finally(() => {
    settled = true;
  });
  const ended = run.then(noop, noop);
  // The task's end is seen at once, even while a slow progress read is under way.
  for (;;) {
    if (settled) return run;
    await Promise.race([watch.read(), ended]);
    if (settled) return run;
    const end = watch.verdict();
    if (end !== undefined) {
      abort.abort(end);
      throw end;
    }
    await Promise.race([watch.sleep(), ended]);
  }
}

function noop(): void {}
