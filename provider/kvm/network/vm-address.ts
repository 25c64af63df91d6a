/**
 * THE rule of an address a VM takes: each static address of a NIC, each
 * address a NIC's pool range can hand out (address-pool.ts), and
 * `proxy.outgoingAddress`. One function judges them all
 * ({@link vmAddressProblem}); a static address is a span of one. Pure.
 *
 * A VM's address is never
 * - in a special block (ip.ts `SPECIAL_BLOCKS`: unspecified, loopback,
 *   multicast, reserved, IPv4-mapped) or link-local (169.254.0.0/16,
 *   fe80::/10: the guest gives itself those, and no route leads to them);
 * - on a /0 (every address of the family would be on the NIC's link);
 * - its subnet's network address, or the broadcast address of an IPv4 one;
 * - an address the NIC's fields give another machine: its gateways (the
 *   router) and nameservers.
 *
 * A range is judged by every address it covers, not only by its endpoints:
 * create may give a VM any of them, and a gateway, a nameserver or a
 * special block can lie anywhere inside. The network and broadcast
 * addresses are the ends of the subnet a range lies in, so only an endpoint
 * can be one; they are judged as coverage all the same. What only the
 * endpoints are judged by is the grammar (canonical text, no IPv4-mapped
 * form), since only they are written (ip.ts, address-pool.ts).
 */
import {
  addressNumber,
  addressText,
  type IpFamily,
  ipProblem,
  parseCidr,
  parseIp,
  SPECIAL_BLOCKS,
} from "./ip";

/** Addresses a VM may be given: one, or a pool range's first to last, in the subnet of `prefix`. */
export interface AddressSpan {
  family: IpFamily;
  first: bigint;
  last: bigint;
  /** The interface prefix; absent for an address given without one (`proxy.outgoingAddress`). */
  prefix?: number;
}

/** An address a NIC's field gives another machine: `the gateway 203.0.113.1`, given at `gateway4`. */
export interface OthersAddress {
  family: IpFamily;
  n: bigint;
  /** What it is, with the address: "the gateway 203.0.113.1". */
  what: string;
  /** The field that gives it, relative to where the failure is reported (`gateway4`, `nics[1].nameservers[0]`). */
  field: string;
}

/** The span of an address (`203.0.113.7`) or interface CIDR (`203.0.113.7/24`); undefined when `text` is neither. */
export function addressSpan(text: string): AddressSpan | undefined {
  const c = text.includes("/") ? parseCidr(text) : undefined;
  const ip = c === undefined ? parseIp(text) : undefined;
  const bytes = c?.bytes ?? ip?.bytes;
  const fam = c?.family ?? ip?.family;
  if (bytes === undefined || fam === undefined) return undefined;
  const n = addressNumber(bytes);
  return { family: fam, first: n, last: n, ...(c !== undefined ? { prefix: c.prefix } : {}) };
}

/**
 * The addresses a NIC's `gateway4`, `gateway6` and `nameservers` give other
 * machines, those that are valid addresses (a refused one is its field's
 * failure alone); `where` prefixes the field names (`nics[1].`).
 */
export function othersOf(
  nic: { gateway4?: unknown; gateway6?: unknown; nameservers?: unknown },
  where = "",
): OthersAddress[] {
  const given: [unknown, string, string][] = [
    [nic.gateway4, "the gateway", "gateway4"],
    [nic.gateway6, "the gateway", "gateway6"],
    ...(Array.isArray(nic.nameservers) ? nic.nameservers : []).map((v, k): [unknown, string, string] => [
      v,
      "the nameserver",
      `nameservers[${k}]`,
    ]),
  ];
  return given.flatMap(([v, what, field]) => {
    const ip = ipProblem(v) === undefined ? parseIp(v) : undefined;
    if (ip === undefined) return [];
    return [
      { family: ip.family, n: addressNumber(ip.bytes), what: `${what} ${ip.text}`, field: where + field },
    ];
  });
}

/**
 * Addresses no VM takes, first to last: what a range's failure calls them
 * (`the gateway 203.0.113.1 (gateway4)`), and more briefly (`the gateway
 * 203.0.113.1`), and the failure of one address among them.
 */
interface Forbidden {
  lo: bigint;
  hi: bigint;
  what: string;
  short: string;
  single: string;
}

const LINK_LOCAL: readonly { family: IpFamily; block: string }[] = [
  { family: 4, block: "169.254.0.0/16" },
  { family: 6, block: "fe80::/10" },
];

const bits = (fam: IpFamily) => (fam === 4 ? 32 : 128);

/** First and last address of a block, and its text (`127.0.0.0/8`; `::1` for one address). */
function bounds(block: string): { fam: IpFamily; lo: bigint; hi: bigint; text: string } {
  const c = parseCidr(block) as NonNullable<ReturnType<typeof parseCidr>>;
  const lo = addressNumber(c.bytes);
  const hi = lo | ((1n << BigInt(bits(c.family) - c.prefix)) - 1n);
  const text = addressText(lo, c.family) + (c.prefix === bits(c.family) ? "" : `/${c.prefix}`);
  return { fam: c.family, lo, hi, text };
}

/** Everything of `span`'s family no VM address may be, in the order failures name them. */
function forbidden(span: AddressSpan, others: readonly OthersAddress[]): Forbidden[] {
  const fam = span.family;
  const text = (n: bigint) => addressText(n, fam);
  const out: Forbidden[] = [];
  const block = (b: ReturnType<typeof bounds>, name: string, single: string) =>
    out.push({ lo: b.lo, hi: b.hi, what: `${b.text} (${name})`, short: b.text, single });
  for (const s of SPECIAL_BLOCKS) {
    const b = bounds(s.block);
    if (b.fam === fam) block(b, s.name, s.why);
  }
  for (const l of LINK_LOCAL) {
    const b = bounds(l.block);
    if (b.fam !== fam) continue;
    block(
      b,
      "link-local",
      `is a link-local address (${b.text}): the guest gives itself those; give an address routed to its link`,
    );
  }
  const p = span.prefix;
  if (p !== undefined && p <= bits(fam) - 2) {
    const host = (1n << BigInt(bits(fam) - p)) - 1n;
    const net = span.first & ~host;
    out.push({
      lo: net,
      hi: net,
      what: `the network address ${text(net)} of its /${p}`,
      short: `the network address ${text(net)}`,
      single: `is the address of the subnet /${p} itself: give the VM's own address in it, e.g. ${text(net + 1n)}/${p}`,
    });
    if (fam === 4) {
      const broadcast = net | host;
      out.push({
        lo: broadcast,
        hi: broadcast,
        what: `the broadcast address ${text(broadcast)} of its /${p}`,
        short: `the broadcast address ${text(broadcast)}`,
        single: `is the broadcast address of its /${p}: give the VM's own address in it, e.g. ${text(broadcast - 1n)}/${p}`,
      });
    }
  }
  for (const o of others) {
    if (o.family !== fam) continue;
    const single = `is ${o.what} (${o.field}): give the VM an address of its own`;
    out.push({ lo: o.n, hi: o.n, what: `${o.what} (${o.field})`, short: o.what, single });
  }
  return out;
}

/** The parts of `span` clear of every address of `fs`, first to last. */
function clearParts(span: AddressSpan, fs: readonly Forbidden[]): [bigint, bigint][] {
  let parts: [bigint, bigint][] = [[span.first, span.last]];
  for (const f of fs) {
    parts = parts.flatMap(([a, b]): [bigint, bigint][] => {
      if (f.hi < a || b < f.lo) return [[a, b]];
      return [
        ...(a < f.lo ? [[a, f.lo - 1n] as [bigint, bigint]] : []),
        ...(f.hi < b ? [[f.hi + 1n, b] as [bigint, bigint]] : []),
      ];
    });
  }
  return parts;
}

/**
 * Why `span` may not be given `x`'s addresses (the first of `fs` it
 * covers), and how to keep clear of them: the example given is the part of
 * the range clear of all of `fs`.
 */
function refusal(span: AddressSpan, x: Forbidden, fs: readonly Forbidden[]): string {
  if (span.first === span.last) return x.single;
  const text = ([lo, hi]: [bigint, bigint]) =>
    `${addressText(lo, span.family)}${lo === hi ? "" : `-${addressText(hi, span.family)}`}/${span.prefix}`;
  const at = x.lo === x.hi ? "at" : "in";
  const [opener, advice] =
    x.lo <= span.first && span.last <= x.hi
      ? [`lies in ${x.what}`, undefined]
      : x.lo <= span.first
        ? [`starts ${at} ${x.what}`, `make it start after ${x.short}`]
        : span.last <= x.hi
          ? [`ends ${at} ${x.what}`, `make it end before ${x.short}`]
          : [`covers ${x.what}, which create could give a VM`, `split it around ${x.short}`];
  const parts = clearParts(span, fs);
  if (advice === undefined || parts.length === 0) return `${opener}: none of its addresses can be a VM's`;
  const shown = parts.slice(0, 3).map(text).join(" and ");
  return `${opener}: ${advice}, e.g. ${shown}${parts.length > 3 ? " and more" : ""}`;
}

/**
 * Why the addresses of `span` cannot be a VM's (see the module header), or
 * undefined; `others` are the addresses the NIC's fields give other
 * machines ({@link othersOf}). A range's failure names the offending
 * address and says how to keep clear of it.
 */
export function vmAddressProblem(
  span: AddressSpan,
  others: readonly OthersAddress[] = [],
): string | undefined {
  if (span.prefix === 0) {
    return `has the prefix /0, which puts every IPv${span.family} address on the NIC's link: give the prefix of the subnet it is on, e.g. /${span.family === 4 ? 24 : 64}`;
  }
  const fs = forbidden(span, others);
  const x = fs.find((f) => f.lo <= span.last && span.first <= f.hi);
  return x === undefined ? undefined : refusal(span, x, fs);
}
