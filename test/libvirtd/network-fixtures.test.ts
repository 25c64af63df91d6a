/**
 * The test host's network fixtures for NICs and addressing (scripts/test-host), checked
 * from host.json's facts: each one exists and does what the booted-guest
 * tests rely on. A missing fixture fails here, loudly, before a guest test
 * spends minutes booting to find out.
 *
 * - the bridge without DHCP: a bridge, up, with its IPv4 and IPv6 addresses;
 *   no libvirt network owns it; a DHCP discover on it gets no offer while one
 *   on the NAT network's bridge does (so the probe itself works); an address
 *   behind it reaches the namespace and is reached from it, over both.
 * - the macvtap parent: a veth whose peer is in the far namespace with its
 *   addresses; a macvtap on it (bridge mode, given an address) reaches the
 *   far end over IPv4 and IPv6, and the namespace reaches it through the
 *   host-side macvlan; its character device is its own.
 * - nwfilter: clean-traffic and every filter it refers to are defined;
 *   ebtables, iptables and ip6tables work in the namespace; clean-traffic
 *   bound to a port of the bridge lets the port's address through and drops
 *   another one.
 * - tc: htb and ingress qdiscs are added and removed on a scratch veth; the
 *   commands libvirt's <bandwidth> runs, through the tc libvirtd sees, limit
 *   both directions.
 * - libvirt: a domain with a direct NIC on the parent and a bridge NIC on the
 *   bridge with clean-traffic and <bandwidth> starts, and its limits change
 *   live.
 *
 * The "guests" here are scratch network namespaces the test creates (the
 * network rule: all traffic stays inside namespaces), named after the host's
 * namespace and this process, each with a veth or macvtap on a fixture.
 * Their addresses come from .226-.253 of the fixtures' IPv4 ranges and
 * ::f0-::fd of the IPv6 ones, which booted guests leave alone. Everything is
 * removed in afterAll.
 */
import { type ChildProcess, execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWhoAmI } from "../support/netns-http";
import {
  type MacvtapFixture,
  macvtapOf,
  type StaticBridge,
  staticBridgeOf,
  type TestHost,
  testHost,
  virshUri,
} from "../support/test-host";

const execFileAsync = promisify(execFile);

let host: TestHost;
let bridge: StaticBridge;
let mv: MacvtapFixture;

/** 0-13, from the PID: this file's scratch addresses (.240 + it) and names. */
const slot = process.pid % 14;
const tag = `${process.pid % 100000}`;
const scratchNamespaces: string[] = [];
const scratchLinks: string[] = [];
const servers: ChildProcess[] = [];
const domains: string[] = [];
const bindings: string[] = [];
const neighbours = new Set<string>();

async function run(cmd: string, args: string[], timeout = 30_000): Promise<string> {
  try {
    return (await execFileAsync(cmd, args, { encoding: "utf8", timeout, maxBuffer: 16 << 20 })).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message?: string };
    throw new Error(`${cmd} ${args.join(" ")} failed: ${e.stderr?.trim() || e.message}`);
  }
}

/** A command inside network namespace `ns`. */
const inNs = (ns: string, cmd: string, ...args: string[]) => run("ip", ["netns", "exec", ns, cmd, ...args]);
/** `ip` on namespace `ns`. */
const ipIn = (ns: string, ...args: string[]) => run("ip", ["-n", ns, ...args]);
const virsh = (...args: string[]) => run("virsh", ["-q", "-c", virshUri(host), ...args]);

interface AddrInfo {
  family: string;
  local: string;
  prefixlen: number;
  tentative?: boolean;
  dadfailed?: boolean;
}
interface Link {
  ifname: string;
  ifindex: number;
  link_index?: number;
  link?: string;
  operstate?: string;
  flags?: string[];
  linkinfo?: { info_kind?: string; info_data?: { mode?: string } };
  addr_info?: AddrInfo[];
}

async function linkOf(ns: string, dev: string): Promise<Link> {
  const links = JSON.parse(await ipIn(ns, "-j", "-d", "addr", "show", "dev", dev)) as Link[];
  const l = links[0];
  if (l === undefined) throw new Error(`no interface ${dev} in namespace ${ns}`);
  return l;
}

function addresses(l: Link): string[] {
  return (l.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`);
}

async function netnsExists(ns: string): Promise<boolean> {
  const out = await run("ip", ["netns", "list"]);
  return out.split("\n").some((line) => line.split(" ")[0] === ns);
}

/** A scratch namespace for this file, removed in afterAll. */
async function scratchNamespace(name: string): Promise<string> {
  const ns = `${host.netns}-fx${tag}${name}`;
  if (await netnsExists(ns)) await run("ip", ["netns", "del", ns]);
  await run("ip", ["netns", "add", ns]);
  scratchNamespaces.push(ns);
  await ipIn(ns, "link", "set", "lo", "up");
  return ns;
}

/**
 * The MAC of a scratch "guest" interface: fixed per slot and use, so that a
 * neighbour entry an earlier run left for the same address still holds.
 */
function scratchMac(use: string): string {
  return `02:6b:76:70:${use.charCodeAt(0).toString(16)}:${slot.toString(16).padStart(2, "0")}`;
}

/** Forgets the neighbour entries the test and far namespaces hold for `addrs` (scratch addresses). */
async function forgetNeighbours(...addrs: string[]): Promise<void> {
  for (const a of addrs) {
    neighbours.add(a);
    for (const ns of [host.netns, mv.farNetns])
      await ipIn(ns, "neigh", "flush", "to", a).catch(() => undefined);
  }
}

/**
 * A veth from the test namespace into `ns`: the host end (attached to
 * `master` when given, like a guest's tap) and the guest end `eth0` in `ns`
 * (its MAC {@link scratchMac} of `use`).
 */
async function vethInto(ns: string, hostEnd: string, use: string, master?: string): Promise<void> {
  await ipIn(
    host.netns,
    "link",
    "add",
    hostEnd,
    "type",
    "veth",
    "peer",
    "name",
    "eth0",
    "address",
    scratchMac(use),
    "netns",
    ns,
  );
  scratchLinks.push(hostEnd);
  if (master !== undefined) await ipIn(host.netns, "link", "set", hostEnd, "master", master);
  await ipIn(host.netns, "link", "set", hostEnd, "up");
  await ipIn(ns, "link", "set", "eth0", "up");
}

/** Adds an address without duplicate address detection (IPv6) to `dev` in `ns`. */
async function addAddress(ns: string, dev: string, cidr: string): Promise<void> {
  await ipIn(ns, "addr", "add", cidr, "dev", dev, ...(cidr.includes(":") ? ["nodad"] : []));
}

interface Fetched {
  status: string;
  body: string;
  seconds: number;
}

/** curl inside `ns`, optionally from a source address or interface; "000" when nothing answered. */
async function fetchIn(
  ns: string,
  url: string,
  opts: { from?: string; maxTime?: number } = {},
): Promise<Fetched> {
  const args = ["netns", "exec", ns, "curl", "-s", "--noproxy", "*", "--max-time", String(opts.maxTime ?? 8)];
  if (opts.from !== undefined) args.push("--interface", opts.from);
  args.push("-w", "\n%{http_code} %{time_total}", url);
  let out: string;
  try {
    out = (await execFileAsync("ip", args, { encoding: "utf8", timeout: 120_000, maxBuffer: 64 << 20 }))
      .stdout;
  } catch (err) {
    out = (err as { stdout?: string }).stdout ?? "";
  }
  const nl = out.lastIndexOf("\n");
  const [status = "000", seconds = "0"] = out
    .slice(nl + 1)
    .trim()
    .split(" ");
  return { status: status || "000", body: nl < 0 ? "" : out.slice(0, nl), seconds: Number(seconds) };
}

/**
 * Sends DHCPDISCOVERs (broadcast flag set) from `dev` in `ns` for `seconds`
 * through a raw packet socket and prints the first DHCPOFFER's address, or
 * nothing: {"offer": "192.168.213.57"} or {"offer": null}.
 */
const DHCP_PROBE = `
import json, os, random, socket, struct, sys, time
dev, wait = sys.argv[1], float(sys.argv[2])
mac = bytes.fromhex(open(f"/sys/class/net/{dev}/address").read().strip().replace(":", ""))
xid = random.getrandbits(32)
def csum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF
bootp = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, xid, 0, 0x8000,
    bytes(4), bytes(4), bytes(4), bytes(4), mac.ljust(16, b"\\0"), b"", b"")
payload = bootp + bytes([99, 130, 83, 99, 53, 1, 1, 55, 3, 1, 3, 6, 255])
udp = struct.pack("!HHHH", 68, 67, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes(4), b"\\xff" * 4)
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
frame = b"\\xff" * 6 + mac + b"\\x08\\x00" + ip + udp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((dev, 0))
s.settimeout(0.2)
end, next_send = time.time() + wait, 0.0
while time.time() < end:
    if time.time() >= next_send:
        s.send(frame)
        next_send = time.time() + 1
    try:
        data = s.recv(4096)
    except socket.timeout:
        continue
    if len(data) < 14 + 20 + 8 + 240 or data[12:14] != b"\\x08\\x00" or data[23] != 17:
        continue
    ihl = (data[14] & 0x0F) * 4
    udp_at = 14 + ihl
    if struct.unpack("!H", data[udp_at + 2 : udp_at + 4])[0] != 68:
        continue
    b = data[udp_at + 8 :]
    if b[0] != 2 or struct.unpack("!I", b[4:8])[0] != xid:
        continue
    opts, i, kind = b[240:], 0, None
    while i < len(opts) and opts[i] != 255:
        if opts[i] == 0:
            i += 1
            continue
        if opts[i] == 53:
            kind = opts[i + 2]
        i += 2 + opts[i + 1]
    if kind == 2:
        print(json.dumps({"offer": socket.inet_ntoa(b[16:20])}))
        sys.exit(0)
print(json.dumps({"offer": None}))
`;

async function dhcpOffer(ns: string, dev: string, seconds: number): Promise<string | null> {
  const out = await inNs(ns, "/usr/bin/python3", "-c", DHCP_PROBE, dev, String(seconds));
  return (JSON.parse(out) as { offer: string | null }).offer;
}

/** The PID of the host's reaper: its mount namespace is libvirtd's (the tc libvirtd runs). */
function reaperPid(): string {
  return readFileSync(path.join(host.stateDir, "pids/reaper.pid"), "utf8").trim();
}

/** tc as libvirtd runs it (in the host's network and private mount namespaces), words split at spaces. */
const libvirtTc = (line: string) =>
  run("nsenter", ["--target", reaperPid(), "--mount", "--net", "--", "tc", ...line.split(" ")]);

/** The `.240 + slot` (`::f0 + slot`) address of an IPv4 /24 (IPv6 /64) fixture address. */
function scratchAddress(fixtureAddress: string): string {
  return fixtureAddress.includes(":")
    ? fixtureAddress.replace(/::[0-9a-f]+$/, `::${(0xf0 + slot).toString(16)}`)
    : fixtureAddress.replace(/\.\d+$/, `.${240 + slot}`);
}

beforeAll(() => {
  host = testHost();
  bridge = staticBridgeOf(host);
  mv = macvtapOf(host);
});

afterAll(async () => {
  const errors: string[] = [];
  const attempt = async (what: string, f: () => Promise<unknown>) => {
    try {
      await f();
    } catch (err) {
      errors.push(`${what}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  for (const child of servers) {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null)
      child.kill("SIGKILL");
  }
  for (const d of domains) {
    await attempt(`destroy ${d}`, () => virsh("destroy", d).catch(() => undefined));
    await attempt(`undefine ${d}`, () => virsh("undefine", d));
  }
  for (const b of bindings) await attempt(`nwfilter binding ${b}`, () => virsh("nwfilter-binding-delete", b));
  for (const l of scratchLinks) {
    await attempt(`link ${l}`, async () => {
      const exists = await ipIn(host.netns, "link", "show", "dev", l).then(
        () => true,
        () => false,
      );
      if (exists) await ipIn(host.netns, "link", "del", l);
    });
  }
  for (const a of neighbours) {
    for (const ns of [host.netns, mv.farNetns])
      await ipIn(ns, "neigh", "flush", "to", a).catch(() => undefined);
  }
  for (const ns of scratchNamespaces) {
    await attempt(`namespace ${ns}`, async () => {
      if (await netnsExists(ns)) await run("ip", ["netns", "del", ns]);
    });
  }
  if (errors.length > 0) throw new Error(`cleanup failed:\n${errors.join("\n")}`);
});

describe("host.json", () => {
  it("records the networking fixtures, apart from the NAT network and each other", () => {
    expect(bridge.name).toMatch(/^[A-Za-z0-9_.-]{1,15}$/);
    expect(mv.parent).toMatch(/^[A-Za-z0-9_.-]{1,15}$/);
    expect(mv.farNetns).not.toBe(host.netns);
    const nat = host.networkAddress.replace(/\.\d+$/, ".");
    for (const a of [bridge.address4, mv.hostAddress4, mv.farAddress4]) {
      expect(a).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      expect(a.startsWith(nat)).toBe(false);
    }
    expect(bridge.address4.replace(/\.\d+$/, "")).not.toBe(mv.farAddress4.replace(/\.\d+$/, ""));
    expect(bridge.address6).toContain(":");
    expect(mv.farAddress6).toContain(":");
    expect([bridge.prefix4, mv.prefix4, bridge.prefix6, mv.prefix6]).toEqual([24, 24, 64, 64]);
  });
});

describe("the bridge without DHCP", () => {
  it("is a bridge, up, holding its IPv4 and IPv6 addresses (not tentative)", async () => {
    const l = await linkOf(host.netns, bridge.name);
    expect(l.linkinfo?.info_kind).toBe("bridge");
    expect(l.flags).toContain("UP");
    expect(addresses(l)).toEqual(
      expect.arrayContaining([
        `${bridge.address4}/${bridge.prefix4}`,
        `${bridge.address6}/${bridge.prefix6}`,
      ]),
    );
    for (const a of l.addr_info ?? []) {
      expect(a.tentative ?? false, `${a.local} is tentative`).toBe(false);
      expect(a.dadfailed ?? false, `${a.local} failed DAD`).toBe(false);
    }
    const forwarding = await inNs(
      host.netns,
      "sysctl",
      "-n",
      "net.ipv4.ip_forward",
      "net.ipv6.conf.all.forwarding",
    );
    expect(forwarding.trim().split("\n")).toEqual(["1", "1"]);
  });

  it("belongs to no libvirt network (so no dnsmasq serves it)", async () => {
    const nets = (await virsh("net-list", "--all", "--name")).split("\n").filter((n) => n.trim() !== "");
    expect(nets).toContain(host.network);
    const bridges = await Promise.all(
      nets.map(async (n) => {
        const info = await virsh("net-info", n.trim());
        return /^Bridge:\s+(\S+)/m.exec(info)?.[1];
      }),
    );
    expect(bridges).toContain(host.networkBridge);
    expect(bridges).not.toContain(bridge.name);
  });

  it("gets no DHCP offer, while the NAT network's bridge does (the probe works)", async () => {
    const ns = await scratchNamespace("d");
    const onNat = `kvmpfx${tag}n`;
    await vethInto(ns, onNat, "n", host.networkBridge);
    await ipIn(ns, "link", "set", "eth0", "name", "nat0");
    const onStatic = `kvmpfx${tag}s`;
    await vethInto(ns, onStatic, "s", bridge.name);
    const offerNat = await dhcpOffer(ns, "nat0", 10);
    expect(offerNat, `no DHCP offer on ${host.networkBridge}: the probe is broken`).toMatch(
      new RegExp(`^${host.networkAddress.replace(/\.\d+$/, "").replaceAll(".", "\\.")}\\.\\d+$`),
    );
    expect(await dhcpOffer(ns, "eth0", 5), `a DHCP server answers on ${bridge.name}`).toBeNull();
  });

  it("carries a static address both ways over IPv4 and IPv6, and routes it to the namespace's other addresses", async () => {
    const ns = await scratchNamespace("b");
    await vethInto(ns, `kvmpfx${tag}b`, "b", bridge.name);
    const guest4 = scratchAddress(bridge.address4);
    const guest6 = scratchAddress(bridge.address6);
    await forgetNeighbours(guest4, guest6);
    await addAddress(ns, "eth0", `${guest4}/${bridge.prefix4}`);
    await addAddress(ns, "eth0", `${guest6}/${bridge.prefix6}`);
    await ipIn(ns, "route", "add", "default", "via", bridge.address4);
    await ipIn(ns, "-6", "route", "add", "default", "via", bridge.address6);

    // The namespace reaches the "guest" (as a health check or curl -x would).
    const inGuest4 = await startWhoAmI(servers, ns, guest4);
    const inGuest6 = await startWhoAmI(servers, ns, guest6);
    expect(await fetchIn(host.netns, `${inGuest4}/whoami`)).toMatchObject({
      status: "200",
      body: bridge.address4,
    });
    expect(await fetchIn(host.netns, `${inGuest6}/whoami`)).toMatchObject({
      status: "200",
      body: bridge.address6,
    });

    // The "guest" reaches targets on the bridge's addresses...
    const target4 = await startWhoAmI(servers, host.netns, bridge.address4);
    const target6 = await startWhoAmI(servers, host.netns, bridge.address6);
    expect(await fetchIn(ns, `${target4}/whoami`)).toMatchObject({ status: "200", body: guest4 });
    expect(await fetchIn(ns, `${target6}/whoami`)).toMatchObject({ status: "200", body: guest6 });
    // ...and, through its gateways, the namespace's other addresses.
    const nat = await startWhoAmI(servers, host.netns, host.networkAddress);
    const macvlan6 = await startWhoAmI(servers, host.netns, mv.hostAddress6);
    expect(await fetchIn(ns, `${nat}/whoami`)).toMatchObject({ status: "200", body: guest4 });
    expect(await fetchIn(ns, `${macvlan6}/whoami`)).toMatchObject({ status: "200", body: guest6 });
  });
});

describe("the macvtap parent and its other side", () => {
  it("is a veth whose peer is in the far namespace with the far addresses; the macvlan holds the host ones", async () => {
    expect(await netnsExists(mv.farNetns), `namespace ${mv.farNetns} is missing`).toBe(true);
    const parent = await linkOf(host.netns, mv.parent);
    const far = await linkOf(mv.farNetns, mv.farInterface);
    expect(parent.linkinfo?.info_kind).toBe("veth");
    expect(far.linkinfo?.info_kind).toBe("veth");
    expect(parent.link_index).toBe(far.ifindex);
    expect(far.link_index).toBe(parent.ifindex);
    expect(parent.flags).toContain("UP");
    expect(parent.flags).toContain("LOWER_UP");
    expect(addresses(far)).toEqual(
      expect.arrayContaining([`${mv.farAddress4}/${mv.prefix4}`, `${mv.farAddress6}/${mv.prefix6}`]),
    );
    expect((parent.addr_info ?? []).filter((a) => a.family === "inet")).toEqual([]);
    const macvlan = await linkOf(host.netns, mv.hostInterface);
    expect(macvlan.linkinfo?.info_kind).toBe("macvlan");
    expect(macvlan.linkinfo?.info_data?.mode).toBe("bridge");
    expect(macvlan.link).toBe(mv.parent);
    expect(addresses(macvlan)).toEqual(
      expect.arrayContaining([`${mv.hostAddress4}/${mv.prefix4}`, `${mv.hostAddress6}/${mv.prefix6}`]),
    );
  });

  it("a macvtap on it (bridge mode) reaches the far end, and the namespace reaches it, over IPv4 and IPv6", async () => {
    const dev = `kvmpfx${tag}m`;
    await ipIn(
      host.netns,
      "link",
      "add",
      "link",
      mv.parent,
      "name",
      dev,
      "address",
      scratchMac("m"),
      "type",
      "macvtap",
      "mode",
      "bridge",
    );
    scratchLinks.push(dev);
    // Its character device is /dev/tap<ifindex>, a name shared by every
    // namespace: it must be this macvtap's own, not another namespace's
    // macvtap with the same ifindex (libvirt would open that one).
    const ifindex = (await inNs(host.netns, "cat", `/sys/class/net/${dev}/ifindex`)).trim();
    const sysDev = (await inNs(host.netns, "cat", `/sys/class/net/${dev}/macvtap/tap${ifindex}/dev`)).trim();
    const [maj, min] = (await run("stat", ["-c", "%t %T", `/dev/tap${ifindex}`])).trim().split(" ");
    expect(`${Number.parseInt(maj ?? "", 16)}:${Number.parseInt(min ?? "", 16)}`).toBe(sysDev);

    // Into a namespace of its own, as a guest's stack would be: its routes
    // then touch nothing of the test namespace.
    const ns = await scratchNamespace("m");
    await ipIn(host.netns, "link", "set", dev, "netns", ns);
    const guest4 = scratchAddress(mv.farAddress4);
    const guest6 = scratchAddress(mv.farAddress6);
    await forgetNeighbours(guest4, guest6);
    await addAddress(ns, dev, `${guest4}/${mv.prefix4}`);
    await addAddress(ns, dev, `${guest6}/${mv.prefix6}`);
    await ipIn(ns, "link", "set", dev, "up");

    const far4 = await startWhoAmI(servers, mv.farNetns, mv.farAddress4);
    const far6 = await startWhoAmI(servers, mv.farNetns, mv.farAddress6);
    expect(await fetchIn(ns, `${far4}/whoami`)).toMatchObject({ status: "200", body: guest4 });
    expect(await fetchIn(ns, `${far6}/whoami`)).toMatchObject({ status: "200", body: guest6 });

    const inGuest4 = await startWhoAmI(servers, ns, guest4);
    const inGuest6 = await startWhoAmI(servers, ns, guest6);
    expect(await fetchIn(host.netns, `${inGuest4}/whoami`)).toMatchObject({
      status: "200",
      body: mv.hostAddress4,
    });
    expect(await fetchIn(host.netns, `${inGuest6}/whoami`)).toMatchObject({
      status: "200",
      body: mv.hostAddress6,
    });
    // The other side reaches it too.
    expect(await fetchIn(mv.farNetns, `${inGuest4}/whoami`)).toMatchObject({
      status: "200",
      body: mv.farAddress4,
    });
  });
});

describe("nwfilter", () => {
  it("defines clean-traffic and every filter it refers to", async () => {
    const names = (await virsh("nwfilter-list"))
      .split("\n")
      .map((l) => l.trim().split(/\s+/)[1])
      .filter((n): n is string => n !== undefined);
    expect(names).toContain("clean-traffic");
    const xml = await virsh("nwfilter-dumpxml", "clean-traffic");
    const refs = [...xml.matchAll(/<filterref filter=['"]([^'"]+)['"]/g)].map((m) => m[1]);
    expect(refs).toEqual(expect.arrayContaining(["no-mac-spoofing", "no-ip-spoofing", "no-arp-spoofing"]));
    for (const r of refs) expect(names, `clean-traffic refers to ${r}`).toContain(r);
  });

  it("ebtables, iptables and ip6tables work in the namespace", async () => {
    await inNs(host.netns, "ebtables", "-t", "nat", "-L");
    await inNs(host.netns, "iptables", "-S");
    await inNs(host.netns, "ip6tables", "-S");
  });

  it("clean-traffic bound to a port of the bridge passes the port's address and drops another", async () => {
    const ns = await scratchNamespace("f");
    const port = `kvmpfx${tag}f`;
    await vethInto(ns, port, "f", bridge.name);
    const own = scratchAddress(bridge.address4);
    const spoofed = bridge.address4.replace(/\.\d+$/, `.${226 + slot}`);
    await forgetNeighbours(own, spoofed);
    await addAddress(ns, "eth0", `${own}/${bridge.prefix4}`);
    await addAddress(ns, "eth0", `${spoofed}/32`);
    const mac = (await inNs(ns, "cat", "/sys/class/net/eth0/address")).trim();
    const target = await startWhoAmI(servers, host.netns, bridge.address4);

    // Unfiltered, both addresses get through: the check below can fail.
    expect(await fetchIn(ns, `${target}/whoami`, { from: own })).toMatchObject({ status: "200", body: own });
    expect(await fetchIn(ns, `${target}/whoami`, { from: spoofed })).toMatchObject({
      status: "200",
      body: spoofed,
    });

    const uuid = randomUUID();
    const xml = path.join(host.stateDir, `fixtures-binding-${tag}.xml`);
    writeFileSync(
      xml,
      `<filterbinding>
  <owner><name>kvmp-fixtures-${tag}</name><uuid>${uuid}</uuid></owner>
  <portdev name='${port}'/>
  <mac address='${mac}'/>
  <filterref filter='clean-traffic'><parameter name='IP' value='${own}'/></filterref>
</filterbinding>
`,
    );
    try {
      await virsh("nwfilter-binding-create", xml);
    } finally {
      rmSync(xml, { force: true });
    }
    bindings.push(port);
    expect(await virsh("nwfilter-binding-list")).toContain(port);
    expect(await inNs(host.netns, "ebtables", "-t", "nat", "-L")).toContain(port);

    await inNs(ns, "ip", "neigh", "flush", "all");
    expect(await fetchIn(ns, `${target}/whoami`, { from: own })).toMatchObject({ status: "200", body: own });
    expect((await fetchIn(ns, `${target}/whoami`, { from: spoofed, maxTime: 4 })).status).toBe("000");

    await virsh("nwfilter-binding-delete", port);
    bindings.splice(bindings.indexOf(port), 1);
  });
});

describe("tc", () => {
  it("adds and removes htb and ingress qdiscs on a scratch veth", async () => {
    const ns = await scratchNamespace("t");
    const dev = `kvmpfx${tag}t`;
    await vethInto(ns, dev, "t");
    const tc = (...args: string[]) => inNs(host.netns, "tc", ...args);
    await tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1");
    await tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "1024kbps");
    await tc("qdisc", "add", "dev", dev, "ingress");
    await tc(
      "filter",
      "add",
      "dev",
      dev,
      "parent",
      "ffff:",
      "protocol",
      "all",
      "u32",
      "match",
      "u32",
      "0",
      "0",
    );
    const shown = await tc("qdisc", "show", "dev", dev);
    expect(shown).toMatch(/qdisc htb 1: root/);
    expect(shown).toMatch(/qdisc ingress ffff:/);
    await tc("qdisc", "del", "dev", dev, "root");
    await tc("qdisc", "del", "dev", dev, "ingress");
    const after = await tc("qdisc", "show", "dev", dev);
    expect(after).not.toMatch(/htb|ingress/);
  });

  it("libvirt's <bandwidth> commands, through the tc libvirtd runs, limit both directions", async () => {
    const ns = await scratchNamespace("w");
    const dev = `kvmpfx${tag}w`;
    await vethInto(ns, dev, "w");
    // The benchmarking range (198.18.0.0/15), on a link of its own.
    const hostSide = `198.18.${slot}.1`;
    const guestSide = `198.18.${slot}.2`;
    await addAddress(host.netns, dev, `${hostSide}/30`);
    await addAddress(ns, "eth0", `${guestSide}/30`);
    // What virNetDevBandwidthSet runs for <inbound average='512'/> and
    // <outbound average='512'/> on a tap (KiB/s; inbound is the tap's egress).
    await libvirtTc(`qdisc add dev ${dev} root handle 1: htb default 1`);
    await libvirtTc(`class add dev ${dev} parent 1: classid 1:1 htb rate 512kbps`);
    await libvirtTc(`qdisc add dev ${dev} parent 1:1 handle 2: sfq perturb 10`);
    await libvirtTc(`filter add dev ${dev} parent 1:0 protocol all prio 1 handle 1 fw flowid 1`);
    await libvirtTc(`qdisc add dev ${dev} ingress`);
    await libvirtTc(
      `filter add dev ${dev} parent ffff: protocol all u32 match u32 0 0 police rate 512kbps burst 32kb mtu 64kb drop flowid :1`,
    );
    const bytes = 1536 * 1024;
    // Down (into the "guest"): 1.5 MiB at 512 KiB/s is about 3 s.
    const fromHost = await startWhoAmI(servers, host.netns, hostSide);
    const down = await fetchIn(ns, `${fromHost}/bytes/${bytes}`, { maxTime: 30 });
    expect(down.status).toBe("200");
    expect(down.body.length).toBe(bytes);
    expect(down.seconds).toBeGreaterThan(2.2);
    // Up (out of the "guest"), through the tap's ingress.
    const fromGuest = await startWhoAmI(servers, ns, guestSide);
    const up = await fetchIn(host.netns, `${fromGuest}/bytes/${bytes}`, { maxTime: 30 });
    expect(up.status).toBe("200");
    expect(up.body.length).toBe(bytes);
    expect(up.seconds).toBeGreaterThan(2.2);

    // virNetDevBandwidthClear: both qdiscs go, and whatever stood in for the police action with them.
    await libvirtTc(`qdisc del dev ${dev} root`);
    await libvirtTc(`qdisc del dev ${dev} ingress`);
    expect(await inNs(host.netns, "tc", "qdisc", "show", "dev", dev)).not.toMatch(/htb|ingress/);
    const ifindex = (await inNs(host.netns, "cat", `/sys/class/net/${dev}/ifindex`)).trim();
    expect(await ipIn(host.netns, "-br", "link")).not.toContain(`kvmpifb${ifindex} `);
    const quick = await fetchIn(ns, `${fromHost}/bytes/${bytes}`, { maxTime: 30 });
    expect(quick.status).toBe("200");
    expect(quick.seconds).toBeLessThan(down.seconds / 2);
  });
});

describe("libvirt", () => {
  it("starts a domain with a direct NIC on the parent and a filtered, limited NIC on the bridge; limits change live", async () => {
    const name = `kvmp-fixtures-${tag}`;
    const macs = [
      `52:54:00:fe:${(slot + 0x10).toString(16)}:01`,
      `52:54:00:fe:${(slot + 0x10).toString(16)}:02`,
    ];
    const xmlPath = path.join(host.stateDir, `${name}.xml`);
    writeFileSync(
      xmlPath,
      `<domain type='qemu'>
  <name>${name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <interface type='direct' trustGuestRxFilters='yes'>
      <source dev='${mv.parent}' mode='bridge'/>
      <mac address='${macs[0]}'/>
      <model type='virtio'/>
      <rom enabled='no'/>
    </interface>
    <interface type='bridge'>
      <source bridge='${bridge.name}'/>
      <mac address='${macs[1]}'/>
      <model type='virtio'/>
      <rom enabled='no'/>
      <bandwidth><inbound average='1024'/><outbound average='1024'/></bandwidth>
      <filterref filter='clean-traffic'><parameter name='IP' value='${scratchAddress(bridge.address4)}'/></filterref>
    </interface>
    <memballoon model='none'/>
  </devices>
</domain>
`,
    );
    try {
      await virsh("define", xmlPath);
    } finally {
      rmSync(xmlPath, { force: true });
    }
    domains.push(name);
    await virsh("start", name);

    const live = await virsh("dumpxml", name);
    const direct = /<interface type='direct'[\s\S]*?<\/interface>/.exec(live)?.[0] ?? "";
    expect(direct).toContain(`<source dev='${mv.parent}' mode='bridge'/>`);
    const macvtap = /<target dev='([^']+)'/.exec(direct)?.[1] ?? "";
    expect((await linkOf(host.netns, macvtap)).link).toBe(mv.parent);
    const bridged = /<interface type='bridge'[\s\S]*?<\/interface>/.exec(live)?.[0] ?? "";
    const tap = /<target dev='([^']+)'/.exec(bridged)?.[1] ?? "";
    expect(tap).not.toBe("");
    const master = JSON.parse(await ipIn(host.netns, "-j", "link", "show", "dev", tap)) as {
      master?: string;
    }[];
    expect(master[0]?.master).toBe(bridge.name);
    expect(await inNs(host.netns, "ebtables", "-t", "nat", "-L")).toContain(`libvirt-I-${tap}`);
    const qdiscs = await inNs(host.netns, "tc", "qdisc", "show", "dev", tap);
    expect(qdiscs).toMatch(/qdisc htb 1: root/);
    expect(qdiscs).toMatch(/qdisc ingress ffff:/);
    // tc shows KiB/s (libvirt's unit, tc's "kbps") as Kbit.
    const rate = async () =>
      /rate (\S+)/.exec(await inNs(host.netns, "tc", "class", "show", "dev", tap))?.[1];
    expect(await rate()).toBe(`${1024 * 8}Kbit`);

    await virsh("domiftune", name, macs[1] ?? "", "--inbound", "4096", "--outbound", "4096", "--live");
    expect(await rate()).toBe(`${4096 * 8}Kbit`);
    expect(await virsh("dumpxml", name)).toMatch(/<inbound average='4096'\/>/);

    await virsh("destroy", name);
    await virsh("undefine", name);
    domains.splice(domains.indexOf(name), 1);
  });
});
