/**
 * Placement: which host of a pool a new VM goes to. Pure: the usage of each
 * host (our managed domains and the reservations of creates in flight, from
 * every stack), its declared capacity and the memory it can give in; the
 * chosen host (or why none has room) out. Deterministic for a given state of
 * the hosts: the most room left wins (as a fraction of the declared limits),
 * then the fewest proxies (which spreads over hosts that declare no limit),
 * then the host key that sorts first.
 */
import type { HostCapacity } from "./capacity";

/** What one VM asks of a host. */
export interface PlacementRequest {
  memoryMiB: number;
  vcpus: number;
}

/** What a host holds already: our domains and the reservations of creates not defined yet. */
export interface HostUsage {
  host: string;
  capacity: HostCapacity;
  proxies: number;
  memoryMiB: number;
  vcpus: number;
  /**
   * Memory the host can give a new VM ({@link availableMemoryMiB}), less
   * what the reservations of creates in flight will take; undefined when
   * the host does not say. A VM must fit in it whatever the declared
   * capacity.
   */
  availableMemoryMiB?: number;
}

/**
 * What a host can give a new VM, in MiB, from its memory figures in KiB
 * (virNodeGetMemoryStats): free memory, and the buffers and page cache the
 * kernel hands back on demand. A hypervisor that has run a while keeps
 * little memory free (its guests' disk reads fill the page cache), so free
 * memory alone refuses hosts with gigabytes to spare. The sum OpenStack
 * Nova's libvirt driver counts as unused. Undefined without a `free` figure.
 */
export function availableMemoryMiB(statsKiB: Readonly<Record<string, number>>): number | undefined {
  const free = statsKiB.free;
  if (free === undefined) return undefined;
  return (free + (statsKiB.buffers ?? 0) + (statsKiB.cached ?? 0)) / 1024;
}

/** The outcome: a host, or why the pool has no room (naming each host's free slots). */
export type Placement = { host: string } | { full: string };

/**
 * The room left on `h` for `req`, between 0 (exactly full after it) and 1,
 * as the smallest fraction left over the declared limits; negative when it
 * does not fit (the declared limits, or the memory the host can give);
 * 1 for a host that declares no limit.
 */
export function roomLeft(h: HostUsage, req: PlacementRequest): number {
  if (h.availableMemoryMiB !== undefined && req.memoryMiB > h.availableMemoryMiB) return -1;
  const dims: [number | undefined, number][] = [
    [h.capacity.proxies, h.proxies + 1],
    [h.capacity.memoryMiB, h.memoryMiB + req.memoryMiB],
    [h.capacity.vcpus, h.vcpus + req.vcpus],
  ];
  let room = 1;
  for (const [cap, used] of dims) {
    if (cap === undefined) continue;
    room = Math.min(room, (cap - used) / cap);
  }
  return room;
}

/** What a host has free, in words, for the "no room" message. */
function freeOf(h: HostUsage): string {
  const parts: string[] = [];
  if (h.capacity.proxies !== undefined)
    parts.push(`${Math.max(0, h.capacity.proxies - h.proxies)} proxy slots`);
  if (h.capacity.memoryMiB !== undefined)
    parts.push(`${Math.max(0, h.capacity.memoryMiB - h.memoryMiB)} MiB`);
  if (h.capacity.vcpus !== undefined) parts.push(`${Math.max(0, h.capacity.vcpus - h.vcpus)} vCPUs`);
  if (h.availableMemoryMiB !== undefined)
    parts.push(`${Math.max(0, Math.floor(h.availableMemoryMiB))} MiB host memory`);
  return `${h.host}: ${parts.length > 0 ? parts.join(", ") : "no limits"} free`;
}

/** Chooses the host of `pool` with the most room left for `req`. */
export function choosePlacement(pool: readonly HostUsage[], req: PlacementRequest): Placement {
  const fits = pool
    .map((h) => ({ h, room: roomLeft(h, req) }))
    .filter((x) => x.room >= 0)
    .sort(
      (a, b) =>
        b.room - a.room ||
        a.h.proxies - b.h.proxies ||
        (a.h.host < b.h.host ? -1 : a.h.host > b.h.host ? 1 : 0),
    );
  const best = fits[0];
  if (best !== undefined) return { host: best.h.host };
  return {
    full:
      `no host of the pool [${pool.map((h) => h.host).join(", ")}] has room for ` +
      `${req.memoryMiB} MiB and ${req.vcpus} vCPU${req.vcpus === 1 ? "" : "s"} (${pool.map(freeOf).join("; ")})`,
  };
}

/** Prefix of the reservation volumes of creates not defined yet. */
export const RESERVATION_PREFIX = "kvmp-rsv-";

/**
 * The reservation volume of a create: `kvmp-rsv-<domain>-<owner tag>`; its
 * capacity (a sparse raw file) carries what it reserves, `memoryMiB × 2^20 +
 * vcpus` bytes, so counting needs no other read.
 */
export function reservationName(domain: string, tag: string): string {
  return `${RESERVATION_PREFIX}${domain}-${tag}`;
}

/** The capacity that records `req` in a reservation volume. */
export function reservationCapacity(req: PlacementRequest): number {
  return req.memoryMiB * 2 ** 20 + req.vcpus;
}

/** What a reservation's capacity records. */
export function reservationRequest(capacity: number): PlacementRequest {
  return { memoryMiB: Math.floor(capacity / 2 ** 20), vcpus: capacity % 2 ** 20 };
}

/** The domain a reservation volume is for, or undefined when the name is not a reservation's. */
export function reservationDomain(volume: string): string | undefined {
  const m = /^kvmp-rsv-(.+)-[0-9a-f]{8}$/.exec(volume);
  return m?.[1];
}
