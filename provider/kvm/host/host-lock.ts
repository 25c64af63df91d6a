/**
 * A short host-side lock, for work that must not interleave across
 * processes (two stacks' `pulumi up`): placement's count and reservation
 * (placer.ts), an address pool's (address-pools.ts). It is the lease of
 * image-lease.ts on a marker volume in the host's storage pool, held for a
 * second or so: short heartbeats, and a short wait before a dead holder's
 * lock is taken over. Taken again when another holder let go first;
 * released when the work ends, whatever its outcome.
 */

import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool } from "../../libvirt/types";
import type { HostPool } from "./hosts";
import { takeLease } from "./image-lease";
import { noPoolError } from "./pools";
import type { RetryEnv } from "./retry";

const LOCK_TIMING = { heartbeatMs: 2_000, staleMs: 15_000, pollMs: 200 };

/**
 * Runs `work` holding lock `lockName` on `host`, as `holder` (one per placer
 * or address pool: two of them in one process are two holders). Fails
 * permanently when the host's storage pool does not exist.
 */
export async function underHostLock<T>(
  hosts: HostPool,
  host: string,
  lockName: string,
  holder: object,
  env: RetryEnv,
  work: (where: { lv: Libvirt; pool: StoragePool }) => Promise<T>,
): Promise<T> {
  const lv = hosts.libvirt(host);
  const pool = await hosts.pool(host);
  if (pool === undefined) throw noPoolError(host, hosts.config(host).pool);
  for (;;) {
    const lock = await takeLease({ host, lv, pool }, lockName, LOCK_TIMING, env, undefined, holder);
    if (lock.kind === "released") continue;
    try {
      return await work({ lv, pool });
    } finally {
      await lock.lease.release();
    }
  }
}
