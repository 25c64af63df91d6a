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
 * (the subnet the NIC is on), and the whole range lies in that subnet. Every
 * address a range covers is one a VM may take, by the rule static addresses
 * follow (vm-address.ts): not the NIC's gateway or a nameserver, not the
 * subnet's network or broadcast address, not special. A
 * pool may hold IPv4 and IPv6 ranges: a NIC then takes one address of each
 * family. The free address taken is the next one after the highest taken
 * (in the order the ranges list them), wrapping to the start: a rotating
 * fleet moves through the whole pool before it reuses an address, so a
 * replacement egresses from an address no member used lately.
 */
import { given, isObject, rejectUnknown } from "../fields";
import type { Failures } from "../validation";
import {
  addressNumber,
  addressText,
  family,
  type IpFamily,
  inSubnet,
  isIpv4Mapped,
  parseCidr,
  parseIp,
} from "./ip";
import { type OthersAddress, vmAddressProblem } from "./vm-address";

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

const POOL_NAME = /^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$/;

/** Why `v` is not a host's address pool name (as host keys), or undefined. */
export function poolNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && POOL_NAME.test(v)) return undefined;
  return "1-63 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit";
}

/** Most ranges a pool may list. */
export const MAX_POOL_RANGES = 64;

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
  if (isIpv4Mapped(first.bytes) || isIpv4Mapped(last.bytes)) return mappedProblem(first, last.bytes);
  if (first.address !== firstText || last.text !== lastText)
    return `write it as ${first.address}${dash < 0 ? "" : `-${last.text}`}/${first.prefix} (canonical form)`;
  const fam = first.family;
  const lo = addressNumber(first.bytes);
  const hi = addressNumber(last.bytes);
  if (hi < lo) return `its last address ${last.text} is below its first ${first.address}`;
  if (subnet(lo, fam, first.prefix) !== subnet(hi, fam, first.prefix))
    return `${first.address} and ${last.text} are not in one /${first.prefix} subnet`;
  return { family: fam, first: lo, last: hi, prefix: first.prefix };
}

/** Why a range written as IPv4-mapped IPv6 is refused, with the IPv4 range to give instead when it is one. */
function mappedProblem(first: { bytes: readonly number[]; prefix: number }, last: readonly number[]): string {
  const v4 = (bytes: readonly number[]) => bytes.slice(12).join(".");
  const both = isIpv4Mapped(first.bytes) && isIpv4Mapped(last) && first.prefix >= 96;
  const span = v4(first.bytes) === v4(last) ? v4(last) : `${v4(first.bytes)}-${v4(last)}`;
  return both
    ? `is IPv4-mapped IPv6: give the IPv4 range ${span}/${first.prefix - 96} itself`
    : "is IPv4-mapped IPv6: give IPv4 addresses as IPv4 ranges";
}

/** The canonical text of a parsed range. */
export function poolRangeText(r: PoolRange): string {
  const first = addressText(r.first, r.family);
  return r.first === r.last
    ? `${first}/${r.prefix}`
    : `${first}-${addressText(r.last, r.family)}/${r.prefix}`;
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
    return [`${addressText(r.first, r.family)}/${r.prefix}`];
  });
}

/** Whether `cidr`'s address (plain or CIDR) is one of the pool's. */
export function inPool(pool: AddressPool, cidr: string): boolean {
  const c = parseCidr(cidr.includes("/") ? cidr : `${cidr}/${family(cidr) === 6 ? 128 : 32}`);
  if (c === undefined) return false;
  const n = addressNumber(c.bytes);
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
    const n = addressNumber(ip.bytes);
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
      const text = addressText(n, fam);
      if (!taken.has(text)) return `${text}/${r.prefix}`;
    }
  }
  return undefined;
}

/**
 * Reads a NIC's `addressPool` input: `{ranges}`, 1 to {@link MAX_POOL_RANGES}
 * ranges, no two overlapping, each handing out only addresses a VM may take
 * (vm-address.ts), none of them one of `others` (the NIC's gateways and
 * nameservers). Failures at `addressPool.ranges[j]` under `at`; pending
 * values are passed over (`unknown`).
 */
export function readAddressPool(
  v: unknown,
  at: Failures,
  pending: (v: unknown) => boolean,
  others: readonly OthersAddress[] = [],
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
    const problem = typeof range === "string" ? range : vmAddressProblem(range, others);
    if (typeof range === "string" || problem !== undefined) {
      p.fail(`ranges[${j}]`, problem as string);
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
 * of each family ({@link checkPoolGateways} holds the family's other ranges
 * to the gateway's subnet).
 */
export function poolGatewayBasis(pool: AddressPool, addresses: readonly string[], at: Failures): string[] {
  addresses.forEach((a, j) => {
    if (!inPool(pool, a)) at.fail(`addresses[${j}]`, `${a} is not an address of addressPool`);
  });
  return addresses.length > 0 ? [...addresses] : representativeAddresses(pool);
}

/**
 * Records failures at `addressPool.ranges[j]` for a range outside the subnet of its
 * family's gateway (`gateways`, as accepted): a VM takes one address of each
 * family, so every range must share the router's subnet. A link-local
 * gateway6 is on every link.
 */
export function checkPoolGateways(
  pool: AddressPool,
  gateways: Partial<Record<IpFamily, string>>,
  at: Failures,
): void {
  rangesOf(pool).forEach((r, j) => {
    const gw = gateways[r.family];
    if (gw === undefined || inSubnet(gw, "fe80::/10")) return;
    const cidr = `${addressText(r.first, r.family)}/${r.prefix}`;
    if (!inSubnet(gw, cidr)) {
      at.fail(
        `addressPool.ranges[${j}]`,
        `lies outside the subnet of the gateway ${gw} (gateway${r.family}): a VM given one of its addresses could not reach its router; give ranges of the gateway's subnet`,
      );
    }
  });
}
