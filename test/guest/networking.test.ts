/**
 * Networking for egress fleets with booted guests, through the
 * real Pulumi CLI run INSIDE the test host's namespace. Two proxies:
 *
 * - A: a NIC with a static IPv4 and IPv6 on the namespace's bridge WITHOUT
 *   DHCP (primary), and a NIC on the NAT network (DHCP);
 * - B: a static IPv4 on the same bridge with `filter: clean-traffic` and a
 *   1 MiB/s `bandwidth`, and a macvtap (`direct`) NIC on a veth whose other
 *   end is a second namespace ("the other side") with static IPv4 and IPv6.
 *
 * A is replaced at the end (renamed, its static addresses kept): deleted
 * first, which the namespace sees as ARP and ND answers from one MAC at a
 * time (test/guest/neighbours.ts).
 *
 * Every probe runs inside a namespace the test host created (`ip netns
 * exec`), to the documentation ranges of its fixtures (test/support/test-host.ts).
 * The test process itself talks to guests only through libvirt and the agent.
 *
 * The bandwidth limits run through the test host's tc (scripts/test-host.d/
 * tc-shim): this machine's kernel lacks sfq and the police action, which
 * libvirt uses; the shim maps them onto htb/pfifo and an IFB with tbf, at
 * the same rates.
 */

import type { ChildProcess } from "node:child_process";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { HostPool } from "../../provider/kvm/host/hosts";
import {
  allDomains,
  cacheVolumeOfImage,
  deleteCachedImage,
  engineSteps,
  removeByHand,
  virsh,
  vmVolumeNames,
  Workspace,
} from "../pulumi/harness";
import { startServer, stopServer } from "../support/netns-http";
import {
  type MacvtapFixture,
  macvtapOf,
  type StaticBridge,
  staticBridgeOf,
  type TestHost,
  testHost,
} from "../support/test-host";
import { testImage, testImageUrlFor } from "./images";
import { answerers, NeighbourWatch } from "./neighbours";
import { NetnsCli } from "./netns-cli";
import {
  agentFor,
  CREATE_TIMEOUT,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  type GuestAgent,
  GuestProgress,
  proxyUrlOf,
  requestThrough,
} from "./support";

const env = inject("guest");
const IMAGE_URL = testImageUrlFor(env, "networking");
const A = `kvmpt-neta-${process.pid}`;
const B = `kvmpt-netb-${process.pid}`;
/** A's name after its replacement (a rename: what stays is its static addresses). */
const A2 = `kvmpt-netr-${process.pid}`;
/** 1 MiB/s in kbit/s: libvirt gets ceil(8389 * 1000 / 8 / 1024) = 1025 KiB/s. */
const ONE_MIB_KBPS = 8389;
/** 4 MiB/s after the in-place change: 4097 KiB/s. */
const FOUR_MIB_KBPS = 33_555;
const TEN_MIB = 10 * 1024 * 1024;

let host: TestHost;
let bridge: StaticBridge;
let mv: MacvtapFixture;
let ws: Workspace;
let cli: NetnsCli;
let agents: HostPool;
let dir: string;
const servers: ChildProcess[] = [];
/** The target server's port in the test namespace (every address) and on the far side. */
let port = 0;
let farPort = 0;

/** The addresses of the two proxies (documentation ranges of the fixtures; not .224-.254). */
const addr = {
  a4: () => "192.0.2.10",
  a6: () => "2001:db8:14::10",
  b4: () => "192.0.2.11",
  bFar4: () => "198.51.100.11",
  bFar6: () => "2001:db8:15::11",
  /** Another proxy's address on the bridge (a proxy that is not running): what a spoofing guest takes. */
  other: () => "192.0.2.50",
};

function proxies(bandwidthKbps: number, nameA = A): Record<string, unknown> {
  const common = {
    host: "local",
    image: "guest",
    memoryMiB: 768,
    diskGiB: 4,
    timeouts: { create: CREATE_TIMEOUT },
    // An IP echo inside the namespace: which address the proxies egress from.
    egressCheck: { url: env.whoamiUrl },
    proxy: {
      // The namespace's addresses on the fixtures: public (documentation ranges), each a single address.
      allowedClients: [
        `${bridge.address4}/32`,
        `${bridge.address6}/128`,
        `${mv.hostAddress4}/32`,
        `${env.gateway}/32`,
      ],
      publicClientsWithoutAuth: true,
    },
  };
  return {
    a: {
      ...common,
      name: nameA,
      nics: [
        {
          bridge: bridge.name,
          addresses: [`${addr.a4()}/${bridge.prefix4}`, `${addr.a6()}/${bridge.prefix6}`],
          gateway4: bridge.address4,
          gateway6: bridge.address6,
          primary: true,
        },
        { network: host.network },
      ],
    },
    b: {
      ...common,
      // B's targets on the far side are on-link there: inward, opened here.
      proxy: { ...common.proxy, allowedDestinations: [`${mv.farAddress4}/32`, `${mv.farAddress6}/128`] },
      name: B,
      nics: [
        {
          bridge: bridge.name,
          addresses: [`${addr.b4()}/${bridge.prefix4}`],
          gateway4: bridge.address4,
          filter: "clean-traffic",
          bandwidth: { outboundKbps: bandwidthKbps },
        },
        {
          direct: { dev: mv.parent, mode: "bridge" },
          addresses: [`${addr.bFar4()}/${mv.prefix4}`, `${addr.bFar6()}/${mv.prefix6}`],
        },
      ],
    },
  };
}

/** A GET (or a CONNECT tunnel) through the proxy at address `proxy` (IPv4 or IPv6), from inside the test namespace. */
const through = (proxy: string, url: string, maxSeconds = 20, connect = false) =>
  requestThrough(env, proxyUrlOf(proxy), url, { maxSeconds, connect, discardBody: true });

const target = (host4or6: string, p: number, file = "ok.txt") =>
  `http://${host4or6.includes(":") ? `[${host4or6}]` : host4or6}:${p}/${file}`;

/** The guest's interfaces as its agent reports them: name, MAC, addresses (CIDR, link-local left out). */
async function guestInterfaces(
  agent: GuestAgent,
): Promise<{ name: string; mac: string; addresses: string[] }[]> {
  type Iface = {
    name: string;
    "hardware-address"?: string;
    "ip-addresses"?: { "ip-address": string; prefix: number }[];
  };
  const list = await agent.command<Iface[]>("guest-network-get-interfaces");
  return list
    .filter((i) => i.name !== "lo")
    .map((i) => ({
      name: i.name,
      mac: (i["hardware-address"] ?? "").toLowerCase(),
      addresses: (i["ip-addresses"] ?? [])
        .filter((a) => !a["ip-address"].toLowerCase().startsWith("fe80"))
        .map((a) => `${a["ip-address"]}/${a.prefix}`),
    }));
}

/** The state's record of a proxy. */
function stateOf(name: string): { inputs: Record<string, unknown>; outputs: Record<string, unknown> } {
  const r = ws.proxies().find((p) => p.outputs?.name === name);
  if (r === undefined) throw new Error(`no proxy ${name} in the state`);
  return { inputs: r.inputs ?? {}, outputs: r.outputs ?? {} };
}

type Nic = { mac: string };
const macsOf = (name: string) => (stateOf(name).inputs.nics as Nic[]).map((n) => n.mac);

/** The live (or inactive) domain XML's interfaces: type, MAC, model, source, bandwidth, filter. */
function liveInterfaces(name: string, inactive = false) {
  const xml = virsh(host, "dumpxml", ...(inactive ? ["--inactive"] : []), name);
  return [...xml.matchAll(/<interface type='(\w+)'[^>]*>([\s\S]*?)<\/interface>/g)].map(([, type, body]) => ({
    type,
    mac: /<mac address='([^']+)'/.exec(body ?? "")?.[1],
    model: /<model type='([^']+)'/.exec(body ?? "")?.[1],
    source: /<source ([^/]*)\/>/.exec(body ?? "")?.[1],
    outbound: /<outbound average='(\d+)'/.exec(body ?? "")?.[1],
    filter: /<filterref filter='([^']+)'/.exec(body ?? "")?.[1],
  }));
}

/** The seed's network-config, read from the seed volume on the host with genisoimage's isoinfo. */
function seedNetworkConfig(name: string): unknown {
  const seed = vmVolumeNames(host, name).find((v) => v.endsWith("-seed.iso")) as string;
  const file = path.join(dir, `${name}-seed.iso`);
  virsh(host, "vol-download", "--pool", host.poolName, seed, file);
  return parseYaml(
    execFileSync("isoinfo", ["-R", "-i", file, "-x", "/network-config"], { encoding: "utf8" }),
  );
}

/** Replaces the address of the guest's NIC `mac` by `cidr` (and its default route), through the agent. */
async function setGuestAddress(agent: GuestAgent, mac: string, cidr: string): Promise<void> {
  const iface = (await guestInterfaces(agent)).find((i) => i.mac === mac);
  if (iface === undefined) throw new Error(`the guest has no NIC ${mac}`);
  await agent.sh(
    `ip -4 addr flush dev ${iface.name} && ip addr add ${cidr} dev ${iface.name} && ip route replace default via ${bridge.address4} dev ${iface.name}`,
  );
  // The namespace forgets which MAC had the address (a stale entry would blur the result).
  execFileSync("ip", ["-n", env.netns, "neigh", "flush", "dev", bridge.name]);
}

beforeAll(async () => {
  const { sha256: imageSha256 } = await testImage(env);
  host = testHost();
  bridge = staticBridgeOf(host);
  mv = macvtapOf(host);
  for (const n of [A, A2, B]) removeByHand(host, n);
  dir = mkdtempSync(path.join(tmpdir(), "kvmpt-net-"));
  writeFileSync(path.join(dir, "ok.txt"), "ok\n");
  writeFileSync(path.join(dir, "ten.bin"), Buffer.alloc(TEN_MIB, 7));
  port = await startServer(servers, env.netns, ["files", "::", dir]);
  farPort = await startServer(servers, mv.farNetns, ["files", "::", dir]);
  agents = new HostPool(
    parseConfig({
      hosts: { local: { uri: `unix://${host.socketPath}`, pool: host.poolName, network: host.network } },
    }).hosts,
  );
  ws = new Workspace("guest-net", { name: "kvmpt-guest-net", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    "kvm:hosts": {
      local: {
        uri: `unix://${host.socketPath}`,
        domainType: "qemu",
        pool: host.poolName,
        network: host.network,
      },
    },
    "kvm:images": { guest: { url: IMAGE_URL, sha256: imageSha256 } },
    "pair:proxies": proxies(ONE_MIB_KBPS),
  });
  cli = new NetnsCli(env.netns, ws);
}, 120_000);

afterAll(async () => {
  await cli?.stopAll();
  if (allDomains(host).some((d) => d === A || d === A2 || d === B)) ws.cleanup();
  for (const n of [A, A2, B]) removeByHand(host, n);
  if (host !== undefined) deleteCachedImage(host, cacheVolumeOfImage({ url: IMAGE_URL }));
  await Promise.all(servers.map((s) => stopServer(s)));
  await agents?.closeAll();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
}, 300_000);

/** What a pulumi run that boots guests watches: those guests (by domain name) and the engine's events. */
function watchGuests(...names: string[]) {
  return {
    guests: names.map((n) => new GuestProgress(agents.libvirt("local"), n)),
    stallMs: GUEST_STALL_MS,
    ceilingMs: GUEST_CEILING_MS,
  };
}

describe("proxies with several NICs, static addresses, macvtap, limits and filters", () => {
  it(
    "pulumi up boots both, each passing its health check on its primary NIC",
    async () => {
      await cli.mustWatched(["up", "--yes", "--skip-preview"], watchGuests(A, B));
      expect(stateOf(A).outputs.state).toBe("running");
      expect(stateOf(B).outputs.state).toBe("running");
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("egressAddress is what the echo saw: B's static address; A's too while routed through its bridge, and a warning at refresh once it is routed out through its NAT NIC", async () => {
    expect(stateOf(B).outputs.egressAddress).toBe(addr.b4());
    const agentA = await agentFor(agents.libvirt("local"), A);
    const echo = env.targets.outward4;
    const [, natMac] = macsOf(A) as [string, string];
    const nat = (await guestInterfaces(agentA)).find((i) => i.mac === natMac);
    const natAddress = (nat?.addresses.find((a) => a.startsWith(env.subnetPrefix)) ?? "").split(
      "/",
    )[0] as string;
    expect(natAddress).not.toBe("");
    try {
      await agentA.sh(`ip route replace ${echo}/32 via ${bridge.address4}`);
      const viaBridge = await cli.must("refresh", "--yes", "--skip-preview");
      expect(stateOf(A).outputs.egressAddress).toBe(addr.a4());
      expect(viaBridge.output).not.toMatch(/saw the proxy's requests come from/);
      await agentA.sh(`ip route replace ${echo}/32 via ${env.gateway} dev ${nat?.name}`);
      const viaNat = await cli.must("refresh", "--yes", "--skip-preview");
      expect(stateOf(A).outputs.egressAddress).toBe(natAddress);
      expect(viaNat.output).toContain(
        `${env.whoamiUrl} saw the proxy's requests come from ${natAddress}, none of the VM's static IPv4 addresses (${addr.a4()})`,
      );
      expect(stateOf(B).outputs.egressAddress).toBe(addr.b4());
    } finally {
      await agentA.sh(`ip route del ${echo}/32`);
    }
  });

  it("A, on a bridge without DHCP: the guest has exactly its static IPv4 and IPv6, and ipAddresses reports both", async () => {
    const [mac0, mac1] = macsOf(A) as [string, string];
    const ifaces = await guestInterfaces(await agentFor(agents.libvirt("local"), A));
    expect(ifaces.find((i) => i.mac === mac0)?.addresses.sort()).toEqual(
      [`${addr.a4()}/${bridge.prefix4}`, `${addr.a6()}/${bridge.prefix6}`].sort(),
    );
    const out = stateOf(A).outputs;
    const reported = out.ipAddresses as { mac: string; addresses: string[] }[];
    expect(reported.map((r) => r.mac)).toEqual([mac0, mac1]);
    expect(reported[0]?.addresses).toEqual(
      expect.arrayContaining([
        expect.stringMatching(`^${addr.a4()}`),
        expect.stringMatching(`^${addr.a6()}`),
      ]),
    );
    expect(out.ipAddress).toBe(addr.a4());
    expect(out.ipv6Address).toBe(addr.a6());
  });

  it("A's proxy answers through its IPv4 and its IPv6 address", async () => {
    expect(await through(addr.a4(), target(env.targets.outward4, port))).toMatchObject({ status: "200" });
    expect(await through(addr.a6(), target(env.targets.outward6, port))).toMatchObject({ status: "200" });
  });

  it("A, without auth, goes outward only: its own addresses, its gateways, private, ULA and metadata addresses are refused, plain and by CONNECT", async () => {
    const refused = [
      target(addr.a4(), 8080),
      target(addr.a6(), 8080),
      target(bridge.address4, port),
      target(bridge.address6, port),
      target(env.gateway, port),
      env.inwardUrl,
      target(env.targets.inward6, port),
      "http://169.254.169.254/latest/meta-data/",
    ];
    for (const url of refused) {
      expect(await through(addr.a4(), url, 10), url).toMatchObject({
        status: "403",
        squidError: expect.stringMatching(/ERR_ACCESS_DENIED/),
      });
    }
    expect(await through(addr.a4(), `http://${env.inwardTlsAddress}/`, 10, true)).toMatchObject({
      status: "403",
    });
    // Positive controls: the same servers answer inside the namespace, and outward through the proxy.
    expect(await through(addr.a4(), target(env.targets.outward4, port), 10)).toMatchObject({ status: "200" });
    expect(await through(addr.a4(), `http://${env.targets.outward4}:443/`, 10, true)).toMatchObject({
      status: "200",
    });
  });

  it("B reaches what allowedDestinations opens (its far side, on-link), never its own address there", async () => {
    expect(await through(addr.b4(), target(mv.farAddress4, farPort), 10)).toMatchObject({ status: "200" });
    expect(await through(addr.b4(), target(addr.bFar4(), 8080), 10)).toMatchObject({ status: "403" });
    // What it does not open on that side stays refused.
    expect(await through(addr.b4(), target(mv.hostAddress4, port), 10)).toMatchObject({ status: "403" });
  });

  it("A has two NICs with addresses (NAT by DHCP, bridge static), and proxyUrl uses the marked one", async () => {
    const [, mac1] = macsOf(A) as [string, string];
    const ifaces = await guestInterfaces(await agentFor(agents.libvirt("local"), A));
    const nat = ifaces.find((i) => i.mac === mac1)?.addresses ?? [];
    expect(nat.some((a) => a.startsWith(env.subnetPrefix))).toBe(true);
    expect(stateOf(A).outputs.proxyUrl).toBe(`http://${addr.a4()}:3128`);
  });

  it("B's macvtap NIC reaches a target on the other side of its parent", async () => {
    const r = await through(addr.b4(), target(mv.farAddress4, farPort));
    expect(r, JSON.stringify(r)).toMatchObject({ status: "200" });
    const ifaces = await guestInterfaces(await agentFor(agents.libvirt("local"), B));
    const [, macvtap] = macsOf(B) as [string, string];
    expect(ifaces.find((i) => i.mac === macvtap)?.addresses).toEqual(
      expect.arrayContaining([`${addr.bFar4()}/${mv.prefix4}`, `${addr.bFar6()}/${mv.prefix6}`]),
    );
  });

  it("every NIC in the domain XML has its MAC, a virtio model and the attachment asked for", () => {
    const [a0, a1] = macsOf(A);
    const [b0, b1] = macsOf(B);
    expect(liveInterfaces(A).map(({ outbound: _o, filter: _f, ...i }) => i)).toEqual([
      { type: "bridge", mac: a0, model: "virtio", source: `bridge='${bridge.name}'` },
      {
        type: "network",
        mac: a1,
        model: "virtio",
        source: expect.stringContaining(`network='${host.network}'`),
      },
    ]);
    expect(liveInterfaces(B).map(({ outbound: _o, ...i }) => i)).toEqual([
      {
        type: "bridge",
        mac: b0,
        model: "virtio",
        source: `bridge='${bridge.name}'`,
        filter: "clean-traffic",
      },
      {
        type: "direct",
        mac: b1,
        model: "virtio",
        source: expect.stringMatching(new RegExp(`dev='${mv.parent}' mode='bridge'`)),
        filter: undefined,
      },
    ]);
  });

  it("the seed's network-config is what the typed fields describe, each NIC matched by its MAC", () => {
    const [a0, a1] = macsOf(A);
    expect(seedNetworkConfig(A)).toEqual({
      version: 2,
      ethernets: {
        nic0: {
          match: { macaddress: a0 },
          dhcp4: false,
          dhcp6: false,
          addresses: [`${addr.a4()}/${bridge.prefix4}`, `${addr.a6()}/${bridge.prefix6}`],
          routes: [{ to: "0.0.0.0/0", via: bridge.address4 }],
          gateway6: bridge.address6,
        },
        nic1: { match: { macaddress: a1 }, dhcp4: true, dhcp6: false },
      },
    });
  });

  it("B's bandwidth is in the live XML, and 10 MiB through its proxy at 1 MiB/s take at least 8 s", async () => {
    expect(liveInterfaces(B)[0]?.outbound).toBe("1025");
    const r = await through(addr.b4(), target(env.targets.outward4, port, "ten.bin"), 60);
    expect(r, JSON.stringify(r)).toMatchObject({ status: "200" });
    expect(r.seconds).toBeGreaterThanOrEqual(8);
  });

  it("a change of B's bandwidth is an update in place at preview, and changes the live and stored XML", async () => {
    ws.setConfig({ "pair:proxies": proxies(FOUR_MIB_KBPS) });
    const preview = await cli.must("preview", "--json");
    const steps = (JSON.parse(preview.stdout) as { steps?: { op: string; urn: string }[] }).steps ?? [];
    expect(steps.filter((s) => s.urn.endsWith("::b")).map((s) => s.op)).toEqual(["update"]);
    expect(steps.filter((s) => s.urn.endsWith("::a"))).toEqual([]);
    const uuid = stateOf(B).outputs.uuid;
    await cli.must("up", "--yes", "--skip-preview");
    expect(stateOf(B).outputs.uuid).toBe(uuid);
    expect(liveInterfaces(B)[0]?.outbound).toBe("4097");
    expect(liveInterfaces(B, true)[0]?.outbound).toBe("4097");
  });

  it("clean-traffic: B taking another proxy's address loses connectivity; A, without the filter, keeps it", async () => {
    const other = addr.other();
    // A (no filter) moves to the other address: its proxy answers there.
    const agentA = await agentFor(agents.libvirt("local"), A);
    const [a0] = macsOf(A) as [string];
    await setGuestAddress(agentA, a0, `${other}/${bridge.prefix4}`);
    expect(await through(other, target(env.targets.outward4, port), 10)).toMatchObject({ status: "200" });
    await setGuestAddress(agentA, a0, `${addr.a4()}/${bridge.prefix4}`);
    expect(await through(addr.a4(), target(env.targets.outward4, port), 10)).toMatchObject({ status: "200" });

    // B (clean-traffic, its IP parameter its own address) does the same: nothing gets through.
    const agentB = await agentFor(agents.libvirt("local"), B);
    const [b0] = macsOf(B) as [string];
    await setGuestAddress(agentB, b0, `${other}/${bridge.prefix4}`);
    expect((await through(other, target(env.targets.outward4, port), 10)).status).toBe("000");
    await setGuestAddress(agentB, b0, `${addr.b4()}/${bridge.prefix4}`);
    expect(await through(addr.b4(), target(env.targets.outward4, port), 10)).toMatchObject({ status: "200" });
  });

  it(
    "A renamed (a replacement keeping its static addresses): preview says it deletes first and why; at no moment do two MACs answer ARP or ND for its addresses, and the new VM answers after up",
    async () => {
      const [oldMac] = macsOf(A) as [string];
      ws.setConfig({ "pair:proxies": proxies(FOUR_MIB_KBPS, A2) });
      const preview = await cli.must("preview");
      expect(preview.output).toContain(
        `replace (delete first: static address ${addr.a4()} kept, static address ${addr.a6()} kept)`,
      );

      const watch = new NeighbourWatch(env.netns, bridge.name, addr.a4(), addr.a6());
      let up: Awaited<ReturnType<NetnsCli["must"]>>;
      try {
        await watch.more(2);
        up = await cli.mustWatched(["up", "--yes", "--skip-preview", "--json"], watchGuests(A, A2));
        await watch.more(3);
      } finally {
        watch.stop();
      }
      // In the engine's order: the old VM goes first.
      const ops = engineSteps(up.stdout)
        .filter((st) => st.urn.endsWith("::a"))
        .map((st) => st.op);
      expect(ops).toEqual(["delete-replaced", "replace", "create-replacement"]);
      const [newMac] = macsOf(A2) as [string];
      expect(newMac).not.toBe(oldMac);
      const rounds = watch.rounds();
      expect(rounds.filter((r) => answerers(r).length > 1)).toEqual([]);
      // Who answered, round by round: the old VM, (nobody,) then only the new one.
      const seq = rounds.flatMap((r) => answerers(r));
      const firstNew = seq.indexOf(newMac);
      expect(seq[0]).toBe(oldMac);
      expect(firstNew).toBeGreaterThan(0);
      expect(seq.slice(0, firstNew).filter((m) => m !== oldMac)).toEqual([]);
      expect(seq.slice(firstNew).filter((m) => m !== newMac)).toEqual([]);
      expect(rounds.at(-1)).toMatchObject({ v4: [newMac], v6: [newMac] });
      expect(allDomains(host).filter((d) => d === A || d === A2)).toEqual([A2]);
      expect(await through(addr.a4(), target(env.targets.outward4, port), 10)).toMatchObject({
        status: "200",
      });
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("pulumi destroy removes both VMs and their volumes", async () => {
    await cli.must("destroy", "--yes", "--skip-preview");
    expect(allDomains(host).filter((d) => d === A || d === A2 || d === B)).toEqual([]);
  });
});
