/**
 * Address pools' rules (kvm/network/address-pool.ts): the ranges' grammar,
 * their size, and the choice of the lowest free address of each family.
 */
import { describe, expect, it } from "vitest";
import {
  allocate,
  inPool,
  parsePoolRange,
  poolCapacity,
  poolRangeText,
  poolSize,
  representativeAddresses,
} from "../../../../provider/kvm/network/address-pool";
import { readNics } from "../../../../provider/kvm/network/nic-rules";
import { Failures } from "../../../../provider/kvm/validation";

describe("a pool range", () => {
  it.each([
    ["an IPv4 span", "203.0.113.10-203.0.113.40/24", 31n],
    ["one IPv4 address", "203.0.113.9/24", 1n],
    ["an IPv6 span", "2001:db8::10-2001:db8::40/64", 49n],
    ["a /31's both addresses", "198.51.100.0-198.51.100.1/31", 2n],
  ])("reads %s: %s holds %i", (_what, text, size) => {
    const r = parsePoolRange(text);
    expect(typeof r).toBe("object");
    expect(poolRangeText(r as Exclude<typeof r, string>)).toBe(text);
    expect(poolSize({ ranges: [text] })).toEqual({ [text.includes(":") ? 6 : 4]: size });
  });

  it.each([
    ["no prefix", "203.0.113.10-203.0.113.40", /needs the interface prefix/],
    ["last below first", "203.0.113.40-203.0.113.10/24", /below its first/],
    ["across subnets", "203.0.113.250-203.0.114.5/24", /not in one \/24 subnet/],
    ["mixed families", "203.0.113.1-2001:db8::1/24", /different families/],
    ["not canonical", "2001:DB8::10-2001:db8::40/64", /write it as 2001:db8::10-2001:db8::40\/64/],
    ["not an address", "edge-1/24", /not an address with a prefix/],
    [
      "IPv4-mapped at one end",
      "::ffff:192.0.2.10-::1:0:0:1/64",
      /IPv4-mapped IPv6: give IPv4 addresses as IPv4/,
    ],
    ["not a string", 7, /must be a string/],
  ])("refuses %s: %j", (_what, text, problem) => {
    expect(parsePoolRange(text)).toMatch(problem);
  });
});

describe("a pool", () => {
  const dual = { ranges: ["203.0.113.10-203.0.113.12/24", "2001:db8::10-2001:db8::11/64"] };

  it("serves as many NICs as its smaller family holds", () => {
    expect(poolSize(dual)).toEqual({ 4: 3n, 6: 2n });
    expect(poolCapacity(dual)).toBe(2n);
  });

  it("gives the next free address after the highest taken of each family, with the range's prefix", () => {
    expect(allocate(dual, new Set())).toEqual({ addresses: ["203.0.113.10/24", "2001:db8::10/64"] });
    expect(allocate(dual, new Set(["203.0.113.10", "2001:db8::10"]))).toEqual({
      addresses: ["203.0.113.11/24", "2001:db8::11/64"],
    });
    // A freed address is not taken again before the rest of the pool: a rotation moves on.
    expect(allocate(dual, new Set(["203.0.113.11"]))).toEqual({
      addresses: ["203.0.113.12/24", "2001:db8::10/64"],
    });
  });

  it("wraps to the start once the highest address is taken, and skips what is taken there", () => {
    const five = { ranges: ["203.0.113.10-203.0.113.14/24"] };
    expect(allocate(five, new Set(["203.0.113.11", "203.0.113.14"]))).toEqual({
      addresses: ["203.0.113.10/24"],
    });
    expect(allocate(five, new Set(["203.0.113.10", "203.0.113.14"]))).toEqual({
      addresses: ["203.0.113.11/24"],
    });
    // Addresses outside the pool (another pool's on the segment) do not move the cursor.
    expect(allocate(five, new Set(["203.0.113.200"]))).toEqual({ addresses: ["203.0.113.10/24"] });
  });

  it("goes on to the next range, and says which family ran out", () => {
    const two = { ranges: ["203.0.113.10/24", "203.0.113.20-203.0.113.21/24"] };
    expect(allocate(two, new Set(["203.0.113.10"]))).toEqual({ addresses: ["203.0.113.20/24"] });
    expect(allocate(dual, new Set(["2001:db8::10", "2001:db8::11"]))).toEqual({
      full: "all 2 IPv6 addresses of the pool (203.0.113.10-203.0.113.12/24, 2001:db8::10-2001:db8::11/64) are taken",
    });
  });

  it("knows its own addresses, and gives each family's first for the gateway rules", () => {
    expect(inPool(dual, "203.0.113.12/24")).toBe(true);
    expect(inPool(dual, "203.0.113.13")).toBe(false);
    expect(inPool(dual, "2001:db8::11/64")).toBe(true);
    expect(representativeAddresses(dual)).toEqual(["203.0.113.10/24", "2001:db8::10/64"]);
  });
});

/** One NIC read as check reads `nics`. */
function read(nic: Record<string, unknown>) {
  const f = new Failures();
  const out = readNics([nic], f, {});
  return { out, failures: f.list };
}

describe("a NIC's addressPool", () => {
  it("is read with its gateways, which must lie in the pool's subnets", () => {
    const { out, failures } = read({
      bridge: "br-public",
      addressPool: { ranges: ["203.0.113.10-203.0.113.40/24", "2001:db8::10-2001:db8::40/64"] },
      gateway4: "203.0.113.1",
      gateway6: "fe80::1",
    });
    expect(failures).toEqual([]);
    expect(out).toEqual([
      expect.objectContaining({
        addresses: [],
        addressPool: { ranges: ["203.0.113.10-203.0.113.40/24", "2001:db8::10-2001:db8::40/64"] },
        gateway4: "203.0.113.1",
      }),
    ]);
  });

  it.each<[string, Record<string, unknown>, string, RegExp]>([
    [
      "a gateway outside",
      { addressPool: { ranges: ["203.0.113.10/24"] }, gateway4: "198.51.100.1" },
      "nics[0].gateway4",
      /outside this NIC's IPv4 subnets/,
    ],
    [
      "an IPv6 gateway without IPv6 ranges",
      { addressPool: { ranges: ["203.0.113.10/24"] }, gateway6: "2001:db8::1" },
      "nics[0].gateway6",
      /needs a static IPv6 address/,
    ],
    [
      "overlapping ranges",
      { addressPool: { ranges: ["203.0.113.10-203.0.113.20/24", "203.0.113.15/24"] } },
      "nics[0].addressPool.ranges[1]",
      /overlaps ranges\[0\]/,
    ],
    ["no ranges", { addressPool: { ranges: [] } }, "nics[0].addressPool.ranges", /must list 1 to 64 ranges/],
    [
      "an unknown field",
      { addressPool: { ranges: ["203.0.113.10/24"], size: 3 } },
      "nics[0].addressPool.size",
      /unknown/,
    ],
    [
      "an address not of the pool",
      { addressPool: { ranges: ["203.0.113.10/24"] }, addresses: ["203.0.113.11/24"] },
      "nics[0].addresses[0]",
      /not an address of addressPool/,
    ],
  ])("refuses %s", (_what, nic, property, reason) => {
    const { failures } = read({ bridge: "br0", ...nic });
    expect(failures).toContainEqual({ property, reason: expect.stringMatching(reason) });
  });
});

describe("a pool NIC's gateways", () => {
  it.each<[string, unknown, string[]]>([
    ["a refused range", "203.0.113.10-203.0.113.40", ["nics[0].addressPool.ranges[0]"]],
    ["a range not known yet", "<pending>", []],
  ])("wait while the pool has %s: only the range is named", (_what, r, properties) => {
    const f = new Failures();
    const nic = { bridge: "br0", addressPool: { ranges: [r] }, gateway4: "203.0.113.1" };
    readNics([nic], f, { isPending: (v) => v === "<pending>" });
    expect(f.list.map((x) => x.property)).toEqual(properties);
  });
});

describe("a pool range hands out only addresses a VM may take (vm-address.ts, as static addresses)", () => {
  const at = (j: number) => `nics[0].addressPool.ranges[${j}]`;
  const pool = (...ranges: string[]) => ({ addressPool: { ranges } });
  it.each<[string, Record<string, unknown>, string, RegExp]>([
    [
      "a range starting at the gateway",
      { ...pool("203.0.113.1-203.0.113.40/24"), gateway4: "203.0.113.1" },
      at(0),
      /starts at the gateway 203\.0\.113\.1 \(gateway4\).*start after the gateway 203\.0\.113\.1, e\.g\. 203\.0\.113\.2-203\.0\.113\.40\/24/,
    ],
    [
      "a range with the gateway inside",
      { ...pool("203.0.113.10-203.0.113.40/24"), gateway4: "203.0.113.20" },
      at(0),
      /covers the gateway 203\.0\.113\.20 \(gateway4\).*203\.0\.113\.10-203\.0\.113\.19\/24 and 203\.0\.113\.21-203\.0\.113\.40\/24/,
    ],
    [
      "an IPv6 range ending at the gateway",
      { ...pool("203.0.113.10/24", "2001:db8::10-2001:db8::40/64"), gateway6: "2001:db8::40" },
      at(1),
      /ends at the gateway 2001:db8::40 \(gateway6\).*end before the gateway 2001:db8::40, e\.g\. 2001:db8::10-2001:db8::3f\/64/,
    ],
    [
      "a range with a nameserver inside",
      { ...pool("203.0.113.10-203.0.113.40/24"), nameservers: ["1.1.1.1", "203.0.113.30"] },
      at(0),
      /covers the nameserver 203\.0\.113\.30 \(nameservers\[1\]\)/,
    ],
    [
      "an IPv6 range that is one nameserver",
      { ...pool("203.0.113.10/24", "2001:db8::53/64"), nameservers: ["2001:db8::53"] },
      at(1),
      /is the nameserver 2001:db8::53 \(nameservers\[0\]\)/,
    ],
    [
      "an IPv4 range starting at the network address",
      pool("203.0.113.0-203.0.113.5/24"),
      at(0),
      /starts at the network address 203\.0\.113\.0 of its \/24.*e\.g\. 203\.0\.113\.1-203\.0\.113\.5\/24/,
    ],
    [
      "an IPv6 range starting at the network address",
      pool("2001:db8::-2001:db8::40/64"),
      at(0),
      /starts at the network address 2001:db8:: of its \/64.*e\.g\. 2001:db8::1-2001:db8::40\/64/,
    ],
    [
      "an IPv4 range ending at the broadcast address",
      pool("203.0.113.250-203.0.113.255/24"),
      at(0),
      /ends at the broadcast address 203\.0\.113\.255 of its \/24.*e\.g\. 203\.0\.113\.250-203\.0\.113\.254\/24/,
    ],
    ["loopback endpoints", pool("127.0.0.5-127.0.0.9/8"), at(0), /127\.0\.0\.0\/8 \(loopback\)/],
    ["the IPv6 loopback ::1", pool("::1-::9/120"), at(0), /starts at ::1 \(loopback\).*e\.g\. ::2-::9\/120/],
    ["multicast endpoints", pool("224.0.0.5-224.0.0.9/24"), at(0), /multicast/],
    [
      "IPv4 link-local endpoints",
      pool("169.254.0.10-169.254.0.20/16"),
      at(0),
      /169\.254\.0\.0\/16 \(link-local\)/,
    ],
    ["IPv6 link-local endpoints", pool("fe80::10-fe80::20/64"), at(0), /fe80::\/10 \(link-local\)/],
    ["the unspecified address", pool("::-::5/64"), at(0), /starts at :: \(unspecified\)/],
    [
      "IPv4-mapped endpoints",
      pool("::ffff:192.0.2.10-::ffff:192.0.2.40/120"),
      at(0),
      /IPv4-mapped.*give the IPv4 range 192\.0\.2\.10-192\.0\.2\.40\/24 itself/,
    ],
    [
      "IPv4-mapped endpoints written in hex",
      pool("::ffff:c000:20a-::ffff:c000:228/120"),
      at(0),
      /IPv4-mapped.*give the IPv4 range 192\.0\.2\.10-192\.0\.2\.40\/24 itself/,
    ],
    [
      "a range whose inside is IPv4-mapped",
      pool("::fffe:ffff:ffff-::1:0:0:1/64"),
      at(0),
      /covers ::ffff:0\.0\.0\.0\/96 \(IPv4-mapped\)/,
    ],
    ["the whole IPv4 space (/0)", pool("203.0.113.10-203.0.113.40/0"), at(0), /\/0/],
    [
      "a range across its /prefix subnet",
      pool("203.0.113.250-203.0.114.5/24"),
      at(0),
      /not in one \/24 subnet/,
    ],
    [
      "a range outside the gateway's /prefix subnet",
      { ...pool("203.0.113.10-203.0.113.20/24", "198.51.100.10-198.51.100.20/24"), gateway4: "203.0.113.1" },
      at(1),
      /outside the subnet of the gateway 203\.0\.113\.1 \(gateway4\)/,
    ],
  ])("refuses %s", (_what, nic, property, reason) => {
    const { out, failures } = read({ bridge: "br0", ...nic });
    expect(out).toBe("invalid");
    expect(failures).toContainEqual({ property, reason: expect.stringMatching(reason) });
  });
});
