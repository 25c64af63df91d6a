import { ProviderError } from "../errors";

/** One rejected input: the property path (`hosts.edge.uri`, `memoryMiB`) and why it was rejected. */
export interface ValidationFailure {
  property: string;
  reason: string;
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

  /** The full property path of `segment` under this collector's prefix. */
  path(segment?: string): string {
    if (segment === undefined || segment === "") return this.prefix;
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
