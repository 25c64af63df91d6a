/**
 * Address pools: a NIC's static address taken at create from ranges of a
 * segment (a bridge, a libvirt network or a macvtap parent) instead of
 * written in the program, so a fleet's members each hold one and a
 * replacement takes a free one while its predecessor still holds its own.
 * Pure: the ranges' grammar, their size, and the choice of a free address;
 * which addresses are taken is read from the hosts (host/address-pools.ts).
 *
 * A range is `first-last/prefix` (`203.0.113.10-203.0.113.40/24`) or one
 * address with its prefix (`203.0.113.9/24`); the prefix is the interface's
 * (the subnet the NIC is on), and the whole range lies in that subnet. A
 * pool may hold IPv4 and IPv6 ranges: a NIC then takes one address of each
 * family. The free address taken is the next one after the highest taken
 * (in the order the ranges list them), wrapping to the start: a rotating
 * fleet moves through the whole pool before it reuses an address, so a
 * replacement egresses from an address no member used lately.
 */
import { given, isObject, rejectUnknown } from "../fields";
import type { Failures } from "../validation";
import { family, type IpFamily, parseCidr, parseIp } from "./ip";

/** A NIC's pool, as check keeps it: canonical range texts. */
export interface AddressPool {
  ranges: string[];
}

/** A parsed range: its family, its first and last address as integers, and the interface prefix. */
export interface PoolRange {
  family: IpFamily;
  first: bigint;
  last: bigint;
  prefix: number;
}

/** Most ranges a pool may list. */
export const MAX_POOL_RANGES = 64;

function toBig(bytes: readonly number[]): bigint {
  return bytes.reduce((n, b) => (n << 8n) | BigInt(b), 0n);
}

function fromBig(n: bigint, fam: IpFamily): string {
  const size = fam === 4 ? 4 : 16;
  const bytes: number[] = [];
  let v = n;
  for (let i = 0; i < size; i++) {
    bytes.unshift(Number(v & 0xffn));
    v >>= 8n;
  }
  if (fam === 4) return bytes.join(".");
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2)
    groups.push((((bytes[i] as number) << 8) | (bytes[i + 1] as number)).toString(16));
  return parseIp(groups.join(":"))?.text as string;
}

function width(fam: IpFamily): number {
  return fam === 4 ? 32 : 128;
}

/** The subnet number of `n` under `prefix` (the bits above the host part). */
function subnet(n: bigint, fam: IpFamily, prefix: number): bigint {
  return n >> BigInt(width(fam) - prefix);
}

/** Parses a range (`first-last/prefix` or `address/prefix`), or says why it is not one. */
export function parsePoolRange(v: unknown): PoolRange | string {
  if (typeof v !== "string") return "must be a string: first-last/prefix, e.g. 203.0.113.10-203.0.113.40/24";
  const slash = v.lastIndexOf("/");
  if (slash < 0) return "needs the interface prefix: first-last/prefix, e.g. 203.0.113.10-203.0.113.40/24";
  const span = v.slice(0, slash);
  const dash = span.indexOf("-");
  const firstText = dash < 0 ? span : span.slice(0, dash);
  const lastText = dash < 0 ? span : span.slice(dash + 1);
  const first = parseCidr(`${firstText}/${v.slice(slash + 1)}`);
  const last = parseIp(lastText);
  if (first === undefined)
    return `${JSON.stringify(firstText)} with /${v.slice(slash + 1)} is not an address with a prefix`;
  if (last === undefined) return `${JSON.stringify(lastText)} is not an address`;
  if (last.family !== first.family) return "its first and last address are of different families";
  if (first.address !== firstText || last.text !== lastText)
    return `write it as ${first.address}${dash < 0 ? "" : `-${last.text}`}/${first.prefix} (canonical form)`;
  const fam = first.family;
  const lo = toBig(first.bytes);
  const hi = toBig(last.bytes);
  if (hi < lo) return `its last address ${last.text} is below its first ${first.address}`;
  if (subnet(lo, fam, first.prefix) !== subnet(hi, fam, first.prefix))
    return `${first.address} and ${last.text} are not in one /${first.prefix} subnet`;
  const hostBits = width(fam) - first.prefix;
  if (fam === 4 && hostBits >= 2) {
    const mask = (1n << BigInt(hostBits)) - 1n;
    if ((lo & mask) === 0n) return `${first.address} is the network address of its /${first.prefix}`;
    if ((hi & mask) === mask) return `${last.text} is the broadcast address of its /${first.prefix}`;
  }
  return { family: fam, first: lo, last: hi, prefix: first.prefix };
}

/** The canonical text of a parsed range. */
export function poolRangeText(r: PoolRange): string {
  const first = fromBig(r.first, r.family);
  return r.first === r.last ? `${first}/${r.prefix}` : `${first}-${fromBig(r.last, r.family)}/${r.prefix}`;
}

/** The parsed ranges of a checked pool. */
export function rangesOf(pool: AddressPool): PoolRange[] {
  return pool.ranges.map(parsePoolRange).filter((r): r is PoolRange => typeof r !== "string");
}

/** How many addresses a pool holds per family (a NIC takes one of each family it has). */
export function poolSize(pool: AddressPool): Partial<Record<IpFamily, bigint>> {
  const out: Partial<Record<IpFamily, bigint>> = {};
  for (const r of rangesOf(pool)) out[r.family] = (out[r.family] ?? 0n) + (r.last - r.first + 1n);
  return out;
}

/** How many NICs a pool can serve at once: its smaller family's size. */
export function poolCapacity(pool: AddressPool): bigint {
  let least: bigint | undefined;
  for (const size of Object.values(poolSize(pool))) if (least === undefined || size < least) least = size;
  return least ?? 0n;
}

/** A CIDR of each family for the gateway rules at check: the first address of the family's first range. */
export function representativeAddresses(pool: AddressPool): string[] {
  const seen = new Set<IpFamily>();
  return rangesOf(pool).flatMap((r) => {
    if (seen.has(r.family)) return [];
    seen.add(r.family);
    return [`${fromBig(r.first, r.family)}/${r.prefix}`];
  });
}

/** Whether `cidr`'s address (plain or CIDR) is one of the pool's. */
export function inPool(pool: AddressPool, cidr: string): boolean {
  const c = parseCidr(cidr.includes("/") ? cidr : `${cidr}/${family(cidr) === 6 ? 128 : 32}`);
  if (c === undefined) return false;
  const n = toBig(c.bytes);
  return rangesOf(pool).some((r) => r.family === c.family && r.first <= n && n <= r.last);
}

/**
 * A free address of each family the pool has, as the NIC's CIDRs (with the
 * range's prefix), given the addresses taken (canonical plain text): the
 * next free one after the highest taken, wrapping (see the module header);
 * or which family has none left.
 */
export function allocate(
  pool: AddressPool,
  taken: ReadonlySet<string>,
): { addresses: string[] } | { full: string } {
  const out: string[] = [];
  const families = [...new Set(rangesOf(pool).map((r) => r.family))].sort();
  for (const fam of families) {
    const ranges = rangesOf(pool).filter((x) => x.family === fam);
    const after = highestTaken(ranges, fam, taken);
    const found = firstFree(ranges, fam, taken, after) ?? firstFree(ranges, fam, taken, undefined);
    if (found === undefined) {
      const size = poolSize(pool)[fam] ?? 0n;
      return { full: `all ${size} IPv${fam} addresses of the pool (${pool.ranges.join(", ")}) are taken` };
    }
    out.push(found);
  }
  return { addresses: out };
}

/** Where in the pool's order (range, address) the highest taken address of the pool is. */
function highestTaken(
  ranges: readonly PoolRange[],
  fam: IpFamily,
  taken: ReadonlySet<string>,
): { range: number; n: bigint } | undefined {
  let after: { range: number; n: bigint } | undefined;
  for (const t of taken) {
    const ip = parseIp(t);
    if (ip === undefined || ip.family !== fam) continue;
    const n = toBig(ip.bytes);
    const i = ranges.findIndex((r) => r.first <= n && n <= r.last);
    if (i < 0) continue;
    if (after === undefined || i > after.range || (i === after.range && n > after.n)) after = { range: i, n };
  }
  return after;
}

/** The first free address after `after` (from the start without it), as a CIDR; undefined when none. */
function firstFree(
  ranges: readonly PoolRange[],
  fam: IpFamily,
  taken: ReadonlySet<string>,
  after: { range: number; n: bigint } | undefined,
): string | undefined {
  for (let i = after?.range ?? 0; i < ranges.length; i++) {
    const r = ranges[i] as PoolRange;
    const start = after !== undefined && i === after.range ? after.n + 1n : r.first;
    for (let n = start; n <= r.last; n++) {
      const text = fromBig(n, fam);
      if (!taken.has(text)) return `${text}/${r.prefix}`;
    }
  }
  return undefined;
}

/**
 * Reads a NIC's `addressPool` input: `{ranges}`, 1 to {@link MAX_POOL_RANGES}
 * ranges, no two overlapping. Failures at `addressPool.ranges[j]` under
 * `at`; pending values are passed over (`unknown`).
 */
export function readAddressPool(
  v: unknown,
  at: Failures,
  pending: (v: unknown) => boolean,
): { pool?: AddressPool; unknown: boolean } {
  if (!given(v)) return { unknown: false };
  if (pending(v)) return { unknown: true };
  if (!isObject(v)) {
    at.fail("addressPool", 'must be { ranges: ["first-last/prefix", ...] }');
    return { unknown: false };
  }
  const p = at.at("addressPool");
  rejectUnknown(v, ["ranges"], p);
  const ranges = v.ranges;
  if (pending(ranges)) return { unknown: true };
  if (!Array.isArray(ranges) || ranges.length === 0 || ranges.length > MAX_POOL_RANGES) {
    p.fail("ranges", `must list 1 to ${MAX_POOL_RANGES} ranges, e.g. ["203.0.113.10-203.0.113.40/24"]`);
    return { unknown: false };
  }
  const parsed: PoolRange[] = [];
  let ok = true;
  let unknown = false;
  ranges.forEach((r, j) => {
    if (pending(r)) {
      unknown = true;
      return;
    }
    const range = parsePoolRange(r);
    if (typeof range === "string") {
      p.fail(`ranges[${j}]`, range);
      ok = false;
      return;
    }
    const overlap = parsed.findIndex(
      (q) => q.family === range.family && q.first <= range.last && range.first <= q.last,
    );
    if (overlap >= 0) {
      p.fail(`ranges[${j}]`, `overlaps ranges[${overlap}]`);
      ok = false;
    }
    parsed.push(range);
  });
  if (!ok || unknown) return { unknown };
  return { pool: { ranges: parsed.map(poolRangeText) }, unknown: false };
}

/**
 * A pool NIC's given addresses checked against its pool (a pool NIC's
 * addresses are taken from it at create: failures at `addresses[j]`), and
 * the addresses its gateway rules hold for: the given ones, else the first
 * of each family (a family's ranges share their subnets).
 */
export function poolGatewayBasis(pool: AddressPool, addresses: readonly string[], at: Failures): string[] {
  addresses.forEach((a, j) => {
    if (!inPool(pool, a)) at.fail(`addresses[${j}]`, `${a} is not an address of addressPool`);
  });
  return addresses.length > 0 ? [...addresses] : representativeAddresses(pool);
}
