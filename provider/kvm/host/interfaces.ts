/**
 * A host's side of a VM's NICs: what must exist on the host before a domain
 * using them is defined (an nwfilter, the parent device of a macvtap NIC),
 * and a NIC's rate limits changed in place.
 *
 * Where a host's interfaces are known (checked against libvirt 9.0):
 * - the interface driver (virInterfaceLookupByName) with its udev backend
 *   reads the network namespace libvirtd runs in at each call: a veth made
 *   after the daemon started is found at once;
 * - node devices (`net_<name>_<mac>`) are kept up to date from udev events,
 *   which a daemon in its own network namespace never receives: there they
 *   list only the interfaces present when it started;
 * - with the older netcf backend, the interface driver knows only the
 *   interfaces of the distribution's network configuration files.
 * So the interface driver is asked first, and only when it knows no such
 * interface (or the host has no interface driver) the node devices; a device
 * neither knows is refused. When the host has neither driver nothing is
 * refused: libvirt's own start error then says what is missing.
 *
 * Rate limits (`<bandwidth>`) are changed with virDomainUpdateDeviceFlags,
 * sending the NIC's element of the persistent definition, found by its MAC,
 * with only `<bandwidth>` replaced: libvirt matches a NIC by its MAC and
 * refuses a live change of anything it cannot change live (model, PCI
 * address), and the persistent element carries none of the live-only parts
 * (target dev, alias, network port), which it fills in from the running NIC.
 * libvirt applies a limit live with tc: an HTB qdisc with an SFQ leaf for
 * traffic to the guest and an ingress policer for traffic from it; a kernel
 * without sch_sfq or act_police refuses the change (INTERNAL_ERROR naming
 * the tc command), and the definition is left as it was.
 */
import { ProviderError } from "../../errors";
import {
  DomainModificationImpact,
  DomainState,
  DomainXmlFlags,
  ListAllNodeDevicesFlags,
} from "../../libvirt/constants";
import { ErrorCode } from "../../libvirt/error-codes";
import { isLibvirtError } from "../../libvirt/errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain, Network } from "../../libvirt/types";
import { bandwidthElement } from "../domain/interface-xml";
import {
  attribute,
  childElement,
  childElements,
  el,
  parseXml,
  serializeXml,
  textContent,
  type XmlElement,
  type XmlNode,
} from "../domain/xml";
import { attachmentOf, type NicBandwidth, type NicSpec } from "../network/nic";
import { quote, type ValidationFailure } from "../validation";
import { hasCode } from "./volumes";

/** True when the host has the nwfilter `name`; false when it has none of that name (NO_NWFILTER). */
export async function nwfilterExists(lv: Libvirt, name: string): Promise<boolean> {
  try {
    await lv.nwfilterLookupByName(name);
    return true;
  } catch (err) {
    if (isLibvirtError(err, "VIR_ERR_NO_NWFILTER")) return false;
    throw err;
  }
}

/**
 * Whether libvirt's interface driver knows host interface `dev`; undefined
 * when the host has no interface driver (NO_SUPPORT), so it cannot tell.
 */
export async function interfaceKnown(lv: Libvirt, dev: string): Promise<boolean | undefined> {
  try {
    await lv.interfaceLookupByName(dev);
    return true;
  } catch (err) {
    if (isLibvirtError(err, "VIR_ERR_NO_INTERFACE")) return false;
    if (hasCode(err, ErrorCode.NO_SUPPORT)) return undefined;
    throw err;
  }
}

/**
 * Whether a node device with the `net` capability is interface `dev`;
 * undefined when the host has no node device driver (NO_SUPPORT). libvirt
 * names these devices `net_<name>_<mac>` with every character other than a
 * letter or digit made `_`, so only devices of that prefix are read, and
 * their XML decides (`eth0.1` and `eth0_1` share the prefix).
 */
export async function netDeviceKnown(lv: Libvirt, dev: string): Promise<boolean | undefined> {
  let devices: { name: string }[];
  try {
    devices = await lv.connectListAllNodeDevices(ListAllNodeDevicesFlags.CAP_NET);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_SUPPORT)) return undefined;
    throw err;
  }
  const prefix = `net_${dev.replace(/[^A-Za-z0-9]/g, "_")}_`;
  for (const d of devices.filter((x) => x.name.startsWith(prefix))) {
    let xml: string;
    try {
      xml = await lv.nodeDeviceGetXmlDesc(d.name);
    } catch (err) {
      if (isLibvirtError(err, "VIR_ERR_NO_NODE_DEVICE")) continue; // gone since the listing
      throw err;
    }
    const net = childElements(parseXml(xml), "capability").find((c) => attribute(c, "type") === "net");
    if (net !== undefined && textContent(childElement(net, "interface")).trim() === dev) return true;
  }
  return false;
}

/** Whether the host has interface `dev` (see the header); undefined when it cannot tell. */
export async function hostInterfaceExists(lv: Libvirt, dev: string): Promise<boolean | undefined> {
  const known = await interfaceKnown(lv, dev);
  if (known === true) return true;
  const asDevice = await netDeviceKnown(lv, dev);
  if (asDevice !== undefined) return asDevice;
  return known;
}

/**
 * Whether the host has libvirt network `name` and whether it is started:
 * a NIC on a network that is defined but not active fails at the domain's
 * start ("network 'x' is not active").
 */
export async function networkState(lv: Libvirt, name: string): Promise<"active" | "inactive" | "missing"> {
  let net: Network;
  try {
    net = await lv.networkLookupByName(name);
  } catch (err) {
    if (isLibvirtError(err, "VIR_ERR_NO_NETWORK")) return "missing";
    throw err;
  }
  return (await lv.networkIsActive(net)) ? "active" : "inactive";
}

/** The host lacks what a VM's NICs need (a libvirt network, a macvtap parent, an nwfilter). Permanent. */
export class NicHostError extends ProviderError {
  readonly host: string;
  readonly failures: readonly ValidationFailure[];

  constructor(host: string, failures: readonly ValidationFailure[]) {
    super("permanent", failures.map((f) => `${f.property}: ${f.reason}`).join("; "));
    this.host = host;
    this.failures = failures;
  }
}

/**
 * Checks that host `hostKey` has what `nics` need before anything of a VM
 * using them is made: each libvirt network, defined and started; each
 * `direct` NIC's parent device; each `filter`. Throws a
 * {@link NicHostError} naming every NIC (`nics[i].network`,
 * `nics[i].direct.dev`, `nics[i].filter`; the host's `network` setting for
 * a NIC `fromHost` marks as given the host's) that cannot work there; each
 * name is asked once.
 */
export async function checkNicsOnHost(
  lv: Libvirt,
  hostKey: string,
  nics: readonly NicSpec[],
  fromHost: readonly boolean[] = [],
): Promise<void> {
  const networks = new Map<string, "active" | "inactive" | "missing">();
  const devices = new Map<string, boolean | undefined>();
  const filters = new Map<string, boolean>();
  const failures: ValidationFailure[] = [];
  for (const [i, nic] of nics.entries()) {
    const a = attachmentOf(nic);
    if (a.kind === "network") {
      if (!networks.has(a.network)) networks.set(a.network, await networkState(lv, a.network));
      const state = networks.get(a.network);
      const property = fromHost[i] === true ? "network" : `nics[${i}].network`;
      const whose = fromHost[i] === true ? ` (the host's network setting, kvm:hosts)` : "";
      if (state === "missing") {
        failures.push({
          property,
          reason: `host ${hostKey} has no libvirt network ${quote(a.network)}${whose}; virsh net-list --all shows the ones it has`,
        });
      } else if (state === "inactive") {
        failures.push({
          property,
          reason:
            `libvirt network ${quote(a.network)} on host ${hostKey} exists but is not active${whose}: ` +
            `start it (virsh net-start ${a.network}; virsh net-autostart ${a.network} keeps it started)`,
        });
      }
    }
    if (a.kind === "direct") {
      if (!devices.has(a.dev)) devices.set(a.dev, await hostInterfaceExists(lv, a.dev));
      if (devices.get(a.dev) === false) {
        failures.push({
          property: `nics[${i}].direct.dev`,
          reason: `host ${hostKey} has no interface ${quote(a.dev)} (the parent device of a macvtap NIC must exist on the host)`,
        });
      }
    }
    if (nic.filter !== undefined) {
      if (!filters.has(nic.filter)) filters.set(nic.filter, await nwfilterExists(lv, nic.filter));
      if (filters.get(nic.filter) === false) {
        failures.push({
          property: `nics[${i}].filter`,
          reason: `host ${hostKey} has no nwfilter ${quote(nic.filter)} (virsh nwfilter-list shows the ones it has)`,
        });
      }
    }
  }
  if (failures.length > 0) throw new NicHostError(hostKey, failures);
}

/** A parsed element as one to serialize again, unchanged. */
function toElement(node: XmlNode): XmlElement {
  return el(node.name, node.attrs, ...node.children.map((c) => (typeof c === "string" ? c : toElement(c))));
}

/**
 * The `<interface>` of `domainXml` whose MAC is `mac`, with its
 * `<bandwidth>` replaced by `bandwidth` (removed when it sets no limit), as
 * an element to send back; undefined when the domain has no NIC with that MAC.
 * Everything else of the element is kept as it is. Pure.
 */
export function interfaceWithBandwidth(
  domainXml: string,
  mac: string,
  bandwidth: NicBandwidth | undefined,
): XmlElement | undefined {
  const devices = childElement(parseXml(domainXml), "devices");
  const nic = (devices === undefined ? [] : childElements(devices, "interface")).find(
    (i) => attribute(childElement(i, "mac"), "address")?.toLowerCase() === mac.toLowerCase(),
  );
  if (nic === undefined) return undefined;
  const element = bandwidthElement(bandwidth);
  const kept = nic.children.filter((c) => typeof c === "string" || c.localName !== "bandwidth");
  return el(nic.name, nic.attrs, ...kept.map((c) => (typeof c === "string" ? c : toElement(c))), element);
}

/**
 * Sets NIC `mac`'s rate limits on domain `dom` (an empty `bandwidth`
 * removes them): on the running domain and its definition at once, or on
 * the definition alone while the domain is not running. A domain that stops
 * between the state read and the update (libvirt: OPERATION_INVALID) gets
 * the definition alone. Throws a permanent ProviderError for a domain
 * without a NIC of that MAC.
 */
export async function setInterfaceBandwidth(
  lv: Libvirt,
  dom: Domain,
  mac: string,
  bandwidth: NicBandwidth | undefined,
): Promise<void> {
  const xml = await lv.domainGetXmlDesc(dom, DomainXmlFlags.INACTIVE);
  const nic = interfaceWithBandwidth(xml, mac, bandwidth);
  if (nic === undefined) {
    throw new ProviderError("permanent", `domain ${dom.name} has no NIC with MAC ${mac}`);
  }
  const device = serializeXml(nic);
  const { CONFIG, LIVE } = DomainModificationImpact;
  const { state } = await lv.domainGetState(dom);
  if (state === DomainState.SHUTOFF) return lv.domainUpdateDeviceFlags(dom, device, CONFIG);
  try {
    await lv.domainUpdateDeviceFlags(dom, device, LIVE | CONFIG);
  } catch (err) {
    if (!hasCode(err, ErrorCode.OPERATION_INVALID)) throw err;
    if ((await lv.domainGetState(dom)).state !== DomainState.SHUTOFF) throw err;
    await lv.domainUpdateDeviceFlags(dom, device, CONFIG);
  }
}
