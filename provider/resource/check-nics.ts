/**
 * `check` for a proxy's networking: `nics` (several NICs, static addresses,
 * macvtap, rate limits, nwfilters; the rules are kvm/network/nic.ts's), the raw
 * `networkConfig`, and `waitForIp`. Each NIC without a MAC gets a stable one
 * derived from the owner, the domain name and its position, so the seed's
 * network-config can match it on first boot and a replacement (a new
 * autoname) gets new ones. A static address another proxy of this program
 * claims on the same host fails here, naming both.
 */

import type { HostConfig } from "../kvm/config/host-config";
import { given } from "../kvm/fields";
import { inPool, poolRangeText, rangesOf } from "../kvm/network/address-pool";
import { bare, family, parseCidr, sameAddress } from "../kvm/network/ip";
import { attachmentOf, canonicalNic, deriveMac, type NicSpec } from "../kvm/network/nic";
import { readNics } from "../kvm/network/nic-rules";
import { type AddressSpan, addressSpan, othersOf, vmAddressProblem } from "../kvm/network/vm-address";
import type { Failures } from "../kvm/validation";
import { quote } from "../kvm/validation";
import { UNKNOWN, type WaitForIp } from "./args";

/** Records that `owner` gives `address` to a VM on `host`; returns the owner that claimed it first, if another. */
export type AddressClaim = (host: string, address: string, owner: string) => string | undefined;

/** The words `waitForIp` takes besides true and false. */
export const WAIT_MODES = ["ipv4", "ipv6", "any"] as const;

/** `waitForIp`: true, false, "ipv4", "ipv6" or "any" (default true). */
export function checkWaitForIp(f: Failures, v: unknown): WaitForIp {
  if (v === undefined || v === null) return true;
  if (v === UNKNOWN) return UNKNOWN as unknown as WaitForIp;
  if (typeof v === "boolean") return v;
  if (typeof v === "string" && (WAIT_MODES as readonly string[]).includes(v)) return v as WaitForIp;
  f.fail("waitForIp", 'must be true, false, "ipv4", "ipv6" or "any"');
  return true;
}

/**
 * The libvirt network of the proxy's primary NIC when its address is likely
 * reachable from its host only: a libvirt network (NAT, as libvirt's
 * `default` is) of a host reached over SSH, the address from DHCP.
 * Undefined otherwise (a bridge or macvtap NIC, static addresses, or a local
 * host, which is this machine).
 */
export function hostOnlyNetwork(nics: readonly NicSpec[], host: HostConfig): string | undefined {
  if (host.endpoint.kind !== "ssh") return undefined;
  const primary = nics.find((n) => n.primary) ?? nics[0];
  if (primary === undefined || primary.addresses.length > 0) return undefined;
  const own = attachmentOf(primary);
  const a = own.kind === "host" ? host.nic : own;
  return a.kind === "network" ? a.network : undefined;
}

/** What preview warns of when {@link hostOnlyNetwork} finds the proxy's address likely reachable from its host only. */
export function unreachableAddressWarning(nics: readonly NicSpec[], host: HostConfig): string | undefined {
  const network = hostOnlyNetwork(nics, host);
  if (network === undefined) return undefined;
  return (
    `the proxy's address will be on libvirt network ${quote(network)} of host ${quote(host.key)}: ` +
    "if that network is NAT (libvirt's default is), only that host reaches it, so proxyUrl is of use there " +
    "only (the health check goes through the host); attach the primary NIC to a bridge or macvtap NIC with " +
    "a reachable address, or forward a port on the host (docs/guides/networking.md)"
  );
}

/** What the networking inputs check to. UNKNOWN stands for a value not known at preview. */
export interface CheckedNetworking {
  nics?: NicSpec[] | typeof UNKNOWN;
  networkConfig?: string | typeof UNKNOWN;
}

export interface NicsContext {
  /** The domain name (an autoname included), for derived MACs. */
  name: string | undefined;
  /** The owner URN, for derived MACs and address claims (the name stands in when absent). */
  owner: string | undefined;
  /** Where the VM goes: a host key, or the keys of its pool. */
  hosts: string[];
  claim?: AddressClaim;
}

/**
 * Why a fixed MAC cannot be `owner`'s: another proxy of the program has it
 * on a host this one may land on (a fleet whose template fixes a MAC gives
 * every member the same one). Claims it otherwise.
 */
export function macClaimProblem(
  ctx: Pick<NicsContext, "claim" | "hosts">,
  mac: string,
  owner: string,
): string | undefined {
  for (const host of ctx.hosts) {
    const other = ctx.claim?.(host, `mac ${mac}`, owner);
    if (other === undefined) continue;
    return `MAC ${mac} is also given to ${quote(other.split("::").pop() ?? other)} on host ${host}: two VMs on one network cannot share it`;
  }
  return undefined;
}

/** `nics` and `networkConfig`; failures at `nics[i].<field>`, `network`, `bridge`, `macAddress`, `networkConfig`. */
export function checkNetworking(
  f: Failures,
  news: Record<string, unknown>,
  ctx: NicsContext,
): CheckedNetworking {
  const out: CheckedNetworking = {};
  const raw = news.networkConfig;
  if (given(raw)) {
    if (raw === UNKNOWN) out.networkConfig = UNKNOWN;
    else if (typeof raw !== "string") f.fail("networkConfig", "must be a string: a NoCloud network-config");
    else out.networkConfig = raw;
  }
  if (!given(news.nics)) return out;
  for (const k of ["network", "bridge", "macAddress"]) {
    if (given(news[k])) f.fail(k, "is the one-NIC shorthand: give it inside nics instead, not both");
  }
  if (news.nics === UNKNOWN) {
    out.nics = UNKNOWN;
    return out;
  }
  const specs = readNics(news.nics, f, { isPending: (x) => x === UNKNOWN });
  if (specs === "invalid") return out;
  if (specs === undefined || JSON.stringify(news.nics).includes(UNKNOWN) || ctx.name === undefined) {
    out.nics = UNKNOWN;
    return out;
  }
  if (out.networkConfig !== undefined) {
    specs.forEach((nic, i) => {
      for (const field of ["addresses", "gateway4", "gateway6", "nameservers"] as const) {
        const v = nic[field];
        if (v !== undefined && (!Array.isArray(v) || v.length > 0)) {
          f.fail(
            `nics[${i}].${field}`,
            "is set in your networkConfig: give either networkConfig or typed addresses",
          );
        }
      }
    });
  }
  specs.forEach((nic, i) => {
    if ((nic.addressPool !== undefined || nic.hostPool !== undefined) && nic.addresses.length > 0)
      f.fail(
        `nics[${i}].addresses`,
        "give addresses or addressPool, not both: a pool NIC's address is taken at create",
      );
  });
  const seed = ctx.owner ?? ctx.name;
  const nics = specs.map((nic, i) =>
    canonicalNic({ ...nic, mac: nic.mac ?? deriveMac(`${seed}/${ctx.name}/${i}`) }),
  );
  const macs = new Map<string, number>();
  nics.forEach((n, i) => {
    const mac = n.mac as string;
    const first = macs.get(mac);
    if (first !== undefined) f.fail(`nics[${i}].macAddress`, `${mac} is also nics[${first}]'s`);
    else macs.set(mac, i);
  });
  if (ctx.claim !== undefined) {
    const owner = ctx.owner ?? ctx.name;
    nics.forEach((n, i) => {
      if (n.macAddress !== undefined) {
        const problem = macClaimProblem(ctx, n.macAddress, owner);
        if (problem !== undefined) f.fail(`nics[${i}].macAddress`, problem);
      }
      n.addresses.forEach((cidr, j) => {
        const address = parseCidr(cidr)?.address;
        if (address === undefined) return;
        for (const host of ctx.hosts) {
          const other = ctx.claim?.(host, address, owner);
          if (other === undefined) continue;
          const who = quote(other.split("::").pop() ?? other);
          f.fail(
            `nics[${i}].addresses[${j}]`,
            `${family(address) === 6 ? "IPv6" : "IPv4"} address ${address} is also given to ${who} on host ${host}`,
          );
          return;
        }
      });
    });
  }
  out.nics = nics;
  return out;
}

/**
 * Why `outgoing` (proxy.outgoingAddress) cannot be an address of the VM, or
 * undefined: never one a NIC gives another machine (a gateway, a
 * nameserver; vm-address.ts); and, when every NIC's addresses of its family
 * are known, one of them: a static address, or one a pool NIC's range
 * holds (which one the VM takes is chosen at create). A NIC with neither
 * gets that family dynamically (DHCPv4, router advertisements), and a raw
 * networkConfig is not read: then any address may be the VM's.
 */
export function outgoingAddressProblem(outgoing: string, networking: CheckedNetworking): string | undefined {
  const { nics } = networking;
  const fam = family(outgoing);
  if (nics === undefined || nics === UNKNOWN || networking.networkConfig !== undefined || fam === undefined)
    return undefined;
  const others = nics.flatMap((n, i) => othersOf(n, `nics[${i}].`));
  const taken = vmAddressProblem(addressSpan(outgoing) as AddressSpan, others);
  if (taken !== undefined) return `must be an address of the VM: ${taken}`;
  const own = nics.map((n) => ({
    statics: n.addresses.filter((a) => family(a) === fam),
    ranges: n.addressPool === undefined ? [] : rangesOf(n.addressPool).filter((r) => r.family === fam),
  }));
  if (own.some((o) => o.statics.length === 0 && o.ranges.length === 0)) return undefined;
  if (own.some((o) => o.statics.some((a) => sameAddress(a, outgoing)))) return undefined;
  if (nics.some((n) => n.addressPool !== undefined && inPool(n.addressPool, outgoing))) return undefined;
  const statics = own.flatMap((o) => o.statics.map(bare));
  const ranges = own.flatMap((o) => o.ranges.map(poolRangeText));
  const which = ranges.length === 0 ? "all static" : "static or from an address pool";
  return `must be one of the VM's IPv${fam} addresses, which are ${which} here (${[...statics, ...ranges].join(", ")})`;
}
