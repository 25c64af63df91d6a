/**
 * The rules of `nics`, applied: reading a resource's `nics` input into
 * {@link NicSpec}s (every failure named by its field), and the checked NIC
 * ({@link CheckedNic}) the domain XML, the seed's network-config and the
 * host's checks take and trust: NICs from the state or made in code are
 * checked once, at the door, by the same rules. Pure.
 */
import { given, isObject, rejectUnknown } from "../fields";
import { Failures, quote } from "../validation";
import { checkPoolGateways, poolGatewayBasis, poolNameProblem, readAddressPool } from "./address-pool";
import { cidrProblem, family, inSubnet, ipProblem, parseCidr, parseIp, unicastProblem } from "./ip";
import { macAddressProblem, normaliseMac } from "./mac";
import {
  attachmentFields,
  attachmentOf,
  bandwidthKbpsProblem,
  bridgeNameProblem,
  canonicalNic,
  DEFAULT_NETWORK,
  type DirectMode,
  directModeProblem,
  filterNameProblem,
  HOST_DEFAULT,
  type HostDefaultAttachment,
  MAX_NICS,
  NIC_RECORD_KEYS,
  type NicAttachment,
  type NicBandwidth,
  type NicFieldsOptions,
  type NicSpec,
  networkNameProblem,
} from "./nic";
import { type AddressSpan, addressSpan, othersOf, vmAddressProblem } from "./vm-address";

declare const checkedBrand: unique symbol;

/**
 * A NIC held to every rule of `nics` (those of one NIC, and no MAC twice):
 * what the domain XML, the seed's network-config and the host's checks
 * take, and trust as it is. Only this module makes one: by checking NICs
 * from the inputs, the state or code ({@link checkedNics}, {@link decodeNics}),
 * when attaching them as the host says ({@link resolveHostNics}), or by
 * construction from checked ones ({@link filledFromPool}).
 */
export type CheckedNic = NicSpec & { readonly [checkedBrand]: true };

/**
 * `nics` with each NIC that names no attachment given the host's own,
 * `hostNic`, held to the rules again (a filter on a host's macvtap NIC is
 * refused). Throws a ValidationError naming the NIC.
 */
export function resolveHostNics(nics: readonly CheckedNic[], hostNic: NicAttachment): CheckedNic[] {
  return decodeNics(
    nics.map((n) =>
      attachmentOf(n).kind === "host" ? canonicalNic({ ...n, ...attachmentFields(hostNic) }) : n,
    ),
    "invalid NICs once attached as the host says",
  );
}

/** The fields of a `nics` item: a NIC's record less the MAC it gets (check derives or takes it) and the pool's name (`addressPool` gives it). */
const NIC_KEYS = NIC_RECORD_KEYS.filter((k) => k !== "mac" && k !== "hostPool");
const ATTACHMENTS = ["network", "bridge", "direct"] as const;

/** Why `v` cannot be a nameserver: not a plain address, or unspecified/multicast (loopback is fine). */
function nameserverProblem(v: unknown): string | undefined {
  const bad = ipProblem(v);
  if (bad !== undefined) return bad;
  const special = unicastProblem(v as string);
  return special === undefined || special.includes("loopback") ? undefined : special;
}

/** What one NIC's reading shares with the others: pending values seen, addresses claimed. */
interface ReadState {
  pending: (v: unknown) => boolean;
  unknown: boolean;
  /** Canonical address -> where it was given first. */
  addresses: Map<string, string>;
}

function readAttachment(
  raw: Record<string, unknown>,
  at: Failures,
  st: ReadState,
  optional: boolean,
): NicAttachment | HostDefaultAttachment | undefined {
  const kinds = ATTACHMENTS.filter((k) => given(raw[k]));
  if (kinds.length === 0 && optional) return HOST_DEFAULT;
  if (kinds.length !== 1) {
    if (kinds.length === 0) at.fail(undefined, "needs exactly one of network, bridge or direct");
    else at.fail(kinds[1], `give exactly one of network, bridge or direct, not ${kinds.join(" and ")}`);
    return undefined;
  }
  const kind = kinds[0] as (typeof ATTACHMENTS)[number];
  const v = raw[kind];
  if (st.pending(v)) {
    st.unknown = true;
    return undefined;
  }
  if (kind === "network" || kind === "bridge") {
    const problem = kind === "network" ? networkNameProblem(v) : bridgeNameProblem(v);
    if (problem !== undefined) at.fail(kind, problem);
    return problem !== undefined
      ? undefined
      : kind === "network"
        ? { kind, network: v as string }
        : { kind, bridge: v as string };
  }
  if (!isObject(v)) {
    at.fail("direct", 'must be { dev, mode }, e.g. { dev: "eth1", mode: "bridge" }');
    return undefined;
  }
  const d = at.at("direct");
  rejectUnknown(v, ["dev", "mode"], d);
  let ok = true;
  if (!given(v.dev)) {
    d.fail("dev", "is required: the host interface the macvtap device attaches to");
    ok = false;
  } else if (st.pending(v.dev)) st.unknown = true;
  else {
    const problem = bridgeNameProblem(v.dev);
    if (problem !== undefined) d.fail("dev", problem);
    ok &&= problem === undefined;
  }
  const mode = given(v.mode) ? v.mode : "bridge";
  if (st.pending(mode)) st.unknown = true;
  else {
    const problem = directModeProblem(mode);
    if (problem !== undefined) d.fail("mode", problem);
    ok &&= problem === undefined;
  }
  return ok ? { kind: "direct", dev: v.dev as string, mode: mode as DirectMode } : undefined;
}

/**
 * Reads a list field of strings: absent is empty; each item checked by
 * `problem` and turned into its canonical form; pending items passed over.
 * Returns undefined when the list itself is pending or not a list.
 */
function readList(
  v: unknown,
  field: string,
  at: Failures,
  st: ReadState,
  problem: (item: unknown) => string | undefined,
  canonical: (item: string) => string,
): string[] | undefined {
  if (!given(v)) return [];
  if (st.pending(v)) {
    st.unknown = true;
    return undefined;
  }
  if (!Array.isArray(v)) {
    at.fail(field, "must be a list of strings");
    return undefined;
  }
  const out: string[] = [];
  v.forEach((item, j) => {
    if (st.pending(item)) {
      st.unknown = true;
      return;
    }
    const bad = problem(item);
    if (bad !== undefined) at.fail(`${field}[${j}]`, bad);
    else out.push(canonical(item as string));
  });
  return out;
}

function canonicalCidr(text: string): string {
  const c = parseCidr(text) as { address: string; prefix: number };
  return `${c.address}/${c.prefix}`;
}

/**
 * Reads `gateway4`/`gateway6`: a plain address of the family, inside one of
 * the NIC's subnets of that family (IPv6: or link-local, fe80::/10); that it
 * is none of the NIC's own addresses is theirs to say (vm-address.ts).
 * `addresses` is undefined when they are not all known yet (the subnet
 * rules then wait).
 */
function readGateway(
  v: unknown,
  fam: 4 | 6,
  at: Failures,
  st: ReadState,
  addresses: string[] | undefined,
): string | undefined {
  const field = `gateway${fam}`;
  if (!given(v)) return undefined;
  if (st.pending(v)) {
    st.unknown = true;
    return undefined;
  }
  const bad = ipProblem(v) ?? unicastProblem(v as string);
  if (bad !== undefined) {
    at.fail(field, bad);
    return undefined;
  }
  const gw = parseIp(v)?.text as string;
  if (family(gw) !== fam) {
    at.fail(
      field,
      `must be an IPv${fam} address (gateway${fam === 4 ? 6 : 4} takes IPv${fam === 4 ? 6 : 4})`,
    );
    return undefined;
  }
  if (addresses === undefined) return gw;
  const own = addresses.filter((a) => family(a) === fam);
  if (own.length === 0) {
    at.fail(field, `needs a static IPv${fam} address in addresses (without one, DHCP/RA gives the route)`);
    return undefined;
  }
  const linkLocal = fam === 6 && inSubnet(gw, "fe80::/10");
  if (!linkLocal && !own.some((a) => inSubnet(gw, a))) {
    at.fail(field, `${gw} is outside this NIC's IPv${fam} subnets (${own.join(", ")})`);
    return undefined;
  }
  return gw;
}

function readBandwidth(v: unknown, at: Failures, st: ReadState): NicBandwidth | undefined {
  if (!given(v)) return undefined;
  if (st.pending(v)) {
    st.unknown = true;
    return undefined;
  }
  if (!isObject(v)) {
    at.fail("bandwidth", "must be { inboundKbps, outboundKbps } (either or both)");
    return undefined;
  }
  const b = at.at("bandwidth");
  rejectUnknown(v, ["inboundKbps", "outboundKbps"], b);
  const out: NicBandwidth = {};
  for (const k of ["inboundKbps", "outboundKbps"] as const) {
    if (!given(v[k])) continue;
    if (st.pending(v[k])) st.unknown = true;
    else {
      const problem = bandwidthKbpsProblem(v[k]);
      if (problem !== undefined) b.fail(k, problem);
      else out[k] = v[k] as number;
    }
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** A field given and not pending: pending ones mark the reading unknown. */
function known(v: unknown, st: ReadState): boolean {
  if (!given(v)) return false;
  if (!st.pending(v)) return true;
  st.unknown = true;
  return false;
}

/**
 * One NIC's fields; failures under `at` (`nics[i]`). Undefined when a failure
 * or a pending value leaves it incomplete (`shared.unknown` then tells which).
 */
function readNic(
  raw: Record<string, unknown>,
  at: Failures,
  shared: ReadState,
  where: string,
  attachmentOptional = false,
): NicSpec | undefined {
  const before = at.list.length;
  const st: ReadState = { ...shared, unknown: false };
  rejectUnknown(raw, NIC_KEYS, at);
  // A host's pool named by `addressPool` may give the attachment: the NIC then names none.
  const named = typeof raw.addressPool === "string" || st.pending(raw.addressPool);
  const attachment = readAttachment(raw, at, st, attachmentOptional || named);
  let mac: string | undefined;
  if (known(raw.macAddress, st)) {
    const problem = macAddressProblem(raw.macAddress);
    if (problem !== undefined) at.fail("macAddress", problem);
    else mac = normaliseMac(raw.macAddress as string);
  }
  // The gateway rules need every address of the NIC: they wait while one is
  // pending, and say nothing more when one (or the pool) was refused.
  const list: ReadState = { ...st, unknown: false };
  const others = othersOf(raw);
  const cidr = (a: unknown) =>
    cidrProblem(a) ?? vmAddressProblem(addressSpan(a as string) as AddressSpan, others);
  const refused = at.list.length;
  const addresses = readList(raw.addresses, "addresses", at, list, cidr, canonicalCidr);
  st.unknown ||= list.unknown;
  (addresses ?? []).forEach((a, j) => {
    const address = (parseCidr(a) as { address: string }).address;
    const first = st.addresses.get(address);
    if (first !== undefined) at.fail(`addresses[${j}]`, `${address} is also given at ${first}`);
    else st.addresses.set(address, `${where}.addresses[${j}]`);
  });
  const hostPool = typeof raw.addressPool === "string" ? raw.addressPool : undefined;
  const nameProblem = hostPool === undefined ? undefined : poolNameProblem(hostPool);
  if (nameProblem !== undefined)
    at.fail("addressPool", `must name an address pool of the host: ${nameProblem}`);
  const pool =
    hostPool !== undefined ? { unknown: false } : readAddressPool(raw.addressPool, at, st.pending, others);
  st.unknown ||= pool.unknown;
  const addressPool = pool.pool;
  // A named pool's ranges are the host's: the gateway rules wait for them (resolveHostPools).
  const complete =
    !list.unknown &&
    at.list.length === refused &&
    hostPool === undefined &&
    (addressPool !== undefined || !given(raw.addressPool));
  const basis = addressPool === undefined ? addresses : poolGatewayBasis(addressPool, addresses ?? [], at);
  const all = complete ? basis : undefined;
  const gateway4 = readGateway(raw.gateway4, 4, at, st, all);
  const gateway6 = readGateway(raw.gateway6, 6, at, st, all);
  if (addressPool !== undefined && all !== undefined)
    checkPoolGateways(addressPool, { 4: gateway4, 6: gateway6 }, at);
  const ip = (n: string) => parseIp(n)?.text as string;
  const nameservers = readList(raw.nameservers, "nameservers", at, st, nameserverProblem, ip);
  const bandwidth = readBandwidth(raw.bandwidth, at, st);
  let filter: string | undefined;
  if (known(raw.filter, st)) {
    const problem = filterNameProblem(raw.filter);
    if (problem !== undefined) at.fail("filter", problem);
    else if (attachment?.kind === "direct") {
      at.fail(
        "filter",
        "works on network and bridge NICs only: libvirt refuses an nwfilter on a direct (macvtap) NIC",
      );
    } else filter = raw.filter as string;
  }
  if (known(raw.primary, st) && typeof raw.primary !== "boolean") at.fail("primary", "must be true or false");
  shared.unknown ||= st.unknown;
  if (at.list.length > before || st.unknown || attachment === undefined) return undefined;
  return canonicalNic({
    ...(attachment.kind === "host" ? {} : attachmentFields(attachment)),
    macAddress: mac,
    mac,
    addresses: addresses as string[],
    addressPool,
    hostPool,
    gateway4,
    gateway6,
    nameservers: nameservers as string[],
    bandwidth,
    filter,
    primary: raw.primary === true,
  });
}

/** One NIC's fields by {@link readNics}' rules (no pending values), its attachment optional: a host's address pool (host-pools.ts). */
export function readPoolNic(raw: Record<string, unknown>, at: Failures): NicSpec | undefined {
  return readNic(raw, at, { pending: () => false, unknown: false, addresses: new Map() }, "", true);
}

/**
 * Reads a resource's `nics` input: a non-empty list (at most {@link MAX_NICS})
 * of `{ network | bridge | direct: { dev, mode }, macAddress, addresses,
 * addressPool: { ranges } | "<host pool>", gateway4, gateway6, nameservers,
 * bandwidth: { inboundKbps, outboundKbps }, filter, primary }`. Every failure is recorded at `nics`, `nics[i]` or
 * `nics[i].<field>` (`nics[i].addresses[j]`, `nics[i].direct.mode`,
 * `nics[i].bandwidth.inboundKbps`). Values for which `options.isPending` is
 * true are passed over.
 *
 * Returns "invalid" when any failure was recorded, undefined when the input
 * is valid so far but something is pending, else the NICs: addresses and
 * nameservers in canonical text (`2001:db8::7/64`), MACs lower case and only
 * when given, `direct` mode "bridge" when not given, and exactly one NIC
 * `primary` (the first when none is marked).
 */
export function readNics(
  input: unknown,
  f: Failures,
  options: NicFieldsOptions,
): NicSpec[] | "invalid" | undefined {
  const pending = (v: unknown) => options.isPending?.(v) === true;
  if (pending(input)) return undefined;
  const before = f.list.length;
  if (!Array.isArray(input)) {
    f.fail("nics", 'must be a list of NICs, e.g. [{ network: "default" }]');
    return "invalid";
  }
  if (input.length === 0) f.fail("nics", "must list at least one NIC");
  if (input.length > MAX_NICS) f.fail("nics", `lists ${input.length} NICs; at most ${MAX_NICS} are accepted`);
  const st: ReadState = { pending, unknown: false, addresses: new Map() };
  const nics: (NicSpec | undefined)[] = input.map((raw, i) => {
    const where = `nics[${i}]`;
    if (pending(raw)) {
      st.unknown = true;
      return undefined;
    }
    if (!isObject(raw)) {
      f.fail(where, `must be an object such as { network: "default" } (got ${quote(raw)})`);
      return undefined;
    }
    return readNic(raw, f.at(where), st, where);
  });
  const marked = input.flatMap((raw, i) => (isObject(raw) && raw.primary === true ? [i] : []));
  for (const i of marked.slice(1)) {
    f.fail(`nics[${i}].primary`, `only one NIC can be primary: nics[${marked[0]}] already is`);
  }
  if (f.list.length > before) return "invalid";
  if (st.unknown || nics.some((n) => n === undefined)) return undefined;
  const out = nics as NicSpec[];
  if (marked.length === 0) (out[0] as NicSpec).primary = true;
  return out;
}

/** A NIC as the user input {@link readNics} reads: its effective MAC as given, the host's NIC read as a network (it has no rule of its own). */
function inputOf(nic: NicSpec): Record<string, unknown> {
  const { macAddress: _given, mac, hostPool, ...rest } = nic;
  return {
    ...rest,
    ...(hostPool !== undefined && nic.addressPool === undefined ? { addressPool: hostPool } : {}),
    ...(attachmentOf(nic).kind === "host" ? { network: DEFAULT_NETWORK } : {}),
    ...(mac !== undefined ? { macAddress: mac } : {}),
  };
}

/**
 * Checks NICs from the state or built in code (what {@link checkedNics} and
 * {@link decodeNics} stand on) by the same rules as {@link readNics},
 * failures named by the input fields (`nics[i].macAddress`), plus: two NICs
 * never share a MAC.
 */
export function checkNicSpecs(nics: readonly NicSpec[], f: Failures = new Failures()): Failures {
  readNics(nics.map(inputOf), f, {});
  const macs = new Map<string, number>();
  nics.forEach((n, i) => {
    if (n.mac === undefined) return;
    const mac = normaliseMac(n.mac);
    const first = macs.get(mac);
    if (first !== undefined) f.fail(`nics[${i}].macAddress`, `${mac} is also nics[${first}]'s`);
    else macs.set(mac, i);
  });
  return f;
}

/**
 * `nic`, a NIC of a pool, with the addresses create took from the pool
 * (address-pool.ts `allocate`: in its ranges, one per family): held to the
 * rules by construction.
 */
export function filledFromPool(nic: CheckedNic, addresses: string[]): CheckedNic {
  return { ...nic, addresses } as CheckedNic;
}

/** `nics` (the state's, or NICs made in code) held to the rules of `nics`; failures under `f`, undefined when any. */
export function checkedNics(
  nics: readonly NicSpec[],
  f: Failures = new Failures(),
): CheckedNic[] | undefined {
  const before = f.list.length;
  checkNicSpecs(nics, f);
  return f.list.length > before ? undefined : ([...nics] as CheckedNic[]);
}

/** As {@link checkedNics}; throws a ValidationError titled `what` naming every failure. */
export function decodeNics(nics: readonly NicSpec[], what = "invalid NICs"): CheckedNic[] {
  const f = new Failures();
  const out = checkedNics(nics, f);
  f.throwIfAny(what);
  return out as CheckedNic[];
}
