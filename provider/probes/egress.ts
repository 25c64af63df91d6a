/**
 * Egress identity (`egressCheck`): the address a target saw a proxy's
 * requests come from, read from the reply of an IP echo the user trusts,
 * and the warnings it gives. Pure.
 *
 * - An echo answers in plain text (`203.0.113.7`) or JSON with the address
 *   under `ip`, `origin` (httpbin), `address` or `query` (ip-api). A list
 *   (`a, b`: an X-Forwarded-For chain the echo adds) ends with the address
 *   that connected to it, which is the one taken. An IPv4-mapped IPv6
 *   address (what a dual-stack echo reports for IPv4) is read as IPv4.
 * - What egress is expected: `proxy.outgoingAddress` for its family (squid
 *   binds outgoing connections of that family to it), else the VM's static
 *   addresses of that family; without either (DHCP, NAT) nothing is
 *   expected and nothing is warned about.
 * - In a fleet, members that share an egress address look like one proxy
 *   to every target: each such address is named with its members.
 */
import { canonicalIp, family, isIpv4Mapped, parseIp } from "../kvm/network/ip";

/**
 * The most bytes of an echo's reply read; a larger reply fails the check.
 * An address is a few dozen bytes, the longest JSON echoes (with location
 * and ASN) under a kilobyte: 4 KiB leaves room, and no more.
 */
export const ECHO_BODY_LIMIT = 4096;

/** The JSON fields an echo may put the address in, in the order they are looked for. */
const ADDRESS_FIELDS = ["ip", "origin", "address", "query"] as const;

/** The egress address in an echo's reply body, or why none could be read. */
export function readEchoReply(body: string): { address: string } | { problem: string } {
  const text = body.trim();
  let candidate: unknown = text;
  if (text.startsWith("{")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return { problem: `its reply is neither an address nor JSON: ${excerpt(text)}` };
    }
    const record = (typeof parsed === "object" && parsed !== null ? parsed : {}) as Record<string, unknown>;
    const field = ADDRESS_FIELDS.find((k) => typeof record[k] === "string");
    if (field === undefined) {
      return {
        problem: `its JSON reply has none of the fields ${ADDRESS_FIELDS.join(", ")}: ${excerpt(text)}`,
      };
    }
    candidate = record[field];
  }
  const last = String(candidate).split(",").pop()?.trim() ?? "";
  const address = unmapped(last);
  if (address === undefined) return { problem: `its reply is not an IP address: ${excerpt(text)}` };
  return { address };
}

/** The canonical text of `text` as an address, IPv4-mapped IPv6 as IPv4; undefined when it is none. */
function unmapped(text: string): string | undefined {
  const ip = parseIp(text);
  if (ip === undefined) return undefined;
  if (ip.family === 6 && isIpv4Mapped(ip.bytes)) return ip.bytes.slice(12).join(".");
  return ip.text;
}

/** A reply's first characters for a message, on one line. */
function excerpt(text: string): string {
  const line = text.replace(/\s+/g, " ");
  return JSON.stringify(line.length > 80 ? `${line.slice(0, 80)}...` : line);
}

/** What decides the egress a proxy should have: its outgoing address, and the VM's static addresses. */
export interface EgressExpectation {
  outgoingAddress?: string;
  /** Every static address of every NIC (CIDR or plain). */
  staticAddresses: readonly string[];
}

/** The expectation of a proxy's inputs (checked, or the state's outputs). */
export function egressExpectationOf(c: {
  proxy?: { outgoingAddress?: string | undefined } | undefined;
  nics?: readonly { addresses?: readonly string[] | undefined }[] | undefined;
}): EgressExpectation {
  const outgoing = c.proxy?.outgoingAddress;
  return {
    ...(outgoing !== undefined ? { outgoingAddress: outgoing } : {}),
    staticAddresses: (c.nics ?? []).flatMap((n) => n.addresses ?? []),
  };
}

/**
 * The warning for an egress address other than the one expected (see the
 * module header), or undefined when it is the one, or nothing is expected.
 */
export function egressMismatch(egress: string, expected: EgressExpectation, url: string): string | undefined {
  const fam = family(egress);
  if (fam === undefined) return undefined;
  const saw = `${url} saw the proxy's requests come from ${egress}`;
  const outgoing = expected.outgoingAddress;
  if (outgoing !== undefined && family(outgoing) === fam) {
    return canonicalIp(outgoing) === egress
      ? undefined
      : `${saw}, not from its outgoingAddress ${outgoing}: NAT or routing between the VM and the target rewrites it`;
  }
  const own = expected.staticAddresses
    .map((a) => a.split("/")[0] as string)
    .filter((a) => family(a) === fam)
    .map((a) => canonicalIp(a) ?? a);
  if (own.length === 0 || own.includes(egress)) return undefined;
  return (
    `${saw}, none of the VM's static IPv${fam} addresses (${own.join(", ")}): ` +
    "NAT, policy routing or a gateway elsewhere sends its traffic out another way"
  );
}

/**
 * One warning per egress address that several members share, naming them
 * (members without a known egress are left out).
 */
export function sharedEgress(
  members: readonly { name: string; egressAddress?: string | undefined }[],
): string[] {
  const by = new Map<string, string[]>();
  for (const m of members) {
    if (m.egressAddress === undefined) continue;
    by.set(m.egressAddress, [...(by.get(m.egressAddress) ?? []), m.name]);
  }
  return [...by]
    .filter(([, names]) => names.length > 1)
    .map(
      ([address, names]) =>
        `${names.join(", ")} egress through one address, ${address}: every target sees them as one proxy`,
    );
}
