import { describe, expect, it } from "vitest";
import {
  canonicalIp,
  cidrProblem,
  family,
  inSubnet,
  ipProblem,
  parseCidr,
  rangeProblem,
  sameAddress,
  subnetsOverlap,
} from "../../../../provider/kvm/network/ip";

describe("parseCidr", () => {
  it.each<[string, 4 | 6, string, number]>([
    ["203.0.113.7/24", 4, "203.0.113.7", 24],
    ["0.0.0.0/0", 4, "0.0.0.0", 0],
    ["198.51.100.255/32", 4, "198.51.100.255", 32],
    ["2001:db8::7/64", 6, "2001:db8::7", 64],
    ["2001:DB8:0:0:0:0:0:7/64", 6, "2001:db8::7", 64],
    ["0001:0db8::0007/48", 6, "1:db8::7", 48],
    ["::/0", 6, "::", 0],
    ["::1/128", 6, "::1", 128],
    ["fe80::/10", 6, "fe80::", 10],
    ["1:2:3:4:5:6:7:8/64", 6, "1:2:3:4:5:6:7:8", 64],
    ["1:0:0:1:0:0:0:1/64", 6, "1:0:0:1::1", 64],
    ["1:0:0:2:0:0:3:4/64", 6, "1::2:0:0:3:4", 64],
    ["1:0:2:3:4:5:6:7/64", 6, "1:0:2:3:4:5:6:7", 64],
    ["1::/16", 6, "1::", 16],
    ["::ffff:192.0.2.1/120", 6, "::ffff:192.0.2.1", 120],
    ["::FFFF:c000:0201/128", 6, "::ffff:192.0.2.1", 128],
    ["64:ff9b::192.0.2.33/96", 6, "64:ff9b::c000:221", 96],
    ["1:2:3:4:5:6:1.2.3.4/64", 6, "1:2:3:4:5:6:102:304", 64],
  ])("reads %s as IPv%i %s with prefix %i, host bits kept", (text, fam, address, prefix) => {
    expect(parseCidr(text)).toMatchObject({ family: fam, address, prefix });
  });

  it.each([
    ["203.0.113.7", "needs a prefix length"],
    ["203.0.113.7/33", "from 0 to 32"],
    ["203.0.113.7/024", "from 0 to 32"],
    ["203.0.113.7/", "from 0 to 32"],
    ["2001:db8::7/129", "from 0 to 128"],
    ["203.0.113.256/24", "over 255"],
    ["203.0.113.07/24", "leading zero"],
    ["203.0.113/24", "four dot-separated numbers"],
    ["203.0.113.7.1/24", "four dot-separated numbers"],
    ["203.0.x.7/24", "not a decimal number"],
    ["2001:db8::7::1/64", "only once"],
    ["2001:db8:0:0:0:0:0:0:7/64", "eight groups"],
    ["2001:db8:0:0:0:0:7/64", "eight groups"],
    ["1:2:3:4::5:6:7:8/64", "at least one zero group"],
    ["2001:db8::g/64", "1-4 hex digits"],
    ["2001:db8::12345/64", "1-4 hex digits"],
    [":1::/64", "1-4 hex digits"],
    ["::1.2.3.4:5/64", "1-4 hex digits"],
    ["fe80::1%eth0/64", "zone"],
    ["::ffff:1.2.3.4.5/96", "four dot-separated numbers"],
    [" 203.0.113.7/24", "without spaces"],
    ["", "without spaces"],
  ])("refuses %j: %s", (text, reason) => {
    expect(parseCidr(text)).toBeUndefined();
    expect(cidrProblem(text)).toContain(reason);
  });

  it("refuses a value that is not a string, saying so", () => {
    expect(cidrProblem(42)).toMatch(/^must be a string/);
  });

  it.each([
    ["2001:DB8:0:0:0:0:0:7/64", "write it as 2001:db8::7/64"],
    ["0001:0db8::0007/48", "write it as 1:db8::7/48"],
    ["::ffff:192.0.2.1/120", "IPv4-mapped"],
    ["64:ff9b::192.0.2.33/96", "write it as 64:ff9b::c000:221/96"],
  ])("reads %s, but refuses it as an input: %s", (text, reason) => {
    expect(parseCidr(text)).toBeDefined();
    expect(cidrProblem(text)).toContain(reason);
  });
});

describe("rangeProblem", () => {
  it.each(["10.0.0.0/8", "203.0.113.7", "2001:db8:100::/48", "::/0", "0.0.0.0/0", "fd00::1"])(
    "accepts %s",
    (r) => {
      expect(rangeProblem(r)).toBeUndefined();
    },
  );

  it.each([
    ["10.0.0.1/8", "host bits set: the range is 10.0.0.0/8"],
    ["2001:db8::1/32", "the range is 2001:db8::/32"],
    ["::ffff:0:0/96", "IPv4-mapped"],
    ["::/64", "reaches into the IPv4-mapped block"],
    ["::ffff:0.0.0.0/96", "IPv4-mapped"],
    ["2001:db8::1%1/128", "zone"],
    ["10.0.0.0/08", "prefix length"],
    ["FD00::/8", "write it as fd00::/8"],
    ["", "without spaces"],
  ])("refuses %j: %s", (r, reason) => {
    expect(rangeProblem(r)).toContain(reason);
  });
});

describe("ipProblem", () => {
  it.each(["203.0.113.1", "2001:db8::1", "::", "fe80::1", "64:ff9b::c000:221"])("accepts %s", (text) => {
    expect(ipProblem(text)).toBeUndefined();
  });

  it.each([
    ["::ffff:192.0.2.1", "IPv4-mapped IPv6 address: give the IPv4 address 192.0.2.1 itself"],
    ["::FFFF:c000:0201", "IPv4-mapped"],
    ["64:ff9b::192.0.2.33", "dotted IPv4 tail: write it as 64:ff9b::c000:221"],
    ["2001:DB8::1", "write it as 2001:db8::1"],
    ["2001:db8:0:0:0:0:0:1", "write it as 2001:db8::1"],
    ["2001:0db8::1", "write it as 2001:db8::1"],
    ["1:0:0:2:0:0:0:3", "write it as 1:0:0:2::3"],
    ["fe80::1%eth0", "zone"],
  ])("refuses %s, naming the form to write: %s", (text, reason) => {
    expect(ipProblem(text)).toContain(reason);
  });

  it.each([
    ["203.0.113.1/24", "without a prefix length"],
    ["203.0.113.300", "over 255"],
    ["2001:db8:::1", "1-4 hex digits"],
    ["example.com", "four dot-separated numbers"],
    [null, "must be a string"],
  ])("refuses %j: %s", (v, reason) => {
    expect(ipProblem(v)).toContain(reason);
  });
});

describe("canonicalIp and family", () => {
  it.each<[string, string | undefined, 4 | 6 | undefined]>([
    ["203.0.113.7", "203.0.113.7", 4],
    ["2001:0DB8:0000:0000:0000:ff00:0042:8329", "2001:db8::ff00:42:8329", 6],
    ["::ffff:C000:0201", "::ffff:192.0.2.1", 6],
    ["0:0:0:0:0:0:0:0", "::", 6],
    ["fe80:0:0:0:1:0:0:0", "fe80::1:0:0:0", 6],
    ["example", undefined, undefined],
  ])("%s is %s, family %s", (text, canonical, fam) => {
    expect(canonicalIp(text)).toBe(canonical);
    expect(family(text)).toBe(fam);
  });

  it("gives the family of a CIDR too", () => {
    expect([family("203.0.113.7/24"), family("2001:db8::7/64"), family("2001:db8::7/200")]).toEqual([
      4,
      6,
      undefined,
    ]);
  });
});

describe("inSubnet", () => {
  it.each<[string, string, boolean]>([
    ["203.0.113.1", "203.0.113.7/24", true],
    ["203.0.114.1", "203.0.113.7/24", false],
    ["203.0.113.200", "203.0.113.130/25", true],
    ["203.0.113.100", "203.0.113.130/25", false],
    ["10.0.0.5", "10.0.0.1/29", true],
    ["10.0.0.9", "10.0.0.1/29", false],
    ["10.1.2.3", "0.0.0.0/0", true],
    ["10.1.2.3/8", "10.1.2.9/24", true],
    ["2001:db8::1", "2001:db8::7/64", true],
    ["2001:db8:0:1::1", "2001:db8::7/64", false],
    ["2001:db8:0:0:7fff::1", "2001:db8::/65", true],
    ["2001:db8:0:0:8000::1", "2001:db8::/65", false],
    ["::ffff:203.0.113.1", "203.0.113.7/24", false],
    ["203.0.113.1", "::ffff:203.0.113.7/120", false],
    ["not an address", "203.0.113.7/24", false],
    ["203.0.113.1", "203.0.113.7", false],
  ])("%s in %s: %s", (ip, cidr, inside) => {
    expect(inSubnet(ip, cidr)).toBe(inside);
  });
});

describe("sameAddress and subnetsOverlap", () => {
  it.each<[string, string, boolean]>([
    ["2001:DB8::7", "2001:db8:0::7/64", true],
    ["203.0.113.7/24", "203.0.113.7/32", true],
    ["203.0.113.7", "::ffff:203.0.113.7", false],
    ["203.0.113.7", "203.0.113.8", false],
    ["x", "x", false],
  ])("%s and %s are the same address: %s", (a, b, same) => {
    expect(sameAddress(a, b)).toBe(same);
  });

  it.each<[string, string, boolean]>([
    ["10.0.0.0/8", "10.1.0.0/16", true],
    ["10.1.0.0/16", "10.0.0.0/8", true],
    ["10.0.0.1/24", "10.0.1.1/24", false],
    ["203.0.113.7/32", "203.0.113.7/32", true],
    ["2001:db8::/32", "2001:db8:1::/48", true],
    ["2001:db8::/48", "2001:db8:1::/48", false],
    ["0.0.0.0/0", "::/0", false],
  ])("%s and %s overlap: %s", (a, b, overlap) => {
    expect(subnetsOverlap(a, b)).toBe(overlap);
  });
});
