/**
 * One attempt at deleting a VM (KvmOperations.delete retries it): the domain
 * (destroyed, undefined with its NVRAM, managed save and snapshot metadata)
 * and its volumes. A domain's volumes are the ones its disks name; without a
 * domain (gone already, or never defined), the names its owner's create chose
 * (tagged with the owner, names.ts), and the untagged names of VMs made
 * before the tags. Everything already gone is fine. With `owner`, a domain of
 * another owner (or none) is left alone with the volumes it uses, and only
 * volumes tagged with `owner` go.
 */
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool } from "../../libvirt/types";
import { ownerTag, perVmVolumeNames } from "../domain/names";
import { reservationName } from "../placement/placement";
import { domainHoldings, lookupDomain, removeDomain } from "./domains";
import type { HostPool } from "./hosts";
import type { RetryEnv } from "./retry";
import type { DeleteOptions, DeleteResult } from "./vm";
import { deleteVolume, lookupVolume, refreshPool } from "./volumes";

export async function deleteOnce(
  hosts: HostPool,
  env: RetryEnv,
  hostKey: string,
  name: string,
  options: DeleteOptions,
): Promise<DeleteResult> {
  const lv = hosts.libvirt(hostKey);
  let dom = await lookupDomain(lv, name);
  // One read of the domain's XML: its owner and the volumes its disks name.
  const held = dom === undefined ? undefined : await domainHoldings(lv, dom);
  if (dom !== undefined && options.owner !== undefined) {
    if (held === "gone") dom = undefined;
    else if (held !== undefined && held.owner !== options.owner) {
      const owner = held.owner;
      // The domain and the volumes it uses are another's; volumes tagged with our owner that it
      // does not use are ours (a create that lost the define to it).
      const inUse = new Set(held.disks);
      const own = [
        ...perVmVolumeNames(name, options.owner).filter((n) => !inUse.has(n)),
        reservationName(name, ownerTag(options.owner)),
      ];
      const pool = await hosts.pool(hostKey);
      const removed = pool === undefined ? [] : await removeVolumes(lv, pool, env, [], own);
      return { domainRemoved: false, volumesRemoved: removed, noop: "not-ours", foreignOwner: owner };
    }
  }
  // The volumes a domain uses are the ones its disks name; without a domain, the names its owner's create chose.
  const disks = dom === undefined || held === undefined || held === "gone" ? [] : held.disks;
  const domainRemoved = dom !== undefined && (await removeDomain(lv, dom));
  const pool = await hosts.pool(hostKey);
  if (pool === undefined) return { domainRemoved, volumesRemoved: [], noop: "pool-missing" };
  const owners = [options.owner, options.volumeOwner].filter((o): o is string => o !== undefined);
  const expected =
    dom !== undefined ? disks : owners.length > 0 ? owners.flatMap((o) => perVmVolumeNames(name, o)) : [];
  // Untagged names: VMs made before the tags, and a VM of unknown owner.
  // And the placement reservation of a create that never defined its domain (placer.ts).
  const alsoTry = [...perVmVolumeNames(name), ...owners.map((o) => reservationName(name, ownerTag(o)))];
  return { domainRemoved, volumesRemoved: await removeVolumes(lv, pool, env, expected, alsoTry) };
}

/**
 * Deletes the volumes named `expected` (refreshing the pool when one is
 * missing: a file libvirt does not know about, created or restored behind
 * its back, is only found after a refresh) and those of `alsoTry` that
 * exist (no refresh for those). Returns the names removed.
 */
async function removeVolumes(
  lv: Libvirt,
  pool: StoragePool,
  env: RetryEnv,
  expected: readonly string[],
  alsoTry: readonly string[],
): Promise<string[]> {
  const removed: string[] = [];
  const missing: string[] = [];
  for (const n of new Set([...expected, ...alsoTry])) {
    const vol = await lookupVolume(lv, pool, n);
    if (vol === undefined) {
      if (expected.includes(n)) missing.push(n);
    } else if (await deleteVolume(lv, vol)) removed.push(n);
  }
  if (missing.length > 0) {
    await refreshPool(lv, pool, env);
    for (const n of missing) {
      const vol = await lookupVolume(lv, pool, n);
      if (vol !== undefined && (await deleteVolume(lv, vol))) removed.push(n);
    }
  }
  return removed;
}
