/**
 * Address pools declared on a host (kvm:hosts `addressPools`): a hosting
 * company gives each hypervisor its own subnet, gateway and often bridge, so
 * the pool is declared where that fact lives and a NIC names it
 * (`addressPool: "<name>"`). Once the host a VM goes to is known (check for
 * one host, create after placement for a pool of hosts, diff and update by
 * the VM's host) the NIC is resolved into an inline pool NIC: the pool's
 * ranges, gateways, nameservers and attachment; everything after (the
 * allocation, the state, the diff, the network-config) is an inline pool's.
 * Pure.
 */
import { given, isObject, rejectUnknown } from "../fields";
import { Failures, quote } from "../validation";
import { poolCapacity, poolNameProblem } from "./address-pool";
import { attachmentFields, attachmentOf, canonicalNic, type NicAttachment, type NicSpec } from "./nic";
import { type CheckedNic, checkedNics, readPoolNic } from "./nic-rules";

/** One pool of a host's addresses, read by a NIC's rules (nic.ts readHostPoolNic). */
export type HostAddressPool = Pick<
  NicSpec,
  "network" | "bridge" | "direct" | "addressPool" | "gateway4" | "gateway6" | "nameservers"
>;

/** What resolving a NIC needs of a host: its key (for messages), its NIC and its pools. */
export interface PoolHost {
  key: string;
  nic: NicAttachment;
  addressPools: Readonly<Record<string, HostAddressPool>>;
}

/**
 * Reads a host's `addressPools`: an object keyed by pool name, each entry a
 * {@link HostAddressPool}. Failures under `at` (`addressPools.<name>.ranges[j]`).
 */
export function readHostAddressPools(v: unknown, at: Failures): Record<string, HostAddressPool> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v)) {
    at.fail("addressPools", "must be an object keyed by pool name, e.g. { public: { ranges: [...] } }");
    return {};
  }
  const out: [string, HostAddressPool][] = [];
  for (const [name, raw] of Object.entries(v as Record<string, unknown>)) {
    const p = at.at(`addressPools.${name}`);
    const nameProblem = poolNameProblem(name);
    if (nameProblem !== undefined) p.fail(undefined, `key ${quote(name)} must be ${nameProblem}`);
    const nic = readHostPoolNic(raw, p);
    if (nic === undefined || nameProblem !== undefined) continue;
    const { network, bridge, direct, addressPool, gateway4, gateway6, nameservers } = nic;
    out.push([name, { network, bridge, direct, addressPool, gateway4, gateway6, nameservers }]);
  }
  return Object.fromEntries(out.map(([k, pool]) => [k, stripUndefined(pool)]));
}

/** The fields of a host's address pool. */
export const HOST_POOL_FIELDS: readonly string[] = [
  "ranges",
  "gateway4",
  "gateway6",
  "nameservers",
  "network",
  "bridge",
  "direct",
];

/**
 * Reads one address pool of a host by the rules of a NIC with that pool:
 * `{ ranges, gateway4, gateway6, nameservers, network | bridge | direct }`,
 * the attachment optional (the NIC's, else the host's NIC). Failures at
 * `ranges[j]`, `gateway4`, ... under `at`.
 */
export function readHostPoolNic(raw: unknown, at: Failures): NicSpec | undefined {
  if (!isObject(raw)) {
    at.fail(
      undefined,
      'must be { ranges: ["first-last/prefix", ...], gateway4, gateway6, nameservers, bridge }',
    );
    return undefined;
  }
  rejectUnknown(raw, HOST_POOL_FIELDS, at);
  const { ranges, ...rest } = raw;
  const fields = Object.fromEntries(Object.entries(rest).filter(([k]) => HOST_POOL_FIELDS.includes(k)));
  if (!given(ranges)) at.fail("ranges", 'is required, e.g. ["203.0.113.2-203.0.113.14/28"]');
  // The pool's failures are named by its own fields: `ranges[j]`, not `addressPool.ranges[j]`.
  const own = new Failures();
  const read = readPoolNic({ ...fields, addressPool: given(ranges) ? { ranges } : undefined }, own);
  for (const x of own.list) {
    at.fail(x.property === "addressPool" ? "ranges" : x.property.replace(/^addressPool\./, ""), x.reason);
  }
  return own.list.length === 0 && given(ranges) ? read : undefined;
}

function stripUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined)) as T;
}

/** Whether a NIC names a host's pool it has not taken yet. */
export function namesHostPool(nic: Pick<NicSpec, "hostPool" | "addressPool">): boolean {
  return nic.hostPool !== undefined && nic.addressPool === undefined;
}

/** Why `host` cannot serve the NICs' named pools (it has no pool of that name), as failures at `nics[i].addressPool`. */
export function missingHostPools(nics: readonly NicSpec[], host: PoolHost, f: Failures): void {
  nics.forEach((nic, i) => {
    if (!namesHostPool(nic)) return;
    const name = nic.hostPool as string;
    if (Object.hasOwn(host.addressPools, name)) return;
    const pools = Object.keys(host.addressPools);
    f.fail(
      `nics[${i}].addressPool`,
      `host ${quote(host.key)} has no address pool ${quote(name)} (kvm:hosts ${host.key}.addressPools: ${
        pools.length > 0 ? pools.join(", ") : "none"
      }): every host the proxy may be placed on needs it`,
    );
  });
}

/**
 * `nics` with each NIC naming a pool of `host` resolved into an inline pool
 * NIC: the pool's ranges, gateways, nameservers and attachment (else the
 * NIC's own, else the host's NIC), the name kept in `hostPool`. A field both
 * the NIC and the pool give is refused at `nics[i].<field>`; the merged NIC
 * is held to a NIC's rules (a gateway of the NIC outside the pool's
 * subnet). Failures under `f`; undefined when any. NICs already resolved
 * (the state's) and the other NICs are as they are.
 */
export function resolveHostPools(
  nics: readonly NicSpec[],
  host: PoolHost,
  f: Failures = new Failures(),
): CheckedNic[] | undefined {
  const before = f.list.length;
  missingHostPools(nics, host, f);
  if (f.list.length > before) return undefined;
  const out = nics.map((nic, i) => {
    if (!namesHostPool(nic)) return nic;
    const name = nic.hostPool as string;
    const pool = host.addressPools[name] as HostAddressPool;
    const refuse = (field: string, what: string) =>
      f.fail(
        `nics[${i}].${field}`,
        `address pool ${quote(name)} of host ${quote(host.key)} gives the ${what} already: give it there or here, not both`,
      );
    const mine = nicAttachment(nic);
    const theirs = poolAttachment(pool);
    if (mine !== undefined && theirs !== undefined) refuse(mine.kind, `attachment (${describe(theirs)})`);
    for (const field of ["gateway4", "gateway6"] as const)
      if (nic[field] !== undefined && pool[field] !== undefined) refuse(field, `${field} (${pool[field]})`);
    if (nic.nameservers.length > 0 && (pool.nameservers ?? []).length > 0)
      refuse("nameservers", "nameservers");
    const attachment = poolAttachment(pool) ?? nicAttachment(nic) ?? host.nic;
    const { network: _n, bridge: _b, direct: _d, ...rest } = nic;
    return canonicalNic({
      ...rest,
      ...attachmentFields(attachment),
      addressPool: pool.addressPool,
      gateway4: nic.gateway4 ?? pool.gateway4,
      gateway6: nic.gateway6 ?? pool.gateway6,
      nameservers: nic.nameservers.length > 0 ? nic.nameservers : (pool.nameservers ?? []),
    });
  });
  if (f.list.length > before) return undefined;
  // The merged NICs by a NIC's own rules: a gateway of the NIC's outside the pool's subnet, say.
  const merged = new Failures();
  const checked = checkedNics(out, merged);
  for (const x of merged.list) f.fail(x.property, `with host ${quote(host.key)}'s address pool: ${x.reason}`);
  return f.list.length > before ? undefined : checked;
}

function poolAttachment(pool: HostAddressPool): NicAttachment | undefined {
  const a = attachmentOf(pool);
  return a.kind === "host" ? undefined : a;
}

function describe(a: NicAttachment): string {
  return a.kind === "direct"
    ? `direct ${a.dev}`
    : a.kind === "bridge"
      ? `bridge ${a.bridge}`
      : `network ${a.network}`;
}

function nicAttachment(nic: NicSpec): NicAttachment | undefined {
  const a = attachmentOf(nic);
  return a.kind === "host" ? undefined : a;
}

/**
 * How many NICs the named pool serves over `hosts`: the sum of each host's
 * pool capacity (a fleet's members spread over the hosts placement picks
 * from; a host lacking the pool counts nothing).
 */
export function hostPoolCapacity(name: string, hosts: readonly PoolHost[]): bigint {
  let total = 0n;
  for (const h of hosts) {
    const pool = Object.hasOwn(h.addressPools, name) ? h.addressPools[name] : undefined;
    if (pool?.addressPool !== undefined) total += poolCapacity(pool.addressPool);
  }
  return total;
}
