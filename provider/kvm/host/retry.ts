/**
 * Error classification and bounded retries for KVM operations.
 *
 * Every failure is transient or permanent. Transient ones (a dropped
 * connection, a libvirt job still running, a pool busy refreshing) are retried
 * with exponential backoff and full jitter until an attempt limit or an
 * overall deadline; permanent ones surface at once. Whatever surfaces is an
 * {@link KvmOperationError} naming the operation, host, domain, the libvirt
 * call and its code, so a user can tell which VM on which host failed where.
 */
import { type ErrorKind, ProviderError, TimeoutError } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import { LibvirtError } from "../../libvirt/errors";
import { sleep } from "../../timers";
import { libvirtHint } from "./libvirt-hints";

/**
 * Libvirt errors whose code is permanent in general but whose message says the
 * object is only busy right now: retrying the same request shortly succeeds.
 */
const BUSY_MESSAGES: readonly { code: number; pattern: RegExp }[] = [
  // storagePoolRefresh while an upload or volume build holds the pool (anchors item 10).
  { code: ErrorCode.INTERNAL_ERROR, pattern: /asynchronous jobs running/i },
  // storageVolUpload/Delete while another stream is being set up on the volume.
  { code: ErrorCode.OPERATION_INVALID, pattern: /is still (in use|being allocated)/i },
  // Pool still starting after a daemon restart.
  { code: ErrorCode.OPERATION_INVALID, pattern: /is starting up/i },
];

/** True for libvirt's "busy" refusals: the object is held by a job right now (see {@link BUSY_MESSAGES}). */
export function isBusy(err: unknown): boolean {
  return (
    err instanceof LibvirtError &&
    BUSY_MESSAGES.some((b) => b.code === err.code && b.pattern.test(err.libvirtMessage))
  );
}

/**
 * The kind of any thrown value: a ProviderError's own kind, except libvirt
 * "busy" errors, which are transient whatever their code; anything unknown is
 * permanent (a bug or bad input must not be retried forever).
 */
export function classifyError(err: unknown): ErrorKind {
  if (err instanceof LibvirtError) {
    if (isBusy(err)) return "transient";
    return err.kind;
  }
  if (err instanceof ProviderError) return err.kind;
  return "permanent";
}

/** Where a failure happened: filled in by the operation that caught it. */
export interface OperationContext {
  /** e.g. "create", "delete", "get". */
  operation: string;
  /** Host key from the provider configuration. */
  host: string;
  /** Domain name, when the operation concerns one. */
  domain?: string;
}

/**
 * A failed KVM operation. Carries the context and, when libvirt reported the
 * failure, the public call name and libvirt code, and keeps the underlying
 * error's kind (or the classifier's verdict for libvirt "busy" errors).
 */
export class KvmOperationError extends ProviderError {
  readonly operation: string;
  readonly host: string;
  readonly domain: string | undefined;
  /** The libvirt call that failed, e.g. 'virDomainCreate'. */
  readonly call: string | undefined;
  /** virErrorNumber, e.g. 42. */
  readonly code: number | undefined;
  /** e.g. 'VIR_ERR_NO_DOMAIN'. */
  readonly codeName: string | undefined;
  /** Attempts made before giving up (1 when not retried). */
  readonly attempts: number;

  constructor(ctx: OperationContext, cause: unknown, attempts = 1, kind: ErrorKind = classifyError(cause)) {
    const lv = cause instanceof LibvirtError ? cause : undefined;
    const what = `${ctx.operation}${ctx.domain !== undefined ? ` of domain ${ctx.domain}` : ""} on host ${ctx.host}`;
    const hint = lv && libvirtHint({ message: lv.libvirtMessage }, ctx.host);
    // The hint first, libvirt's own words after it.
    const detail = lv
      ? `${hint !== undefined ? `${hint}; ` : ""}${lv.call} failed: ${lv.libvirtMessage} (${lv.codeName}, code ${lv.code})`
      : cause instanceof Error
        ? cause.message
        : String(cause);
    const tries = attempts > 1 ? ` after ${attempts} attempts` : "";
    super(kind, `${what} failed${tries}: ${detail}`, { cause });
    this.operation = ctx.operation;
    this.host = ctx.host;
    this.domain = ctx.domain;
    this.call = lv?.call ?? (cause instanceof KvmOperationError ? cause.call : undefined);
    this.code = lv?.code;
    this.codeName = lv?.codeName;
    this.attempts = attempts;
  }
}

/**
 * Wraps `err` in a KvmOperationError for `ctx`, unless it already is one (an
 * inner operation's context is more precise) or is a TimeoutError (which
 * already says what it waited for).
 */
export function toOperationError(ctx: OperationContext, err: unknown, attempts = 1): ProviderError {
  if (err instanceof KvmOperationError || err instanceof TimeoutError) return err;
  return new KvmOperationError(ctx, err, attempts);
}

/** Backoff settings. Defaults suit libvirt calls: about a minute of retries at most. */
export interface RetryPolicy {
  /** Most attempts in all (default 6). */
  maxAttempts?: number;
  /** Delay before the second attempt, before jitter (default 250 ms). */
  initialDelayMs?: number;
  /** Cap on a single delay (default 10 s). */
  maxDelayMs?: number;
  /** Growth factor per attempt (default 2). */
  factor?: number;
  /** Overall deadline from the first attempt, ms (default 60 s). No retry starts after it. */
  deadlineMs?: number;
}

/** Injectable clock and randomness, so tests never depend on wall-clock time. */
export interface RetryEnv {
  now?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Uniform in [0, 1). */
  random?: () => number;
}

/** Options of {@link withRetry}. */
export interface RetryOptions extends RetryPolicy, RetryEnv {
  /** When set, failures surface wrapped in a KvmOperationError for this context. */
  context?: OperationContext;
  signal?: AbortSignal;
  /** Retries only the transient failures this accepts (default all of them). */
  retryIf?: (err: unknown) => boolean;
  /** Called before each wait with the error, the attempt that failed (1-based) and the delay chosen. */
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
}

export const DEFAULT_RETRY_POLICY: Required<RetryPolicy> = {
  maxAttempts: 6,
  initialDelayMs: 250,
  maxDelayMs: 10_000,
  factor: 2,
  deadlineMs: 60_000,
};

/**
 * The delay before attempt `attempt + 1` (attempt is 1-based): "full jitter",
 * uniform in [0, min(max, initial × factor^(attempt-1))], so that many clients
 * failing together do not retry in lockstep.
 */
export function backoffDelay(
  attempt: number,
  policy: RetryPolicy = {},
  random: () => number = Math.random,
): number {
  const p = { ...DEFAULT_RETRY_POLICY, ...policy };
  const ceiling = Math.min(p.maxDelayMs, p.initialDelayMs * p.factor ** Math.max(0, attempt - 1));
  return Math.floor(random() * ceiling);
}

/** A sleep that ends early (rejecting) when `signal` aborts: the timers' own (timers.ts). */
export { sleep };

/**
 * Runs `fn` until it succeeds, retrying transient failures (see
 * {@link classifyError}) with bounded exponential backoff and jitter.
 *
 * Permanent failures surface at once. A transient failure surfaces when the
 * attempts are used up or when waiting for the next attempt would pass the
 * deadline; it keeps kind transient, so a caller further out (Pulumi's next
 * run) may still retry. With `context`, whatever surfaces is a
 * KvmOperationError carrying host, domain, call and libvirt code.
 */
export async function withRetry<T>(
  fn: (attempt: number) => Promise<T>,
  options: RetryOptions = {},
): Promise<T> {
  const policy = { ...DEFAULT_RETRY_POLICY, ...stripUndefined(options) };
  const now = options.now ?? (() => performance.now());
  const wait = options.sleep ?? sleep;
  const random = options.random ?? Math.random;
  const started = now();
  const fail = (err: unknown, attempts: number): never => {
    throw options.context ? toOperationError(options.context, err, attempts) : err;
  };
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (options.signal?.aborted) fail(err, attempt);
      if (classifyError(err) !== "transient" || attempt >= policy.maxAttempts) fail(err, attempt);
      if (options.retryIf !== undefined && !options.retryIf(err)) fail(err, attempt);
      const delay = backoffDelay(attempt, policy, random);
      if (now() - started + delay >= policy.deadlineMs) fail(err, attempt);
      options.onRetry?.(err, attempt, delay);
      try {
        await wait(delay, options.signal);
      } catch (abortReason) {
        fail(abortReason, attempt);
      }
    }
  }
}

function stripUndefined(o: RetryPolicy): RetryPolicy {
  const out: RetryPolicy = {};
  for (const k of Object.keys(DEFAULT_RETRY_POLICY) as (keyof RetryPolicy)[]) {
    if (o[k] !== undefined) out[k] = o[k];
  }
  return out;
}
