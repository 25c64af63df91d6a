/**
 * What cloud-init says of a guest's first boot, read from the files it
 * writes: `/run/cloud-init/result.json` appears when its last stage has
 * finished (with the errors of every stage); `/run/cloud-init/status.json`
 * says which stage runs and each stage's errors; `/var/log/cloud-init-output.log`
 * holds what the modules and scripts printed. Pure: parsing and the text of
 * a failure, with the lines redacted.
 *
 * Facts (cloud-init 22.4 on Debian 12, 25.x on Debian 13): result.json is
 * `{"v1": {"datasource": ..., "errors": [...]}}` and is written after the
 * final stage (after the user's runcmd); an error names its module first,
 * e.g. `('scripts-user', RuntimeError('Runparts: 1 failures (runcmd) in 1
 * attempted commands'))` (22.4 writes hyphens); recoverable errors (warnings, deprecations) are
 * listed apart (`recoverable_errors`, 23.4 and later) and are no failure.
 */

/** Where cloud-init writes its outcome, once the final stage is done. */
export const RESULT_FILE = "/run/cloud-init/result.json";
/** Where cloud-init writes what runs now. */
export const STATUS_FILE = "/run/cloud-init/status.json";
/** What modules and scripts (the provider's setup scripts included) printed. */
export const OUTPUT_LOG = "/var/log/cloud-init-output.log";

/** cloud-init's outcome once its final stage is done. */
export interface CloudInitResult {
  /** Every error cloud-init recorded, as it wrote them. */
  errors: string[];
  /** The modules the errors name (e.g. `scripts_user`, `package_update_upgrade_install`). */
  failedModules: string[];
}

/** Parses result.json; undefined when it is not cloud-init's result. */
export function parseResult(text: string): CloudInitResult | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  const v1 = (parsed as { v1?: { errors?: unknown } } | null)?.v1;
  if (typeof v1 !== "object" || v1 === null) return undefined;
  const errors = Array.isArray(v1.errors) ? v1.errors.map((e) => String(e)) : [];
  const failedModules = [...new Set(errors.flatMap((e) => moduleOf(e) ?? []))];
  return { errors, failedModules };
}

/**
 * The module an error names first (`('scripts-user', ...)`, `running module
 * scripts_user`), as cloud-init's documentation names it: with underscores
 * (its errors write `scripts-user` or `scripts_user` by version).
 */
function moduleOf(error: string): string | undefined {
  const name = /^\(\s*'([A-Za-z0-9_-]+)'/.exec(error)?.[1] ?? /\bmodule\s+([A-Za-z0-9_-]+)/.exec(error)?.[1];
  return name?.replaceAll("-", "_");
}

/** The stage status.json says runs now (`init-local`, `init`, `modules-config`, `modules-final`), if any. */
export function runningStage(text: string): string | undefined {
  try {
    const stage = (JSON.parse(text) as { v1?: { stage?: unknown } }).v1?.stage;
    return typeof stage === "string" ? stage : undefined;
  } catch {
    return undefined;
  }
}

/** Credentials in URLs (`scheme://user:pass@`) and `password: ...`-like pairs, masked. */
export function redactGuestLines(text: string, secrets: readonly string[] = []): string {
  let out = text;
  for (const s of secrets) if (s.length >= 4) out = out.split(s).join("***");
  return out
    .replace(/([a-z][a-z0-9+.-]*:\/\/)[^\s/@:]+:[^\s/@]+@/gi, "$1***:***@")
    .replace(/\b(pass(?:word|wd|phrase)?|secret|token)(\s*[:=]\s*)\S+/gi, "$1$2***");
}

/** The last `n` lines of `text` (trailing blank lines dropped), each cut to 400 characters. */
export function lastLines(text: string, n: number): string[] {
  const lines = text.replace(/\s+$/, "").split("\n");
  return lines.slice(-n).map((l) => (l.length > 400 ? `${l.slice(0, 400)}…` : l));
}

/** The text of a first boot that cloud-init finished with errors. */
export function failureText(result: CloudInitResult, outputTail: string[] | undefined): string {
  const modules = result.failedModules.length > 0 ? result.failedModules.join(", ") : "an unnamed module";
  const shown = result.errors.slice(0, 5).map((e) => `  ${e.length > 300 ? `${e.slice(0, 300)}…` : e}`);
  return [
    `cloud-init finished the guest's first boot with errors in ${modules}:`,
    ...shown,
    ...guestLinesText(outputTail),
  ].join("\n");
}

/** The guest's own last lines for an error message, or nothing. */
export function guestLinesText(tail: string[] | undefined, from = OUTPUT_LOG): string[] {
  if (tail === undefined || tail.length === 0) return [];
  return [`last lines of ${from} in the guest:`, ...tail.map((l) => `  | ${l}`)];
}
