/**
 * Who fills a host's image cache entry: a lease the host itself arbitrates,
 * so that two processes (two stacks' `pulumi up`, on one machine or two)
 * needing one new image upload it once.
 *
 * - The lock is the `<image>.partial` marker volume (names.ts), created
 *   exclusively: libvirt refuses a second volume of that name
 *   (STORAGE_VOL_EXIST), so exactly one process holds it.
 * - The holder proves it is alive by growing the marker's capacity by one
 *   byte every `heartbeatMs` (virStorageVolResize; a sparse raw file, so
 *   nothing is written). Its counter starts at a random value, so another
 *   holder's marker never continues the same count.
 * - Everyone else waits, reading the marker's capacity every `pollMs`: it
 *   changed means alive; the marker gone means the image is complete (or
 *   the holder gave up: look again). Unchanged for `staleMs` (measured on
 *   the waiter's own clock: no clocks are compared) means its holder died:
 *   the waiter deletes the marker, after checking it is still the same
 *   count, and takes its turn at the exclusive create.
 * - A marker this process made and no longer works on (an upload that
 *   failed or was cut) is taken over at once: its holder is known dead.
 * - Before it removes the marker at the end, the holder checks the count is
 *   still its own: a holder that stalled past `staleMs` lost the lease and
 *   must not remove its successor's marker.
 */
import { ProviderError } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool, StorageVol } from "../../libvirt/types";
import { every } from "../../timers";
import { buildCachedImageVolumeXml } from "../domain/volume-xml";
import { type RetryEnv, sleep } from "./retry";
import { deleteVolume, hasCode, lookupVolume, refreshPool, volumeInfo } from "./volumes";

/** Timing of the lease. */
export interface LeaseTiming {
  /** How often the holder grows the marker (default 5 s). */
  heartbeatMs?: number;
  /** How long an unchanged marker is waited on before its holder counts as dead (default 30 s). */
  staleMs?: number;
  /** How often a waiter reads the marker (default 1 s). */
  pollMs?: number;
}

const DEFAULTS: Required<LeaseTiming> = { heartbeatMs: 5_000, staleMs: 30_000, pollMs: 1_000 };

type Held = { state: "active" } | { state: "idle" } | { state: "doubt"; start: number };

/**
 * Markers a holder holds or held, by host, pool and name: "active" while
 * its work runs, "idle" once it stopped (failed or cut), "doubt" when the
 * create's reply never came (ours only if its count is the one we chose).
 * A holder is this process unless the caller names one of its own (one
 * object per placer or address pool: two of them in one process, as the
 * tests make them, are two holders, as two processes would be).
 */
const held = new WeakMap<object, Map<string, Held>>();
/** The holder of callers that name none: the process. */
const PROCESS = {};

function mineOf(holder: object): Map<string, Held> {
  let m = held.get(holder);
  if (m === undefined) {
    m = new Map();
    held.set(holder, m);
  }
  return m;
}

function key(host: string, pool: StoragePool, marker: string): string {
  return `${host}\0${pool.name}\0${marker}`;
}

/** A held lease: keep it alive while uploading, then release (removing the marker) or abandon. */
export interface HeldLease {
  marker: StorageVol;
  /** Removes the marker if the lease is still ours; false when another holder took over meanwhile. */
  release(): Promise<boolean>;
  /** Stops the heartbeat and leaves the marker (the upload failed: the image must never count as complete). */
  abandon(): void;
}

/** What {@link takeLease} found. */
export type LeaseOutcome = { kind: "held"; lease: HeldLease } | { kind: "released" };

interface Where {
  host: string;
  lv: Libvirt;
  pool: StoragePool;
}

/**
 * Takes the lease on `markerName`, waiting while another live holder has it.
 * Resolves "released" when a marker that existed went away (the caller looks
 * at the image again: another holder may have completed it).
 */
export async function takeLease(
  where: Where,
  markerName: string,
  timing: LeaseTiming = {},
  env: RetryEnv = {},
  signal?: AbortSignal,
  holder: object = PROCESS,
): Promise<LeaseOutcome> {
  const mine = mineOf(holder);
  const t = { ...DEFAULTS, ...stripUndefined(timing) };
  const { lv, pool } = where;
  const k = key(where.host, pool, markerName);
  const now = env.now ?? (() => performance.now());
  const wait = env.sleep ?? sleep;
  let existing = await lookupVolume(lv, pool, markerName);
  if (existing !== undefined) {
    const own = mine.get(k);
    const ours =
      own?.state === "idle" || (own?.state === "doubt" && (await capacityOf(lv, existing)) === own.start);
    if (!ours) {
      // Another holder (another process, or another upload of ours): wait while its count moves.
      let last = await capacityOf(lv, existing);
      let since = now();
      for (;;) {
        if (last === undefined) return { kind: "released" };
        if (now() - since >= t.staleMs) break;
        await wait(t.pollMs, signal);
        const count = await capacityOf(lv, existing);
        if (count !== last) {
          last = count;
          since = now();
        }
      }
      // Unchanged for staleMs: delete it only if it is still that count.
      if ((await capacityOf(lv, existing)) !== last) return { kind: "released" };
    }
    await deleteVolume(lv, existing);
    existing = undefined;
  }
  // Above any allocation a sparse file reports (libvirt refuses a resize "below the allocation").
  const start = 2 ** 20 + Math.floor((env.random ?? Math.random)() * 2 ** 20);
  const xml = buildCachedImageVolumeXml({ name: markerName, format: "raw", capacityBytes: start });
  let marker: StorageVol;
  mine.set(k, { state: "doubt", start });
  try {
    marker = await lv.storageVolCreateXml(pool, xml);
  } catch (err) {
    // Another process made it first (its holder is alive by definition: wait on it next time round),
    // or its file exists and libvirt does not know it yet (let the pool learn it).
    if (hasCode(err, ErrorCode.STORAGE_VOL_EXIST)) {
      mine.delete(k);
      return { kind: "released" };
    }
    if (hasCode(err, ErrorCode.OPERATION_INVALID) && /already exists/i.test(err.libvirtMessage)) {
      mine.delete(k);
      await refreshPool(lv, pool, env);
      return { kind: "released" };
    }
    // Any other failure, a cut connection included: the marker may be ours; its count will tell.
    throw err;
  }
  mine.set(k, { state: "active" });
  let count = start;
  let beating = true;
  const timer = every(() => {
    count += 1;
    lv.storageVolResize(marker, count).catch(() => {
      // A missed beat: the next one tries again; waiters tolerate staleMs.
    });
  }, t.heartbeatMs);
  timer.unref?.();
  const stop = () => {
    if (!beating) return;
    beating = false;
    clearInterval(timer);
  };
  return {
    kind: "held",
    lease: {
      marker,
      async release() {
        stop();
        const seen = await capacityOf(lv, marker);
        // Our count, or one behind (a beat whose reply was still in flight): still ours.
        if (seen !== undefined && seen !== count && seen !== count - 1) {
          mine.delete(k);
          return false;
        }
        await deleteVolume(lv, marker);
        mine.delete(k);
        return true;
      },
      abandon() {
        stop();
        mine.set(k, { state: "idle" });
      },
    },
  };
}

/** The marker's capacity (the holder's count), or undefined when it is gone. */
async function capacityOf(lv: Libvirt, vol: StorageVol): Promise<number | undefined> {
  try {
    return (await volumeInfo(lv, vol))?.capacity;
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_STORAGE_VOL)) return undefined;
    throw err;
  }
}

function stripUndefined(t: LeaseTiming): LeaseTiming {
  const out: LeaseTiming = {};
  for (const [k, v] of Object.entries(t)) if (v !== undefined) out[k as keyof LeaseTiming] = v;
  return out;
}

/** The lease was lost to another holder while this process uploaded: the upload must not count. */
export class LeaseLostError extends ProviderError {
  constructor(marker: string) {
    super("transient", `the cache fill lease ${marker} passed to another process meanwhile; looking again`);
  }
}
