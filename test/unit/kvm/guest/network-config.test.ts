/**
 * The seed's network-config, parsed back as YAML and compared as structures.
 * Which keys cloud-init 22.4 (Debian 12, the guest image's) renders how is
 * written in network-config.ts; these tests hold the document to that.
 */
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { buildNetworkConfig, needsNetworkConfig } from "../../../../provider/kvm/guest/network-config";
import { type NicSpec, shorthandNic } from "../../../../provider/kvm/network/nic";
import { decodeNics } from "../../../../provider/kvm/network/nic-rules";
import { ValidationError } from "../../../../provider/kvm/validation";

function nic(over: Partial<NicSpec> = {}): NicSpec {
  return {
    network: "default",
    mac: "52:54:00:00:00:01",
    addresses: [],
    nameservers: [],
    primary: true,
    ...over,
  };
}

function parsed(nics: NicSpec[]): unknown {
  return YAML.parse(buildNetworkConfig(decodeNics(nics)));
}

describe("needsNetworkConfig", () => {
  const cases: [string, NicSpec[], boolean][] = [
    ["one DHCP NIC (the image's own configuration)", [nic()], false],
    ["the shorthand's one NIC, its MAC left to libvirt", [shorthandNic(undefined, undefined)], false],
    [
      "one DHCP NIC with rate limits and a filter",
      [nic({ bandwidth: { inboundKbps: 10 }, filter: "clean-traffic" })],
      false,
    ],
    ["two DHCP NICs", [nic(), nic({ mac: "52:54:00:00:00:02", primary: false })], true],
    ["a static address", [nic({ addresses: ["203.0.113.7/24"] })], true],
    ["nameservers only", [nic({ nameservers: ["1.1.1.1"] })], true],
  ];
  it.each(cases.map(([label, nics, needed]) => [label, needed, nics] as const))(
    "%s: %s",
    (_, needed, nics) => {
      expect(needsNetworkConfig(nics)).toBe(needed);
    },
  );
});

describe("buildNetworkConfig", () => {
  it("writes a static dual-stack NIC: addresses, IPv4 route, gateway6, nameservers, no DHCP", () => {
    const doc = parsed([
      nic({
        network: undefined,
        bridge: "br-pub",
        mac: "52:54:00:aa:00:01",
        addresses: ["203.0.113.7/24", "2001:db8::7/64"],
        gateway4: "203.0.113.1",
        gateway6: "2001:db8::1",
        nameservers: ["1.1.1.1", "2606:4700:4700::1111"],
      }),
    ]);
    expect(doc).toEqual({
      version: 2,
      ethernets: {
        nic0: {
          match: { macaddress: "52:54:00:aa:00:01" },
          dhcp4: false,
          dhcp6: false,
          addresses: ["203.0.113.7/24", "2001:db8::7/64"],
          routes: [{ to: "0.0.0.0/0", via: "203.0.113.1" }],
          gateway6: "2001:db8::1",
          nameservers: { addresses: ["1.1.1.1", "2606:4700:4700::1111"] },
        },
      },
    });
  });

  it("writes one entry per NIC, in order, each matched by its MAC; DHCP NICs ask DHCPv4", () => {
    const doc = parsed([
      nic({ mac: "52:54:00:aa:00:01", addresses: ["203.0.113.7/24"] }),
      nic({ mac: "52:54:00:aa:00:02", primary: false }),
    ]) as { ethernets: Record<string, unknown> };
    expect(doc.ethernets).toEqual({
      nic0: {
        match: { macaddress: "52:54:00:aa:00:01" },
        dhcp4: false,
        dhcp6: false,
        addresses: ["203.0.113.7/24"],
      },
      nic1: { match: { macaddress: "52:54:00:aa:00:02" }, dhcp4: true, dhcp6: false },
    });
    expect(Object.keys(doc.ethernets)).toEqual(["nic0", "nic1"]);
  });

  it("keeps DHCPv4 on a NIC with static IPv6 only (a link-local gateway6 as given)", () => {
    const doc = parsed([nic({ addresses: ["2001:db8::7/64"], gateway6: "fe80::1" })]) as {
      ethernets: { nic0: unknown };
    };
    expect(doc.ethernets.nic0).toEqual({
      match: { macaddress: "52:54:00:00:00:01" },
      dhcp4: true,
      dhcp6: false,
      addresses: ["2001:db8::7/64"],
      gateway6: "fe80::1",
    });
  });

  it("lists IPv4 addresses before IPv6 ones, each family in the order given", () => {
    const doc = parsed([
      nic({ addresses: ["2001:db8::8/64", "203.0.113.8/24", "2001:db8::7/64", "203.0.113.7/24"] }),
    ]) as { ethernets: { nic0: { addresses: string[] } } };
    expect(doc.ethernets.nic0.addresses).toEqual([
      "203.0.113.8/24",
      "203.0.113.7/24",
      "2001:db8::8/64",
      "2001:db8::7/64",
    ]);
  });

  it("matches a MAC given in upper case by its lower case (the v2 schema asks for it)", () => {
    const doc = parsed([nic({ mac: "52:54:00:AA:BB:CC" })]) as { ethernets: { nic0: { match: unknown } } };
    expect(doc.ethernets.nic0.match).toEqual({ macaddress: "52:54:00:aa:bb:cc" });
  });

  it("quotes every string, so a YAML 1.1 reader (cloud-init's PyYAML) keeps MACs and addresses as text", () => {
    // A plain 52:54:00:12:34:56 is a base-60 integer in YAML 1.1.
    expect(typeof YAML.parse("m: 52:54:00:12:34:56", { version: "1.1" }).m).toBe("number");
    const text = buildNetworkConfig(
      decodeNics([
        nic({
          mac: "52:54:00:12:34:56",
          addresses: ["1:2:3:4:5:6:7:8/64"],
          nameservers: ["1:2:3:4:5:6:7:9"],
        }),
      ]),
    );
    expect(YAML.parse(text, { version: "1.1" })).toEqual(YAML.parse(text));
  });

  it("uses no key Debian 12's cloud-init 22.4 mishandles (to: default, a ::/0 route, set-name, a network: wrapper)", () => {
    const text = buildNetworkConfig(
      decodeNics([
        nic({
          addresses: ["203.0.113.7/24", "2001:db8::7/64"],
          gateway4: "203.0.113.1",
          gateway6: "2001:db8::1",
        }),
        nic({
          mac: "52:54:00:00:00:02",
          addresses: ["2001:db8:1::7/64"],
          gateway6: "fe80::1",
          primary: false,
        }),
      ]),
    );
    expect(text).not.toMatch(/default|::\/0|set-name|^network:/m);
    expect(text).toMatch(/^version: 2$/m);
  });

  it("is block-style YAML ending in a newline", () => {
    expect(buildNetworkConfig(decodeNics([nic({ addresses: ["203.0.113.7/24"] })]))).toBe(
      [
        "version: 2",
        "ethernets:",
        "  nic0:",
        "    match:",
        '      macaddress: "52:54:00:00:00:01"',
        "    dhcp4: false",
        "    dhcp6: false",
        "    addresses:",
        '      - "203.0.113.7/24"',
        "",
      ].join("\n"),
    );
  });

  it("refuses a NIC without a MAC, naming it", () => {
    const withoutMac = nic({ primary: false });
    delete withoutMac.mac;
    try {
      buildNetworkConfig(decodeNics([nic(), withoutMac]));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).failures).toEqual([
        { property: "nics[1].macAddress", reason: "is needed: network-config matches NICs by MAC" },
      ]);
    }
  });
});
