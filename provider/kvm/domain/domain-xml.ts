/**
 * Domain XML for a proxy VM, and the parser `read` uses on what libvirt
 * returns.
 *
 * Disks are always `<disk type='file'>` with the paths libvirt reported for
 * the volumes (virStorageVolGetPath), never `<disk type='volume'>`: libvirt's
 * virt-aa-helper only grants QEMU AppArmor access to disk sources that carry
 * a path, so pool/volume references fail with "Could not open base image:
 * Permission denied" on every stock Debian/Ubuntu host.
 */
import { DOMAIN_TYPES, type DomainType } from "../config/host-config";
import { FIRMWARES, type Firmware } from "../config/image";
import { attachmentOf, type NicAttachment } from "../network/nic";
import type { CheckedNic } from "../network/nic-rules";
import { Failures } from "../validation";
import {
  buildInterfaceElement,
  type ParsedInterface,
  parsedAttachmentOf,
  parseInterface,
} from "./interface-xml";
import { buildMetadataElement, checkMetadata, findMetadata, type ProxyMetadata } from "./metadata";
import { domainNameProblem } from "./names";
import {
  attribute,
  childElement,
  childElements,
  descend,
  el,
  forbiddenXmlCharacter,
  parseXml,
  serializeXml,
  textContent,
  type XmlElement,
  XmlError,
  type XmlNode,
} from "./xml";

/** The MAC rules live with the NICs (network/nic.ts); exported here too for the domain's own MAC. */
export { macAddressProblem, normaliseMac } from "../network/nic";
export type { ParsedInterface } from "./interface-xml";

/** The name of the virtio-serial channel qemu-guest-agent listens on. */
export const GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0";
/** Machine type requested; libvirt expands it to the newest versioned q35 (e.g. `pc-q35-7.2`). */
export const MACHINE_TYPE = "q35";
/** Target device of the root disk (virtio). */
export const ROOT_DISK_TARGET = "vda";
/** Target device of the seed CD-ROM (SATA). */
export const SEED_TARGET = "sda";

/** Smallest and largest memory accepted, MiB. */
export const MIN_MEMORY_MIB = 128;
export const MAX_MEMORY_MIB = 1024 * 1024;
/** Most vCPUs accepted. */
export const MAX_VCPUS = 256;

/** Everything {@link buildDomainXml} needs. Paths are already resolved by the caller. */
export interface DomainSpec {
  name: string;
  /** From the host configuration: `kvm`, or `qemu` (TCG) on hosts without hardware virtualisation. */
  domainType: DomainType;
  memoryMiB: number;
  vcpus: number;
  firmware: Firmware;
  /** Absolute path of the per-VM qcow2 overlay, as virStorageVolGetPath reported it. */
  diskPath: string;
  /** Absolute path of the NoCloud seed ISO volume. */
  seedPath: string;
  /**
   * Every NIC, in order, each with its attachment (resolved against the
   * host: no host-default left), MAC (libvirt generates one when absent),
   * rate limits and nwfilter.
   */
  nics: readonly CheckedNic[];
  /** Our metadata; a bake's builder (host/image-bake.ts), no proxy, has none. */
  metadata?: ProxyMetadata;
}

function pathProblem(path: unknown): string | undefined {
  if (typeof path !== "string" || !path.startsWith("/") || path === "/")
    return "must be an absolute file path";
  const bad = forbiddenXmlCharacter(path);
  return bad === undefined ? undefined : `contains ${bad}, which XML cannot carry`;
}

/**
 * Checks a spec, recording every failure under `f` (paths `name`,
 * `memoryMiB`, `vcpus`, `diskPath`, `seedPath`, `nics` and `nics[i]` (none,
 * or one not attached to anything libvirt knows; the NICs' own rules were
 * checked on the way in, nic-rules.ts), metadata fields such as `proxyPort`
 * and `tags.<key>`).
 */
export function checkDomainSpec(spec: DomainSpec, f: Failures = new Failures()): Failures {
  const nameProblem = domainNameProblem(spec.name);
  if (nameProblem !== undefined) f.fail("name", nameProblem);
  if (!DOMAIN_TYPES.includes(spec.domainType))
    f.fail("domainType", `must be one of ${DOMAIN_TYPES.join(", ")}`);
  if (!FIRMWARES.includes(spec.firmware)) f.fail("firmware", `must be one of ${FIRMWARES.join(", ")}`);
  if (
    !Number.isInteger(spec.memoryMiB) ||
    spec.memoryMiB < MIN_MEMORY_MIB ||
    spec.memoryMiB > MAX_MEMORY_MIB
  ) {
    f.fail("memoryMiB", `must be an integer from ${MIN_MEMORY_MIB} to ${MAX_MEMORY_MIB}`);
  }
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < 1 || spec.vcpus > MAX_VCPUS) {
    f.fail("vcpus", `must be an integer from 1 to ${MAX_VCPUS}`);
  }
  const diskProblem = pathProblem(spec.diskPath);
  if (diskProblem !== undefined) f.fail("diskPath", diskProblem);
  const seedProblem = pathProblem(spec.seedPath);
  if (seedProblem !== undefined) f.fail("seedPath", seedProblem);
  if (spec.diskPath === spec.seedPath && diskProblem === undefined)
    f.fail("seedPath", "must differ from diskPath");
  checkNics(spec.nics, f);
  if (spec.metadata !== undefined) checkMetadata(spec.metadata, f);
  return f;
}

/** The NICs of a spec (checked NICs, kept as they are): at least one, each attached to something libvirt knows. */
function checkNics(nics: readonly CheckedNic[] | undefined, f: Failures): void {
  if (!Array.isArray(nics) || nics.length === 0) {
    f.fail("nics", "must list at least one NIC");
    return;
  }
  nics.forEach((n, i) => {
    if (attachmentOf(n).kind === "host") {
      f.fail(`nics[${i}]`, "attaches to the host's NIC: resolve it against the host's configuration first");
    }
  });
}

/**
 * CPU features a guest under TCG runs slower with: ERMS and FSRM make Linux and
 * glibc copy by `rep movsb`. Measured on QEMU 7.2 (first boot of the test image
 * to cloud-init done, 1 vCPU, two runs each): 55-62 s without, 63-69 s with.
 */
export const TCG_SLOW_CPU_FEATURES = ["erms", "fsrm"] as const;

/**
 * The domain XML as an element tree (see {@link buildDomainXml}). Throws
 * ValidationError listing every problem in the spec.
 */
export function buildDomainElement(spec: DomainSpec): XmlElement {
  checkDomainSpec(spec).throwIfAny("invalid VM spec");
  const uefi = spec.firmware === "uefi";
  // host-passthrough needs KVM; under TCG, "maximum" asks QEMU for every
  // feature it can emulate (x86-64-v2 and beyond, which current distributions
  // need), where the default qemu64 model lacks SSE4.2/POPCNT. Less the fast
  // string features: with them the guest copies memory by `rep movsb`, which
  // TCG emulates a byte at a time (a test guest's first boot took 10-14% longer).
  const cpu =
    spec.domainType === "kvm"
      ? el("cpu", { mode: "host-passthrough", check: "none" })
      : el(
          "cpu",
          { mode: "maximum" },
          ...TCG_SLOW_CPU_FEATURES.map((name) => el("feature", { policy: "disable", name })),
        );
  return el(
    "domain",
    { type: spec.domainType },
    el("name", {}, spec.name),
    spec.metadata !== undefined && el("metadata", {}, buildMetadataElement(spec.metadata)),
    el("memory", { unit: "MiB" }, spec.memoryMiB),
    el("vcpu", { placement: "static" }, spec.vcpus),
    el(
      "os",
      // firmware='efi' lets libvirt pick the OVMF binary matching the
      // machine and create/manage the NVRAM file (removed by undefine with
      // the NVRAM flag). No explicit <loader>/<nvram>.
      uefi ? { firmware: "efi" } : {},
      el("type", { arch: "x86_64", machine: MACHINE_TYPE }, "hvm"),
      uefi && el("firmware", {}, el("feature", { enabled: "no", name: "secure-boot" })),
      el("boot", { dev: "hd" }),
    ),
    el("features", {}, el("acpi"), el("apic")),
    cpu,
    el("clock", { offset: "utc" }),
    el("on_poweroff", {}, "destroy"),
    el("on_reboot", {}, "restart"),
    // A crashed guest stays down and visible as such, rather than looping.
    el("on_crash", {}, "destroy"),
    el(
      "devices",
      {},
      el(
        "disk",
        { type: "file", device: "disk" },
        el("driver", { name: "qemu", type: "qcow2", discard: "unmap" }),
        el("source", { file: spec.diskPath }),
        el("target", { dev: ROOT_DISK_TARGET, bus: "virtio" }),
      ),
      el(
        "disk",
        { type: "file", device: "cdrom" },
        el("driver", { name: "qemu", type: "raw" }),
        el("source", { file: spec.seedPath }),
        el("target", { dev: SEED_TARGET, bus: "sata" }),
        el("readonly"),
      ),
      ...spec.nics.map(buildInterfaceElement),
      el(
        "channel",
        { type: "unix" },
        // No path: libvirt generates one per domain.
        el("source", { mode: "bind" }),
        el("target", { type: "virtio", name: GUEST_AGENT_CHANNEL }),
      ),
      el("serial", { type: "pty" }, el("target", { port: 0 })),
      el("console", { type: "pty" }, el("target", { type: "serial", port: 0 })),
      el("rng", { model: "virtio" }, el("backend", { model: "random" }, "/dev/urandom")),
    ),
  );
}

/**
 * Builds the domain XML libvirt's virDomainDefineXML takes: a q35 machine of
 * the host's domain type (`kvm` or `qemu`); memory in MiB and static vCPUs;
 * the overlay as a virtio qcow2 disk and the seed as a read-only SATA CD-ROM,
 * both `type='file'` with exactly the given paths; virtio NICs on a libvirt
 * network, a bridge or a host interface (macvtap), with rate limits and
 * nwfilters (see interface-xml.ts); the guest-agent
 * channel `org.qemu.guest_agent.0`; a pty serial console; a virtio RNG fed
 * from /dev/urandom; UEFI via `<os firmware='efi'>` with secure boot off (no
 * explicit loader or NVRAM) or BIOS; our metadata element; power-off and
 * crash destroy, reboot restarts. CPU: host-passthrough under KVM, `maximum`
 * under TCG.
 *
 * Pure; every value is escaped by the serializer. Throws ValidationError
 * listing every problem in the spec.
 */
export function buildDomainXml(spec: DomainSpec): string {
  return serializeXml(buildDomainElement(spec));
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/** One `<disk>` of a parsed domain. */
export interface ParsedDisk {
  /** `file`, `block`, `volume`, `network`... as libvirt reports it. */
  type: string;
  /** `disk`, `cdrom`... */
  device: string;
  /** source file (type file) or dev (type block). */
  source?: string;
  /** For `type='volume'` disks (never ours): the pool and volume named. */
  pool?: string;
  volume?: string;
  driverType?: string;
  targetDev?: string;
  targetBus?: string;
  readonly: boolean;
}

/** What `read` needs from a domain XML. */
export interface ParsedDomain {
  name: string;
  uuid?: string;
  /** The domain type as libvirt reports it (`kvm`, `qemu`, or another driver's). */
  domainType: string;
  /** Machine as libvirt expanded it, e.g. `pc-q35-7.2`. */
  machine?: string;
  /** Maximum memory in MiB (may be fractional if the domain was not defined in whole MiB). */
  memoryMiB: number;
  vcpus: number;
  firmware: Firmware;
  disks: ParsedDisk[];
  /** Source of the first `device='disk'` disk: our overlay. */
  diskPath?: string;
  /** Source of the first `device='cdrom'` disk: our seed. */
  seedPath?: string;
  interfaces: ParsedInterface[];
  /** The first interface's MAC address, lower case. */
  mac?: string;
  /** The first interface's attachment, when it is a network, a bridge or a direct (macvtap) NIC. */
  nic?: NicAttachment;
  /** Our metadata; undefined for domains this provider does not manage. */
  metadata?: ProxyMetadata;
  /**
   * The guest-agent channel as the live XML reports it: `none` when the
   * domain has no such channel, else its target's `state` attribute
   * (`connected`/`disconnected`), undefined when libvirt gives none
   * (inactive XML). get() skips asking a disconnected agent.
   */
  guestAgent?: "none" | "connected" | "disconnected";
}

const UNIT_BYTES: Record<string, number> = {
  b: 1,
  bytes: 1,
  k: 1024,
  kib: 1024,
  kb: 1000,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  mb: 1000 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  gb: 1000 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
  tb: 1000 ** 4,
};

/**
 * Converts a libvirt scaled integer (`<memory unit='KiB'>262144</memory>`;
 * the unit defaults to `defaultUnit`) to bytes. Throws XmlError on a bad value or unit.
 */
export function scaledToBytes(value: string, unit: string | undefined, defaultUnit = "KiB"): number {
  const factor = UNIT_BYTES[(unit ?? defaultUnit).toLowerCase()];
  if (factor === undefined) throw new XmlError(`unknown unit ${JSON.stringify(unit)}`);
  const v = value.trim();
  if (!/^[0-9]{1,20}$/.test(v)) throw new XmlError(`not a non-negative integer: ${JSON.stringify(value)}`);
  return Number(v) * factor;
}

/**
 * Parses a domain XML as libvirt returns it (virDomainGetXMLDesc) into what
 * `read` needs: name, UUID, domain type, memory, vCPUs, disks and their
 * sources, NIC MAC and network/bridge, firmware, and our metadata.
 *
 * Firmware is `uefi` when `<os firmware='efi'>` or a pflash `<loader>` is
 * present, else `bios`. Throws XmlError for malformed XML or a document that
 * is not a domain, and MetadataError when our metadata element is present
 * but invalid; other tools' metadata is ignored.
 */
export function parseDomainXml(xml: string): ParsedDomain {
  const root = parseXml(xml);
  if (root.localName !== "domain" || root.namespace !== "")
    throw new XmlError(`expected <domain>, got <${root.name}>`);
  const name = textContent(childElement(root, "name")).trim();
  if (name === "") throw new XmlError("domain XML lacks <name>");
  const domainType = attribute(root, "type");
  if (domainType === undefined) throw new XmlError("domain XML lacks the type attribute");

  const memory = childElement(root, "memory");
  if (memory === undefined) throw new XmlError("domain XML lacks <memory>");
  const memoryMiB = scaledToBytes(textContent(memory), attribute(memory, "unit")) / 1024 ** 2;
  const vcpuText = textContent(childElement(root, "vcpu")).trim();
  if (!/^[0-9]+$/.test(vcpuText))
    throw new XmlError(`domain XML has a bad <vcpu>: ${JSON.stringify(vcpuText)}`);

  const os = childElement(root, "os");
  const loader = descend(os, "loader");
  const uefi =
    attribute(os, "firmware") === "efi" ||
    attribute(loader, "type") === "pflash" ||
    /ovmf|edk2|efi/i.test(textContent(loader));

  const devices = childElement(root, "devices");
  const disks: ParsedDisk[] = devices === undefined ? [] : childElements(devices, "disk").map(parseDisk);
  const interfaces: ParsedInterface[] =
    devices === undefined ? [] : childElements(devices, "interface").map(parseInterface);

  const parsed: ParsedDomain = {
    name,
    domainType,
    memoryMiB,
    vcpus: Number(vcpuText),
    firmware: uefi ? "uefi" : "bios",
    disks,
    interfaces,
  };
  const uuid = textContent(childElement(root, "uuid")).trim();
  if (uuid !== "") parsed.uuid = uuid;
  const machine = attribute(descend(os, "type"), "machine");
  if (machine !== undefined) parsed.machine = machine;
  const root0 = disks.find((d) => d.device === "disk");
  if (root0?.source !== undefined) parsed.diskPath = root0.source;
  const seed = disks.find((d) => d.device === "cdrom");
  if (seed?.source !== undefined) parsed.seedPath = seed.source;
  const first = interfaces[0];
  if (first?.mac !== undefined) parsed.mac = first.mac;
  const nic = first === undefined ? undefined : parsedAttachmentOf(first);
  if (nic !== undefined) parsed.nic = nic;
  const metadata = findMetadata(root);
  if (metadata !== undefined) parsed.metadata = metadata;
  const agent = agentChannelState(devices);
  if (agent !== undefined) parsed.guestAgent = agent;
  return parsed;
}

function agentChannelState(devices: XmlNode | undefined): ParsedDomain["guestAgent"] {
  const channel = (devices === undefined ? [] : childElements(devices, "channel")).find(
    (c) => attribute(childElement(c, "target"), "name") === GUEST_AGENT_CHANNEL,
  );
  if (channel === undefined) return "none";
  const state = attribute(childElement(channel, "target"), "state");
  return state === "connected" || state === "disconnected" ? state : undefined;
}

function parseDisk(disk: XmlNode): ParsedDisk {
  const source = childElement(disk, "source");
  const driver = childElement(disk, "driver");
  const target = childElement(disk, "target");
  const out: ParsedDisk = {
    type: attribute(disk, "type") ?? "file",
    device: attribute(disk, "device") ?? "disk",
    readonly: childElement(disk, "readonly") !== undefined,
  };
  const src = attribute(source, "file") ?? attribute(source, "dev");
  if (src !== undefined) out.source = src;
  const pool = attribute(source, "pool");
  if (pool !== undefined) out.pool = pool;
  const volume = attribute(source, "volume");
  if (volume !== undefined) out.volume = volume;
  const driverType = attribute(driver, "type");
  if (driverType !== undefined) out.driverType = driverType;
  const dev = attribute(target, "dev");
  if (dev !== undefined) out.targetDev = dev;
  const bus = attribute(target, "bus");
  if (bus !== undefined) out.targetBus = bus;
  return out;
}
