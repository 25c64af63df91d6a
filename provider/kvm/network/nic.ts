/**
 * A VM's NICs: where each attaches (a libvirt network, an existing host
 * bridge, or a macvtap device on a host interface), its MAC, static
 * addresses, gateways, nameservers, rate limits and nwfilter. One description
 * ({@link NicSpec}), its rules (attachment names, macvtap modes, MAC
 * addresses and the stable derived MAC (mac.ts), rate limits in libvirt's units,
 * nwfilter names and parameters); the reading of a resource's `nics` input
 * by those rules, and the checked NIC the builders take, are in
 * nic-rules.ts. Used by the host config (the host's default NIC), by
 * `check`, by the domain XML builder and by the seed's network-config. Pure.
 */
import { given } from "../fields";
import type { Failures } from "../validation";
import type { AddressPool } from "./address-pool";
import { parseCidr } from "./ip";
import { normaliseMac } from "./mac";

export { deriveMac, macAddressProblem, normaliseMac } from "./mac";

export type DirectMode = (typeof DIRECT_MODES)[number];

/**
 * A NIC's attachment: a libvirt network, an existing host bridge, or a
 * macvtap device on a host interface (`direct`).
 */
export type NicAttachment =
  | { kind: "network"; network: string }
  | { kind: "bridge"; bridge: string }
  | { kind: "direct"; dev: string; mode: DirectMode };

/**
 * "The host's NIC": the network or bridge the host's configuration names
 * (kvm:hosts `network`/`bridge`), which only the host a VM lands on decides.
 * The one-NIC shorthand without `network`/`bridge` attaches here; create
 * resolves it ({@link resolveHostNics}) before the domain XML is built.
 */
export interface HostDefaultAttachment {
  kind: "host";
}

/** The attachment of the one-NIC shorthand that names no network or bridge. */
export const HOST_DEFAULT: HostDefaultAttachment = { kind: "host" };

/** Rate limits of a NIC, kilobits per second (1000 bits), as the user gives them. */
export interface NicBandwidth {
  /** Traffic to the guest. */
  inboundKbps?: number;
  /** Traffic from the guest. */
  outboundKbps?: number;
}

/** A NIC's `direct` (macvtap) attachment: the host interface and the mode. */
export interface DirectAttachment {
  dev: string;
  mode: DirectMode;
}

/**
 * One NIC of a VM, as check resolved it: the one description from check
 * (the state holds it as it is) down to the domain XML, the seed's
 * network-config, the filter parameters and the address outputs. Keyed as
 * the `nics` input is, so the state reads like the program.
 *
 * It attaches to at most one of `network`, `bridge` or `direct`
 * ({@link attachmentOf}); with none, to the host's NIC (the one-NIC
 * shorthand without `network`/`bridge`), which create resolves
 * ({@link resolveHostNics}) before the domain XML is built.
 */
export interface NicSpec {
  network?: string;
  bridge?: string;
  direct?: DirectAttachment;
  /** The MAC the user gave, lower case; absent when derived or left to libvirt. */
  macAddress?: string;
  /**
   * The MAC the NIC gets, lower case: the given one, or for NICs of `nics`
   * one check derives from the owner, the name and the position. Absent
   * only for the one-NIC shorthand without `macAddress` (libvirt picks one).
   */
  mac?: string;
  /**
   * Static addresses, CIDR (`203.0.113.7/24`, `2001:db8::7/64`); empty: DHCP / RA,
   * or, with `addressPool`, the addresses create takes from the pool.
   */
  addresses: string[];
  /** Ranges the NIC's static address is taken from at create (address-pool.ts), one of each family. */
  addressPool?: AddressPool;
  /**
   * The host's address pool the NIC takes its ranges, gateways, nameservers
   * and attachment from (`addressPool: "<name>"`, kvm:hosts `addressPools`):
   * once the host is known (host-pools.ts resolveHostPools) those fields hold
   * the pool's, and this keeps its name.
   */
  hostPool?: string;
  gateway4?: string;
  gateway6?: string;
  nameservers: string[];
  bandwidth?: NicBandwidth;
  /** A libvirt nwfilter (e.g. `clean-traffic`), its `IP` parameters the NIC's static IPv4 addresses. */
  filter?: string;
  /** The NIC `proxyUrl` uses (exactly one NIC of a VM is). */
  primary: boolean;
}

/** Where `nic` attaches: its `direct`, `bridge` or `network`, or the host's NIC when it names none. */
export function attachmentOf(
  nic: Pick<NicSpec, "network" | "bridge" | "direct">,
): NicAttachment | HostDefaultAttachment {
  if (nic.direct !== undefined) return { kind: "direct", dev: nic.direct.dev, mode: nic.direct.mode };
  if (nic.bridge !== undefined) return { kind: "bridge", bridge: nic.bridge };
  if (nic.network !== undefined) return { kind: "network", network: nic.network };
  return HOST_DEFAULT;
}

/**
 * The segment a NIC is on (`bridge:br0`, `network:default`, `direct:eth1`):
 * where two static addresses clash, and what an address pool counts its
 * taken addresses by. Undefined for the host's NIC before create resolves it.
 */
export function segmentOf(nic: Pick<NicSpec, "network" | "bridge" | "direct">): string | undefined {
  const a = attachmentOf(nic);
  if (a.kind === "host") return undefined;
  return a.kind === "direct"
    ? `direct:${a.dev}`
    : a.kind === "bridge"
      ? `bridge:${a.bridge}`
      : `network:${a.network}`;
}

/** The fields of a NIC that say it attaches to `a`. */
export function attachmentFields(a: NicAttachment): Pick<NicSpec, "network" | "bridge" | "direct"> {
  if (a.kind === "network") return { network: a.network };
  if (a.kind === "bridge") return { bridge: a.bridge };
  return { direct: { dev: a.dev, mode: a.mode } };
}

/**
 * The one NIC of the shorthand (`network` or `bridge`, `macAddress`): DHCP,
 * primary, on the named attachment or the host's, with the given MAC or
 * none (libvirt picks one).
 */
export function shorthandNic(attachment: NicAttachment | undefined, macAddress: string | undefined): NicSpec {
  const mac = macAddress === undefined ? undefined : normaliseMac(macAddress);
  return canonicalNic({
    ...(attachment !== undefined ? attachmentFields(attachment) : {}),
    macAddress: mac,
    mac,
    addresses: [],
    nameservers: [],
    primary: true,
  });
}

/**
 * `nic` with its keys in one order and without undefined ones: the state
 * holds NICs as they are, and the spec hash and the diff compare them.
 */
export function canonicalNic(nic: NicSpec): NicSpec {
  const out: Record<string, unknown> = {};
  for (const k of NIC_RECORD_KEYS) if (nic[k] !== undefined) out[k] = nic[k];
  return out as unknown as NicSpec;
}

export const NIC_RECORD_KEYS = [
  "network",
  "bridge",
  "direct",
  "macAddress",
  "mac",
  "addresses",
  "addressPool",
  "hostPool",
  "gateway4",
  "gateway6",
  "nameservers",
  "bandwidth",
  "filter",
  "primary",
] as const satisfies readonly (keyof NicSpec)[];

/** The network NICs attach to when neither the host nor the resource names one. */
export const DEFAULT_NETWORK = "default";

/** Values a caller has not decided yet (e.g. Pulumi's unknowns at preview): passed over, not validated. */
export interface NicFieldsOptions {
  isPending?: (v: unknown) => boolean;
}

/**
 * Reads the `network` and `bridge` fields of `input` (null counts as not
 * given): at most one of them, each a valid name. Failures are recorded at
 * `network`/`bridge` under `f`. Returns the attachment, undefined when
 * neither is given (or one is pending), or "invalid".
 */
export function readNicFields(
  input: { network?: unknown; bridge?: unknown },
  f: Failures,
  options: NicFieldsOptions = {},
): NicAttachment | "invalid" | undefined {
  const pending = (v: unknown) => options.isPending?.(v) === true;
  const { network, bridge } = input;
  let ok = true;
  if (given(network) && given(bridge)) {
    f.fail("bridge", "give either network or bridge, not both");
    ok = false;
  }
  if (given(network) && !pending(network)) {
    const problem = networkNameProblem(network);
    if (problem !== undefined) {
      f.fail("network", problem);
      ok = false;
    }
  }
  if (given(bridge) && !pending(bridge)) {
    const problem = bridgeNameProblem(bridge);
    if (problem !== undefined) {
      f.fail("bridge", problem);
      ok = false;
    }
  }
  if (!ok) return "invalid";
  if (pending(network) || pending(bridge)) return undefined;
  if (given(bridge)) return { kind: "bridge", bridge: bridge as string };
  if (given(network)) return { kind: "network", network: network as string };
  return undefined;
}

// ---------------------------------------------------------------------------
// The rules of one NIC's values
// ---------------------------------------------------------------------------

/** macvtap modes of a `direct` NIC (libvirt's `<source dev mode>`). */
export const DIRECT_MODES = ["bridge", "vepa", "private", "passthrough"] as const;

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$/;
// Linux limits interface names to 15 bytes (IFNAMSIZ - 1).
const INTERFACE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$/;

/** Why `v` is not a libvirt network name, or undefined. */
export function networkNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && NETWORK_NAME.test(v)) return undefined;
  return "must be a libvirt network name: 1-128 letters, digits, '.', '_', '+', ':' or '-', starting with a letter or digit";
}

/** Why `v` is not a Linux interface name (a host bridge, a macvtap parent), or undefined. */
export function bridgeNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && INTERFACE_NAME.test(v)) return undefined;
  return "must be a Linux interface name: 1-15 letters, digits, '.', '_' or '-'";
}

/** Why `v` is not a macvtap mode, or undefined. */
export function directModeProblem(v: unknown): string | undefined {
  if ((DIRECT_MODES as readonly unknown[]).includes(v)) return undefined;
  return `must be one of ${DIRECT_MODES.map((m) => JSON.stringify(m)).join(", ")}`;
}

// ---------------------------------------------------------------------------
// Rate limits and nwfilters
// ---------------------------------------------------------------------------

/** Most NICs a VM may have. */
export const MAX_NICS = 16;
/** Highest rate limit accepted, kbit/s (100 Gbit/s). */
export const MAX_BANDWIDTH_KBPS = 100_000_000;

/** Why `v` is not a rate in kbit/s (an integer from 1 to 100 Gbit/s), or undefined. */
export function bandwidthKbpsProblem(v: unknown): string | undefined {
  if (typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_BANDWIDTH_KBPS) return undefined;
  return `must be an integer number of kbit/s from 1 to ${MAX_BANDWIDTH_KBPS} (100 Gbit/s)`;
}

/** kbit/s (1000 bits) to libvirt's `average` unit, KiB/s (1024 bytes): rounded up, never 0. */
function kbpsToKiBps(kbps: number): number {
  return Math.max(1, Math.ceil((kbps * 125) / 1024));
}

/** A NIC's rate limits as libvirt's `<inbound average>`/`<outbound average>`, in KiB/s. */
export function libvirtBandwidth(b: NicBandwidth): { inbound?: number; outbound?: number } {
  const out: { inbound?: number; outbound?: number } = {};
  if (b.inboundKbps !== undefined) out.inbound = kbpsToKiBps(b.inboundKbps);
  if (b.outboundKbps !== undefined) out.outbound = kbpsToKiBps(b.outboundKbps);
  return out;
}

const FILTER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Why `v` is not a libvirt nwfilter name (e.g. `clean-traffic`), or undefined. */
export function filterNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && FILTER_NAME.test(v)) return undefined;
  return "must be a libvirt nwfilter name such as clean-traffic: 1-128 letters, digits, '.', '_' or '-'";
}

/** The nwfilter parameters of a NIC: one `IP` per static IPv4 address (no prefix). */
export function filterParameters(nic: Pick<NicSpec, "addresses">): { name: string; value: string }[] {
  return nic.addresses
    .map((a) => parseCidr(a))
    .filter((c) => c?.family === 4)
    .map((c) => ({ name: "IP", value: (c as { address: string }).address }));
}

// ---------------------------------------------------------------------------
// Reading `nics`
// ---------------------------------------------------------------------------
