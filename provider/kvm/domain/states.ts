/**
 * Provider states: what a VM looks like to the Pulumi resource, derived from
 * libvirt's domain state and whether the guest has reported an address yet.
 */
import { DomainState, IpAddrType } from "../../libvirt/constants";
import type { DomainInterface, DomainIpAddress } from "../../libvirt/types";
import { inSubnet, parseIp, unicastProblem } from "../network/ip";

/**
 * - `provisioning`: running (or starting), no address yet;
 * - `running`: running with an address (a routable IPv4 or a global IPv6);
 * - `stopped`: defined but not running (shut off, paused, suspended, shutting down);
 * - `failed`: crashed, or shut off because QEMU crashed or failed;
 * - `absent`: no such domain.
 */
export type ProxyState = "provisioning" | "running" | "stopped" | "failed" | "absent";

/** virDomainShutoffReason values that mean the VM died rather than was stopped. */
export const ShutoffReason = {
  UNKNOWN: 0,
  SHUTDOWN: 1,
  DESTROYED: 2,
  CRASHED: 3,
  MIGRATED: 4,
  SAVED: 5,
  FAILED: 6,
  FROM_SNAPSHOT: 7,
  DAEMON: 8,
} as const;

/** libvirt's state names for log lines and messages. */
export function domainStateName(state: number): string {
  const names = ["nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed", "pmsuspended"];
  return names[state] ?? `state-${state}`;
}

/**
 * Maps libvirt's state (undefined when the domain does not exist) plus the
 * guest's address (its first routable IPv4, else its first global IPv6: an
 * IPv6-only proxy runs too) onto a provider state.
 */
export function mapDomainState(
  libvirt: { state: number; reason: number } | undefined,
  address: string | undefined,
): ProxyState {
  if (libvirt === undefined) return "absent";
  switch (libvirt.state) {
    case DomainState.RUNNING:
    case DomainState.BLOCKED:
      return address === undefined ? "provisioning" : "running";
    // NOSTATE is a transient moment while libvirt starts the domain.
    case DomainState.NOSTATE:
      return "provisioning";
    case DomainState.CRASHED:
      return "failed";
    case DomainState.SHUTOFF:
      return libvirt.reason === ShutoffReason.CRASHED || libvirt.reason === ShutoffReason.FAILED
        ? "failed"
        : "stopped";
    case DomainState.PAUSED:
    case DomainState.SHUTDOWN:
    case DomainState.PMSUSPENDED:
      return "stopped";
    default:
      return "failed";
  }
}

/** True for a libvirt state in which the guest is executing (so it may have addresses). */
export function isActiveState(state: number): boolean {
  return state === DomainState.RUNNING || state === DomainState.BLOCKED;
}

/**
 * True when `addr` is an IPv4 address a client could use: not loopback
 * (127/8), link-local (169.254/16), unspecified (0/8), multicast or broadcast.
 */
export function isRoutableIpv4(addr: string): boolean {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(addr);
  if (!m) return false;
  const o = m.slice(1).map(Number);
  if (o.some((x) => x > 255)) return false;
  const [a, b] = o as [number, number, number, number];
  if (a === 0 || a === 127 || a >= 224) return false;
  if (a === 169 && b === 254) return false;
  return true;
}

/** The first address of `ifaces` that `wanted` takes, preferring the interface with `mac`. */
function firstAddress(
  ifaces: readonly DomainInterface[],
  mac: string | undefined,
  wanted: (a: DomainIpAddress) => boolean,
): string | undefined {
  const rank = (i: DomainInterface) => (i.hwaddr?.toLowerCase() === mac ? 0 : 1);
  const ordered = mac === undefined ? ifaces : [...ifaces].sort((a, b) => rank(a) - rank(b));
  for (const i of ordered) {
    for (const a of i.addrs) if (wanted(a)) return a.addr;
  }
  return undefined;
}

/** First routable IPv4 of `ifaces` (as libvirt reports interface addresses), preferring the interface with `mac`. */
export function firstRoutableIpv4(ifaces: readonly DomainInterface[], mac?: string): string | undefined {
  return firstAddress(ifaces, mac, (a) => a.type === IpAddrType.IPV4 && isRoutableIpv4(a.addr));
}

/**
 * True when `addr` is an IPv6 address a client could use: not loopback
 * (::1), unspecified (::), link-local (fe80::/10), multicast (ff00::/8) or
 * IPv4-mapped (ip.ts `unicastProblem`). Unique local addresses (fc00::/7)
 * count: they route within a site.
 */
export function isGlobalIpv6(addr: string): boolean {
  return parseIp(addr)?.family === 6 && unicastProblem(addr) === undefined && !inSubnet(addr, "fe80::/10");
}

/** True for an address a guest reports that a client could reach: {@link isRoutableIpv4} or {@link isGlobalIpv6}. */
export function isUsableAddress(a: DomainIpAddress): boolean {
  return a.type === IpAddrType.IPV4 ? isRoutableIpv4(a.addr) : isGlobalIpv6(a.addr);
}

/** First global IPv6 of `ifaces`, preferring the interface with `mac` (as {@link firstRoutableIpv4}). */
export function firstGlobalIpv6(ifaces: readonly DomainInterface[], mac?: string): string | undefined {
  return firstAddress(ifaces, mac, (a) => a.type === IpAddrType.IPV6 && isGlobalIpv6(a.addr));
}

/** The addresses of one NIC, keyed by its MAC (lower case). */
export interface NicAddresses {
  mac: string;
  /** `addr/prefix` (CIDR), or the bare address when the source gives no prefix (0). */
  addresses: string[];
}

/**
 * Every usable address (see {@link isUsableAddress}) of `ifaces` grouped by
 * MAC, IPv4 and IPv6 in the order reported: interfaces without a MAC (or the
 * all-zero one of loopback) are left out, and two reported with one MAC (a
 * VLAN on a NIC) are merged. With `macs` (the domain's NICs), only those, in
 * that order: what else a guest runs (a container bridge) is not a NIC of
 * the VM. A NIC without usable addresses is left out.
 */
export function addressesByMac(ifaces: readonly DomainInterface[], macs?: readonly string[]): NicAddresses[] {
  const byMac = new Map<string, string[]>();
  for (const i of ifaces) {
    const mac = i.hwaddr?.toLowerCase();
    if (mac === undefined || mac === "00:00:00:00:00:00") continue;
    const list = byMac.get(mac) ?? [];
    for (const a of i.addrs) {
      if (!isUsableAddress(a)) continue;
      const text = a.prefix > 0 ? `${a.addr}/${a.prefix}` : a.addr;
      if (!list.includes(text)) list.push(text);
    }
    byMac.set(mac, list);
  }
  const order = macs === undefined ? [...byMac.keys()] : macs.map((m) => m.toLowerCase());
  return order.flatMap((mac) => {
    const addresses = byMac.get(mac) ?? [];
    return addresses.length > 0 ? [{ mac, addresses }] : [];
  });
}
