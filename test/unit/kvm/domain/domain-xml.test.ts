import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  buildDomainXml,
  type DomainSpec,
  GUEST_AGENT_CHANNEL,
  macAddressProblem,
  parseDomainXml,
  scaledToBytes,
} from "../../../../provider/kvm/domain/domain-xml";
import { parseMetadata } from "../../../../provider/kvm/domain/metadata";
import {
  attribute,
  childElement,
  childElements,
  descend,
  parseXml,
  textContent,
  type XmlNode,
} from "../../../../provider/kvm/domain/xml";
import {
  attachmentOf,
  type NicAttachment,
  type NicSpec,
  shorthandNic,
} from "../../../../provider/kvm/network/nic";
import { type CheckedNic, decodeNics } from "../../../../provider/kvm/network/nic-rules";
import { ValidationError } from "../../../../provider/kvm/validation";
import { oneNic, sampleMetadata, sampleSpec } from "../fixtures";

const VARIANTS: [string, Partial<DomainSpec>][] = [
  ["kvm, UEFI, network", {}],
  ["qemu (TCG), UEFI, network", { domainType: "qemu" }],
  ["kvm, BIOS", { firmware: "bios" }],
  ["qemu, BIOS", { domainType: "qemu", firmware: "bios" }],
  ["bridge", { nics: oneNic({ kind: "bridge", bridge: "br0" }) }],
  ["fixed MAC", { nics: oneNic(undefined, "52:54:00:AB:cd:01") }],
  [
    "bridge, fixed MAC, BIOS, qemu",
    {
      nics: oneNic({ kind: "bridge", bridge: "br-lan" }, "52:54:00:00:00:01"),
      firmware: "bios",
      domainType: "qemu",
    },
  ],
  [
    "paths with quotes",
    { diskPath: "/pool/a'/><disk type='volume'", seedPath: '/pool/b"/><source pool="x"' },
  ],
];

function build(overrides: Partial<DomainSpec> = {}): XmlNode {
  return parseXml(buildDomainXml(sampleSpec(overrides)));
}

function devices(root: XmlNode): XmlNode {
  return childElement(root, "devices") as XmlNode;
}

function walk(node: XmlNode, visit: (n: XmlNode) => void): void {
  visit(node);
  for (const c of node.children) if (typeof c !== "string") walk(c, visit);
}

describe("buildDomainXml: disks are files, never pool volumes", () => {
  // History: the first real host (Ubuntu, libvirt 11.6) failed at
  // DomainCreate with "Could not open base image: Permission denied":
  // virt-aa-helper grants AppArmor access only to disk sources with a path,
  // so <disk type='volume'> fails on every stock Debian/Ubuntu host.
  it.each(VARIANTS)("%s: no type='volume' disk and no pool= attribute anywhere", (_, overrides) => {
    const xml = buildDomainXml(sampleSpec(overrides));
    expect(xml).not.toMatch(/type\s*=\s*["']volume["']/);
    expect(xml).not.toMatch(/\spool\s*=\s*["']/);
    walk(parseXml(xml), (n) => {
      expect(n.attrs.pool).toBeUndefined();
      expect(n.attrs.volume).toBeUndefined();
      if (n.localName === "disk") expect(n.attrs.type).toBe("file");
    });
  });

  it.each(VARIANTS)("%s: the disk sources equal the given paths", (_, overrides) => {
    const spec = sampleSpec(overrides);
    const disks = childElements(devices(parseXml(buildDomainXml(spec))), "disk");
    expect(disks.map((d) => attribute(childElement(d, "source"), "file"))).toEqual([
      spec.diskPath,
      spec.seedPath,
    ]);
  });
});

describe("buildDomainXml: devices", () => {
  it("attaches the overlay as a virtio qcow2 disk", () => {
    const disk = childElements(devices(build()), "disk")[0] as XmlNode;
    expect(disk.attrs).toMatchObject({ type: "file", device: "disk" });
    expect(childElement(disk, "driver")?.attrs).toMatchObject({ name: "qemu", type: "qcow2" });
    expect(childElement(disk, "target")?.attrs).toEqual({ dev: "vda", bus: "virtio" });
  });

  it("attaches the seed as a read-only raw SATA CD-ROM", () => {
    const cd = childElements(devices(build()), "disk")[1] as XmlNode;
    expect(cd.attrs).toMatchObject({ type: "file", device: "cdrom" });
    expect(childElement(cd, "driver")?.attrs).toEqual({ name: "qemu", type: "raw" });
    expect(childElement(cd, "target")?.attrs).toEqual({ dev: "sda", bus: "sata" });
    expect(childElement(cd, "readonly")).toBeDefined();
  });

  it("puts the NIC on a libvirt network", () => {
    const nic = childElement(devices(build()), "interface") as XmlNode;
    expect(nic.attrs).toEqual({ type: "network" });
    expect(childElement(nic, "source")?.attrs).toEqual({ network: "default" });
    expect(childElement(nic, "model")?.attrs).toEqual({ type: "virtio" });
  });

  it("puts the NIC on a bridge", () => {
    const nic = childElement(
      devices(build({ nics: oneNic({ kind: "bridge", bridge: "br0" }) })),
      "interface",
    ) as XmlNode;
    expect(nic.attrs).toEqual({ type: "bridge" });
    expect(childElement(nic, "source")?.attrs).toEqual({ bridge: "br0" });
  });

  it("leaves the MAC to libvirt when none is fixed", () => {
    expect(childElement(childElement(devices(build()), "interface") as XmlNode, "mac")).toBeUndefined();
  });

  it("writes a fixed MAC in lower case", () => {
    const nic = childElement(
      devices(build({ nics: oneNic(undefined, "52:54:00:AB:CD:EF") })),
      "interface",
    ) as XmlNode;
    expect(childElement(nic, "mac")?.attrs).toEqual({ address: "52:54:00:ab:cd:ef" });
  });

  it("adds the guest-agent channel (the provider learns the IP through it)", () => {
    const channel = childElement(devices(build()), "channel") as XmlNode;
    expect(channel.attrs).toEqual({ type: "unix" });
    expect(childElement(channel, "target")?.attrs).toEqual({ type: "virtio", name: GUEST_AGENT_CHANNEL });
    expect(GUEST_AGENT_CHANNEL).toBe("org.qemu.guest_agent.0");
  });

  it("adds a pty serial console", () => {
    const d = devices(build());
    expect(childElement(d, "serial")?.attrs).toEqual({ type: "pty" });
    expect(childElement(childElement(d, "console") as XmlNode, "target")?.attrs).toEqual({
      type: "serial",
      port: "0",
    });
  });

  it("adds a virtio RNG fed from /dev/urandom", () => {
    const rng = childElement(devices(build()), "rng") as XmlNode;
    expect(rng.attrs).toEqual({ model: "virtio" });
    expect(textContent(childElement(rng, "backend"))).toBe("/dev/urandom");
  });
});

describe("buildDomainXml: machine", () => {
  it.each(["kvm", "qemu"] as const)("uses the host's domain type %s", (domainType) => {
    expect(build({ domainType }).attrs.type).toBe(domainType);
  });

  it("asks for a q35 x86_64 machine", () => {
    expect(descend(build(), "os", "type")?.attrs).toEqual({ arch: "x86_64", machine: "q35" });
  });

  it("sets memory in MiB and static vCPUs", () => {
    const root = build({ memoryMiB: 2048, vcpus: 4 });
    expect(childElement(root, "memory")?.attrs).toEqual({ unit: "MiB" });
    expect(textContent(childElement(root, "memory"))).toBe("2048");
    expect(textContent(childElement(root, "vcpu"))).toBe("4");
  });

  it("passes the host CPU through under KVM", () => {
    expect(childElement(build({ domainType: "kvm" }), "cpu")?.attrs.mode).toBe("host-passthrough");
  });

  // /dev/kvm on the test host cannot run guests; TCG has no host CPU to pass through.
  it("asks for the maximum emulated CPU under TCG less the fast string features, never host-passthrough", () => {
    const cpu = childElement(build({ domainType: "qemu" }), "cpu");
    expect(cpu?.attrs).toEqual({ mode: "maximum" });
    const features = cpu?.children.flatMap((c) => (typeof c === "string" ? [] : [[c.name, c.attrs]]));
    expect(features).toEqual([
      ["feature", { policy: "disable", name: "erms" }],
      ["feature", { policy: "disable", name: "fsrm" }],
    ]);
  });

  it("keeps every host feature under KVM", () => {
    const cpu = childElement(build({ domainType: "kvm" }), "cpu");
    expect(cpu?.children.filter((c) => typeof c !== "string")).toEqual([]);
  });

  it.each([
    ["on_poweroff", "destroy"],
    ["on_reboot", "restart"],
    ["on_crash", "destroy"],
  ])("sets %s to %s", (element, action) => {
    expect(textContent(childElement(build(), element))).toBe(action);
  });
});

describe("buildDomainXml: firmware", () => {
  // History: Debian 13 hangs after GRUB under SeaBIOS and boots under OVMF.
  it("selects UEFI with <os firmware='efi'> and secure boot off", () => {
    const os = childElement(build({ firmware: "uefi" }), "os") as XmlNode;
    expect(os.attrs).toEqual({ firmware: "efi" });
    expect(childElement(childElement(os, "firmware") as XmlNode, "feature")?.attrs).toEqual({
      enabled: "no",
      name: "secure-boot",
    });
  });

  // libvirt then picks OVMF and owns the NVRAM file, which undefine with the
  // NVRAM flag removes (peer issue: UEFI VMs that could not be undefined).
  it.each(["uefi", "bios"] as const)("%s: writes no explicit loader or nvram", (firmware) => {
    const os = childElement(build({ firmware }), "os") as XmlNode;
    expect(childElement(os, "loader")).toBeUndefined();
    expect(childElement(os, "nvram")).toBeUndefined();
  });

  it("selects BIOS by leaving out the firmware attribute and element", () => {
    const os = childElement(build({ firmware: "bios" }), "os") as XmlNode;
    expect(os.attrs).toEqual({});
    expect(childElement(os, "firmware")).toBeUndefined();
  });

  it("boots from the disk", () => {
    expect(descend(build(), "os", "boot")?.attrs).toEqual({ dev: "hd" });
  });
});

describe("buildDomainXml: metadata and escaping", () => {
  it("embeds our metadata element", () => {
    const xml = buildDomainXml(sampleSpec());
    expect(parseMetadata(xml)).toEqual(sampleMetadata());
  });

  it.each([
    ["a tag", { metadata: sampleMetadata({ tags: { "a'/><disk type='volume'": "]]><x/>&<" } }) }],
    [
      "an owner URN",
      { metadata: sampleMetadata({ owner: { project: "p&<", stack: "s'\"", urn: "urn:]]>" } }) },
    ],
    ["paths", { diskPath: "/pool/a'/><disk type='volume' device='disk'>", seedPath: '/pool/]]>&<"' }],
    [
      "the image ref",
      { metadata: sampleMetadata({ image: { ref: "x'/>", url: "https://e/&<>", format: "raw" } }) },
    ],
  ])("escapes injection attempts through %s and parses them back unchanged", (_, overrides) => {
    const spec = sampleSpec(overrides as Partial<DomainSpec>);
    const xml = buildDomainXml(spec);
    const root = parseXml(xml);
    expect(childElements(devices(root), "disk")).toHaveLength(2);
    const parsed = parseDomainXml(xml);
    expect(parsed.diskPath).toBe(spec.diskPath);
    expect(parsed.seedPath).toBe(spec.seedPath);
    expect(parsed.metadata).toEqual(spec.metadata);
  });
});

describe("buildDomainXml: validation", () => {
  it.each<[string, Partial<DomainSpec>, string]>([
    ["a bad name", { name: "-x" }, "name"],
    ["an injected name", { name: "x'/><disk type='volume'" }, "name"],
    ["too little memory", { memoryMiB: 64 }, "memoryMiB"],
    ["fractional memory", { memoryMiB: 1024.5 }, "memoryMiB"],
    ["zero vCPUs", { vcpus: 0 }, "vcpus"],
    ["a relative disk path", { diskPath: "web-1-root.qcow2" }, "diskPath"],
    ["a seed path with a control character", { seedPath: "/pool/a\u0001" }, "seedPath"],
    ["the same path twice", { seedPath: "/var/lib/libvirt/images/web-1-root.qcow2" }, "seedPath"],
    ["an unknown domain type", { domainType: "xen" as never }, "domainType"],
    ["an unknown firmware", { firmware: "efi" as never }, "firmware"],
    ["a bad proxy port in the metadata", { metadata: sampleMetadata({ proxyPort: 0 }) }, "proxyPort"],
  ])("rejects %s at %s", (_, overrides, property) => {
    try {
      buildDomainXml(sampleSpec(overrides));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).failures.map((f) => f.property)).toContain(property);
    }
  });

  it("reports every failure at once", () => {
    try {
      buildDomainXml(sampleSpec({ name: "", memoryMiB: 0, vcpus: 0 }));
      expect.unreachable();
    } catch (err) {
      expect((err as ValidationError).failures.map((f) => f.property)).toEqual([
        "name",
        "memoryMiB",
        "vcpus",
      ]);
    }
  });

  it.each([
    ["52:54:00:12:34:56", undefined],
    ["02:00:00:00:00:01", undefined],
    ["00:00:00:00:00:00", "zero"],
    ["ff:ff:ff:ff:ff:ff", "unicast"],
    ["52:54:00:12:34", "six"],
    ["52:54:00:12:34:5g", "six"],
  ])("judges the MAC %s", (mac, problem) => {
    if (problem === undefined) expect(macAddressProblem(mac)).toBeUndefined();
    else expect(macAddressProblem(mac)).toContain(problem);
  });
});

describe("parseDomainXml", () => {
  it.each(VARIANTS)("%s: round-trips build -> parse", (_, overrides) => {
    const spec = sampleSpec(overrides);
    const parsed = parseDomainXml(buildDomainXml(spec));
    expect(parsed).toMatchObject({
      name: spec.name,
      domainType: spec.domainType,
      memoryMiB: spec.memoryMiB,
      vcpus: spec.vcpus,
      firmware: spec.firmware,
      diskPath: spec.diskPath,
      seedPath: spec.seedPath,
      nic: attachmentOf(spec.nics[0] as NicSpec),
      metadata: spec.metadata,
    });
    expect(parsed.mac).toBe(spec.nics[0]?.mac);
    expect(parsed.disks.map((d) => [d.type, d.device, d.driverType, d.targetDev, d.readonly])).toEqual([
      ["file", "disk", "qcow2", "vda", false],
      ["file", "cdrom", "raw", "sda", true],
    ]);
  });

  // Trimmed from `virsh dumpxml` on the test host (libvirt 9.0) after defining
  // a UEFI TCG domain built by buildDomainXml.
  const DUMPED = `<domain type='qemu'>
  <name>kvmp-probe</name>
  <uuid>be2786b4-781b-4b6f-ac67-684f1c2eb31f</uuid>
  <metadata>
    <kvmp:proxy xmlns:kvmp="https://pulumi-kvm-proxy.dev/xmlns/proxy/v1" version="1" managedBy="pulumi-kvm-proxy" createdAt="2026-09-04T14:04:00.000Z">
      <kvmp:owner project="infra" stack="prod" urn="urn:x"/>
      <kvmp:image ref="debian" url="https://e/d.qcow2" format="qcow2"/>
      <kvmp:spec hash="${"b".repeat(64)}" proxyPort="3128" diskGiB="10"/>
    </kvmp:proxy>
  </metadata>
  <memory unit='KiB'>262144</memory>
  <currentMemory unit='KiB'>262144</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <firmware>
      <feature enabled='no' name='secure-boot'/>
    </firmware>
    <boot dev='hd'/>
  </os>
  <cpu mode='maximum' check='none'/>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/pool/kvmp-probe-root.qcow2'/>
      <target dev='vda' bus='virtio'/>
      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/pool/kvmp-probe-seed.iso'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <interface type='network'>
      <mac address='52:54:00:12:34:56'/>
      <source network='default'/>
      <model type='virtio'/>
    </interface>
  </devices>
</domain>`;

  it("reads what libvirt returns", () => {
    expect(parseDomainXml(DUMPED)).toMatchObject({
      name: "kvmp-probe",
      uuid: "be2786b4-781b-4b6f-ac67-684f1c2eb31f",
      domainType: "qemu",
      machine: "pc-q35-7.2",
      memoryMiB: 256,
      vcpus: 1,
      firmware: "uefi",
      diskPath: "/pool/kvmp-probe-root.qcow2",
      seedPath: "/pool/kvmp-probe-seed.iso",
      mac: "52:54:00:12:34:56",
      nic: { kind: "network", network: "default" },
      metadata: { proxyPort: 3128, tags: {} },
    });
  });

  it("reads a domain without our metadata as unmanaged", () => {
    const other = DUMPED.replace(/<metadata>[\s\S]*<\/metadata>/, "");
    expect(parseDomainXml(other).metadata).toBeUndefined();
  });

  it("recognises UEFI from a pflash loader (older libvirt, or hand-written XML)", () => {
    const manual = DUMPED.replace("<os firmware='efi'>", "<os>").replace(
      "<boot dev='hd'/>",
      "<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader><boot dev='hd'/>",
    );
    expect(parseDomainXml(manual).firmware).toBe("uefi");
  });

  it("reports a volume disk that someone else defined, with its pool", () => {
    const vol = DUMPED.replace(
      "<source file='/pool/kvmp-probe-root.qcow2'/>",
      "<source pool='default' volume='x.qcow2'/>",
    ).replace("<disk type='file' device='disk'>", "<disk type='volume' device='disk'>");
    const parsed = parseDomainXml(vol);
    expect(parsed.disks[0]).toMatchObject({ type: "volume", pool: "default", volume: "x.qcow2" });
    expect(parsed.diskPath).toBeUndefined();
  });

  it("reads a bridge attachment", () => {
    const bridged = DUMPED.replace("<interface type='network'>", "<interface type='bridge'>").replace(
      "<source network='default'/>",
      "<source bridge='br0'/>",
    );
    expect(parseDomainXml(bridged).nic).toEqual({ kind: "bridge", bridge: "br0" });
  });

  it.each([
    ["not a domain", "<network><name>x</name></network>"],
    ["no name", "<domain type='kvm'><memory>1</memory><vcpu>1</vcpu></domain>"],
    ["no type", "<domain><name>x</name><memory>1</memory><vcpu>1</vcpu></domain>"],
    ["no memory", "<domain type='kvm'><name>x</name><vcpu>1</vcpu></domain>"],
    [
      "a bad memory unit",
      "<domain type='kvm'><name>x</name><memory unit='parsecs'>1</memory><vcpu>1</vcpu></domain>",
    ],
    ["a bad vcpu", "<domain type='kvm'><name>x</name><memory>1</memory><vcpu>two</vcpu></domain>"],
  ])("rejects %s", (_, xml) => {
    expect(() => parseDomainXml(xml)).toThrow();
  });

  it.each([
    ["1", undefined, 1024],
    ["1", "KiB", 1024],
    ["1", "k", 1024],
    ["2", "MiB", 2 * 1024 ** 2],
    ["1", "G", 1024 ** 3],
    ["1", "GB", 1e9],
    ["5", "bytes", 5],
  ])("scales %s %s to %i bytes", (value, unit, bytes) => {
    expect(scaledToBytes(value, unit)).toBe(bytes);
  });
});

describe("buildDomainXml: nics", () => {
  const NICS: CheckedNic[] = decodeNics([
    {
      bridge: "br-pub",
      mac: "52:54:00:AA:00:01",
      addresses: ["203.0.113.7/24", "2001:db8::7/64", "203.0.113.8/24"],
      gateway4: "203.0.113.1",
      nameservers: [],
      bandwidth: { inboundKbps: 8192, outboundKbps: 1000 },
      filter: "clean-traffic",
      primary: true,
    },
    {
      network: "kvmp-nat",
      mac: "52:54:00:aa:00:02",
      addresses: [],
      nameservers: [],
      bandwidth: { outboundKbps: 8 },
      primary: false,
    },
    {
      direct: { dev: "eth1", mode: "vepa" },
      addresses: [],
      nameservers: [],
      primary: false,
    },
  ]);

  function interfaces(spec: Partial<DomainSpec>): XmlNode[] {
    return childElements(devices(build(spec)), "interface");
  }

  it("renders one virtio interface per NIC, in order, with its attachment", () => {
    const got = interfaces({ nics: NICS }).map((i) => ({
      type: attribute(i, "type"),
      source: childElement(i, "source")?.attrs,
      model: attribute(childElement(i, "model"), "type"),
    }));
    expect(got).toEqual([
      { type: "bridge", source: { bridge: "br-pub" }, model: "virtio" },
      { type: "network", source: { network: "kvmp-nat" }, model: "virtio" },
      { type: "direct", source: { dev: "eth1", mode: "vepa" }, model: "virtio" },
    ]);
  });

  it("trusts the guest's receive filters on a direct NIC only (IPv6 neighbour discovery over macvtap)", () => {
    expect(interfaces({ nics: NICS }).map((i) => attribute(i, "trustGuestRxFilters"))).toEqual([
      undefined,
      undefined,
      "yes",
    ]);
  });

  it("gives each NIC its MAC in lower case, and none when the NIC has none", () => {
    const macs = interfaces({ nics: NICS }).map((i) => attribute(childElement(i, "mac"), "address"));
    expect(macs).toEqual(["52:54:00:aa:00:01", "52:54:00:aa:00:02", undefined]);
  });

  it("limits a NIC's rates in KiB/s, only in the directions given", () => {
    const bandwidth = interfaces({ nics: NICS }).map((i) => {
      const b = childElement(i, "bandwidth");
      return b === undefined ? undefined : childElements(b).map((d) => [d.localName, d.attrs]);
    });
    expect(bandwidth).toEqual([
      [
        ["inbound", { average: "1000" }],
        ["outbound", { average: "123" }],
      ],
      [["outbound", { average: "1" }]],
      undefined,
    ]);
  });

  it("references the nwfilter with one IP parameter per static IPv4 address", () => {
    const [pub, nat] = interfaces({ nics: NICS });
    const filterref = childElement(pub as XmlNode, "filterref") as XmlNode;
    expect(attribute(filterref, "filter")).toBe("clean-traffic");
    expect(childElements(filterref, "parameter").map((p) => p.attrs)).toEqual([
      { name: "IP", value: "203.0.113.7" },
      { name: "IP", value: "203.0.113.8" },
    ]);
    expect(childElement(nat as XmlNode, "filterref")).toBeUndefined();
  });

  it("renders the shorthand's one NIC as a direct NIC too", () => {
    const [iface] = interfaces({ nics: oneNic({ kind: "direct", dev: "eth1", mode: "passthrough" }) });
    expect([attribute(iface, "type"), childElement(iface as XmlNode, "source")?.attrs]).toEqual([
      "direct",
      { dev: "eth1", mode: "passthrough" },
    ]);
  });

  // The rules of a NIC are decodeNics' (nic.test.ts): the builder takes checked NICs as they are.
  const refusals: [string, Partial<DomainSpec>, string][] = [
    ["an empty list of NICs", { nics: [] }, "nics"],
    ["no NIC at all", { nics: undefined as never }, "nics"],
    [
      "a NIC on the host's NIC, not resolved against the host",
      { nics: decodeNics([shorthandNic(undefined, undefined)]) },
      "nics[0]",
    ],
  ];
  it.each(refusals.map(([label, overrides, property]) => [label, property, overrides] as const))(
    "rejects %s at %s",
    (_, property, overrides) => {
      try {
        buildDomainXml(sampleSpec(overrides));
        expect.unreachable();
      } catch (err) {
        expect(err).toBeInstanceOf(ValidationError);
        expect((err as ValidationError).failures.map((f) => f.property)).toContain(property);
      }
    },
  );
});

describe("parseDomainXml: interfaces", () => {
  it("reads back every NIC: attachment, MAC, rates in KiB/s, filter and parameters", () => {
    const spec = sampleSpec({
      nics: decodeNics([
        {
          bridge: "br-pub",
          mac: "52:54:00:aa:00:01",
          addresses: ["203.0.113.7/24"],
          gateway4: "203.0.113.1",
          nameservers: [],
          bandwidth: { inboundKbps: 8192 },
          filter: "clean-traffic",
          primary: true,
        },
        {
          direct: { dev: "eth1", mode: "private" },
          addresses: [],
          nameservers: [],
          primary: false,
        },
      ]),
    });
    const parsed = parseDomainXml(buildDomainXml(spec));
    expect(parsed.interfaces).toEqual([
      {
        type: "bridge",
        mac: "52:54:00:aa:00:01",
        bridge: "br-pub",
        model: "virtio",
        bandwidth: { inboundKiBps: 1000 },
        filter: "clean-traffic",
        filterParameters: [{ name: "IP", value: "203.0.113.7" }],
      },
      { type: "direct", dev: "eth1", mode: "private", model: "virtio" },
    ]);
    expect(parsed.nic).toEqual({ kind: "bridge", bridge: "br-pub" });
  });

  const DIRECT = (source: string, extra = "") =>
    `<domain type='kvm'><name>x</name><memory>1</memory><vcpu>1</vcpu><devices>
      <interface type='direct'><mac address='52:54:00:12:34:56'/>${source}<model type='virtio'/>${extra}</interface>
    </devices></domain>`;

  it.each<[string, string, NicAttachment | undefined]>([
    ["a direct NIC", "<source dev='eth1' mode='bridge'/>", { kind: "direct", dev: "eth1", mode: "bridge" }],
    [
      "a direct NIC without a mode (libvirt's default, vepa)",
      "<source dev='eth1'/>",
      { kind: "direct", dev: "eth1", mode: "vepa" },
    ],
    ["a direct NIC in a mode it does not know", "<source dev='eth1' mode='fancy'/>", undefined],
    ["a direct NIC without a device", "<source mode='bridge'/>", undefined],
  ])("reads %s as the first NIC's attachment", (_, source, nic) => {
    expect(parseDomainXml(DIRECT(source)).nic).toEqual(nic);
  });

  it("reads the live XML of a rate-limited NIC, leaving out a rate that is not a number", () => {
    const xml = DIRECT(
      "<source dev='eth1' mode='bridge'/>",
      "<bandwidth><inbound average='10' peak='20' burst='5'/><outbound average='lots'/></bandwidth>",
    );
    expect(parseDomainXml(xml).interfaces[0]?.bandwidth).toEqual({ inboundKiBps: 10 });
  });

  it("reads a filterref without parameters", () => {
    const xml = DIRECT("<source dev='eth1' mode='bridge'/>", "<filterref filter='no-mac-spoofing'/>");
    expect(parseDomainXml(xml).interfaces[0]).toMatchObject({
      filter: "no-mac-spoofing",
      filterParameters: [],
    });
  });

  it("reports no mode for a NIC that is not direct", () => {
    const xml = DIRECT("<source network='default' mode='x'/>").replace("type='direct'", "type='network'");
    expect(parseDomainXml(xml).interfaces[0]?.mode).toBeUndefined();
  });
});

describe("buildDomainXml: golden", () => {
  // The XML of these specs is pinned byte for byte: the shorthand's one NIC
  // and `nics` build what existing VMs were defined with.
  const GOLDEN = JSON.parse(readFileSync(join(__dirname, "golden", "domain-xml.json"), "utf8")) as Record<
    string,
    string
  >;
  const cases: Record<string, Partial<DomainSpec>> = {
    shorthandNetwork: {},
    shorthandBridgeMac: { nics: oneNic({ kind: "bridge", bridge: "br0" }, "52:54:00:AB:cd:01") },
    shorthandDirect: { nics: oneNic({ kind: "direct", dev: "eth1", mode: "vepa" }) },
    nics: {
      nics: decodeNics([
        {
          network: "default",
          mac: "52:54:00:00:00:01",
          addresses: ["203.0.113.7/24"],
          gateway4: "203.0.113.1",
          nameservers: [],
          bandwidth: { inboundKbps: 1000 },
          filter: "clean-traffic",
          primary: true,
        },
        {
          direct: { dev: "eth1", mode: "bridge" },
          mac: "52:54:00:00:00:02",
          addresses: [],
          nameservers: [],
          primary: false,
        },
      ]),
    },
  };
  it.each(Object.keys(cases))("%s: the pinned XML", (key) => {
    expect(buildDomainXml(sampleSpec(cases[key]))).toBe(GOLDEN[key]);
  });
});
