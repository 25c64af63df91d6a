/**
 * A counting semaphore: at most `limit` holders at once, the rest wait in
 * arrival order. Bounds the creates in flight on one host (capacity's
 * `concurrentCreates`) whatever Pulumi's `--parallel` is.
 */
export class Semaphore {
  private held = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  /** Holders now. */
  get inUse(): number {
    return this.held;
  }

  /** Resolves once a place is free (at once when one is); call the returned function to give it back. */
  async acquire(onWait?: (ahead: number) => void): Promise<() => void> {
    if (this.held >= this.limit) {
      onWait?.(this.waiting.length + 1);
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.held += 1;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.held -= 1;
    };
  }
}
