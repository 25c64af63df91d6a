/**
 * The storage pool handle of a host, looked up once per host and connection
 * instead of once per operation (the fleet bench counted one
 * virStoragePoolLookupByName per proxy in every `up`).
 *
 * A pool handle is its name and UUID, and libvirtd resolves it by UUID: a
 * pool destroyed and created again under the same name (a new UUID) answers
 * calls on the old handle with NO_STORAGE_POOL. {@link PoolHandles.caller}
 * wraps the host's RPC caller so that such a failure on the host's own pool
 * looks the name up again and, when it now names another pool, re-issues
 * the call with the new handle (the call failed before it did anything: the
 * pool is resolved first), and later calls that still carry the old handle
 * are given the new one. A pool that is gone stays an error.
 */

import { ProviderError } from "../../errors";
import type { CallOptions, RpcCaller } from "../../libvirt/connection";
import { ErrorCode } from "../../libvirt/error-codes";
import { LibvirtError } from "../../libvirt/errors";
import type { Procedure } from "../../libvirt/procedures";
import { Procedures } from "../../libvirt/procedures";
import type { StoragePool } from "../../libvirt/types";

interface Cached {
  /** The connection's generation when the lookup answered (callers share a lookup in flight). */
  generation: number | undefined;
  handle: Promise<StoragePool | undefined>;
}

function poolArg(args: unknown): StoragePool | undefined {
  if (typeof args !== "object" || args === null || !("pool" in args)) return undefined;
  const p = (args as { pool: unknown }).pool;
  return typeof p === "object" && p !== null && "uuid" in p && "name" in p ? (p as StoragePool) : undefined;
}

function noPool(err: unknown): boolean {
  return err instanceof LibvirtError && err.code === ErrorCode.NO_STORAGE_POOL;
}

/** One host's pool handle: looked up on first use, again after a reconnect or a NO_STORAGE_POOL. */
export class PoolHandles {
  #cached: Cached | undefined;
  /** UUIDs of handles of this pool name that libvirtd no longer knows. */
  readonly #stale = new Set<string>();
  #inner: RpcCaller | undefined;

  /**
   * @param name the host's configured pool
   * @param generation the connection's current generation (it changes on every reconnect; -1 while disconnected)
   */
  constructor(
    readonly name: string,
    private readonly generation: () => number,
  ) {}

  /** Wraps the host's caller (once, when the host's entry is built); the handle is looked up through it. */
  caller(inner: RpcCaller): RpcCaller {
    this.#inner = inner;
    return {
      call: <A, R>(proc: Procedure<A, R>, args: A, options?: CallOptions): Promise<R> =>
        this.#call(inner, proc, args, options),
      upload: (proc, args, source, options) => inner.upload(proc, args, source, options),
      readStream: (proc, args, onData, options) => inner.readStream(proc, args, onData, options),
    };
  }

  /** The pool's handle, or undefined when the host has no pool of that name (not cached: it may appear). */
  get(): Promise<StoragePool | undefined> {
    const c = this.#cached;
    if (c !== undefined && (c.generation === undefined || c.generation === this.generation()))
      return c.handle;
    const inner = this.#inner;
    if (inner === undefined) return Promise.reject(new Error("PoolHandles.get before caller()"));
    const handle = inner.call(Procedures.storagePoolLookupByName, { name: this.name }).then(
      (pool) => pool,
      (err: unknown) => {
        if (noPool(err)) return undefined;
        throw err;
      },
    );
    const entry: Cached = { generation: undefined, handle };
    this.#cached = entry;
    // A failed or empty lookup is not kept: the next caller asks again.
    handle.then(
      (pool) => {
        // The lookup itself may have connected: it belongs to the connection it answered on.
        entry.generation = this.generation();
        if (pool === undefined && this.#cached === entry) this.#cached = undefined;
      },
      () => {
        if (this.#cached === entry) this.#cached = undefined;
      },
    );
    return handle;
  }

  /** Drops the cached handle (the next get() looks the pool up). */
  forget(): void {
    this.#cached = undefined;
  }

  async #call<A, R>(inner: RpcCaller, proc: Procedure<A, R>, args: A, options?: CallOptions): Promise<R> {
    let pool = poolArg(args);
    if (pool === undefined || pool.name !== this.name) return inner.call(proc, args, options);
    if (this.#stale.has(pool.uuid)) {
      // A caller still holds a handle libvirtd has already refused: send the current one.
      const current = await this.get();
      if (current !== undefined && current.uuid !== pool.uuid) {
        pool = current;
        args = { ...args, pool };
      }
    }
    try {
      return await inner.call(proc, args, options);
    } catch (err) {
      if (!noPool(err)) throw err;
      this.#stale.add(pool.uuid);
      const cached = this.#cached;
      if (cached !== undefined && (await cached.handle.catch(() => undefined))?.uuid === pool.uuid) {
        this.forget();
      }
      const fresh = await this.get();
      if (fresh === undefined || fresh.uuid === pool.uuid) throw err;
      return inner.call(proc, { ...args, pool: fresh }, options);
    }
  }
}

/** Host `host` has no storage pool `name` (its `pool` setting). Permanent. */
export function noPoolError(host: string, name: string): ProviderError {
  return new ProviderError(
    "permanent",
    `host ${host} has no storage pool ${JSON.stringify(name)} (the host's pool setting, kvm:hosts); ` +
      "virsh pool-list --all shows the ones it has",
  );
}

/** Storage pool `name` on host `host` is defined but not started. Permanent. */
export function inactivePoolError(host: string, name: string): ProviderError {
  return new ProviderError(
    "permanent",
    `storage pool ${JSON.stringify(name)} on host ${host} exists but is not active: ` +
      `start it (virsh pool-start ${name}; virsh pool-autostart ${name} keeps it started)`,
  );
}
