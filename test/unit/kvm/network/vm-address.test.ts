/**
 * The one rule of a VM's own addresses (kvm/network/vm-address.ts): a static
 * address, `proxy.outgoingAddress` and every address a pool range can hand
 * out are judged by the same function. The fields that use it are tested
 * with their paths in nic.test.ts, address-pool.test.ts and check-nics.test.ts.
 */
import { describe, expect, it } from "vitest";
import { type PoolRange, parsePoolRange } from "../../../../provider/kvm/network/address-pool";
import {
  type AddressSpan,
  addressSpan,
  othersOf,
  vmAddressProblem,
} from "../../../../provider/kvm/network/vm-address";

const span = (text: string) => addressSpan(text) as AddressSpan;
const range = (text: string) => parsePoolRange(text) as PoolRange;
/** The NIC's gateways and nameservers of the rows below. */
const OTHERS = othersOf({
  gateway4: "203.0.113.1",
  gateway6: "2001:db8::1",
  nameservers: ["203.0.113.53", "2001:db8::53"],
});

describe("one address of a VM", () => {
  it.each([
    ["0.0.0.5/8", "this network"],
    ["127.0.0.1/8", "loopback"],
    ["224.0.0.1/4", "multicast"],
    ["255.255.255.255/32", "reserved"],
    ["::/0", "/0"],
    ["::/128", "unspecified"],
    ["::1/128", "loopback"],
    ["ff02::1/64", "multicast"],
    ["::ffff:192.0.2.1/96", "IPv4-mapped IPv6 address: give the IPv4 address itself"],
    ["169.254.1.5/16", "link-local address (169.254.0.0/16)"],
    ["fe80::5/64", "link-local address (fe80::/10)"],
    ["203.0.113.7/0", "has the prefix /0, which puts every IPv4 address on the NIC's link"],
    ["203.0.113.0/24", "the subnet /24 itself: give the VM's own address in it, e.g. 203.0.113.1/24"],
    ["2001:db8::/64", "the subnet /64 itself: give the VM's own address in it, e.g. 2001:db8::1/64"],
    ["10.0.0.0/30", "the subnet /30 itself"],
    [
      "203.0.113.255/24",
      "the broadcast address of its /24: give the VM's own address in it, e.g. 203.0.113.254/24",
    ],
    ["203.0.113.1/24", "is the gateway 203.0.113.1 (gateway4): give the VM an address of its own"],
    ["2001:db8::1/64", "is the gateway 2001:db8::1 (gateway6)"],
    ["203.0.113.53/24", "is the nameserver 203.0.113.53 (nameservers[0])"],
    ["2001:db8::53/64", "is the nameserver 2001:db8::53 (nameservers[1])"],
    ["169.254.169.254", "link-local"],
    ["203.0.113.1", "is the gateway 203.0.113.1 (gateway4)"],
  ])("refuses %s: %s", (text, reason) => {
    expect(vmAddressProblem(span(text), OTHERS)).toContain(reason);
  });

  it.each([
    "203.0.113.7/24",
    "203.0.113.0/31",
    "203.0.113.255/31",
    "203.0.113.0/32",
    "2001:db8::/127",
    "2001:db8::7/64",
    "198.51.100.1/24",
    "203.0.113.7",
  ])("accepts %s", (text) => {
    expect(vmAddressProblem(span(text), OTHERS)).toBeUndefined();
  });
});

describe("every address of a range", () => {
  it.each([
    [
      "starting at a point",
      "203.0.113.1-203.0.113.9/24",
      "starts at the gateway 203.0.113.1 (gateway4): make it start after the gateway 203.0.113.1, e.g. 203.0.113.2-203.0.113.9/24",
    ],
    [
      "ending at a point",
      "203.0.113.50-203.0.113.53/24",
      "ends at the nameserver 203.0.113.53 (nameservers[0]): make it end before the nameserver 203.0.113.53, e.g. 203.0.113.50-203.0.113.52/24",
    ],
    [
      "covering a point",
      "2001:db8::2-2001:db8::60/64",
      "covers the nameserver 2001:db8::53 (nameservers[1]), which create could give a VM: split it around the nameserver 2001:db8::53, e.g. 2001:db8::2-2001:db8::52/64 and 2001:db8::54-2001:db8::60/64",
    ],
    [
      "leaving one address beside a point",
      "203.0.113.52-203.0.113.53/24",
      "make it end before the nameserver 203.0.113.53, e.g. 203.0.113.52/24",
    ],
    [
      "ending in a block",
      "126.255.255.250-127.0.0.5/7",
      "ends in 127.0.0.0/8 (loopback): make it end before 127.0.0.0/8, e.g. 126.255.255.250-126.255.255.255/7",
    ],
    [
      "covering a block",
      "169.0.0.1-169.255.0.1/8",
      "covers 169.254.0.0/16 (link-local), which create could give a VM: split it around 169.254.0.0/16, e.g. 169.0.0.1-169.253.255.255/8 and 169.255.0.0-169.255.0.1/8",
    ],
    [
      "inside a block",
      "ff02::1-ff02::9/64",
      "lies in ff00::/8 (multicast): none of its addresses can be a VM's",
    ],
    [
      "starting at the network address",
      "198.51.100.0-198.51.100.9/24",
      "starts at the network address 198.51.100.0 of its /24: make it start after the network address 198.51.100.0, e.g. 198.51.100.1-198.51.100.9/24",
    ],
    [
      "whose example keeps clear of the rest too",
      "203.0.113.0-203.0.113.5/24",
      "starts at the network address 203.0.113.0 of its /24: make it start after the network address 203.0.113.0, e.g. 203.0.113.2-203.0.113.5/24",
    ],
    [
      "with no address clear",
      "203.0.113.0-203.0.113.1/24",
      "starts at the network address 203.0.113.0 of its /24: none of its addresses can be a VM's",
    ],
  ])("refuses a range %s: %s", (_what, text, reason) => {
    expect(vmAddressProblem(range(text), OTHERS)).toContain(reason);
  });

  it.each([
    "203.0.113.2-203.0.113.52/24",
    "203.0.113.54-203.0.113.254/24",
    "2001:db8::2-2001:db8::52/64",
    "198.51.100.0-198.51.100.1/31",
    "198.51.100.1-198.51.100.254/24",
  ])("accepts %s, clear of everything", (text) => {
    expect(vmAddressProblem(range(text), OTHERS)).toBeUndefined();
  });
});

describe("the addresses a NIC gives other machines", () => {
  it("are its gateways and nameservers that are valid addresses, named by their fields", () => {
    expect(
      othersOf(
        { gateway4: "203.0.113.1", gateway6: "2001:DB8::1", nameservers: ["dns", "1.1.1.1"] },
        "nics[2].",
      ).map((o) => `${o.field}: ${o.what}`),
    ).toEqual([
      "nics[2].gateway4: the gateway 203.0.113.1",
      "nics[2].nameservers[1]: the nameserver 1.1.1.1",
    ]);
  });
});
