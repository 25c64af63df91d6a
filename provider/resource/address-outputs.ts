/**
 * The address outputs of a proxy: `ipAddresses` (every NIC's addresses, v4
 * and v6, in the order of `nics`), and the primary NIC's first IPv4
 * (`ipAddress`) and first global IPv6 (`ipv6Address`) that `proxyUrl` is
 * built from. What the guest reports (agent, then leases) comes first; a NIC
 * with static addresses the guest has not reported shows its configured
 * ones, which are what it will have. Pure.
 */

import { bare } from "../kvm/network/ip";
import type { NicSpec } from "../kvm/network/nic";
import type { CheckedInputs } from "./args";

/** What the VM reports: the first NIC's IPv4, and every address per MAC when read. */
export interface ReportedAddresses {
  mac?: string | undefined;
  ipv4?: string | undefined;
  ipAddresses?: { mac: string; addresses: string[] }[] | undefined;
}

export interface AddressOutputs {
  ipAddress?: string;
  ipv6Address?: string;
  ipAddresses?: { mac: string; addresses: string[] }[];
}

function isIpv6(address: string): boolean {
  return address.includes(":");
}

/** Global (not link-local, not loopback) IPv6. */
function isGlobalIpv6(address: string): boolean {
  const a = bare(address).toLowerCase();
  return isIpv6(a) && !a.startsWith("fe80:") && a !== "::1";
}

function firstIpv4(addresses: readonly string[]): string | undefined {
  const a = addresses.find((x) => !isIpv6(x));
  return a === undefined ? undefined : bare(a);
}

function firstIpv6(addresses: readonly string[]): string | undefined {
  const a = addresses.find(isGlobalIpv6);
  return a === undefined ? undefined : bare(a);
}

/** The address outputs for the checked NICs (undefined: the one-NIC shorthand) and what the VM reports. */
export function addressOutputs(nics: readonly NicSpec[] | undefined, r: ReportedAddresses): AddressOutputs {
  const reportedOf = (mac: string | undefined) =>
    mac === undefined ? [] : (r.ipAddresses?.find((x) => x.mac === mac)?.addresses ?? []);
  const out: AddressOutputs = {};
  if (nics === undefined || nics.length === 0) {
    if (r.ipv4 !== undefined) out.ipAddress = r.ipv4;
    if (r.ipAddresses !== undefined) out.ipAddresses = r.ipAddresses;
    const v6 = firstIpv6(reportedOf(r.mac));
    if (v6 !== undefined) out.ipv6Address = v6;
    return out;
  }
  // NICs of `nics` always carry their MAC (check derives one when none is given).
  const ipAddresses = nics.map((n) => {
    const reported = reportedOf(n.mac);
    return { mac: n.mac as string, addresses: reported.length > 0 ? reported : [...n.addresses] };
  });
  out.ipAddresses = ipAddresses;
  const primaryIndex = Math.max(
    0,
    nics.findIndex((n) => n.primary),
  );
  const primary = ipAddresses[primaryIndex]?.addresses ?? [];
  const v4 = firstIpv4(primary) ?? (nics.length === 1 ? r.ipv4 : undefined);
  if (v4 !== undefined) out.ipAddress = v4;
  const v6 = firstIpv6(primary);
  if (v6 !== undefined) out.ipv6Address = v6;
  return out;
}

/** What waitForIp is told (kvm/host/operations.ts). */
export type WaitAddressOptions = {
  family: "ipv4" | "ipv6" | "any";
  staticAddresses?: { mac: string; addresses: string[] }[];
};

/** The address proxyUrl and the health check use: the primary NIC's IPv4, else its IPv6. */
export function proxyAddressOf(
  nics: readonly NicSpec[] | undefined,
  status: ReportedAddresses,
): string | undefined {
  const a = addressOutputs(nics, status);
  return a.ipAddress ?? a.ipv6Address;
}

/** What waitForIp waits for: the address family, and the static addresses that need no wait. */
export function waitOptionsOf(c: Pick<CheckedInputs, "waitForIp" | "nics">): WaitAddressOptions {
  const family = c.waitForIp === true || c.waitForIp === false ? "ipv4" : c.waitForIp;
  const staticAddresses = (c.nics ?? []).flatMap((n) =>
    n.addresses.length > 0 && n.mac !== undefined ? [{ mac: n.mac, addresses: n.addresses }] : [],
  );
  return { family, ...(staticAddresses.length > 0 ? { staticAddresses } : {}) };
}
