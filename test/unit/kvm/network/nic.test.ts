import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  attachmentOf,
  DIRECT_MODES,
  deriveMac,
  filterParameters,
  libvirtBandwidth,
  MAX_BANDWIDTH_KBPS,
  MAX_NICS,
  macAddressProblem,
  type NicAttachment,
  type NicSpec,
  shorthandNic,
} from "../../../../provider/kvm/network/nic";
import {
  type CheckedNic,
  checkNicSpecs,
  decodeNics,
  readNics,
  resolveHostNics,
} from "../../../../provider/kvm/network/nic-rules";
import { Failures, type ValidationError, type ValidationFailure } from "../../../../provider/kvm/validation";

/** Stands for a Pulumi unknown at preview. */
const PENDING = "<pending>";

function read(input: unknown): { result: ReturnType<typeof readNics>; failures: ValidationFailure[] } {
  const f = new Failures();
  const result = readNics(input, f, { isPending: (v) => v === PENDING });
  return { result, failures: f.list };
}

function properties(input: unknown): string[] {
  return read(input).failures.map((x) => x.property);
}

function nics(input: unknown): NicSpec[] {
  const { result, failures } = read(input);
  expect(failures).toEqual([]);
  return result as NicSpec[];
}

describe("readNics: what it returns", () => {
  it.each<[string, Record<string, unknown>, NicAttachment]>([
    ["a libvirt network", { network: "default" }, { kind: "network", network: "default" }],
    ["a host bridge", { bridge: "br0" }, { kind: "bridge", bridge: "br0" }],
    [
      "a macvtap device, mode bridge by default",
      { direct: { dev: "eth1" } },
      { kind: "direct", dev: "eth1", mode: "bridge" },
    ],
    [
      "a macvtap device in a given mode",
      { direct: { dev: "eth1", mode: "vepa" } },
      { kind: "direct", dev: "eth1", mode: "vepa" },
    ],
  ])("reads %s", (_, nic, attachment) => {
    expect(attachmentOf(nics([nic])[0] as NicSpec)).toEqual(attachment);
  });

  it("accepts every macvtap mode", () => {
    for (const mode of DIRECT_MODES) {
      expect(nics([{ direct: { dev: "eth1", mode } }])[0]?.direct).toEqual({ dev: "eth1", mode });
    }
  });

  it("returns addresses, gateways and nameservers as given (in canonical text)", () => {
    const given = {
      bridge: "br0",
      addresses: ["203.0.113.7/24", "2001:db8::7/64"],
      gateway4: "203.0.113.1",
      gateway6: "2001:db8::1",
      nameservers: ["2606:4700:4700::1111", "1.1.1.1"],
    };
    const [nic] = nics([given]);
    const { bridge: _b, ...fields } = given;
    expect(nic).toMatchObject(fields);
  });

  it.each<[string, Record<string, unknown>, string, string]>([
    [
      "an address",
      { addresses: ["2001:DB8:0:0::7/64"] },
      "nics[0].addresses[0]",
      "write it as 2001:db8::7/64",
    ],
    [
      "a gateway",
      { addresses: ["2001:db8::7/64"], gateway6: "2001:DB8::1" },
      "nics[0].gateway6",
      "write it as 2001:db8::1",
    ],
    [
      "a nameserver",
      { nameservers: ["2606:4700:4700:0:0:0:0:1111"] },
      "nics[0].nameservers[0]",
      "write it as 2606:4700:4700::1111",
    ],
    [
      "an IPv4-mapped nameserver",
      { nameservers: ["::ffff:1.1.1.1"] },
      "nics[0].nameservers[0]",
      "give the IPv4 address 1.1.1.1 itself",
    ],
  ])("refuses %s not in canonical text, naming the form to write", (_what, fields, property, reason) => {
    expect(read([{ bridge: "br0", ...fields }]).failures).toContainEqual({
      property,
      reason: expect.stringContaining(reason),
    });
  });

  it("lower-cases a given MAC", () => {
    expect(nics([{ network: "n", macAddress: "52:54:00:AB:CD:EF" }])[0]?.mac).toBe("52:54:00:ab:cd:ef");
  });

  it("sets no MAC, gateway, bandwidth or filter the user did not give", () => {
    expect(nics([{ network: "n" }])[0]).toEqual({
      network: "n",
      addresses: [],
      nameservers: [],
      primary: true,
    });
  });

  it("keeps rate limits and the nwfilter", () => {
    const [nic] = nics([{ bridge: "br0", bandwidth: { outboundKbps: 8192 }, filter: "clean-traffic" }]);
    expect([nic?.bandwidth, nic?.filter]).toEqual([{ outboundKbps: 8192 }, "clean-traffic"]);
  });

  it("drops an empty bandwidth object (no limits)", () => {
    expect(nics([{ network: "n", bandwidth: {} }])[0]?.bandwidth).toBeUndefined();
  });

  it("makes the first NIC primary when none is marked", () => {
    expect(nics([{ network: "a" }, { network: "b" }]).map((n) => n.primary)).toEqual([true, false]);
  });

  it("keeps the NIC marked primary as the only one", () => {
    const marked = nics([
      { network: "a", primary: false },
      { network: "b", primary: true },
      { network: "c" },
    ]);
    expect(marked.map((n) => n.primary)).toEqual([false, true, false]);
  });

  it("treats null as not given", () => {
    const [nic] = nics([
      {
        network: "n",
        bridge: null,
        macAddress: null,
        addresses: null,
        gateway4: null,
        bandwidth: null,
        filter: null,
      },
    ]);
    expect(nic).toEqual({
      network: "n",
      addresses: [],
      nameservers: [],
      primary: true,
    });
  });

  it("accepts a link-local IPv6 gateway (fe80::1, as many hosters give it)", () => {
    expect(nics([{ bridge: "br0", addresses: ["2001:db8::7/64"], gateway6: "fe80::1" }])[0]?.gateway6).toBe(
      "fe80::1",
    );
  });

  it("accepts a gateway in any of the NIC's subnets of its family", () => {
    const [nic] = nics([
      { bridge: "br0", addresses: ["203.0.113.7/24", "198.51.100.7/24"], gateway4: "198.51.100.1" },
    ]);
    expect(nic?.gateway4).toBe("198.51.100.1");
  });

  it("accepts a loopback nameserver (a resolver run in the guest)", () => {
    expect(nics([{ network: "n", nameservers: ["127.0.0.1", "::1"] }])[0]?.nameservers).toEqual([
      "127.0.0.1",
      "::1",
    ]);
  });

  it("accepts rates from 1 kbit/s to 100 Gbit/s", () => {
    const [nic] = nics([{ network: "n", bandwidth: { inboundKbps: 1, outboundKbps: MAX_BANDWIDTH_KBPS } }]);
    expect(nic?.bandwidth).toEqual({ inboundKbps: 1, outboundKbps: 100_000_000 });
  });

  it(`accepts ${MAX_NICS} NICs`, () => {
    expect(nics(Array.from({ length: MAX_NICS }, () => ({ network: "n" })))).toHaveLength(MAX_NICS);
  });
});

describe("readNics: refusals name the field", () => {
  const v4 = { bridge: "br0", addresses: ["203.0.113.7/24"] };
  const v6 = { bridge: "br0", addresses: ["2001:db8::7/64"] };
  const refusals: [string, unknown, string, string][] = [
    ["not a list", { network: "n" }, "nics", "must be a list"],
    ["an empty list", [], "nics", "at least one NIC"],
    ["too many NICs", Array.from({ length: MAX_NICS + 1 }, () => ({ network: "n" })), "nics", "at most 16"],
    ["a NIC that is not an object", [42], "nics[0]", "must be an object"],
    ["a NIC without attachment", [{ macAddress: "52:54:00:00:00:01" }], "nics[0]", "exactly one of"],
    ["two attachments", [{ network: "n", bridge: "br0" }], "nics[0].bridge", "not network and bridge"],
    ["a bad network name", [{ network: "a/b" }], "nics[0].network", "libvirt network name"],
    ["a long bridge name", [{ bridge: "bridge-name-too-long" }], "nics[0].bridge", "Linux interface name"],
    ["direct as a string", [{ direct: "eth1" }], "nics[0].direct", "{ dev, mode }"],
    ["direct without dev", [{ direct: { mode: "bridge" } }], "nics[0].direct.dev", "is required"],
    ["a bad direct dev", [{ direct: { dev: "eth 1" } }], "nics[0].direct.dev", "Linux interface name"],
    [
      "an unknown macvtap mode",
      [{ direct: { dev: "eth1", mode: "macvlan" } }],
      "nics[0].direct.mode",
      '"passthrough"',
    ],
    [
      "an unknown direct property",
      [{ direct: { dev: "eth1", vlan: 5 } }],
      "nics[0].direct.vlan",
      "unknown property",
    ],
    [
      "an unknown NIC property",
      [{ network: "n", mtu: 9000 }],
      "nics[0].mtu",
      "unknown property (known: network",
    ],
    ["a multicast MAC", [{ network: "n", macAddress: "01:00:5e:00:00:01" }], "nics[0].macAddress", "unicast"],
    [
      "an all-zero MAC",
      [{ network: "n", macAddress: "00:00:00:00:00:00" }],
      "nics[0].macAddress",
      "all zero",
    ],
    ["addresses as a string", [{ network: "n", addresses: "203.0.113.7/24" }], "nics[0].addresses", "list"],
    [
      "an address without prefix",
      [{ network: "n", addresses: ["203.0.113.7"] }],
      "nics[0].addresses[0]",
      "prefix",
    ],
    [
      "a subnet as an address",
      [{ network: "n", addresses: ["203.0.113.0/24"] }],
      "nics[0].addresses[0]",
      "itself",
    ],
    [
      "a multicast address",
      [{ network: "n", addresses: ["ff02::1/64"] }],
      "nics[0].addresses[0]",
      "multicast",
    ],
    [
      "an address twice on one NIC",
      [{ network: "n", addresses: ["203.0.113.7/24", "203.0.113.7/32"] }],
      "nics[0].addresses[1]",
      "203.0.113.7 is also given at nics[0].addresses[0]",
    ],
    [
      "an address on two NICs, with other prefixes",
      [
        { network: "n", addresses: ["2001:db8::7/64"] },
        { bridge: "br0", addresses: ["2001:db8::7/48"] },
      ],
      "nics[1].addresses[0]",
      "2001:db8::7 is also given at nics[0].addresses[0]",
    ],
    ["an IPv6 gateway4", [{ ...v6, gateway4: "2001:db8::1" }], "nics[0].gateway4", "must be an IPv4 address"],
    [
      "gateway4 with a prefix",
      [{ ...v4, gateway4: "203.0.113.1/24" }],
      "nics[0].gateway4",
      "without a prefix",
    ],
    [
      "gateway4 without an IPv4 address",
      [{ ...v6, gateway4: "203.0.113.1" }],
      "nics[0].gateway4",
      "needs a static IPv4",
    ],
    [
      "gateway4 outside the subnets",
      [{ ...v4, gateway4: "203.0.114.1" }],
      "nics[0].gateway4",
      "outside this NIC's IPv4 subnets (203.0.113.7/24)",
    ],
    [
      "an address that is the NIC's gateway4",
      [{ ...v4, gateway4: "203.0.113.7" }],
      "nics[0].addresses[0]",
      "is the gateway 203.0.113.7 (gateway4)",
    ],
    [
      "an address that is a nameserver",
      [{ ...v4, nameservers: ["203.0.113.7"] }],
      "nics[0].addresses[0]",
      "is the nameserver 203.0.113.7 (nameservers[0])",
    ],
    [
      "a link-local address",
      [{ network: "n", addresses: ["fe80::5/64"] }],
      "nics[0].addresses[0]",
      "link-local",
    ],
    [
      "an address on a /0",
      [{ network: "n", addresses: ["203.0.113.7/0"] }],
      "nics[0].addresses[0]",
      "prefix /0",
    ],
    ["a multicast gateway", [{ ...v4, gateway4: "224.0.0.1" }], "nics[0].gateway4", "multicast"],
    ["an IPv4 gateway6", [{ ...v4, gateway6: "203.0.113.1" }], "nics[0].gateway6", "must be an IPv6 address"],
    [
      "gateway6 without an IPv6 address",
      [{ ...v4, gateway6: "2001:db8::1" }],
      "nics[0].gateway6",
      "needs a static IPv6",
    ],
    ["gateway6 outside the subnets", [{ ...v6, gateway6: "2001:db8:1::1" }], "nics[0].gateway6", "outside"],
    [
      "a CIDR nameserver",
      [{ network: "n", nameservers: ["1.1.1.1/32"] }],
      "nics[0].nameservers[0]",
      "without a prefix",
    ],
    [
      "a multicast nameserver",
      [{ network: "n", nameservers: ["1.1.1.1", "224.0.0.251"] }],
      "nics[0].nameservers[1]",
      "multicast",
    ],
    ["nameservers as a string", [{ network: "n", nameservers: "1.1.1.1" }], "nics[0].nameservers", "list"],
    ["bandwidth as a number", [{ network: "n", bandwidth: 1000 }], "nics[0].bandwidth", "inboundKbps"],
    [
      "a zero rate",
      [{ network: "n", bandwidth: { inboundKbps: 0 } }],
      "nics[0].bandwidth.inboundKbps",
      "integer",
    ],
    [
      "a fractional rate",
      [{ network: "n", bandwidth: { outboundKbps: 1.5 } }],
      "nics[0].bandwidth.outboundKbps",
      "integer",
    ],
    [
      "a rate over 100 Gbit/s",
      [{ network: "n", bandwidth: { outboundKbps: MAX_BANDWIDTH_KBPS + 1 } }],
      "nics[0].bandwidth.outboundKbps",
      "100 Gbit/s",
    ],
    [
      "a rate as a string",
      [{ network: "n", bandwidth: { inboundKbps: "1000" } }],
      "nics[0].bandwidth.inboundKbps",
      "integer",
    ],
    [
      "a burst (not offered)",
      [{ network: "n", bandwidth: { burstKb: 5 } }],
      "nics[0].bandwidth.burstKb",
      "unknown property",
    ],
    [
      "a filter name with a space",
      [{ network: "n", filter: "clean traffic" }],
      "nics[0].filter",
      "nwfilter name",
    ],
    [
      "a filter on a direct NIC",
      [{ direct: { dev: "eth1" }, filter: "clean-traffic" }],
      "nics[0].filter",
      "direct (macvtap)",
    ],
    ["primary as a string", [{ network: "n", primary: "yes" }], "nics[0].primary", "true or false"],
    [
      "two NICs marked primary",
      [
        { network: "a", primary: true },
        { network: "b", primary: true },
      ],
      "nics[1].primary",
      "nics[0] already is",
    ],
  ];
  it.each(refusals.map(([label, input, property, reason]) => [label, property, input, reason] as const))(
    "refuses %s at %s",
    (_, property, input, reason) => {
      const { result, failures } = read(input);
      expect(result).toBe("invalid");
      expect(failures).toContainEqual({ property, reason: expect.stringContaining(reason) });
    },
  );

  it("reports every failure at once, in order", () => {
    expect(
      properties([
        { network: "a/b", macAddress: "01:00:00:00:00:00" },
        { bridge: "br0", addresses: ["x"], bandwidth: { inboundKbps: 0 } },
      ]),
    ).toEqual([
      "nics[0].network",
      "nics[0].macAddress",
      "nics[1].addresses[0]",
      "nics[1].bandwidth.inboundKbps",
    ]);
  });

  it("judges no gateway against addresses it refused", () => {
    expect(properties([{ bridge: "br0", addresses: ["203.0.113.7"], gateway4: "203.0.113.1" }])).toEqual([
      "nics[0].addresses[0]",
    ]);
  });

  it("returns invalid, not the good NICs, when one NIC fails", () => {
    expect(read([{ network: "ok" }, { network: "a/b" }]).result).toBe("invalid");
  });
});

describe("readNics: values not known yet (Pulumi unknowns at preview)", () => {
  it.each<[string, unknown]>([
    ["the whole list", PENDING],
    ["a NIC", [{ network: "n" }, PENDING]],
    ["a network name", [{ network: PENDING }]],
    ["a direct NIC's device", [{ direct: { dev: PENDING } }]],
    ["a direct NIC's mode", [{ direct: { dev: "eth1", mode: PENDING } }]],
    ["a MAC", [{ network: "n", macAddress: PENDING }]],
    ["the address list", [{ network: "n", addresses: PENDING }]],
    [
      "an address, with a gateway its subnet would have to hold",
      [{ bridge: "br0", addresses: [PENDING], gateway4: "198.51.100.1" }],
    ],
    ["a gateway", [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: PENDING }]],
    ["a nameserver", [{ network: "n", nameservers: [PENDING] }]],
    ["the bandwidth", [{ network: "n", bandwidth: PENDING }]],
    ["a rate", [{ network: "n", bandwidth: { inboundKbps: PENDING } }]],
    ["the filter", [{ network: "n", filter: PENDING }]],
    ["the primary flag", [{ network: "n", primary: PENDING }]],
  ])("passes over %s: no failure, no NICs yet", (_, input) => {
    expect(read(input)).toEqual({ result: undefined, failures: [] });
  });

  it("still refuses what is known beside a pending value", () => {
    const { result, failures } = read([{ network: PENDING, addresses: [PENDING, "203.0.113.0/24"] }]);
    expect([result, failures.map((x) => x.property)]).toEqual(["invalid", ["nics[0].addresses[1]"]]);
  });
});

describe("checkNicSpecs: NICs built in code, by the same rules", () => {
  const nic = (over: Partial<NicSpec> = {}): NicSpec => ({
    network: "default",
    mac: "52:54:00:00:00:01",
    addresses: [],
    nameservers: [],
    primary: true,
    ...over,
  });

  it("accepts what readNics returns", () => {
    const read = nics([
      { bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1", filter: "clean-traffic" },
      { direct: { dev: "eth1", mode: "private" }, bandwidth: { inboundKbps: 10 } },
    ]);
    expect(checkNicSpecs(read).list).toEqual([]);
  });

  it("refuses two NICs with one MAC", () => {
    const twins = [nic(), nic({ mac: "52:54:00:00:00:01", primary: false })];
    expect(checkNicSpecs(twins).list).toEqual([
      { property: "nics[1].macAddress", reason: "52:54:00:00:00:01 is also nics[0]'s" },
    ]);
  });

  it("names the input fields of a bad NIC", () => {
    const bad = nic({
      network: undefined,
      direct: { dev: "eth1", mode: "nope" as never },
      gateway4: "203.0.113.1",
    });
    expect(checkNicSpecs([bad]).list.map((x) => x.property)).toEqual([
      "nics[0].direct.mode",
      "nics[0].gateway4",
    ]);
  });
});

describe("decodeNics: NICs from the state or from code, checked once before the builders take them", () => {
  const base: NicSpec = {
    network: "kvmp-nat",
    mac: "52:54:00:aa:00:02",
    addresses: [],
    nameservers: [],
    primary: true,
  };
  const nic = (over: Partial<NicSpec>): NicSpec => ({ ...base, ...over });
  const failuresOf = (list: NicSpec[]): string[] => {
    try {
      decodeNics(list);
      return [];
    } catch (err) {
      return (err as ValidationError).failures.map((x) => x.property);
    }
  };

  it("returns the NICs as they are when they keep the rules", () => {
    const list = [
      nic({}),
      nic({ network: undefined, direct: { dev: "eth1", mode: "vepa" }, mac: undefined, primary: false }),
    ];
    const got = decodeNics(list);
    expect(got).toEqual(list);
    for (const [i, n] of got.entries()) expect(n).toBe(list[i]);
  });

  it.each<[string, NicSpec[], string]>([
    [
      "a multicast MAC of the shorthand",
      [shorthandNic(undefined, "01:00:5e:00:00:01")],
      "nics[0].macAddress",
    ],
    [
      "a malformed MAC of the shorthand",
      [shorthandNic(undefined, "52-54-00-00-00-01")],
      "nics[0].macAddress",
    ],
    ["a bad network name", [shorthandNic({ kind: "network", network: "a/b" }, undefined)], "nics[0].network"],
    [
      "a long bridge name",
      [shorthandNic({ kind: "bridge", bridge: "bridge-name-too-long" }, undefined)],
      "nics[0].bridge",
    ],
    [
      "a bad mode of the shorthand's NIC",
      [shorthandNic({ kind: "direct", dev: "eth1", mode: "x" as never }, undefined)],
      "nics[0].direct.mode",
    ],
    [
      "a bad device of the shorthand's NIC",
      [shorthandNic({ kind: "direct", dev: "", mode: "bridge" }, undefined)],
      "nics[0].direct.dev",
    ],
    [
      "an unknown macvtap mode",
      [nic({ network: undefined, direct: { dev: "eth1", mode: "x" as never } })],
      "nics[0].direct.mode",
    ],
    ["a bad bridge name", [nic({ network: undefined, bridge: "a bridge" })], "nics[0].bridge"],
    ["a multicast MAC", [nic({ mac: "03:00:00:00:00:01" })], "nics[0].macAddress"],
    ["one MAC on two NICs", [nic({}), nic({ primary: false })], "nics[1].macAddress"],
    ["a rate of 0", [nic({ bandwidth: { inboundKbps: 0 } })], "nics[0].bandwidth.inboundKbps"],
    ["a bad filter name", [nic({ filter: "no/slash" })], "nics[0].filter"],
    [
      "a filter on a direct NIC",
      [nic({ network: undefined, direct: { dev: "eth1", mode: "bridge" }, filter: "clean-traffic" })],
      "nics[0].filter",
    ],
    [
      "an address without its prefix (a filter's parameter)",
      [nic({ addresses: ["203.0.113.7"] })],
      "nics[0].addresses[0]",
    ],
    [
      "a gateway outside its subnets",
      [nic({ addresses: ["203.0.113.7/24"], gateway4: "198.51.100.1" })],
      "nics[0].gateway4",
    ],
  ])("refuses %s", (_, list, property) => {
    expect(failuresOf(list)).toContain(property);
  });

  it("holds NICs resolved onto the host's attachment to the rules too: a filter on a host's macvtap NIC", () => {
    const filtered = decodeNics([{ ...shorthandNic(undefined, undefined), filter: "clean-traffic" }]);
    expect(() => resolveHostNics(filtered, { kind: "direct", dev: "eth0", mode: "bridge" })).toThrow(
      /nics\[0\]\.filter/,
    );
  });
});

describe("the one-NIC shorthand and the host's NIC", () => {
  it.each<[string, NicAttachment | undefined, string | undefined, NicSpec]>([
    [
      "a network, no MAC (libvirt picks one)",
      { kind: "network", network: "lan" },
      undefined,
      { network: "lan", addresses: [], nameservers: [], primary: true },
    ],
    [
      "a bridge and a given MAC, lower case",
      { kind: "bridge", bridge: "br0" },
      "52:54:00:AB:CD:EF",
      {
        bridge: "br0",
        macAddress: "52:54:00:ab:cd:ef",
        mac: "52:54:00:ab:cd:ef",
        addresses: [],
        nameservers: [],
        primary: true,
      },
    ],
    ["neither: the host's NIC", undefined, undefined, { addresses: [], nameservers: [], primary: true }],
  ])("the shorthand with %s is one DHCP NIC", (_, attachment, mac, want) => {
    const nic = shorthandNic(attachment, mac);
    expect(nic).toEqual(want);
    expect(Object.keys(nic)).toEqual(Object.keys(want));
  });

  it("attaches a NIC that names nothing to the host's NIC, and leaves the others", () => {
    const own = decodeNics(nics([{ bridge: "br1", macAddress: "52:54:00:00:00:01" }]))[0] as CheckedNic;
    const given = decodeNics([shorthandNic(undefined, "52:54:00:00:00:02"), { ...own, primary: false }]);
    const resolved = resolveHostNics(given, { kind: "direct", dev: "eth0", mode: "bridge" });
    expect(resolved.map(attachmentOf)).toEqual([
      { kind: "direct", dev: "eth0", mode: "bridge" },
      { kind: "bridge", bridge: "br1" },
    ]);
    expect(Object.keys(resolved[0] as NicSpec)).toEqual([
      "direct",
      "macAddress",
      "mac",
      "addresses",
      "nameservers",
      "primary",
    ]);
    expect(resolved[1]).toBe(given[1]);
  });
});

describe("deriveMac", () => {
  const seed = "urn:pulumi:prod::infra::kvm:index:Proxy::web/web-1/0";

  it("is 52:54:00 and the first three bytes of sha256(seed)", () => {
    // Computed independently (Python hashlib) for this seed.
    expect(deriveMac(seed)).toBe("52:54:00:a3:f3:a9");
    const digest = createHash("sha256").update("anything").digest();
    expect(deriveMac("anything")).toBe(
      `52:54:00:${[...digest.subarray(0, 3)].map((b) => b.toString(16).padStart(2, "0")).join(":")}`,
    );
  });

  it("differs with the NIC's index", () => {
    expect(deriveMac(seed.replace(/0$/, "1"))).toBe("52:54:00:27:f0:c8");
  });

  it("is a locally administered unicast MAC that a NIC accepts", () => {
    const mac = deriveMac("x");
    expect(macAddressProblem(mac)).toBeUndefined();
    expect(Number.parseInt(mac.slice(0, 2), 16) & 0b11).toBe(0b10);
  });
});

describe("libvirtBandwidth", () => {
  it.each<[number, number]>([
    [1, 1],
    [8, 1],
    [1000, 123],
    [8192, 1000],
    [8193, 1001],
    [MAX_BANDWIDTH_KBPS, 12_207_032],
  ])("%i kbit/s is %i KiB/s (rounded up, never 0)", (kbps, kib) => {
    expect(libvirtBandwidth({ inboundKbps: kbps, outboundKbps: kbps })).toEqual({
      inbound: kib,
      outbound: kib,
    });
  });

  it("limits only the directions given", () => {
    expect(libvirtBandwidth({ outboundKbps: 8192 })).toEqual({ outbound: 1000 });
    expect(libvirtBandwidth({})).toEqual({});
  });
});

describe("filterParameters", () => {
  it("gives one IP parameter per static IPv4 address, without its prefix", () => {
    const addresses = ["203.0.113.7/24", "2001:db8::7/64", "198.51.100.2/32"];
    expect(filterParameters({ addresses })).toEqual([
      { name: "IP", value: "203.0.113.7" },
      { name: "IP", value: "198.51.100.2" },
    ]);
  });

  it("gives none for a DHCP NIC (libvirt then learns the address)", () => {
    expect(filterParameters({ addresses: [] })).toEqual([]);
  });
});
