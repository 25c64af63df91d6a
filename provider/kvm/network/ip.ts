/**
 * The one address grammar of the provider: IPv4 and IPv6 addresses, interface
 * CIDRs and address ranges as text. Every address field of the inputs
 * (allowlists, destinations, NIC addresses, gateways, nameservers, the
 * outgoing address) is read here; what a VM's own address may be is
 * vm-address.ts's rule. Pure.
 *
 * - Parsing is lenient (`::` compression, upper case, dotted IPv4 tails such
 *   as `::ffff:192.0.2.1`), for what guests and libvirt report.
 * - Inputs are accepted in their canonical text only (RFC 5952 for IPv6:
 *   lower case, no leading zeros, the longest run of two or more zero groups
 *   compressed; dotted decimal without leading zeros for IPv4), without zone
 *   indexes and without IPv4 in IPv6 clothing (IPv4-mapped `::ffff:a.b.c.d`,
 *   dotted tails): squid keeps IPv4 as IPv4-mapped IPv6 internally and reads
 *   a zone (`%1`) as `::/0`, so a text it could read otherwise than preview
 *   shows is refused, with the canonical form to write instead.
 * - An interface CIDR (`203.0.113.7/24`) keeps its host bits; a range
 *   (`203.0.113.0/24`, or a single address) has none.
 * - A host before a port (`[2001:db8::1]:3128`) is written by
 *   transport/host-port.ts, which the transports share; re-exported here for
 *   the layers above the core.
 */

export { hostPort, urlHost } from "../../transport/host-port";

export type IpFamily = 4 | 6;

/** A parsed address: its family, its bytes (4 or 16) and its canonical text. */
export interface IpAddress {
  family: IpFamily;
  bytes: readonly number[];
  /** RFC 5952 text (IPv4: dotted decimal). */
  text: string;
}

/** A parsed CIDR: the address as given (host bits kept) and the prefix length. */
export interface Cidr {
  family: IpFamily;
  /** Canonical text of the address, without the prefix. */
  address: string;
  prefix: number;
  bytes: readonly number[];
}

const IPV4_OCTET = /^(?:0|[1-9][0-9]{0,2})$/;
const HEX_GROUP = /^[0-9A-Fa-f]{1,4}$/;

function parseIpv4(text: string): number[] | string {
  const parts = text.split(".");
  if (parts.length !== 4) return "an IPv4 address has four dot-separated numbers, e.g. 203.0.113.7";
  const bytes: number[] = [];
  for (const p of parts) {
    if (!IPV4_OCTET.test(p)) {
      return /^0[0-9]+$/.test(p)
        ? `IPv4 number ${JSON.stringify(p)} has a leading zero (read as octal by some tools)`
        : `IPv4 number ${JSON.stringify(p)} is not a decimal number`;
    }
    const n = Number(p);
    if (n > 255) return `IPv4 number ${p} is over 255`;
    bytes.push(n);
  }
  return bytes;
}

function groupsOf(part: string): string[] {
  return part === "" ? [] : part.split(":");
}

function parseIpv6(text: string): number[] | string {
  if (text.includes("%")) return "zone indexes (%...) are not accepted";
  const halves = text.split("::");
  if (halves.length > 2) return '"::" may appear only once';
  const head = groupsOf(halves[0] as string);
  const tail = halves.length === 2 ? groupsOf(halves[1] as string) : [];
  // A dotted IPv4 tail stands for the last two groups.
  const last = halves.length === 2 ? tail : head;
  let v4: number[] | undefined;
  if (last.length > 0 && (last[last.length - 1] as string).includes(".")) {
    const parsed = parseIpv4(last[last.length - 1] as string);
    if (typeof parsed === "string") return parsed;
    v4 = parsed;
    last.pop();
  }
  for (const g of [...head, ...tail]) {
    if (!HEX_GROUP.test(g)) return `IPv6 group ${JSON.stringify(g)} is not 1-4 hex digits`;
  }
  const words = (gs: string[]) => gs.map((g) => Number.parseInt(g, 16));
  const v4Words =
    v4 === undefined
      ? []
      : [(v4[0] as number) * 256 + (v4[1] as number), (v4[2] as number) * 256 + (v4[3] as number)];
  if (halves.length === 2) {
    const given = head.length + tail.length + v4Words.length;
    if (given > 7) return '"::" must stand for at least one zero group';
    const all = [...words(head), ...new Array<number>(8 - given).fill(0), ...words(tail), ...v4Words];
    return all.flatMap((w) => [w >> 8, w & 0xff]);
  }
  const all = [...words(head), ...v4Words];
  if (all.length !== 8) return 'an IPv6 address has eight groups, or fewer with one "::"';
  return all.flatMap((w) => [w >> 8, w & 0xff]);
}

function parse(text: string): IpAddress | string {
  if (text.includes(":")) {
    const bytes = parseIpv6(text);
    return typeof bytes === "string" ? bytes : { family: 6, bytes, text: formatIpv6(bytes) };
  }
  const bytes = parseIpv4(text);
  return typeof bytes === "string" ? bytes : { family: 4, bytes, text: bytes.join(".") };
}

/** Whether 16 bytes are an IPv4-mapped IPv6 address (`::ffff:0:0/96`). */
export function isIpv4Mapped(bytes: readonly number[]): boolean {
  return (
    bytes.length === 16 &&
    bytes.slice(0, 10).every((b) => b === 0) &&
    bytes[10] === 0xff &&
    bytes[11] === 0xff
  );
}

function formatIpv6(bytes: readonly number[]): string {
  if (isIpv4Mapped(bytes)) return `::ffff:${bytes.slice(12).join(".")}`;
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push((bytes[i] as number) * 256 + (bytes[i + 1] as number));
  // The longest run of two or more zero words, the first of equal runs (RFC 5952 4.2).
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (ws: number[]) => ws.map((w) => w.toString(16)).join(":");
  if (best < 0) return hex(words);
  return `${hex(words.slice(0, best))}::${hex(words.slice(best + bestLen))}`;
}

function stringProblem(v: unknown, what: string): string | undefined {
  if (typeof v !== "string") return `must be a string: ${what}`;
  if (v.trim() !== v || v === "") return `must be ${what}, without spaces`;
  return undefined;
}

/** Parses a plain address (no prefix); undefined when it is not one. */
export function parseIp(v: unknown): IpAddress | undefined {
  if (stringProblem(v, "") !== undefined) return undefined;
  const parsed = parse(v as string);
  return typeof parsed === "string" ? undefined : parsed;
}

/** Why `v` is not a plain IPv4 or IPv6 address, or undefined. */
export function ipProblem(v: unknown): string | undefined {
  const what = "an IPv4 or IPv6 address, e.g. 203.0.113.1 or 2001:db8::1";
  const bad = stringProblem(v, what);
  if (bad !== undefined) return bad;
  const text = v as string;
  if (text.includes("/")) return `must be ${what}, without a prefix length`;
  const parsed = parse(text);
  if (typeof parsed === "string") return `must be ${what}: ${parsed}`;
  return canonicalProblem(text, parsed);
}

/**
 * Why the address `text`, parsed as `a`, is not written as inputs must be:
 * IPv4 inside IPv6 (mapped, or a dotted tail), or a text other than the
 * canonical one. Undefined when it is canonical.
 */
function canonicalProblem(text: string, a: IpAddress, prefix = ""): string | undefined {
  if (a.family === 6 && isIpv4Mapped(a.bytes)) {
    return `${JSON.stringify(text)} is an IPv4-mapped IPv6 address: give the IPv4 address ${a.bytes.slice(12).join(".")} itself`;
  }
  if (a.family === 6 && text.includes(".")) {
    return `${JSON.stringify(text + prefix)} has a dotted IPv4 tail: write it as ${a.text}${prefix}`;
  }
  if (text !== a.text) {
    return `${JSON.stringify(text + prefix)} is not in canonical form: write it as ${a.text}${prefix}`;
  }
  return undefined;
}

function splitCidr(text: string): Cidr | string {
  const slash = text.indexOf("/");
  if (slash < 0) return "needs a prefix length";
  const prefixText = text.slice(slash + 1);
  const address = parse(text.slice(0, slash));
  if (typeof address === "string") return address;
  const max = address.family === 4 ? 32 : 128;
  if (!/^(?:0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > max) {
    return `the prefix length must be a number from 0 to ${max}`;
  }
  return { family: address.family, address: address.text, prefix: Number(prefixText), bytes: address.bytes };
}

/** Parses `address/prefix` (host bits kept); undefined when it is not a CIDR. */
export function parseCidr(v: unknown): Cidr | undefined {
  if (stringProblem(v, "") !== undefined) return undefined;
  const parsed = splitCidr(v as string);
  return typeof parsed === "string" ? undefined : parsed;
}

/** Why `v` is not an address with a prefix length (`203.0.113.7/24`, `2001:db8::7/64`), or undefined. */
export function cidrProblem(v: unknown): string | undefined {
  const what = "an address with its prefix length, e.g. 203.0.113.7/24 or 2001:db8::7/64";
  const bad = stringProblem(v, what);
  if (bad !== undefined) return bad;
  const parsed = splitCidr(v as string);
  if (typeof parsed === "string") return `must be ${what}: ${parsed}`;
  return canonicalProblem(bare(v as string), ipOf(parsed), `/${parsed.prefix}`);
}

function ipOf(c: Cidr): IpAddress {
  return { family: c.family, bytes: c.bytes, text: c.address };
}

/** The IPv4-mapped block, which squid reads as IPv4 (it keeps IPv4 clients and targets in that form). */
const IPV4_MAPPED_BLOCK = "::ffff:0.0.0.0/96";

/**
 * Parses an address range: `network/prefix` without host bits, or a single
 * address (the full-length prefix); undefined when it is not one
 * ({@link rangeProblem} says why).
 */
export function parseRange(v: unknown): Cidr | undefined {
  return rangeProblem(v) === undefined ? either(v as string) : undefined;
}

/**
 * Why `v` is not an address range as inputs must write it (`10.0.0.0/8`,
 * `2001:db8:100::/48`, `203.0.113.7`), or undefined: canonical text, no host
 * bits (squid masks them away with a warning: the range would be another
 * than the one written), and no IPv6 range reaching into the IPv4-mapped
 * block but `::/0` (squid reads such a range as IPv4 addresses too).
 */
export function rangeProblem(v: unknown): string | undefined {
  const what = "an address range, e.g. 203.0.113.0/24, 2001:db8:100::/48 or a single address";
  const bad = stringProblem(v, what);
  if (bad !== undefined) return bad;
  const text = v as string;
  const r = text.includes("/") ? splitCidr(text) : whole(parse(text));
  if (typeof r === "string") return `must be ${what}: ${r}`;
  const canonical = canonicalProblem(bare(text), ipOf(r), text.includes("/") ? `/${r.prefix}` : "");
  if (canonical !== undefined) return canonical;
  const network = networkOf(r);
  if (network.address !== r.address) {
    return `${JSON.stringify(text)} has host bits set: the range is ${network.address}/${r.prefix}`;
  }
  if (r.family === 6 && r.prefix > 0 && subnetsOverlap(`${r.address}/${r.prefix}`, IPV4_MAPPED_BLOCK)) {
    return `${JSON.stringify(text)} reaches into the IPv4-mapped block ::ffff:0.0.0.0/96, which squid reads as IPv4 addresses: give IPv4 ranges as IPv4`;
  }
  return undefined;
}

/** The range of `c` with its host bits cleared. */
function networkOf(c: Cidr): Cidr {
  const bytes = c.bytes.map((b, i) => {
    const bits = Math.min(8, Math.max(0, c.prefix - i * 8));
    return b & ((0xff << (8 - bits)) & 0xff);
  });
  const text = c.family === 4 ? bytes.join(".") : formatIpv6(bytes);
  return { family: c.family, address: text, prefix: c.prefix, bytes };
}

/** The range (`network/prefix`) an interface CIDR lies in: `192.0.2.10/24` → `192.0.2.0/24`. */
export function subnetOf(cidr: string): string | undefined {
  const c = parseCidr(cidr);
  if (c === undefined) return undefined;
  const n = networkOf(c);
  return `${n.address}/${n.prefix}`;
}

/** `address/prefix` of a range, a single address with its full-length prefix. */
export function rangeText(c: Cidr): string {
  return `${c.address}/${c.prefix}`;
}

/** Whether range (or address) `inner` lies wholly inside range `outer`. */
export function rangeContains(outer: string, inner: string): boolean {
  const o = either(outer);
  const i = either(inner);
  return o !== undefined && i !== undefined && cidrContains(o, i);
}

/** {@link rangeContains} of parsed ranges. */
export function cidrContains(o: Cidr, i: Cidr): boolean {
  return o.family === i.family && i.prefix >= o.prefix && samePrefix(o.bytes, i.bytes, o.prefix);
}

/** An address or CIDR, parsed leniently (undefined when it is neither). */
export function parseEither(text: string): Cidr | undefined {
  return either(text);
}

/** Whether two ranges (or addresses) share any address. */
export function rangesOverlap(a: string, b: string): boolean {
  const x = either(a);
  const y = either(b);
  if (x === undefined || y === undefined || x.family !== y.family) return false;
  return samePrefix(x.bytes, y.bytes, Math.min(x.prefix, y.prefix));
}

/** How many addresses a range holds (2^(bits - prefix)). */
export function rangeSize(c: Pick<Cidr, "family" | "prefix">): bigint {
  return 1n << BigInt((c.family === 4 ? 32 : 128) - c.prefix);
}

/** A plain address as a CIDR of its full length (a parse failure passes through). */
function whole(ip: IpAddress | string): Cidr | string {
  return typeof ip === "string"
    ? ip
    : { family: ip.family, address: ip.text, prefix: ip.family === 4 ? 32 : 128, bytes: ip.bytes };
}

/** An address or CIDR, parsed; the prefix is the full length for a plain address. */
function either(text: string): Cidr | undefined {
  if (text.includes("/")) return parseCidr(text);
  const ip = parseIp(text);
  return ip === undefined ? undefined : (whole(ip) as Cidr);
}

/** The canonical text of a plain address (RFC 5952 for IPv6), or undefined. */
export function canonicalIp(text: string): string | undefined {
  return parseIp(text)?.text;
}

/** The address part of a CIDR (or the address itself), as written. */
export function bare(cidr: string): string {
  const slash = cidr.indexOf("/");
  return slash < 0 ? cidr : cidr.slice(0, slash);
}

/** The family of an address or CIDR, or undefined when `text` is neither. */
export function family(text: string): IpFamily | undefined {
  return either(text)?.family;
}

function samePrefix(a: readonly number[], b: readonly number[], bits: number): boolean {
  const whole = Math.floor(bits / 8);
  for (let i = 0; i < whole; i++) if (a[i] !== b[i]) return false;
  const rest = bits % 8;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return ((a[whole] as number) & mask) === ((b[whole] as number) & mask);
}

/**
 * Whether the address `ip` (plain or CIDR; its own prefix is ignored) lies in
 * the subnet of `cidr` (its address with the host bits cleared). Addresses of
 * different families never do (an IPv4-mapped address is IPv6).
 */
export function inSubnet(ip: string, cidr: string): boolean {
  const a = either(ip);
  const net = parseCidr(cidr);
  if (a === undefined || net === undefined || a.family !== net.family) return false;
  return samePrefix(a.bytes, net.bytes, net.prefix);
}

/** Whether two addresses (plain or CIDR; prefixes ignored) are the same address. */
export function sameAddress(a: string, b: string): boolean {
  const x = either(a);
  const y = either(b);
  return x !== undefined && y !== undefined && x.family === y.family && x.address === y.address;
}

/** Whether the subnets of two CIDRs share any address (one contains the other). */
export function subnetsOverlap(a: string, b: string): boolean {
  const x = parseCidr(a);
  const y = parseCidr(b);
  if (x === undefined || y === undefined || x.family !== y.family) return false;
  return samePrefix(x.bytes, y.bytes, Math.min(x.prefix, y.prefix));
}

/**
 * Blocks no address of a VM, gateway or (loopback aside) nameserver lies in:
 * the block, its short name in a failure, and why an address in it is refused.
 */
export const SPECIAL_BLOCKS: readonly { family: IpFamily; block: string; name: string; why: string }[] = [
  { family: 4, block: "0.0.0.0/8", name: "this network", why: "is in 0.0.0.0/8 (this network)" },
  { family: 4, block: "127.0.0.0/8", name: "loopback", why: "is a loopback address" },
  { family: 4, block: "224.0.0.0/4", name: "multicast", why: "is a multicast address" },
  {
    family: 4,
    block: "240.0.0.0/4",
    name: "reserved",
    why: "is in the reserved 240.0.0.0/4 (or the broadcast address)",
  },
  { family: 6, block: "::/128", name: "unspecified", why: "is the unspecified address" },
  { family: 6, block: "::1/128", name: "loopback", why: "is the loopback address" },
  { family: 6, block: "ff00::/8", name: "multicast", why: "is a multicast address" },
  {
    family: 6,
    block: "::ffff:0:0/96",
    name: "IPv4-mapped",
    why: "is an IPv4-mapped IPv6 address: give the IPv4 address itself",
  },
];

/**
 * Why an address (plain or CIDR) cannot be a VM's own address or its
 * gateway: unspecified, loopback, multicast, reserved, IPv4-mapped. Assumes
 * `text` parses (undefined otherwise).
 */
export function unicastProblem(text: string): string | undefined {
  const a = either(text);
  if (a === undefined) return undefined;
  for (const { family: fam, block, why } of SPECIAL_BLOCKS) {
    if (fam === a.family && inSubnet(a.address, block)) return why;
  }
  return undefined;
}

/** An address's bytes as one number (big-endian): what ranges are compared and counted in. */
export function addressNumber(bytes: readonly number[]): bigint {
  return bytes.reduce((n, b) => (n << 8n) | BigInt(b), 0n);
}

/** The canonical text of the address numbered `n` in family `fam`. */
export function addressText(n: bigint, fam: IpFamily): string {
  const bytes: number[] = [];
  let v = n;
  for (let i = 0; i < (fam === 4 ? 4 : 16); i++) {
    bytes.unshift(Number(v & 0xffn));
    v >>= 8n;
  }
  return fam === 4 ? bytes.join(".") : formatIpv6(bytes);
}
