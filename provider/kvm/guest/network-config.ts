/**
 * The seed's NoCloud `network-config` (version 2) built from a VM's NICs:
 * each NIC matched by its MAC, with its static addresses, default routes and
 * nameservers, DHCPv4 where it has no static IPv4. Pure.
 *
 * Only keys every renderer the guest's cloud-init may pick (networkd, eni,
 * netplan) turns into what they mean. Checked against Debian 12's cloud-init
 * 22.4.2 (the guest image's; its `devel net-convert` to each renderer) and
 * against cloud-init's network-config v2 schema:
 * - `match: {macaddress}` (lower case, as the schema asks), no `set-name`:
 *   the provider never needs the guest's interface names, and 22.4's
 *   networkd renderer would write the new name into `[Match] Name=` without
 *   a `.link` file to rename by.
 * - The IPv4 default route is `routes: [{to: 0.0.0.0/0, via}]`, netplan's
 *   preferred form, rendered by 22.4 as a default route everywhere.
 * - The IPv6 default route is `gateway6` (deprecated by netplan and since
 *   cloud-init 22.4, still read by every version): 22.4.2 renders
 *   `to: "::/0"` as a route to `::/64` on networkd and eni
 *   (canonical/cloud-init#4600), and `to: default` makes it fail the whole
 *   init-local stage ("Address default is not a valid ip address";
 *   canonical/cloud-init#3988, network_state reads it since PR #6391, 2025).
 * - `dhcp6` is always false: the image asks DHCPv4 only (IPv6 comes from
 *   static addresses or router advertisements, which networkd accepts).
 * - No `network:` wrapper: the NoCloud file form cloud-init's docs show
 *   (22.4 strips a wrapper when present, so both would work).
 *
 * Written by the yaml package in block style with every string value
 * double-quoted, so YAML 1.1 readers (PyYAML) never take a MAC such as
 * 52:54:00:12:34:56 for a base-60 number.
 */
import { stringify } from "yaml";
import { family } from "../network/ip";
import type { NicSpec } from "../network/nic";
import type { CheckedNic } from "../network/nic-rules";
import { Failures } from "../validation";

/** One `ethernets` entry of the document. */
export interface EthernetConfig {
  match: { macaddress: string };
  dhcp4: boolean;
  dhcp6: boolean;
  addresses?: string[];
  routes?: { to: string; via: string }[];
  gateway6?: string;
  nameservers?: { addresses: string[] };
}

/** The network-config document, before it is written as YAML. */
export interface NetworkConfig {
  version: 2;
  /** `nic0`, `nic1`... in the order of the NICs. */
  ethernets: Record<string, EthernetConfig>;
}

/**
 * Whether the VM needs a network-config: more than one NIC, or a NIC with
 * static addresses or nameservers. A single DHCP NIC keeps the image's own
 * configuration (and a seed without the file).
 */
export function needsNetworkConfig(nics: readonly NicSpec[]): boolean {
  return nics.length > 1 || nics.some((n) => n.addresses.length > 0 || n.nameservers.length > 0);
}

function ethernetOf(nic: NicSpec): EthernetConfig {
  // IPv4 first (each family in the given order): 22.4 hangs the routes on the
  // first address's stanza, which must be the IPv4 one for eni.
  const v4 = nic.addresses.filter((a) => family(a) === 4);
  const v6 = nic.addresses.filter((a) => family(a) === 6);
  const eth: EthernetConfig = {
    match: { macaddress: (nic.mac as string).toLowerCase() },
    dhcp4: v4.length === 0,
    dhcp6: false,
  };
  if (nic.addresses.length > 0) eth.addresses = [...v4, ...v6];
  if (nic.gateway4 !== undefined) eth.routes = [{ to: "0.0.0.0/0", via: nic.gateway4 }];
  if (nic.gateway6 !== undefined) eth.gateway6 = nic.gateway6;
  if (nic.nameservers.length > 0) eth.nameservers = { addresses: [...nic.nameservers] };
  return eth;
}

/**
 * The network-config document of `nics` (checked NICs). Throws
 * ValidationError when a NIC has no MAC (`nics[i].macAddress`).
 */
export function networkConfigOf(nics: readonly CheckedNic[]): NetworkConfig {
  const f = new Failures();
  nics.forEach((n, i) => {
    if (n.mac === undefined) f.fail(`nics[${i}].macAddress`, "is needed: network-config matches NICs by MAC");
  });
  f.throwIfAny("invalid network-config");
  const ethernets: Record<string, EthernetConfig> = {};
  nics.forEach((nic, i) => {
    ethernets[`nic${i}`] = ethernetOf(nic);
  });
  return { version: 2, ethernets };
}

/** The NoCloud `network-config` file (version 2 YAML) of `nics`. Throws as {@link networkConfigOf}. */
export function buildNetworkConfig(nics: readonly CheckedNic[]): string {
  return stringify(networkConfigOf(nics), {
    defaultStringType: "QUOTE_DOUBLE",
    defaultKeyType: "PLAIN",
    lineWidth: 0,
  });
}
