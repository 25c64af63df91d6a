/**
 * The `<interface>` element a bandwidth update sends (interfaces.ts
 * `interfaceWithBandwidth`): the NIC of one MAC, everything but
 * `<bandwidth>` as it was. What libvirt makes of it is tested against the
 * real daemon (test/libvirtd/kvm/interfaces.test.ts).
 */
import { describe, expect, it } from "vitest";
import {
  childElement,
  childElements,
  parseXml,
  serializeXml,
  type XmlNode,
} from "../../../../provider/kvm/domain/xml";
import { interfaceWithBandwidth } from "../../../../provider/kvm/host/interfaces";

const DOMAIN = `<domain type='qemu'><name>vm</name><devices>
<interface type='network'><mac address='52:54:00:aa:00:01'/><source network='kvmp-nat'/>
<bandwidth><inbound average='10' peak='20'/></bandwidth><model type='virtio'/>
<address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/></interface>
<interface type='bridge'><mac address='52:54:00:aa:00:02'/><source bridge='br0'/><model type='virtio'/></interface>
</devices></domain>`;

function sent(mac: string, b: Parameters<typeof interfaceWithBandwidth>[2]): XmlNode {
  const e = interfaceWithBandwidth(DOMAIN, mac, b);
  if (e === undefined) throw new Error("no element");
  return parseXml(serializeXml(e));
}

function withoutBandwidth(n: XmlNode): string[] {
  return childElements(n)
    .filter((c) => c.localName !== "bandwidth")
    .map((c) => `${c.name} ${JSON.stringify(c.attrs)}`);
}

describe("interfaceWithBandwidth", () => {
  it("replaces the NIC's bandwidth, in KiB/s rounded up, keeping every other part", () => {
    const n = sent("52:54:00:AA:00:01", { inboundKbps: 8000, outboundKbps: 1 });
    const bw = childElement(n, "bandwidth");
    expect(childElements(bw as XmlNode).map((c) => [c.name, c.attrs])).toEqual([
      ["inbound", { average: "977" }], // 8000 kbit/s = 976.5625 KiB/s
      ["outbound", { average: "1" }],
    ]);
    expect(n.attrs).toEqual({ type: "network" });
    expect(withoutBandwidth(n)).toEqual([
      'mac {"address":"52:54:00:aa:00:01"}',
      'source {"network":"kvmp-nat"}',
      'model {"type":"virtio"}',
      'address {"type":"pci","domain":"0x0000","bus":"0x01","slot":"0x00","function":"0x0"}',
    ]);
  });

  it("one direction only: the other has no element", () => {
    const bw = childElement(sent("52:54:00:aa:00:02", { outboundKbps: 1024 }), "bandwidth") as XmlNode;
    expect(childElements(bw).map((c) => [c.name, c.attrs])).toEqual([["outbound", { average: "125" }]]);
  });

  it("no limit removes the element", () => {
    expect(childElement(sent("52:54:00:aa:00:01", {}), "bandwidth")).toBeUndefined();
    expect(childElement(sent("52:54:00:aa:00:01", undefined), "bandwidth")).toBeUndefined();
  });

  it("a MAC the domain has no NIC with gives nothing", () => {
    expect(interfaceWithBandwidth(DOMAIN, "52:54:00:aa:00:03", { inboundKbps: 1 })).toBeUndefined();
  });
});
