import { ProviderError, REPORT_URL } from "../errors";

/** One rejected input: the property path (`hosts.edge.uri`, `memoryMiB`) and why it was rejected. */
export interface ValidationFailure {
  property: string;
  reason: string;
}

/**
 * `v` as JSON for a failure's reason, cut to `max` characters: a reason
 * quotes a (non-secret) value to help find it, never megabytes of it.
 */
export function quote(v: unknown, max = 64): string {
  let text: string;
  try {
    text = JSON.stringify(v) ?? String(v);
  } catch {
    text = typeof v;
  }
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}

/**
 * The reason recorded when a parser threw instead of recording a failure (a
 * bug): the error's class only, since its message might quote the value.
 */
export function internalFailure(err: unknown): string {
  const kind = err instanceof Error ? err.name : typeof err;
  return `could not be checked (internal error: ${kind}); please report this at ${REPORT_URL}`;
}

/**
 * Bad input, reported all at once.
 *
 * Always permanent: retrying the same input cannot succeed. Carries every
 * failure found rather than only the first, so the Pulumi resource's `check`
 * can return them together as `{ property, reason }` failures.
 */
export class ValidationError extends ProviderError {
  readonly failures: readonly ValidationFailure[];

  constructor(failures: readonly ValidationFailure[], what = "invalid input") {
    super("permanent", `${what}: ${failures.map((f) => `${f.property}: ${f.reason}`).join("; ")}`);
    this.failures = failures;
  }
}

/**
 * Collects validation failures under a property path prefix.
 *
 * `at("hosts.edge").fail("uri", "...")` records `hosts.edge.uri`. Used by the
 * builders so that every check runs and all failures surface together.
 */
export class Failures {
  readonly list: ValidationFailure[];
  private readonly prefix: string;

  constructor(prefix = "", list: ValidationFailure[] = []) {
    this.prefix = prefix;
    this.list = list;
  }

  /** A collector sharing this one's list, whose paths are prefixed with `segment`. */
  at(segment: string): Failures {
    return new Failures(this.path(segment), this.list);
  }

  /**
   * The full property path of `segment` under this collector's prefix (the
   * prefix itself when `segment` is undefined; an empty key is a segment too,
   * so a failure of `{"": ...}` never lands on its parent).
   */
  path(segment?: string): string {
    if (segment === undefined) return this.prefix;
    return this.prefix === "" ? segment : `${this.prefix}.${segment}`;
  }

  /** Records a failure at `segment` (or at the prefix itself when `segment` is omitted). */
  fail(segment: string | undefined, reason: string): void {
    this.list.push({ property: this.path(segment), reason });
  }

  get empty(): boolean {
    return this.list.length === 0;
  }

  /** Throws a ValidationError carrying every failure recorded so far, if any. */
  throwIfAny(what?: string): void {
    if (this.list.length > 0) throw new ValidationError([...this.list], what);
  }
}
