/**
 * One `<interface>` of a domain XML: built from a NIC's description, and
 * parsed back from what libvirt returns (domain-xml.ts uses both). Pure.
 *
 * Built: `<interface type='network|bridge|direct'>` with `<mac>` when known,
 * `<source network>` / `<source bridge>` / `<source dev mode>` (a direct
 * NIC with `trustGuestRxFilters`, for IPv6 over macvtap), a virtio
 * model, `<bandwidth>` (libvirt's `average`, KiB/s) when limited, and
 * `<filterref>` with one `IP` parameter per static IPv4 address when a
 * nwfilter is named.
 */
import {
  attachmentOf,
  DIRECT_MODES,
  type DirectMode,
  filterParameters,
  libvirtBandwidth,
  type NicAttachment,
  type NicBandwidth,
  normaliseMac,
} from "../network/nic";
import type { CheckedNic } from "../network/nic-rules";
import { attribute, childElement, childElements, el, type XmlElement, type XmlNode } from "./xml";

/** The `<bandwidth>` element of a NIC's limits (KiB/s), or undefined when it has none. */
export function bandwidthElement(bandwidth: NicBandwidth | undefined): XmlElement | undefined {
  const limits = bandwidth === undefined ? {} : libvirtBandwidth(bandwidth);
  if (limits.inbound === undefined && limits.outbound === undefined) return undefined;
  return el(
    "bandwidth",
    {},
    limits.inbound !== undefined && el("inbound", { average: limits.inbound }),
    limits.outbound !== undefined && el("outbound", { average: limits.outbound }),
  );
}

/** The `<interface>` element of one checked NIC, which names its attachment (resolveHostNics). */
export function buildInterfaceElement(nic: CheckedNic): XmlElement {
  const a = attachmentOf(nic);
  if (a.kind === "host") throw new Error("a NIC attached to the host's NIC must be resolved first");
  return el(
    "interface",
    // A macvtap passes the guest only the multicast groups the host set up, so
    // IPv6 neighbour discovery fails unless the guest's receive filters are
    // trusted. Nothing is lost: a direct NIC takes no nwfilter anyway.
    a.kind === "direct" ? { type: a.kind, trustGuestRxFilters: "yes" } : { type: a.kind },
    nic.mac !== undefined && el("mac", { address: normaliseMac(nic.mac) }),
    a.kind === "network"
      ? el("source", { network: a.network })
      : a.kind === "bridge"
        ? el("source", { bridge: a.bridge })
        : el("source", { dev: a.dev, mode: a.mode }),
    el("model", { type: "virtio" }),
    bandwidthElement(nic.bandwidth),
    nic.filter !== undefined &&
      el("filterref", { filter: nic.filter }, ...filterParameters(nic).map((p) => el("parameter", p))),
  );
}

/** One `<interface>` of a parsed domain. */
export interface ParsedInterface {
  /** `network`, `bridge`, `direct`, `user`... */
  type: string;
  mac?: string;
  network?: string;
  bridge?: string;
  /** A direct (macvtap) NIC's host interface (`<source dev>`). */
  dev?: string;
  /** A direct NIC's macvtap mode (`<source mode>`) as libvirt reports it. */
  mode?: string;
  model?: string;
  /** `<bandwidth>`: the `average` of `<inbound>`/`<outbound>`, KiB/s as libvirt keeps them. */
  bandwidth?: { inboundKiBps?: number; outboundKiBps?: number };
  /** The nwfilter of `<filterref filter>`. */
  filter?: string;
  /** The `<parameter>`s of the filterref, in document order. */
  filterParameters?: { name: string; value: string }[];
}

function average(node: XmlNode | undefined): number | undefined {
  const v = attribute(node, "average");
  return v !== undefined && /^[0-9]{1,15}$/.test(v) ? Number(v) : undefined;
}

/** Parses one `<interface>` element. Values libvirt would not write (a non-numeric rate) are left out. */
export function parseInterface(iface: XmlNode): ParsedInterface {
  const source = childElement(iface, "source");
  const out: ParsedInterface = { type: attribute(iface, "type") ?? "" };
  const mac = attribute(childElement(iface, "mac"), "address");
  if (mac !== undefined) out.mac = normaliseMac(mac);
  const network = attribute(source, "network");
  if (network !== undefined) out.network = network;
  const bridge = attribute(source, "bridge");
  if (bridge !== undefined) out.bridge = bridge;
  const dev = attribute(source, "dev");
  if (dev !== undefined) out.dev = dev;
  const mode = attribute(source, "mode");
  if (mode !== undefined && out.type === "direct") out.mode = mode;
  const model = attribute(childElement(iface, "model"), "type");
  if (model !== undefined) out.model = model;
  const bandwidth = childElement(iface, "bandwidth");
  if (bandwidth !== undefined) {
    const inbound = average(childElement(bandwidth, "inbound"));
    const outbound = average(childElement(bandwidth, "outbound"));
    out.bandwidth = {
      ...(inbound !== undefined ? { inboundKiBps: inbound } : {}),
      ...(outbound !== undefined ? { outboundKiBps: outbound } : {}),
    };
  }
  const filterref = childElement(iface, "filterref");
  const filter = attribute(filterref, "filter");
  if (filterref !== undefined && filter !== undefined) {
    out.filter = filter;
    out.filterParameters = childElements(filterref, "parameter").flatMap((p) => {
      const name = attribute(p, "name");
      const value = attribute(p, "value");
      return name !== undefined && value !== undefined ? [{ name, value }] : [];
    });
  }
  return out;
}

/**
 * The attachment a parsed interface describes: a network, a bridge, or a
 * direct NIC (libvirt's default mode `vepa` when none is written); undefined
 * for other kinds or an unknown mode.
 */
export function parsedAttachmentOf(i: ParsedInterface): NicAttachment | undefined {
  if (i.type === "network" && i.network !== undefined) return { kind: "network", network: i.network };
  if (i.type === "bridge" && i.bridge !== undefined) return { kind: "bridge", bridge: i.bridge };
  if (i.type === "direct" && i.dev !== undefined) {
    const mode = i.mode ?? "vepa";
    if ((DIRECT_MODES as readonly string[]).includes(mode)) {
      return { kind: "direct", dev: i.dev, mode: mode as DirectMode };
    }
  }
  return undefined;
}
