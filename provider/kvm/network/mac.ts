/**
 * A NIC's MAC address: the rule a fixed one follows, its normal form, and
 * the stable MAC derived for a NIC given none. Pure.
 */
import { createHash } from "node:crypto";

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
