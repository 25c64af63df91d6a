/**
 * How long a proxy has been failing its health check, and when that
 * replaces it (`healthCheck.replaceAfter`). Each probe of a create, update
 * or refresh gives a fresh ProxyHealth; the record keeps since when the
 * failures that go on now began, so an `up` (whose diff reads only the
 * state) can tell a proxy failing for an hour from one that failed once.
 * Pure.
 */
import { durationText } from "../errors";
import type { ProxyHealth } from "./outputs";
import type { RecordedState } from "./recorded-state";

/**
 * `next` as the state records it after `previous`: a failure keeps the
 * start of the failures before it (the previous probe's time when an older
 * record has no start), a success drops it.
 */
export function withFailingSince(previous: ProxyHealth | undefined, next: ProxyHealth): ProxyHealth {
  const { failingSince: _dropped, ...rest } = next;
  if (next.ok) return rest;
  const since =
    previous !== undefined && !previous.ok
      ? (previous.failingSince ?? previous.checkedAt)
      : (next.failingSince ?? next.checkedAt);
  return { ...rest, failingSince: since };
}

/**
 * Why the proxy the state records is replaced at this `up` because it
 * failed too long, or undefined: it is degraded (its VM runs, its proxy
 * fails), and has been since at least `replaceAfter` seconds before `now`.
 */
export function failedTooLong(
  olds: RecordedState,
  replaceAfter: number | undefined,
  now: number,
): string | undefined {
  if (replaceAfter === undefined || olds.state !== "degraded") return undefined;
  const health = olds.health;
  if (health === undefined || health.ok) return undefined;
  const since = Date.parse(health.failingSince ?? health.checkedAt);
  if (Number.isNaN(since) || now - since < replaceAfter * 1000) return undefined;
  const why = health.reason !== undefined ? `: ${health.reason}` : "";
  return `replacing: failing its health check since ${new Date(since).toISOString()} (${durationText(now - since)}), over its healthCheck.replaceAfter of ${durationText(replaceAfter * 1000)}${why}`;
}

/** `healthCheck.replaceAfter` of checked inputs (seconds), if set. */
export function replaceAfterOf(healthCheck: unknown): number | undefined {
  const v = (healthCheck as { replaceAfter?: unknown } | false | undefined) || undefined;
  return typeof v?.replaceAfter === "number" ? v.replaceAfter : undefined;
}
