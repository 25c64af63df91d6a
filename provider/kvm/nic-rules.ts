/**
 * The rules of one NIC's values, beside the types in nic.ts (which
 * re-exports everything here): attachment names, macvtap modes, MAC
 * addresses (and the stable derived MAC), rate limits in libvirt's units,
 * nwfilter names and parameters. Pure.
 */
import { createHash } from "node:crypto";
import { parseCidr } from "./ip";
import type { NicBandwidth, NicSpec } from "./nic";

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
// MAC addresses
// ---------------------------------------------------------------------------

/**
 * Why `mac` is not an acceptable fixed MAC address, or undefined: six
 * colon-separated hex octets, unicast (libvirt rejects multicast) and not all zero.
 */
export function macAddressProblem(mac: unknown): string | undefined {
  if (typeof mac !== "string" || !/^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}$/.test(mac)) {
    return "must be six colon-separated hex octets, e.g. 52:54:00:12:34:56";
  }
  const first = Number.parseInt(mac.slice(0, 2), 16);
  if ((first & 1) === 1) return "must be a unicast address (the first octet's lowest bit must be 0)";
  if (/^00(?::00){5}$/.test(mac)) return "must not be all zero";
  return undefined;
}

/** Normalises a MAC address to lower case (libvirt reports lower case). */
export function normaliseMac(mac: string): string {
  return mac.toLowerCase();
}

/**
 * A stable MAC for a NIC given none: `52:54:00` (QEMU's locally administered
 * unicast prefix) and the first three bytes of sha256(`seed`). The resource
 * seeds it with the owner URN, the domain name and the NIC's index, so the
 * seed's network-config can match the NIC on first boot.
 */
export function deriveMac(seed: string): string {
  const digest = createHash("sha256").update(seed, "utf8").digest();
  const tail = [...digest.subarray(0, 3)].map((b) => b.toString(16).padStart(2, "0"));
  return `52:54:00:${tail.join(":")}`;
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
