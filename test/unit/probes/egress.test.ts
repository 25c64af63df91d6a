/**
 * The egress check's reading of an IP echo's reply and its warnings
 * (provider/probes/egress.ts). The reply formats are those of echo services
 * users run or trust: plain text (icanhazip, ifconfig.me, our namespace's
 * whoami), JSON with `ip` (ipify), `origin` (httpbin, a list behind proxies),
 * `address`, `query` (ip-api).
 */
import { describe, expect, it } from "vitest";
import {
  egressExpectationOf,
  egressMismatch,
  readEchoReply,
  sharedEgress,
} from "../../../provider/probes/egress";

describe("an IP echo's reply", () => {
  it.each([
    ["plain IPv4 with a newline", "203.0.113.7\n", "203.0.113.7"],
    ["plain IPv6, upper case, as canonical text", "2001:DB8:0::7\r\n", "2001:db8::7"],
    ["IPv4-mapped IPv6 (a dual-stack echo) as IPv4", "::ffff:192.0.2.5", "192.0.2.5"],
    ["JSON ip", '{"ip": "198.51.100.4"}', "198.51.100.4"],
    ["JSON origin, a list: the last address connected", '{"origin": "10.0.0.1, 203.0.113.9"}', "203.0.113.9"],
    ["JSON address", '{"address": "2001:db8::44", "country": "NL"}', "2001:db8::44"],
    ["JSON query (ip-api)", '{"status":"success","query":"203.0.113.10"}', "203.0.113.10"],
    ["a plain list", "10.1.1.1, 203.0.113.11", "203.0.113.11"],
  ])("%s: %j", (_what, body, address) => {
    expect(readEchoReply(body)).toEqual({ address });
  });

  it.each([
    ["an HTML page", "<html>forbidden</html>", /not an IP address: "<html>forbidden<\/html>"/],
    ["broken JSON", '{"ip": ', /neither an address nor JSON/],
    [
      "JSON without an address field",
      '{"client": "203.0.113.7"}',
      /none of the fields ip, origin, address, query/,
    ],
    ["JSON whose ip is no address", '{"ip": "localhost"}', /not an IP address/],
    ["an empty body", "", /not an IP address: ""/],
    ["a zone index", "fe80::1%eth0", /not an IP address/],
  ])("%s is refused, quoted", (_what, body, problem) => {
    const r = readEchoReply(body);
    expect("problem" in r ? r.problem : "").toMatch(problem);
  });

  it("quotes at most 80 characters of a long reply, on one line", () => {
    const r = readEchoReply(`${"x".repeat(50)}\n${"y".repeat(100)}`);
    expect("problem" in r ? r.problem : "").toBe(
      `its reply is not an IP address: "${"x".repeat(50)} ${"y".repeat(29)}..."`,
    );
  });
});

describe("the egress expected of a proxy", () => {
  const URL = "http://echo.test/";
  const nics = [{ addresses: ["203.0.113.7/24", "2001:db8::7/64"] }, { addresses: ["192.168.1.5/24"] }];

  it.each<[string, string, Parameters<typeof egressExpectationOf>[0], RegExp | undefined]>([
    ["its outgoingAddress", "203.0.113.8", { proxy: { outgoingAddress: "203.0.113.8" }, nics }, undefined],
    [
      "not its outgoingAddress",
      "203.0.113.7",
      { proxy: { outgoingAddress: "203.0.113.8" }, nics },
      /come from 203\.0\.113\.7, not from its outgoingAddress 203\.0\.113\.8: NAT or routing/,
    ],
    ["a static address of any NIC", "192.168.1.5", { nics }, undefined],
    [
      "none of the static addresses of its family",
      "198.51.100.1",
      { nics },
      /none of the VM's static IPv4 addresses \(203\.0\.113\.7, 192\.168\.1\.5\)/,
    ],
    [
      "IPv6 beside an IPv4 outgoingAddress: the static IPv6 decide",
      "2001:db8::99",
      { proxy: { outgoingAddress: "203.0.113.7" }, nics },
      /none of the VM's static IPv6 addresses \(2001:db8::7\)/,
    ],
    [
      "an IPv6 static address beside an IPv4 outgoingAddress",
      "2001:db8::7",
      { proxy: { outgoingAddress: "203.0.113.7" }, nics },
      undefined,
    ],
    [
      "anything, without static addresses (DHCP behind NAT)",
      "198.51.100.1",
      { nics: [{ addresses: [] }] },
      undefined,
    ],
    ["anything, without NICs in the inputs (the one-NIC shorthand)", "198.51.100.1", {}, undefined],
  ])("%s", (_what, egress, inputs, warning) => {
    const w = egressMismatch(egress, egressExpectationOf(inputs), URL);
    if (warning === undefined) expect(w).toBeUndefined();
    else expect(w).toMatch(warning);
  });

  it("names the echo that saw it", () => {
    expect(egressMismatch("198.51.100.1", { staticAddresses: ["203.0.113.7/24"] }, URL)).toMatch(
      /^http:\/\/echo\.test\/ saw the proxy's requests come from 198\.51\.100\.1/,
    );
  });
});

describe("a fleet's shared egress addresses", () => {
  it("names each address several members share, with its members", () => {
    expect(
      sharedEgress([
        { name: "f-0", egressAddress: "203.0.113.7" },
        { name: "f-1", egressAddress: "203.0.113.8" },
        { name: "f-2", egressAddress: "203.0.113.7" },
        { name: "f-3", egressAddress: undefined },
        { name: "f-4", egressAddress: "203.0.113.8" },
      ]),
    ).toEqual([
      "f-0, f-2 egress through one address, 203.0.113.7: every target sees them as one proxy",
      "f-1, f-4 egress through one address, 203.0.113.8: every target sees them as one proxy",
    ]);
  });

  it("says nothing when every member has an address of its own, or none is known", () => {
    expect(
      sharedEgress([
        { name: "f-0", egressAddress: "203.0.113.7" },
        { name: "f-1", egressAddress: "2001:db8::7" },
        { name: "f-2" },
        { name: "f-3" },
      ]),
    ).toEqual([]);
  });
});
