/**
 * Error classes shared by every layer.
 *
 * Every failure the provider surfaces is either transient (retrying the same
 * request later may succeed: a dropped connection, a key file that has not
 * appeared yet, a libvirt job still running) or permanent (retrying cannot
 * help: bad input, an unknown host key, a domain XML libvirt rejects). The
 * retry loops and the Pulumi resource decide on `kind`, never on message text.
 */
export type ErrorKind = "transient" | "permanent";

/** Where a bug in the provider is reported (package.json `bugs`; a unit test holds them equal). */
export const REPORT_URL = "https://github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/issues";

/**
 * What to do when a VM or the state was written by another version of this
 * package: one version for the program and the provider, the newest. The
 * provider plugin is the package's bin/pulumi-resource-kvmproxy, so the one
 * install upgrades both.
 */
export const UPGRADE_ACTION =
  "upgrade pulumi-kvm-proxy where the program installs it (npm install pulumi-kvm-proxy@latest; " +
  "the provider plugin is its bin/pulumi-resource-kvmproxy, upgraded with it), then run the command again";

/** An error's message, or the thrown value as text when it is not an Error. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class ProviderError extends Error {
  readonly kind: ErrorKind;

  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = new.target.name;
  }

  get transient(): boolean {
    return this.kind === "transient";
  }
}

/**
 * A duration for a message, in its largest unit and the next one below
 * that is not zero: "9 min 47 s", "2 h 5 min", "1 d 3 h", "1 d 1 s",
 * "45 s", "1.5 s", "250 ms".
 * Pure; negative or non-finite values read as given ("-2 s", "?").
 */
export function durationText(ms: number): string {
  if (!Number.isFinite(ms)) return "?";
  if (ms < 0) return `-${durationText(-ms)}`;
  if (Math.round(ms) < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000 && Math.round(ms) % 1000 !== 0) return `${(Math.round(ms / 100) / 10).toString()} s`;
  const s = Math.round(ms / 1000);
  const units: [number, string][] = [
    [Math.floor(s / 86_400), "d"],
    [Math.floor((s % 86_400) / 3600), "h"],
    [Math.floor((s % 3600) / 60), "min"],
    [s % 60, "s"],
  ];
  const first = units.findIndex(([n]) => n > 0);
  if (first === -1) return "0 s";
  const [a, ua] = units[first] as [number, string];
  const next = units.slice(first + 1).find(([n]) => n > 0);
  return next !== undefined ? `${a} ${ua} ${next[0]} ${next[1]}` : `${a} ${ua}`;
}

/** Raised when a wait (RPC, IP, health check, upload) runs past its deadline. */
export class TimeoutError extends ProviderError {
  /** What was being waited for, e.g. "reply to virDomainLookupByName". */
  readonly waitingFor: string;
  readonly timeoutMs: number;
  /** The setting that sets this deadline, e.g. "timeouts.create"; absent for a fixed one. */
  readonly setting: string | undefined;

  constructor(waitingFor: string, timeoutMs: number, setting?: string) {
    const by = setting === undefined ? "" : ` (${setting})`;
    super("transient", `timed out after ${durationText(timeoutMs)}${by} waiting for ${waitingFor}`);
    this.waitingFor = waitingFor;
    this.timeoutMs = timeoutMs;
    this.setting = setting;
  }
}

/** True when `err` is a ProviderError of kind transient. Unknown errors are permanent. */
export function isTransient(err: unknown): boolean {
  return err instanceof ProviderError && err.kind === "transient";
}

/** Raised by work the engine cancelled (an interrupted `pulumi up`, `pulumi cancel`): retrying it in the same run cannot help. */
export class CancelledError extends ProviderError {
  constructor() {
    super("permanent", "cancelled: the Pulumi engine asked the provider to stop");
  }
}
