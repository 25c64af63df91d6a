/**
 * The pure parts of address discovery: which reported addresses
 * count, how they are grouped per NIC, and when a wait for an address is
 * settled, by the guest or by the static configuration.
 */
import { describe, expect, it } from "vitest";
import {
  addressesByMac,
  firstGlobalIpv6,
  isGlobalIpv6,
  mapDomainState,
} from "../../../../provider/kvm/domain/states";
import { settledStatus, withStaticAddresses } from "../../../../provider/kvm/host/addresses";
import type { VmStatus } from "../../../../provider/kvm/host/operations";
import { DomainState } from "../../../../provider/libvirt/constants";
import type { DomainInterface } from "../../../../provider/libvirt/types";

describe("isGlobalIpv6", () => {
  it.each([
    ["2001:db8::7", true],
    ["fd00::1", true], // unique local: routes within a site
    ["::1", false],
    ["0:0:0:0:0:0:0:1", false],
    ["::", false],
    ["fe80::1", false],
    ["febf::1", false], // still fe80::/10
    ["fec0::1", true], // just past it
    ["ff02::1", false],
    ["::ffff:192.0.2.1", false],
    ["192.0.2.1", false],
    ["fe80::1%eth0", false],
    ["not an address", false],
  ])("%s → %s", (addr, global) => {
    expect(isGlobalIpv6(addr)).toBe(global);
  });
});

describe("mapDomainState with an address of either family", () => {
  it("a running guest with only a global IPv6 runs", () => {
    expect(mapDomainState({ state: DomainState.RUNNING, reason: 1 }, "2001:db8::7")).toBe("running");
  });
});

/** As the guest agent reports a guest with a loopback, a container bridge and two NICs. */
const AGENT: DomainInterface[] = [
  {
    name: "lo",
    hwaddr: "00:00:00:00:00:00",
    addrs: [
      { type: 0, addr: "127.0.0.1", prefix: 8 },
      { type: 1, addr: "::1", prefix: 128 },
    ],
  },
  { name: "docker0", hwaddr: "02:42:00:00:00:01", addrs: [{ type: 0, addr: "172.17.0.1", prefix: 16 }] },
  {
    name: "enp1s0",
    hwaddr: "52:54:00:AA:00:01",
    addrs: [
      { type: 0, addr: "203.0.113.7", prefix: 24 },
      { type: 1, addr: "2001:db8::7", prefix: 64 },
      { type: 1, addr: "fe80::5054:ff:feaa:1", prefix: 64 },
      { type: 0, addr: "169.254.9.9", prefix: 16 },
    ],
  },
  { name: "enp2s0", hwaddr: "52:54:00:aa:00:02", addrs: [{ type: 1, addr: "fe80::2", prefix: 64 }] },
  { name: "enp1s0.7", hwaddr: "52:54:00:aa:00:01", addrs: [{ type: 0, addr: "198.51.100.7", prefix: 24 }] },
];

describe("addressesByMac", () => {
  it("groups usable v4 and v6 by MAC (lower case), merging a VLAN, without loopback or link-local", () => {
    expect(addressesByMac(AGENT)).toEqual([
      { mac: "02:42:00:00:00:01", addresses: ["172.17.0.1/16"] },
      { mac: "52:54:00:aa:00:01", addresses: ["203.0.113.7/24", "2001:db8::7/64", "198.51.100.7/24"] },
    ]);
  });

  it("with the domain's MACs: only its NICs, in its order", () => {
    const lease: DomainInterface[] = [
      { name: "vnet1", hwaddr: "52:54:00:aa:00:02", addrs: [{ type: 0, addr: "192.168.213.9", prefix: 24 }] },
      ...AGENT,
    ];
    expect(addressesByMac(lease, ["52:54:00:aa:00:02", "52:54:00:AA:00:01", "52:54:00:aa:00:03"])).toEqual([
      { mac: "52:54:00:aa:00:02", addresses: ["192.168.213.9/24"] },
      { mac: "52:54:00:aa:00:01", addresses: ["203.0.113.7/24", "2001:db8::7/64", "198.51.100.7/24"] },
    ]);
  });

  it("a lease without a prefix (a network without that family) gives the bare address, once", () => {
    const lease: DomainInterface[] = [
      {
        name: "vnet0",
        hwaddr: "52:54:00:aa:00:01",
        addrs: [
          { type: 1, addr: "2001:db8::6", prefix: 0 },
          { type: 1, addr: "2001:db8::6", prefix: 0 },
        ],
      },
    ];
    expect(addressesByMac(lease)).toEqual([{ mac: "52:54:00:aa:00:01", addresses: ["2001:db8::6"] }]);
  });
});

describe("firstGlobalIpv6", () => {
  it("prefers the NIC with the domain's MAC and skips link-local and loopback", () => {
    const other: DomainInterface = {
      name: "eth9",
      hwaddr: "52:54:00:aa:00:09",
      addrs: [{ type: 1, addr: "2001:db8::9", prefix: 64 }],
    };
    expect(firstGlobalIpv6([other, ...AGENT], "52:54:00:aa:00:01")).toBe("2001:db8::7");
    expect(firstGlobalIpv6([AGENT[0] as DomainInterface, AGENT[3] as DomainInterface])).toBeUndefined();
  });
});

describe("settledStatus", () => {
  const booting: VmStatus = {
    host: "h",
    name: "vm",
    state: "provisioning",
    mac: "52:54:00:aa:00:01",
    ipAddresses: [],
    guestAgentAnswered: false,
  };
  const STATIC = [
    { mac: "52:54:00:aa:00:02", addresses: ["198.51.100.2/24"] },
    { mac: "52:54:00:AA:00:01", addresses: ["2001:db8::7/64", "203.0.113.7/24"] },
  ];

  it("waits while nothing is known and nothing is configured", () => {
    expect(settledStatus(booting, "ipv4", undefined)).toBeUndefined();
    expect(settledStatus(booting, "any", [])).toBeUndefined();
  });

  it("a reported address of the family settles it as it is", () => {
    const s: VmStatus = { ...booting, state: "running", ipv6Address: "2001:db8::5" };
    expect(settledStatus(s, "ipv6", STATIC)).toBe(s);
    expect(settledStatus(s, "any", undefined)).toBe(s);
    expect(settledStatus(s, "ipv4", undefined)).toBeUndefined();
  });

  it("with static addresses and no agent answering, the configuration answers: first NIC first", () => {
    const s = settledStatus(booting, "ipv4", STATIC);
    expect(s).toMatchObject({
      state: "running",
      ipv4: "203.0.113.7",
      ipSource: "static",
      ipv6Address: "2001:db8::7",
      ipAddresses: [
        { mac: "52:54:00:aa:00:02", addresses: ["198.51.100.2/24"] },
        { mac: "52:54:00:aa:00:01", addresses: ["2001:db8::7/64", "203.0.113.7/24"] },
      ],
    });
  });

  it("an agent that answered has the last word: no configured answer", () => {
    expect(settledStatus({ ...booting, guestAgentAnswered: true }, "ipv4", STATIC)).toBeUndefined();
  });

  it("the configuration answers only for the family it has", () => {
    const v6only = [{ mac: "52:54:00:aa:00:01", addresses: ["2001:db8::7/64"] }];
    expect(settledStatus(booting, "ipv4", v6only)).toBeUndefined();
    expect(settledStatus(booting, "ipv6", v6only)?.ipv6Address).toBe("2001:db8::7");
    expect(settledStatus(booting, "any", v6only)?.state).toBe("running");
  });

  it("what the guest reported for a NIC stays; the configuration fills only the others", () => {
    const reported: VmStatus = {
      ...booting,
      state: "running",
      ipv4: "192.168.213.9",
      ipSource: "lease",
      ipAddresses: [{ mac: "52:54:00:aa:00:01", addresses: ["192.168.213.9/24"] }],
    };
    const s = withStaticAddresses(reported, STATIC);
    // NIC 1's configured IPv6 is not taken: the guest reported NIC 1, and without it.
    expect(s.ipv6Address).toBeUndefined();
    expect(s).toMatchObject({
      ipv4: "192.168.213.9",
      ipSource: "lease",
      ipAddresses: [
        { mac: "52:54:00:aa:00:01", addresses: ["192.168.213.9/24"] },
        { mac: "52:54:00:aa:00:02", addresses: ["198.51.100.2/24"] },
      ],
    });
  });
});
