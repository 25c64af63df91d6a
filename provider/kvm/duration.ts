/**
 * Durations as users write them in config and inputs: seconds as a number,
 * or text such as "90", "45s", "10m", "1h30m", "7d".
 */

/**
 * The shortest deadline accepted anywhere (`callTimeout`, `timeouts.create`,
 * `timeouts.delete`), seconds: below it no deadline can hold one libvirt
 * round trip, so a smaller value is a mistake (milliseconds meant, or a
 * typo) that would otherwise fail only at `up`. Not higher: the fault tests
 * end creates and calls on purpose with deadlines of 2-5 s (docs/contributing/decisions.md).
 */
export const MIN_DEADLINE_SECONDS = 1;

/** Seconds, or undefined when `v` is no duration (or not finite). */
export function parseDuration(v: unknown): number | undefined {
  if (typeof v === "number") return Number.isFinite(v) ? v : undefined;
  if (typeof v !== "string") return undefined;
  const t = v.trim();
  let secs: number;
  if (/^\d+(\.\d+)?$/.test(t)) secs = Number(t);
  else {
    const m = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(t);
    if (!m || t === "") return undefined;
    secs = Number(m[1] ?? 0) * 86_400 + Number(m[2] ?? 0) * 3600 + Number(m[3] ?? 0) * 60 + Number(m[4] ?? 0);
  }
  return Number.isFinite(secs) ? secs : undefined;
}
