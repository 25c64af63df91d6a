import { describe, expect, it } from "vitest";
import type { NicSpec } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import { addressOutputs, proxyAddressOf, waitOptionsOf } from "../../../provider/resource/address-outputs";
import { bandwidthChanges } from "../../../provider/resource/diff";

const nic = (mac: string, extra: Partial<NicSpec> = {}): NicSpec => ({
  network: "default",
  mac,
  addresses: [],
  nameservers: [],
  primary: false,
  ...extra,
});
const A = "52:54:00:00:00:0a";
const B = "52:54:00:00:00:0b";

describe("addressOutputs", () => {
  it("the one-NIC shorthand keeps the reported IPv4, and adds the first NIC's global IPv6", () => {
    expect(
      addressOutputs(undefined, {
        mac: A,
        ipv4: "192.168.122.5",
        ipAddresses: [{ mac: A, addresses: ["192.168.122.5/24", "fe80::1/64", "2001:db8::5/64"] }],
      }),
    ).toEqual({
      ipAddress: "192.168.122.5",
      ipv6Address: "2001:db8::5",
      ipAddresses: [{ mac: A, addresses: ["192.168.122.5/24", "fe80::1/64", "2001:db8::5/64"] }],
    });
  });

  it("takes the primary NIC's addresses, not the first NIC's", () => {
    const out = addressOutputs([nic(A), nic(B, { primary: true })], {
      ipv4: "192.168.122.5",
      ipAddresses: [
        { mac: A, addresses: ["192.168.122.5/24"] },
        { mac: B, addresses: ["203.0.113.7/24", "2001:db8::7/64"] },
      ],
    });
    expect(out.ipAddress).toBe("203.0.113.7");
    expect(out.ipv6Address).toBe("2001:db8::7");
  });

  it("shows a NIC's static addresses until the guest reports its own, in the order of nics", () => {
    const nics = [
      nic(A),
      nic(B, { bridge: "br0", addresses: ["203.0.113.7/24", "2001:db8::7/64"], primary: true }),
    ];
    const out = addressOutputs(nics, { ipAddresses: [{ mac: A, addresses: ["192.168.122.5/24"] }] });
    expect(out.ipAddresses).toEqual([
      { mac: A, addresses: ["192.168.122.5/24"] },
      { mac: B, addresses: ["203.0.113.7/24", "2001:db8::7/64"] },
    ]);
    expect(proxyAddressOf(nics, { ipAddresses: [] })).toBe("203.0.113.7");
  });

  it("falls back to IPv6 for the proxy's address when the primary NIC has no IPv4", () => {
    expect(proxyAddressOf([nic(A, { addresses: ["2001:db8::7/64"], primary: true })], {})).toBe(
      "2001:db8::7",
    );
  });

  it("has no address before any is known", () => {
    expect(proxyAddressOf([nic(A, { primary: true })], {})).toBeUndefined();
  });
});

describe("waitOptionsOf", () => {
  it.each([
    [true, "ipv4"],
    ["ipv6", "ipv6"],
    ["any", "any"],
  ] as const)("waitForIp %s waits for %s", (waitForIp, family) => {
    expect(waitOptionsOf({ waitForIp }).family).toBe(family);
  });

  it("passes the static addresses, which need no wait", () => {
    expect(
      waitOptionsOf({
        waitForIp: true,
        nics: decodeNics([nic(A), nic(B, { addresses: ["203.0.113.7/24"] })]),
      }).staticAddresses,
    ).toEqual([{ mac: B, addresses: ["203.0.113.7/24"] }]);
  });
});

describe("bandwidthChanges", () => {
  it.each([
    ["a new limit", [nic(A)], [nic(A, { bandwidth: { outboundKbps: 8000 } })], [[A, { outboundKbps: 8000 }]]],
    [
      "a changed limit",
      [nic(A, { bandwidth: { outboundKbps: 1 } })],
      [nic(A, { bandwidth: { outboundKbps: 2 } })],
      [[A, { outboundKbps: 2 }]],
    ],
    ["a lifted limit", [nic(A, { bandwidth: { inboundKbps: 5 } })], [nic(A)], [[A, {}]]],
    [
      "no change",
      [nic(A, { bandwidth: { inboundKbps: 5 } })],
      [nic(A, { bandwidth: { inboundKbps: 5 } })],
      [],
    ],
    [
      "a NIC that is new (the VM is replaced anyway)",
      [nic(A)],
      [nic(B, { bandwidth: { inboundKbps: 5 } })],
      [],
    ],
  ])("%s", (_what, olds, news, expected) => {
    expect(bandwidthChanges(olds, news)).toEqual(expected);
  });
});
