/**
 * Who may use a proxy and where it may go (provider/kvm/proxy/access.ts):
 * the rules on allowedClients and allowedDestinations, and squid's ordered
 * access list, read as a table. What squid itself makes of the list is
 * shown with a real squid in test/libvirtd/proxy/squid-rules.test.ts.
 */
import { describe, expect, it } from "vitest";
import {
  type AccessInputs,
  checkAllowedClients,
  checkAllowedDestinations,
  ONLINK_ACL_FILE,
  OWN_ACL_FILE,
  squidAccess,
} from "../../../../provider/kvm/proxy/access";

function failures(run: (f: { fail(p: string | undefined, r: string): void }) => unknown) {
  const list: { property: string | undefined; reason: string }[] = [];
  const result = run({ fail: (property, reason) => list.push({ property, reason }) });
  return { list, result };
}

const NO_AUTH = { auth: false, publicClientsWithoutAuth: false };
const AUTH = { auth: true, publicClientsWithoutAuth: false };
const OPT_OUT = { auth: false, publicClientsWithoutAuth: true };

describe("allowedClients", () => {
  it.each<[string, string[], typeof NO_AUTH, string, RegExp]>([
    ["everyone, IPv4", ["0.0.0.0/0"], NO_AUTH, "c[0]", /IPv6 clients too/],
    ["everyone, IPv6", ["::/0"], NO_AUTH, "c[0]", /IPv4 clients too/],
    [
      "everyone, both, no auth",
      ["0.0.0.0/0", "::/0"],
      NO_AUTH,
      "c[0]",
      /public addresses, and the proxy has no auth/,
    ],
    ["two halves of IPv4", ["0.0.0.0/1", "128.0.0.0/1"], NO_AUTH, "c[0]", /public addresses/],
    ["the second half too", ["0.0.0.0/1", "128.0.0.0/1"], NO_AUTH, "c[1]", /public addresses/],
    ["IPv4-mapped everyone", ["::ffff:0:0/96"], NO_AUTH, "c[0]", /canonical form|IPv4-mapped/],
    ["IPv4-mapped, dotted", ["::ffff:0.0.0.0/96"], NO_AUTH, "c[0]", /IPv4-mapped/],
    ["global unicast IPv6", ["2000::/3"], NO_AUTH, "c[0]", /public addresses/],
    ["a zone", ["2001:db8::1%1/128"], NO_AUTH, "c[0]", /zone/],
    ["a zone, no prefix", ["fe80::1%eth0"], NO_AUTH, "c[0]", /zone/],
    ["a leading zero", ["010.0.0.0/8"], NO_AUTH, "c[0]", /leading zero/],
    ["host bits", ["10.0.0.1/8"], NO_AUTH, "c[0]", /host bits set: the range is 10.0.0.0\/8/],
    ["upper case", ["FC00::/7"], NO_AUTH, "c[0]", /write it as fc00::\/7/],
    ["uncompressed", ["fc00:0:0:0:0:0:0:0/7"], NO_AUTH, "c[0]", /write it as fc00::\/7/],
    ["a public /24", ["203.0.113.0/24"], NO_AUTH, "c[0]", /publicClientsWithoutAuth/],
    ["10/7 reaches past 10/8", ["10.0.0.0/7"], NO_AUTH, "c[0]", /public addresses/],
    ["loopback", ["127.0.0.0/8"], AUTH, "c[0]", /loopback/],
    ["multicast", ["224.0.0.0/4"], AUTH, "c[0]", /multicast/],
    ["too wide with the opt-out", ["203.0.0.0/15"], OPT_OUT, "c[0]", /at most a \/16/],
    ["IPv6 too wide with the opt-out", ["2001:db8::/31"], OPT_OUT, "c[0]", /at most a \/32/],
    ["the world with the opt-out", ["0.0.0.0/0", "::/0"], OPT_OUT, "c[0]", /too wide/],
    ["not a string", [42 as unknown as string], NO_AUTH, "c[0]", /must be a string/],
  ])("refuses %s at the entry", (_what, entries, options, property, reason) => {
    const { list } = failures((f) => checkAllowedClients(f, "c", entries, options));
    expect(list.find((x) => x.property === property)?.reason).toMatch(reason);
  });

  it("refuses more than a /8 of public IPv4 in all with the opt-out, naming the list", () => {
    const entries = Array.from({ length: 257 }, (_, i) => `${20 + Math.floor(i / 256)}.${i % 256}.0.0/16`);
    const { list } = failures((f) => checkAllowedClients(f, "c", entries, OPT_OUT));
    expect(list).toEqual([{ property: "c", reason: expect.stringMatching(/more than a \/8/) }]);
  });

  it.each<[string, string[], typeof NO_AUTH]>([
    [
      "the default private ranges",
      ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fe80::/10"],
      NO_AUTH,
    ],
    ["one private address", ["192.168.1.7"], NO_AUTH],
    ["a ULA /48", ["fd12:3456:789a::/48"], NO_AUTH],
    ["everyone with auth", ["0.0.0.0/0", "::/0"], AUTH],
    ["a public /24 with auth", ["203.0.113.0/24"], AUTH],
    ["a public /24 with the opt-out", ["203.0.113.0/24", "2001:db8:100::/48"], OPT_OUT],
  ])("accepts %s", (_what, entries, options) => {
    expect(failures((f) => checkAllowedClients(f, "c", entries, options)).list).toEqual([]);
  });

  it("returns the public ranges admitted without auth, for the opt-out's warning", () => {
    const { result } = failures((f) =>
      checkAllowedClients(f, "c", ["10.0.0.0/8", "203.0.113.0/24"], OPT_OUT),
    );
    expect(result).toEqual(["203.0.113.0/24"]);
  });
});

describe("allowedDestinations", () => {
  it.each<[string, string, RegExp]>([
    ["loopback", "127.0.0.0/8", /the VM itself/],
    ["the metadata address", "169.254.169.254", /metadata/],
    ["link-local IPv6", "fe80::/64", /link-local/],
    ["AWS's IPv6 metadata", "fd00:ec2::254", /metadata/],
    ["everything (reaches loopback)", "0.0.0.0/0", /the VM itself/],
    ["multicast", "239.0.0.0/8", /multicast/],
    ["a zone", "fd00::1%2", /zone/],
    ["host bits", "192.168.1.1/24", /host bits/],
  ])("refuses %s", (_what, entry, reason) => {
    const { list } = failures((f) => checkAllowedDestinations(f, "d", [entry]));
    expect(list).toEqual([{ property: "d[0]", reason: expect.stringMatching(reason) }]);
  });

  it.each(["192.168.10.0/24", "10.1.2.3", "fd12::/16", "100.64.0.0/10", "203.0.113.0/24"])(
    "accepts %s",
    (entry) => {
      expect(failures((f) => checkAllowedDestinations(f, "d", [entry])).list).toEqual([]);
    },
  );
});

const BASE: AccessInputs = {
  auth: false,
  allowedClients: ["10.0.0.0/8"],
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
};

describe("squid's access list", () => {
  it.each<[string, Partial<AccessInputs>, string[]]>([
    [
      "without auth",
      {},
      [
        "http_access deny !kvmp_clients !kvmp_self",
        "http_access deny manager",
        "http_access deny !Safe_ports",
        "http_access deny CONNECT !SSL_ports",
        "http_access deny to_localhost",
        "http_access deny kvmp_never",
        "http_access deny kvmp_own",
        "http_access deny kvmp_inward",
        "http_access allow kvmp_self",
        "http_access allow kvmp_clients",
        "http_access deny all",
      ],
    ],
    [
      "with auth and opened destinations",
      { auth: true, allowedDestinations: ["192.168.10.0/24"] },
      [
        "http_access deny !kvmp_clients !kvmp_self",
        "http_access deny manager",
        "http_access deny !Safe_ports",
        "http_access deny CONNECT !SSL_ports",
        "http_access deny to_localhost",
        "http_access deny kvmp_never",
        "http_access deny kvmp_own",
        "http_access deny kvmp_inward !kvmp_opened",
        "http_access allow kvmp_self",
        "http_access deny !kvmp_users",
        "http_access allow kvmp_users",
        "http_access deny all",
      ],
    ],
  ])(
    "%s: clients, then what no one may do, then destinations, then authentication",
    (_what, change, rules) => {
      expect(squidAccess({ ...BASE, ...change }).rules).toEqual(rules);
    },
  );

  it("defines the destination sets: never, the VM's own (file and static), inward (private, file, static), opened", () => {
    const { acls } = squidAccess({
      ...BASE,
      allowedDestinations: ["192.168.10.0/24"],
      ownAddresses: ["203.0.113.10", "2001:db8:10::10"],
      onLink: ["203.0.113.0/24", "203.0.113.1"],
    });
    expect(acls).toContain(
      "acl kvmp_never dst 127.0.0.0/8 0.0.0.0/8 ::1/128 ::/128 169.254.0.0/16 fe80::/10 fd00:ec2::254/128 224.0.0.0/4 ff00::/8 240.0.0.0/4",
    );
    expect(acls).toContain(`acl kvmp_own dst "${OWN_ACL_FILE}"`);
    expect(acls).toContain("acl kvmp_own dst 203.0.113.10 2001:db8:10::10");
    expect(acls).toContain(
      "acl kvmp_inward dst 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 fc00::/7",
    );
    expect(acls).toContain(`acl kvmp_inward dst "${ONLINK_ACL_FILE}"`);
    // The gateway lies in the subnet: squid would warn of it and drop it.
    expect(acls).toContain("acl kvmp_inward dst 203.0.113.0/24");
    expect(acls).toContain("acl kvmp_opened dst 192.168.10.0/24");
    expect(acls).toContain("acl kvmp_self src 127.0.0.1/32 ::1/128");
  });

  it("writes 'all' for everyone and drops repeated clients", () => {
    expect(squidAccess({ ...BASE, allowedClients: ["0.0.0.0/0", "::/0"] }).acls[0]).toBe(
      "acl kvmp_clients src all",
    );
    expect(squidAccess({ ...BASE, allowedClients: ["10.0.0.0/8", "10.0.0.0/8"] }).acls[0]).toBe(
      "acl kvmp_clients src 10.0.0.0/8",
    );
  });

  it("spreads a long list over lines of one ACL, each far below squid's 8191-byte limit", () => {
    const clients = Array.from({ length: 1000 }, (_, i) => `fd00:${i.toString(16)}:ffff:ffff:ffff:ffff::/96`);
    const lines = squidAccess({ ...BASE, allowedClients: clients }).acls.filter((l) =>
      l.startsWith("acl kvmp_clients "),
    );
    expect(lines.length).toBeGreaterThan(1);
    expect(lines.flatMap((l) => l.split(" ").slice(3))).toEqual(clients);
    for (const l of lines) expect(Buffer.byteLength(l)).toBeLessThan(8191);
  });
});
