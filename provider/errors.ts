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

/** Raised when a wait (RPC, IP, health check, upload) runs past its deadline. */
export class TimeoutError extends ProviderError {
  /** What was being waited for, e.g. "reply to virDomainLookupByName". */
  readonly waitingFor: string;
  readonly timeoutMs: number;

  constructor(waitingFor: string, timeoutMs: number) {
    super("transient", `timed out after ${timeoutMs} ms waiting for ${waitingFor}`);
    this.waitingFor = waitingFor;
    this.timeoutMs = timeoutMs;
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
