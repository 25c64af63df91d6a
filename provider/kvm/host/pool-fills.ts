/**
 * What the image cache and the baker share: one fill of a pool volume in
 * flight per host, pool and name in this process (later callers wait for it
 * and receive its progress), and the volumes found or made complete,
 * remembered per pool handle. A pool handle lives for one connection
 * (pools.ts), so a reconnect looks again; a caller that finds a remembered
 * volume gone {@link PoolFills.forget}s it.
 */
import type { StoragePool } from "../../libvirt/types";
import { type ProgressListener, report } from "../progress";

/** Where a fill happens: one host's pool. */
export interface FillLocation {
  host: string;
  pool: StoragePool;
}

/** What {@link PoolFills.run} gives: the value, and whether this call's fill made it. */
export interface Filled<T> {
  value: T;
  /** False when remembered, or when this call waited for another caller's fill. */
  own: boolean;
}

export class PoolFills<T> {
  private readonly inflight = new Map<string, { promise: Promise<T>; listeners: Set<ProgressListener> }>();
  private readonly known = new WeakMap<StoragePool, Map<string, T>>();

  /**
   * The remembered value of `name`, the fill in flight for it, or a new
   * `fill` (which reports to every waiting caller's listener); the value is
   * remembered once the fill succeeds.
   */
  run(
    loc: FillLocation,
    name: string,
    onProgress: ProgressListener | undefined,
    fill: (report: ProgressListener) => Promise<T>,
  ): Promise<Filled<T>> {
    const remembered = this.known.get(loc.pool)?.get(name);
    if (remembered !== undefined) return Promise.resolve({ value: remembered, own: false });
    const key = this.key(loc, name);
    const running = this.inflight.get(key);
    if (running) {
      if (onProgress !== undefined) running.listeners.add(onProgress);
      return running.promise
        .then((value) => ({ value, own: false }))
        .finally(() => {
          if (onProgress !== undefined) running.listeners.delete(onProgress);
        });
    }
    const listeners = new Set<ProgressListener>(onProgress !== undefined ? [onProgress] : []);
    const promise = fill((progress) => {
      for (const l of listeners) report(l, progress);
    })
      .then((value) => {
        this.remember(loc, name, value);
        return value;
      })
      .finally(() => this.inflight.delete(key));
    this.inflight.set(key, { promise, listeners });
    return promise.then((value) => ({ value, own: true }));
  }

  /** Stops trusting what this connection remembers of `name`; true when something was remembered. */
  forget(loc: Pick<FillLocation, "pool">, name: string): boolean {
    return this.known.get(loc.pool)?.delete(name) ?? false;
  }

  /** True while this process fills `name` in the location's pool. */
  running(loc: FillLocation, name: string): boolean {
    return this.inflight.has(this.key(loc, name));
  }

  private remember(loc: FillLocation, name: string, value: T): void {
    let byName = this.known.get(loc.pool);
    if (byName === undefined) {
      byName = new Map();
      this.known.set(loc.pool, byName);
    }
    byName.set(name, value);
  }

  private key(loc: FillLocation, name: string): string {
    return `${loc.host}\0${loc.pool.name}\0${name}`;
  }
}
