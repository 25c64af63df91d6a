/**
 * Address pools on the hosts (network/address-pool.ts decides): which
 * addresses of a segment are taken, read from the hosts themselves so that
 * every stack counts every other's, and the allocation of free ones to a
 * create's pool NICs.
 *
 * - Taken: the static addresses our managed domains record on that segment
 *   (metadata `address` elements, any stack, on every host the VM could be
 *   on: the hosts share the segment's addresses), and the reservations of
 *   creates not defined yet (`kvmp-ipr-<domain>@<address>` volumes).
 * - Two creates never take one address: in this process allocations run
 *   one after the other; across processes the allocation holds a lock (a
 *   lease volume, image-lease.ts) on the first of the hosts by key, counts
 *   again under it and makes its reservation there before letting go. The
 *   reservation is removed once the domain is defined (its metadata counts
 *   from then on), or by the create's rollback. A reservation counts while
 *   it stands, even when a domain of its name exists (its own, defined and
 *   not yet let go of; or another host's of the same name, when creates
 *   are in flight on this one).
 * - A reservation left by a process that died between the two, or whose
 *   removal failed, keeps its address for a day (no create lives longer:
 *   timeouts.create is at most 24 h), its name carrying when it was made;
 *   the next allocation after that removes it, unless a domain of its name
 *   still stands.
 *
 * Drift: a domain deleted by hand frees its addresses (nothing else records
 * them); a domain whose metadata cannot be read is skipped, as placement
 * skips it.
 */
import { ProviderError } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool } from "../../libvirt/types";
import type { MetadataAddress } from "../domain/metadata";
import { buildCachedImageVolumeXml } from "../domain/volume-xml";
import { type AddressPool, allocate } from "../network/address-pool";
import { bare } from "../network/ip";
import { segmentOf } from "../network/nic";
import { type CheckedNic, filledFromPool, resolveHostNics } from "../network/nic-rules";
import { managedMetadata } from "./domains";
import { underHostLock } from "./host-lock";
import type { HostPool } from "./hosts";
import type { RetryEnv } from "./retry";
import { deleteVolumeByName, hasCode } from "./volumes";

/** The lock volume an allocation holds on its lock host while it counts and reserves. */
export const ADDRESS_LOCK = "kvmp-addresses.lock";
/** Reservation volumes: `kvmp-ipr-<domain>@<address>@<unix seconds>`. */
export const ADDRESS_RESERVATION_PREFIX = "kvmp-ipr-";
/** Age past which a reservation whose domain was never defined is stale: a day and an hour, seconds. */
export const RESERVATION_STALE_SECONDS = 25 * 3600;

/** A create's pool NICs given addresses, and the reservations to drop once its domain is defined. */
export interface Allocation {
  nics: CheckedNic[];
  /** The host the reservations are on (the lock host) and their volume names. */
  reservations: { host: string; volumes: string[] };
}

/** The reservation volume of `domain` for `address` (plain), made at `seconds` (Unix time). */
export function reservationVolume(domain: string, address: string, seconds: number): string {
  return `${ADDRESS_RESERVATION_PREFIX}${domain}@${address}@${Math.floor(seconds)}`;
}

/** The domain, address and time of a reservation volume, or undefined for another volume. */
export function parseReservation(
  volume: string,
): { domain: string; address: string; seconds: number } | undefined {
  const m = /^kvmp-ipr-(.+)@([0-9a-f.:]+)@(\d{1,12})$/.exec(volume);
  return m === null ? undefined : { domain: m[1] as string, address: m[2] as string, seconds: Number(m[3]) };
}

export class AddressPools {
  private readonly hosts: HostPool;
  private readonly env: RetryEnv;
  /** Allocations in this process, one after the other. */
  private chain: Promise<unknown> = Promise.resolve();
  /** The recorded addresses of domains already read, by UUID (they do not change). */
  private readonly recorded = new Map<string, MetadataAddress[]>();
  /**
   * Runs between an allocation's count and its reservation: where two
   * processes without the lock would both see an address free. Tests widen
   * that window through it; nothing else sets it.
   */
  counted: ((domain: string) => Promise<void>) | undefined;

  constructor(hosts: HostPool, env: RetryEnv = {}) {
    this.hosts = hosts;
    this.env = env;
  }

  /** Wall-clock milliseconds: reservation times are compared across processes and machines. */
  private now(): number {
    return Date.now();
  }

  /**
   * Gives each pool NIC of VM `name` (on `host`; the addresses unique over
   * `shared`, the hosts its segment spans) a free address of each family of
   * its pool, none of `avoid` (blocked addresses), and reserves them. NICs with addresses already are left as
   * they are (a restart of a VM the state records). Nothing to take: no
   * lock, no call.
   */
  allocate(
    name: string,
    host: string,
    shared: readonly string[],
    nics: readonly CheckedNic[],
    avoid: readonly string[] = [],
  ): Promise<Allocation> {
    const wanted = nics.some((n) => n.addressPool !== undefined && n.addresses.length === 0);
    if (!wanted) return Promise.resolve({ nics: [...nics], reservations: { host, volumes: [] } });
    const mine = this.chain
      .catch(() => undefined)
      .then(() => this.allocateNow(name, host, shared, nics, avoid));
    this.chain = mine;
    return mine;
  }

  /** Removes an allocation's reservations (its domain is defined, or its create was rolled back). */
  async release(a: Allocation): Promise<void> {
    if (a.reservations.volumes.length === 0) return;
    const lv = this.hosts.libvirt(a.reservations.host);
    const pool = await this.hosts.pool(a.reservations.host);
    if (pool === undefined) return;
    for (const v of a.reservations.volumes) await deleteVolumeByName(lv, pool, v);
  }

  /**
   * The addresses taken on `segment` over `hosts` (plain, canonical):
   * recorded by domains, and reserved (but by domain `except`'s own
   * reservations: an earlier attempt of the same create).
   */
  async taken(segment: string, hosts: readonly string[], except?: string): Promise<Set<string>> {
    // The reservations are read before the domains: a create defines its domain and then drops its
    // reservation, so an address missing from the first read is in the second. The other order
    // misses a create that does both between the two reads.
    const lockHost = lockHostOf(hosts);
    const lockLv = this.hosts.libvirt(lockHost);
    const pool = await this.hosts.pool(lockHost);
    const reserved = pool === undefined ? [] : await lockLv.storagePoolListAllVolumes(pool);
    const out = new Set<string>();
    const names = new Set<string>();
    for (const h of hosts) {
      const lv = this.hosts.libvirt(h);
      for (const dom of await lv.connectListAllDomains(0)) {
        names.add(dom.name);
        for (const a of await this.addressesOf(lv, dom)) if (a.segment === segment) out.add(bare(a.cidr));
      }
    }
    // Reservations count whatever their segment (the volume name has none): the safe side. Stale ones go.
    if (pool !== undefined) {
      const now = this.now() / 1000;
      for (const v of reserved) {
        const r = parseReservation(v.name);
        if (r === undefined || r.domain === except) continue;
        if (now - r.seconds <= RESERVATION_STALE_SECONDS) out.add(r.address);
        else if (!names.has(r.domain)) await deleteVolumeByName(lockLv, pool, v.name);
      }
    }
    return out;
  }

  private async allocateNow(
    name: string,
    host: string,
    shared: readonly string[],
    nics: readonly CheckedNic[],
    avoid: readonly string[],
  ): Promise<Allocation> {
    const lockHost = lockHostOf(shared);
    return underHostLock(
      this.hosts,
      lockHost,
      ADDRESS_LOCK,
      this,
      this.env,
      async ({ lv, pool: storage }) => {
        const resolved = resolveHostNics(nics, this.hosts.config(host).nic);
        const filled: CheckedNic[] = [];
        const volumes: string[] = [];
        for (const nic of resolved) {
          const pool: AddressPool | undefined = nic.addressPool;
          if (pool === undefined || nic.addresses.length > 0) {
            filled.push(nic);
            continue;
          }
          const segment = segmentOf(nic) as string;
          // Blocked addresses count as taken: never handed out, whoever asks.
          const taken = new Set([...(await this.taken(segment, shared, name)), ...avoid]);
          const choice = allocate(pool, taken);
          await this.counted?.(name);
          if ("full" in choice) {
            throw new ProviderError(
              "permanent",
              `no free address on ${segment} for ${name}: ${choice.full} (by VMs of any stack on ${shared.join(", ")}, or reserved by creates in flight${avoid.length > 0 ? `, or blocked: ${avoid.join(", ")}` : ""})`,
            );
          }
          for (const cidr of choice.addresses) {
            const volume = reservationVolume(name, bare(cidr), this.now() / 1000);
            await reserve(lv, storage, volume);
            volumes.push(volume);
          }
          filled.push(filledFromPool(nic, choice.addresses));
        }
        return { nics: filled, reservations: { host: lockHost, volumes } };
      },
    );
  }

  /** A domain's recorded static addresses (none: not ours, made before they were recorded, or gone). */
  private async addressesOf(lv: Libvirt, dom: { name: string; uuid: string; id: number }) {
    const known = this.recorded.get(dom.uuid);
    if (known !== undefined) return known;
    try {
      const m = await managedMetadata(lv, dom);
      const addresses = m?.addresses ?? [];
      if (m !== undefined) this.recorded.set(dom.uuid, addresses);
      return addresses;
    } catch (err) {
      if (hasCode(err, ErrorCode.NO_DOMAIN)) return [];
      throw err;
    }
  }
}

/** The host whose lock and reservations an allocation over `hosts` uses: the first by key. */
export function lockHostOf(hosts: readonly string[]): string {
  return [...hosts].sort()[0] as string;
}

async function reserve(lv: Libvirt, pool: StoragePool, volume: string): Promise<void> {
  const xml = buildCachedImageVolumeXml({ name: volume, format: "raw", capacityBytes: 1 });
  try {
    await lv.storageVolCreateXml(pool, xml);
  } catch (err) {
    // A reservation of ours from an earlier attempt of this create: it stands.
    if (!hasCode(err, ErrorCode.STORAGE_VOL_EXIST)) throw err;
  }
}
