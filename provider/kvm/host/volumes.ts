/**
 * Storage-volume helpers that tolerate libvirt's view of a dir pool drifting
 * from the files on disk (anchors item 10):
 * - a file removed behind libvirt's back stays listed: lookup and path work,
 *   virStorageVolGetInfo fails with NO_STORAGE_VOL (50), creating the name
 *   again fails with STORAGE_VOL_EXIST, deleting it succeeds;
 * - a file created behind libvirt's back is unknown: lookup fails with
 *   NO_STORAGE_VOL and creating it fails with OPERATION_INVALID "volume
 *   target path ... already exists" until the pool is refreshed.
 * The pool is refreshed only when one of these is seen, never routinely.
 */
import { ErrorCode } from "../../libvirt/error-codes";
import { LibvirtError } from "../../libvirt/errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool, StorageVol, StorageVolInfo } from "../../libvirt/types";
import { isBusy, type RetryEnv, withRetry } from "./retry";

/** True for a libvirt error with one of the given codes. */
export function hasCode(err: unknown, ...codes: number[]): err is LibvirtError {
  return err instanceof LibvirtError && codes.includes(err.code);
}

/** The volume, or undefined when libvirt does not know it (NO_STORAGE_VOL). */
export async function lookupVolume(
  lv: Libvirt,
  pool: StoragePool,
  name: string,
): Promise<StorageVol | undefined> {
  try {
    return await lv.storageVolLookupByName(pool, name);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_STORAGE_VOL)) return undefined;
    throw err;
  }
}

/** The volume's info, or undefined when its file is gone although libvirt still lists it. */
export async function volumeInfo(lv: Libvirt, vol: StorageVol): Promise<StorageVolInfo | undefined> {
  try {
    return await lv.storageVolGetInfo(vol);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_STORAGE_VOL)) return undefined;
    throw err;
  }
}

/**
 * The volume's path. libvirt's file-system backends (dir, fs, netfs) key a
 * volume by its path (storage_backend_fs.c sets the key to the target path):
 * a key that is an absolute path ending in the volume's name is taken as
 * is, saving a round trip per volume; any other key (an LV's UUID, an RBD
 * name) asks virStorageVolGetPath.
 */
export async function volumePath(lv: Libvirt, vol: StorageVol): Promise<string> {
  if (vol.key.startsWith("/") && vol.key.endsWith(`/${vol.name}`)) return vol.key;
  return lv.storageVolGetPath(vol);
}

/**
 * Refreshes the pool, waiting while another job holds it ("asynchronous jobs
 * running", which libvirt reports while an upload or volume build is set up).
 * That wait is for a lock, not a retry of a failure: only the busy refusal
 * is waited out here; every other failure goes to the operation's retry.
 */
export async function refreshPool(lv: Libvirt, pool: StoragePool, env: RetryEnv = {}): Promise<void> {
  await withRetry(() => lv.storagePoolRefresh(pool), {
    ...env,
    maxAttempts: 8,
    deadlineMs: 30_000,
    retryIf: isBusy,
  });
}

/** Deletes a volume, tolerating one that is already gone. True when something was deleted. */
export async function deleteVolume(lv: Libvirt, vol: StorageVol): Promise<boolean> {
  try {
    await lv.storageVolDelete(vol);
    return true;
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_STORAGE_VOL)) return false;
    throw err;
  }
}

/** Looks a volume up by name and deletes it; true when something was deleted. */
export async function deleteVolumeByName(lv: Libvirt, pool: StoragePool, name: string): Promise<boolean> {
  const vol = await lookupVolume(lv, pool, name);
  return vol === undefined ? false : deleteVolume(lv, vol);
}

function isUnknownFileExists(err: unknown): boolean {
  return hasCode(err, ErrorCode.OPERATION_INVALID) && /already exists/i.test(err.libvirtMessage);
}

/**
 * Creates a fresh volume `name` from `xml`. Whatever already holds the name is
 * replaced: a volume libvirt knows (possibly stale) is deleted first; a file
 * libvirt does not know makes it refresh the pool, then delete. Callers use it
 * only for volumes they mean to rebuild.
 */
export async function createFreshVolume(
  lv: Libvirt,
  pool: StoragePool,
  name: string,
  xml: string,
  env: RetryEnv = {},
): Promise<StorageVol> {
  try {
    return await lv.storageVolCreateXml(pool, xml);
  } catch (err) {
    if (isUnknownFileExists(err)) await refreshPool(lv, pool, env);
    else if (!hasCode(err, ErrorCode.STORAGE_VOL_EXIST)) throw err;
  }
  await deleteVolumeByName(lv, pool, name);
  return lv.storageVolCreateXml(pool, xml);
}
