/**
 * Placement on the hosts of a pool (placement.ts decides; this counts and
 * reserves). What a host holds is counted from the host itself, so every
 * stack counts every other's: our managed domains whose disks are in the
 * host's storage pool (memory, vCPUs and pool from their metadata; VMs made
 * before it recorded them are read from their XML and count on every entry
 * of their hypervisor, the safe side) and the reservations of creates not
 * defined yet (`kvmp-rsv-*` volumes in that pool). A host entry is thus a
 * hypervisor and storage pool: one hypervisor split into entries by pool
 * keeps each entry's capacity apart.
 *
 * Two creates must never both take a host's last room:
 * - in this process, placements run one after the other;
 * - across processes, the chosen host is counted again under its placement
 *   lock (a lease volume, image-lease.ts), and the reservation volume is
 *   made before the lock is released; the reservation is removed once the
 *   domain is defined (the domain counts from then on) or by the create's
 *   rollback. A reservation a crashed process left keeps its room until its
 *   VM name is deleted: counting too much is the safe side.
 */
import { ProviderError } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import { LibvirtError } from "../../libvirt/errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool } from "../../libvirt/types";
import { parseDomainXml } from "../domain/domain-xml";
import { ownerTag } from "../domain/names";
import { buildCachedImageVolumeXml } from "../domain/volume-xml";
import {
  availableMemoryMiB,
  choosePlacement,
  type HostUsage,
  type PlacementRequest,
  RESERVATION_PREFIX,
  reservationCapacity,
  reservationDomain,
  reservationName,
  reservationRequest,
  roomLeft,
} from "../placement/placement";
import { managedMetadata } from "./domains";
import { underHostLock } from "./host-lock";
import type { HostPool } from "./hosts";
import type { RetryEnv } from "./retry";
import { deleteVolumeByName, hasCode, volumeInfo } from "./volumes";

/** The lock volume a placement on a host holds while it counts and reserves. */
export const PLACEMENT_LOCK = "kvmp-placement.lock";

/** A create placed on a host: where, and the reservation to drop once its domain is defined. */
export interface Placed {
  host: string;
  reservation: string;
}

export class Placer {
  private readonly hosts: HostPool;
  private readonly env: RetryEnv;
  /** Placements in this process, one after the other. */
  private chain: Promise<unknown> = Promise.resolve();
  /** Memory and vCPUs of domains already read, by UUID (they do not change). */
  private readonly sized = new Map<string, Sized>();

  constructor(hosts: HostPool, env: RetryEnv = {}) {
    this.hosts = hosts;
    this.env = env;
  }

  /** Places VM `name` of `ownerUrn` on the host of `pool` with the most room, and reserves it there. */
  place(pool: readonly string[], name: string, ownerUrn: string, req: PlacementRequest): Promise<Placed> {
    const mine = this.chain.catch(() => undefined).then(() => this.placeNow(pool, name, ownerUrn, req));
    this.chain = mine;
    return mine;
  }

  /** Removes the reservation of a placed create (its domain is defined, or it was rolled back). */
  async release(placed: Placed): Promise<void> {
    const lv = this.hosts.libvirt(placed.host);
    const pool = await this.hosts.pool(placed.host);
    if (pool !== undefined) await deleteVolumeByName(lv, pool, placed.reservation);
  }

  private async placeNow(
    pool: readonly string[],
    name: string,
    ownerUrn: string,
    req: PlacementRequest,
  ): Promise<Placed> {
    const reservation = reservationName(name, ownerTag(ownerUrn));
    for (;;) {
      const usage = await Promise.all(pool.map((h) => this.usageOf(h)));
      const choice = choosePlacement(usage, req);
      if ("full" in choice) throw new ProviderError("permanent", choice.full);
      const host = choice.host;
      const placed = await underHostLock(
        this.hosts,
        host,
        PLACEMENT_LOCK,
        this,
        this.env,
        async ({ lv, pool: storage }) => {
          // Counted again under the lock: another process may have taken room since (then choose again).
          if (roomLeft(await this.usageOf(host), req) < 0) return undefined;
          const xml = buildCachedImageVolumeXml({
            name: reservation,
            format: "raw",
            capacityBytes: reservationCapacity(req),
          });
          try {
            await lv.storageVolCreateXml(storage, xml);
          } catch (err) {
            // A reservation of ours from an earlier attempt of this create: it stands.
            if (!hasCode(err, ErrorCode.STORAGE_VOL_EXIST)) throw err;
          }
          return { host, reservation };
        },
      );
      if (placed !== undefined) return placed;
    }
  }

  /** What host `key` holds: our domains and the reservations whose domain is not defined yet. */
  async usageOf(key: string): Promise<HostUsage> {
    const config = this.hosts.config(key);
    const lv = this.hosts.libvirt(key);
    const usage: HostUsage = { host: key, capacity: config.capacity, proxies: 0, memoryMiB: 0, vcpus: 0 };
    // The reservations are read before the domains: a create defines its domain and then drops its
    // reservation, so one missing from the first read is in the second. The other order misses a
    // create that does both between the two reads.
    const pool = await this.hosts.pool(key);
    const reserved: { domain: string; request: PlacementRequest }[] = [];
    if (pool !== undefined) {
      for (const vol of await reservations(lv, pool)) {
        const domain = reservationDomain(vol.name);
        if (domain === undefined) continue;
        const info = await volumeInfo(lv, vol);
        if (info !== undefined) reserved.push({ domain, request: reservationRequest(info.capacity) });
      }
    }
    const domains = await lv.connectListAllDomains(0);
    const names = new Set(domains.map((d) => d.name));
    for (const dom of domains) {
      const size = await this.sizeOf(lv, dom);
      if (size === undefined || (size.storagePool !== undefined && size.storagePool !== config.pool))
        continue;
      usage.proxies += 1;
      usage.memoryMiB += size.memoryMiB;
      usage.vcpus += size.vcpus;
    }
    let reservedMiB = 0;
    for (const { domain, request } of reserved) {
      if (names.has(domain)) continue;
      usage.proxies += 1;
      usage.memoryMiB += request.memoryMiB;
      usage.vcpus += request.vcpus;
      reservedMiB += request.memoryMiB;
    }
    const available = await availableMemory(lv);
    if (available !== undefined) usage.availableMemoryMiB = available - reservedMiB;
    return usage;
  }

  /** A managed domain's memory and vCPUs (undefined: not ours, or gone meanwhile). */
  private async sizeOf(
    lv: Libvirt,
    dom: { name: string; uuid: string; id: number },
  ): Promise<Sized | undefined> {
    const known = this.sized.get(dom.uuid);
    if (known !== undefined) return known;
    try {
      const m = await managedMetadata(lv, dom);
      if (m === undefined) return undefined;
      const resolved: Sized =
        m.memoryMiB !== undefined && m.vcpus !== undefined
          ? { memoryMiB: m.memoryMiB, vcpus: m.vcpus }
          : await this.sizeFromXml(lv, dom);
      if (m.storagePool !== undefined) resolved.storagePool = m.storagePool;
      this.sized.set(dom.uuid, resolved);
      return resolved;
    } catch (err) {
      if (hasCode(err, ErrorCode.NO_DOMAIN)) return undefined;
      throw err;
    }
  }

  private async sizeFromXml(lv: Libvirt, dom: { name: string; uuid: string; id: number }) {
    const parsed = parseDomainXml(await lv.domainGetXmlDesc(dom));
    return { memoryMiB: parsed.memoryMiB, vcpus: parsed.vcpus };
  }
}

/** What a managed domain takes of its host, and the storage pool it counts in (undefined: every pool). */
interface Sized {
  memoryMiB: number;
  vcpus: number;
  storagePool?: string;
}

/**
 * What the host can give a new VM, in MiB ({@link availableMemoryMiB}); its
 * free memory alone when the daemon gives no memory figures (a driver
 * without them, or one that cannot read them: any error the daemon itself
 * answers; a cut connection still fails); undefined when it reports neither.
 */
async function availableMemory(lv: Libvirt): Promise<number | undefined> {
  try {
    const available = availableMemoryMiB(await lv.nodeGetMemoryStats());
    if (available !== undefined) return available;
  } catch (err) {
    if (!(err instanceof LibvirtError)) throw err;
  }
  try {
    return (await lv.nodeGetFreeMemory()) / 2 ** 20;
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_SUPPORT)) return undefined;
    throw err;
  }
}

/** The reservation volumes in a pool. */
async function reservations(lv: Libvirt, pool: StoragePool) {
  return (await lv.storagePoolListAllVolumes(pool)).filter((v) => v.name.startsWith(RESERVATION_PREFIX));
}
