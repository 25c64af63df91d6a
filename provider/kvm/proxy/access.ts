/**
 * Who may use a proxy and where it may go: the address sets behind the
 * proxy's access rules, the rules on `allowedClients` and
 * `allowedDestinations`, and squid's ordered access list built from them.
 * Pure.
 *
 * Clients: without `auth`, only addresses the internet at large cannot send
 * from ({@link NON_PUBLIC_CLIENT_RANGES}) may be admitted; a public range
 * needs `auth`, or the explicit `publicClientsWithoutAuth` for narrow ranges
 * (IP-restricted crawler egress), never the world.
 *
 * Destinations: outward only. Before any allow, squid denies the VM itself
 * (loopback, its own addresses), link-local (the metadata services),
 * multicast and reserved space; then, unless `allowedDestinations` opens
 * them, the private, CGNAT and ULA ranges and the VM's on-link subnets and
 * gateways (static ones from the NICs, the rest read on the guest at first
 * boot into {@link ONLINK_ACL_FILE}).
 *
 * Facts (squid 5.7 on Debian 12, read with `squid -k parse` and requests):
 * `0.0.0.0/0` and `::/0` are each read as `all` (both families); host bits
 * are masked away with a warning; an empty ACL file is a warning and matches
 * nothing; a `dst` ACL matches when any address the target's name resolves
 * to does; a directive line is cut at 8191 bytes, so long lists are spread
 * over several lines of one ACL name (squid accumulates them).
 */
import {
  type Cidr,
  cidrContains,
  type IpFamily,
  parseEither,
  parseRange,
  rangeContains,
  rangeProblem,
  rangeSize,
  rangesOverlap,
  rangeText,
} from "../network/ip";

/** A named set of ranges: what a failure or a comment calls it. */
interface RangeSet {
  readonly ranges: readonly string[];
  readonly what: string;
}

/** Sources the internet at large cannot send from: admitted without `auth`. */
export const NON_PUBLIC_CLIENT_RANGES: readonly RangeSet[] = [
  { ranges: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"], what: "private (RFC 1918)" },
  { ranges: ["100.64.0.0/10"], what: "shared address space (CGNAT, RFC 6598)" },
  { ranges: ["169.254.0.0/16", "fe80::/10"], what: "link-local" },
  { ranges: ["fc00::/7"], what: "unique local (ULA, RFC 4193)" },
];

/** Client ranges admitted when the proxy names none: the private, CGNAT and link-local ranges and ULA. */
export const DEFAULT_ALLOWED_CLIENTS: readonly string[] = [
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "100.64.0.0/10",
  "fc00::/7",
  "fe80::/10",
];

/** Where no client sends from, refused in `allowedClients` (the world-wide `/0` aside). */
const NO_CLIENT_RANGES: readonly RangeSet[] = [
  { ranges: ["127.0.0.0/8", "::1/128"], what: "loopback (the VM's own processes are always admitted)" },
  { ranges: ["0.0.0.0/8", "::/128"], what: '"this network" or unspecified' },
  { ranges: ["224.0.0.0/4", "ff00::/8"], what: "multicast" },
  { ranges: ["240.0.0.0/4"], what: "reserved (240.0.0.0/4)" },
];

/** Destinations no input can open: the VM itself, link-local (metadata services), multicast, reserved. */
export const NEVER_DESTINATIONS: readonly RangeSet[] = [
  { ranges: ["127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"], what: "the VM itself (loopback)" },
  {
    ranges: ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"],
    what: "link-local and cloud metadata services",
  },
  { ranges: ["224.0.0.0/4", "ff00::/8"], what: "multicast" },
  { ranges: ["240.0.0.0/4"], what: "reserved (240.0.0.0/4, broadcast)" },
];

/** Destinations denied unless `allowedDestinations` opens them: everything not reachable from the internet. */
export const INWARD_DESTINATIONS: readonly RangeSet[] = [
  { ranges: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"], what: "private (RFC 1918)" },
  { ranges: ["100.64.0.0/10"], what: "shared address space (CGNAT)" },
  { ranges: ["fc00::/7"], what: "unique local (ULA)" },
];

/** The file of the VM's own addresses, written on the guest at first boot. */
export const OWN_ACL_FILE = "/etc/squid/kvm-proxy-own.acl";
/** The file of the VM's on-link subnets and gateways, written on the guest at first boot. */
export const ONLINK_ACL_FILE = "/etc/squid/kvm-proxy-onlink.acl";

/** Widest public range `publicClientsWithoutAuth` admits, per family. */
export const WIDEST_PUBLIC_PREFIX: Readonly<Record<IpFamily, number>> = { 4: 16, 6: 32 };
/** Most public IPv4 addresses `publicClientsWithoutAuth` admits in all (a /8). */
export const MOST_PUBLIC_IPV4 = 1n << 24n;

/** Values per ACL line: far below squid's 8191-byte line limit (an IPv6 range is at most 43 bytes). */
export const ACL_VALUES_PER_LINE = 64;

/** Pulumi's failure collector, as far as these rules use it. */
interface Fail {
  fail(property: string | undefined, reason: string): void;
}

function setOf(sets: readonly RangeSet[], r: string, how: "contains" | "overlaps"): RangeSet | undefined {
  return sets.find((s) =>
    s.ranges.some((x) => (how === "contains" ? rangeContains(x, r) : rangesOverlap(x, r))),
  );
}

/** Whether a checked range lies wholly inside the ranges admitted without auth. */
export function isNonPublicClientRange(r: string): boolean {
  return setOf(NON_PUBLIC_CLIENT_RANGES, r, "contains") !== undefined;
}

const WORLD: Readonly<Record<IpFamily, string>> = { 4: "0.0.0.0/0", 6: "::/0" };

/** The options the client rules depend on. */
export interface ClientRuleOptions {
  /** Basic authentication is set. */
  auth: boolean;
  /** The explicit opt-out: narrow public ranges admitted without auth. */
  publicClientsWithoutAuth: boolean;
}

/**
 * Checks `allowedClients` (each entry already known): the grammar, no range
 * no client sends from, `0.0.0.0/0` and `::/0` together or not at all, and
 * without auth no public range unless opted out (then narrow ones only).
 * Failures at `field[i]`. Returns the public entries admitted without auth
 * (for the warning the opt-out gives at every preview).
 */
export function checkAllowedClients(
  f: Fail,
  field: string,
  entries: readonly unknown[],
  o: ClientRuleOptions,
): string[] {
  const parsed: (Cidr | undefined)[] = entries.map((e, i) => {
    const problem = rangeProblem(e);
    if (problem !== undefined) f.fail(`${field}[${i}]`, problem);
    return problem === undefined ? parseRange(e) : undefined;
  });
  const texts = parsed.map((c) => (c === undefined ? undefined : rangeText(c)));
  const publicOnes: string[] = [];
  let publicIpv4 = 0n;
  parsed.forEach((c, i) => {
    if (c === undefined) return;
    const at = `${field}[${i}]`;
    const r = texts[i] as string;
    if (c.prefix === 0) {
      const other = WORLD[c.family === 4 ? 6 : 4];
      if (!texts.includes(other)) {
        f.fail(
          at,
          `squid reads ${r} as "all", which admits IPv${c.family === 4 ? 6 : 4} clients too: list ${other} beside it, or give narrower ranges`,
        );
      }
    } else {
      const none = setOf(NO_CLIENT_RANGES, r, "contains");
      if (none !== undefined) {
        f.fail(at, `${r} is ${none.what}: no client of the proxy sends from there`);
        return;
      }
    }
    if (o.auth || isNonPublicClientRange(r)) return;
    if (!o.publicClientsWithoutAuth) {
      f.fail(
        at,
        `${r} admits public addresses, and the proxy has no auth: an open proxy on the internet is found and abused within hours. ` +
          "Without proxy.auth only private, CGNAT, link-local and ULA clients are admitted: set proxy.auth, " +
          `or, for IP-restricted clients, proxy.publicClientsWithoutAuth: true with ranges of at most a /${WIDEST_PUBLIC_PREFIX[4]} (IPv4) or /${WIDEST_PUBLIC_PREFIX[6]} (IPv6)`,
      );
      return;
    }
    if (c.prefix < WIDEST_PUBLIC_PREFIX[c.family]) {
      f.fail(
        at,
        `${r} is too wide to admit without auth: publicClientsWithoutAuth admits public ranges of at most a /${WIDEST_PUBLIC_PREFIX[c.family]} (IPv${c.family}); set proxy.auth`,
      );
      return;
    }
    if (c.family === 4) publicIpv4 += rangeSize(c);
    publicOnes.push(r);
  });
  if (publicIpv4 > MOST_PUBLIC_IPV4) {
    f.fail(
      field,
      `admits ${publicIpv4} public IPv4 addresses without auth, more than a /8 (${MOST_PUBLIC_IPV4}): set proxy.auth`,
    );
  }
  return publicOnes;
}

/**
 * Checks `allowedDestinations` (each entry known): the grammar, and no range
 * touching what no input can open (the VM itself, link-local, metadata,
 * multicast, reserved). Failures at `field[i]`.
 */
export function checkAllowedDestinations(f: Fail, field: string, entries: readonly unknown[]): void {
  entries.forEach((e, i) => {
    const at = `${field}[${i}]`;
    const problem = rangeProblem(e);
    if (problem !== undefined) {
      f.fail(at, problem);
      return;
    }
    const r = rangeText(parseRange(e) as Cidr);
    const never = setOf(NEVER_DESTINATIONS, r, "overlaps");
    if (never !== undefined) f.fail(at, `${r} reaches into ${never.what}, which the proxy never opens`);
  });
}

// ---------------------------------------------------------------------------
// squid's access list
// ---------------------------------------------------------------------------

/** Who may use the proxy and where it may go: the one rule set squid and Dante both enforce. */
export interface AccessRules {
  /** Client ranges admitted (checked); everyone else is refused. */
  allowedClients: readonly string[];
  /** Inward ranges opened (checked). */
  allowedDestinations: readonly string[];
  /** The VM's static addresses (plain), never reachable through it. */
  ownAddresses: readonly string[];
  /** The VM's static on-link subnets and gateways (ranges or plain addresses). */
  onLink: readonly string[];
}

/** What squid's access list is built from. */
export interface AccessInputs extends AccessRules {
  /** Basic authentication is on (the auth_param lines come before the list). */
  auth: boolean;
}

/** squid's `acl` lines and its ordered `http_access` rules (first match wins). */
export interface SquidAccess {
  acls: string[];
  rules: string[];
}

/** `acl <name> <type> <values>` over as many lines as the values need. */
function aclLines(name: string, type: string, values: readonly string[]): string[] {
  const lines: string[] = [];
  for (let i = 0; i < values.length; i += ACL_VALUES_PER_LINE) {
    lines.push(`acl ${name} ${type} ${values.slice(i, i + ACL_VALUES_PER_LINE).join(" ")}`);
  }
  return lines;
}

const flat = (sets: readonly RangeSet[]) => sets.flatMap((s) => s.ranges);

/**
 * `values` without repeats and without a range another one holds: squid
 * warns of, and drops, an entry inside another of the same ACL.
 */
export function minimalRanges(values: readonly string[]): string[] {
  const unique = [...new Set(values)];
  const parsed = unique.map(parseEither);
  return unique.filter((v, i) => {
    const inner = parsed[i];
    return (
      inner === undefined ||
      !parsed.some(
        (outer, j) => j !== i && outer !== undefined && unique[j] !== v && cidrContains(outer, inner),
      )
    );
  });
}

/** The clients as squid must read them: `all` for the world (both families are then listed). */
function clientValues(allowed: readonly string[]): string[] {
  const unique = [...new Set(allowed)];
  return unique.includes(WORLD[4]) || unique.includes(WORLD[6]) ? ["all"] : minimalRanges(unique);
}

/**
 * squid's access list for `a`: clients first (outsiders get 403 before any
 * challenge and before any name is resolved), then what no one may do, then
 * the destinations (never the VM itself, link-local, metadata, multicast;
 * not the inward ranges unless opened), then the VM's own processes
 * (admitted: the in-guest health probe), then authentication, then allow.
 */
export function squidAccess(a: AccessInputs): SquidAccess {
  const acls = [
    ...aclLines("kvmp_clients", "src", clientValues(a.allowedClients)),
    "acl kvmp_self src 127.0.0.1/32 ::1/128",
    "acl SSL_ports port 443",
    "acl Safe_ports port 80 21 443 70 210 280 488 591 777 1025-65535",
    ...aclLines("kvmp_never", "dst", flat(NEVER_DESTINATIONS)),
    `acl kvmp_own dst "${OWN_ACL_FILE}"`,
    ...aclLines("kvmp_own", "dst", minimalRanges(a.ownAddresses)),
    ...aclLines("kvmp_inward", "dst", flat(INWARD_DESTINATIONS)),
    `acl kvmp_inward dst "${ONLINK_ACL_FILE}"`,
    ...aclLines(
      "kvmp_inward",
      "dst",
      minimalRanges([...flat(INWARD_DESTINATIONS), ...a.onLink]).filter(
        (r) => !flat(INWARD_DESTINATIONS).includes(r),
      ),
    ),
    ...aclLines("kvmp_opened", "dst", minimalRanges(a.allowedDestinations)),
  ];
  const rules = [
    "http_access deny !kvmp_clients !kvmp_self",
    "http_access deny manager",
    "http_access deny !Safe_ports",
    "http_access deny CONNECT !SSL_ports",
    "http_access deny to_localhost",
    "http_access deny kvmp_never",
    "http_access deny kvmp_own",
    a.allowedDestinations.length > 0
      ? "http_access deny kvmp_inward !kvmp_opened"
      : "http_access deny kvmp_inward",
    "http_access allow kvmp_self",
  ];
  if (a.auth) rules.push("http_access deny !kvmp_users", "http_access allow kvmp_users");
  else rules.push("http_access allow kvmp_clients");
  rules.push("http_access deny all");
  return { acls, rules };
}
