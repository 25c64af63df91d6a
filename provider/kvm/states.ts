/**
 * Provider states: what a VM looks like to the Pulumi resource, derived from
 * libvirt's domain state and whether the guest has reported an address yet.
 */
import { DomainState, IpAddrType } from "../libvirt/constants";
import type { DomainInterface } from "../libvirt/types";

/**
 * - `provisioning`: running (or starting), no routable IPv4 yet;
 * - `running`: running with a routable IPv4;
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
 * first routable IPv4 onto a provider state.
 */
export function mapDomainState(
  libvirt: { state: number; reason: number } | undefined,
  ipv4: string | undefined,
): ProxyState {
  if (libvirt === undefined) return "absent";
  switch (libvirt.state) {
    case DomainState.RUNNING:
    case DomainState.BLOCKED:
      return ipv4 === undefined ? "provisioning" : "running";
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

/** First routable IPv4 of `ifaces` (as libvirt reports interface addresses), preferring the interface with `mac`. */
export function firstRoutableIpv4(ifaces: readonly DomainInterface[], mac?: string): string | undefined {
  const ordered = mac === undefined ? ifaces : [...ifaces].sort((a, b) => rank(a) - rank(b));
  function rank(i: DomainInterface): number {
    return i.hwaddr?.toLowerCase() === mac ? 0 : 1;
  }
  for (const i of ordered) {
    for (const a of i.addrs) {
      if (a.type === IpAddrType.IPV4 && isRoutableIpv4(a.addr)) return a.addr;
    }
  }
  return undefined;
}
