/**
 * Address pools declared on the hosts (kvm:hosts `addressPools`) and NICs
 * naming one (`addressPool: "<name>"`): the host config reads a pool by a
 * NIC's rules, failures named by its path; check holds every host the proxy
 * may go to to having the pool, and on one host resolves the NIC into an
 * inline pool NIC; a fleet counts the pools of its hosts together; diff
 * compares a VM with its host's pool as with an inline one.
 */
import { describe, expect, it } from "vitest";
import { validateConfig } from "../../../provider/kvm/config/host-config";
import type { CreateSpec } from "../../../provider/kvm/host/operations";
import type { ProvisionOptions } from "../../../provider/kvm/host/provision";
import { resolveHostPools } from "../../../provider/kvm/network/host-pools";
import type { NicSpec } from "../../../provider/kvm/network/nic";
import { readNics } from "../../../provider/kvm/network/nic-rules";
import { Failures } from "../../../provider/kvm/validation";
import { poolRoomProblem } from "../../../provider/program/proxy-fleet";
import { checkInputs } from "../../../provider/resource/check";
import { diffProxy } from "../../../provider/resource/diff";
import { outputsFrom } from "../../../provider/resource/mapping";
import { KvmProxyRuntime } from "../../../provider/resource/provider";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";

const SOCKET = "unix:///run/libvirt/libvirt-sock";
/** Three hypervisors, each with its own /28, gateway and bridge; `c` has no `public` pool. */
const HOSTS = {
  a: {
    uri: SOCKET,
    addressPools: {
      public: { ranges: ["203.0.113.2-203.0.113.14/28"], gateway4: "203.0.113.1", bridge: "br-a" },
    },
  },
  b: {
    uri: SOCKET,
    addressPools: {
      public: {
        ranges: ["198.51.100.18-198.51.100.30/28"],
        gateway4: "198.51.100.17",
        nameservers: ["9.9.9.9"],
        bridge: "br-b",
      },
    },
  },
  c: { uri: SOCKET, addressPools: { other: { ranges: ["192.0.2.2-192.0.2.6/29"] } } },
};
const IMAGES = { debian: { url: "https://example.com/debian.qcow2", sha256: "c".repeat(64) } };
const stackConfig = (hosts: Record<string, unknown> = HOSTS) =>
  readStackConfig((k) => ({ "kvm:hosts": hosts, "kvm:images": IMAGES })[k]);
const owner = { project: "p", stack: "s", urn: "urn:pulumi:s::p::KvmProxy::edge", resource: "edge" };

let n = 0;
function check(news: Record<string, unknown>, olds: Record<string, unknown> = {}, hosts = HOSTS) {
  return checkInputs(
    olds,
    { image: "debian", owner, ...news },
    { config: stackConfig(hosts), randomBytes: (k) => new Uint8Array(k).fill(++n) },
  );
}

describe("a host's addressPools in the config", () => {
  const failuresOf = (pools: unknown) => {
    const r = validateConfig({ hosts: { edge: { uri: SOCKET, addressPools: pools } } });
    return r.ok ? [] : r.failures;
  };

  it("reads a pool by a NIC's rules: canonical ranges, gateways, nameservers, attachment", () => {
    const r = validateConfig({ hosts: HOSTS });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config.hosts.b?.addressPools).toEqual({
      public: {
        bridge: "br-b",
        addressPool: { ranges: ["198.51.100.18-198.51.100.30/28"] },
        gateway4: "198.51.100.17",
        nameservers: ["9.9.9.9"],
      },
    });
    expect(r.config.hosts.c?.addressPools.other).toEqual({
      addressPool: { ranges: ["192.0.2.2-192.0.2.6/29"] },
      nameservers: [],
    });
  });

  it.each<[string, unknown, string, RegExp]>([
    ["not an object", ["public"], "hosts.edge.addressPools", /must be an object keyed by pool name/],
    [
      "a bad pool name",
      { Public: { ranges: ["203.0.113.2/28"] } },
      "hosts.edge.addressPools.Public",
      /key "Public"/,
    ],
    [
      "an entry not an object",
      { public: "203.0.113.2/28" },
      "hosts.edge.addressPools.public",
      /must be \{ ranges/,
    ],
    [
      "no ranges",
      { public: { gateway4: "203.0.113.1" } },
      "hosts.edge.addressPools.public.ranges",
      /is required/,
    ],
    [
      "empty ranges",
      { public: { ranges: [] } },
      "hosts.edge.addressPools.public.ranges",
      /must list 1 to 64/,
    ],
    [
      "a range not canonical",
      { public: { ranges: ["203.0.113.02/28"] } },
      "hosts.edge.addressPools.public.ranges[0]",
      /./,
    ],
    [
      "a range outside the gateway's subnet",
      { public: { ranges: ["203.0.113.2-203.0.113.14/28"], gateway4: "198.51.100.1" } },
      "hosts.edge.addressPools.public.gateway4",
      /outside this NIC's IPv4 subnets/,
    ],
    [
      "the gateway inside its ranges",
      { public: { ranges: ["203.0.113.1-203.0.113.14/28"], gateway4: "203.0.113.1" } },
      "hosts.edge.addressPools.public.ranges[0]",
      /gateway/,
    ],
    [
      "two attachments",
      { public: { ranges: ["203.0.113.2/28"], bridge: "br0", network: "default" } },
      "hosts.edge.addressPools.public.bridge",
      /give exactly one of network, bridge or direct/,
    ],
    [
      "a bad bridge name",
      { public: { ranges: ["203.0.113.2/28"], bridge: "a bridge" } },
      "hosts.edge.addressPools.public.bridge",
      /Linux interface name/,
    ],
    [
      "a bad nameserver",
      { public: { ranges: ["203.0.113.2/28"], nameservers: ["dns"] } },
      "hosts.edge.addressPools.public.nameservers[0]",
      /./,
    ],
    [
      "an unknown field",
      { public: { ranges: ["203.0.113.2/28"], size: 3 } },
      "hosts.edge.addressPools.public.size",
      /unknown/,
    ],
  ])("refuses %s, naming the path", (_what, pools, property, reason) => {
    const failures = failuresOf(pools);
    expect(failures.filter((x) => x.property === property)).toHaveLength(1);
    expect(failures.find((x) => x.property === property)?.reason).toMatch(reason);
  });
});

describe("a NIC naming a host's pool", () => {
  const read = (nic: Record<string, unknown>) => {
    const f = new Failures();
    return { nics: readNics([nic], f, {}), failures: f.list };
  };

  it("is read as the pool's name, the attachment optional", () => {
    expect(read({ addressPool: "public" })).toEqual({
      nics: [{ addresses: [], hostPool: "public", nameservers: [], primary: true }],
      failures: [],
    });
    expect(read({ addressPool: "public", bridge: "br0" }).nics).toEqual([
      { bridge: "br0", addresses: [], hostPool: "public", nameservers: [], primary: true },
    ]);
  });

  it.each<[string, Record<string, unknown>, string, RegExp]>([
    [
      "a bad name",
      { addressPool: "Public!" },
      "nics[0].addressPool",
      /must name an address pool of the host: 1-63 lower-case letters/,
    ],
    [
      "an object form still read as before",
      { bridge: "br0", addressPool: { ranges: [] } },
      "nics[0].addressPool.ranges",
      /must list 1 to 64/,
    ],
    [
      "the object form without an attachment",
      { addressPool: { ranges: ["203.0.113.2/28"] } },
      "nics[0]",
      /needs exactly one of network, bridge or direct/,
    ],
  ])("refuses %s", (_what, nic, property, reason) => {
    const { failures } = read(nic);
    expect(failures.find((x) => x.property === property)?.reason).toMatch(reason);
  });

  it("refuses static addresses beside it at check: the pool gives the address at create", () => {
    const r = check({ host: "a", nics: [{ addressPool: "public", addresses: ["203.0.113.5/28"] }] });
    expect(r.failures).toContainEqual({
      property: "nics[0].addresses",
      reason: expect.stringMatching(/give addresses or addressPool, not both/),
    });
  });
});

describe("resolving a NIC on its host's pool", () => {
  const config = validateConfig({ hosts: HOSTS });
  if (!config.ok) throw new Error("fixture");
  const hostA = config.config.hosts.a as NonNullable<typeof config.config.hosts.a>;
  const named = (more: Partial<NicSpec> = {}): NicSpec => ({
    hostPool: "public",
    mac: "52:54:00:00:00:01",
    addresses: [],
    nameservers: [],
    primary: true,
    ...more,
  });

  it("takes the pool's ranges, gateway and bridge, keeping the pool's name", () => {
    expect(resolveHostPools([named()], hostA)).toEqual([
      {
        bridge: "br-a",
        mac: "52:54:00:00:00:01",
        addresses: [],
        addressPool: { ranges: ["203.0.113.2-203.0.113.14/28"] },
        hostPool: "public",
        gateway4: "203.0.113.1",
        nameservers: [],
        primary: true,
      },
    ]);
  });

  it("takes the host's NIC when neither the pool nor the NIC names an attachment", () => {
    const c = validateConfig({ hosts: HOSTS });
    if (!c.ok) throw new Error("fixture");
    const hostC = c.config.hosts.c as NonNullable<typeof c.config.hosts.c>;
    expect(resolveHostPools([named({ hostPool: "other" })], hostC)?.[0]).toMatchObject({
      network: "default",
      addressPool: { ranges: ["192.0.2.2-192.0.2.6/29"] },
    });
  });

  it("leaves a NIC already resolved (the state's) as it is", () => {
    const once = resolveHostPools([named()], hostA) as NicSpec[];
    expect(resolveHostPools(once, hostA)).toEqual(once);
  });

  it.each<[string, Partial<NicSpec>, string, RegExp]>([
    [
      "an attachment beside the pool's",
      { bridge: "br0" },
      "nics[0].bridge",
      /gives the attachment \(bridge br-a\) already: give it there or here, not both/,
    ],
    [
      "a gateway4 beside the pool's",
      { gateway4: "203.0.113.14" },
      "nics[0].gateway4",
      /gives the gateway4 \(203\.0\.113\.1\) already/,
    ],
    [
      "a pool the host lacks",
      { hostPool: "private" },
      "nics[0].addressPool",
      /host "a" has no address pool "private" \(kvm:hosts a\.addressPools: public\)/,
    ],
  ])("refuses %s, naming the field", (_what, more, property, reason) => {
    const f = new Failures();
    expect(resolveHostPools([named(more)], hostA, f)).toBeUndefined();
    expect(f.list.find((x) => x.property === property)?.reason).toMatch(reason);
  });

  it("holds the merged NIC to a NIC's rules: a gateway of the NIC's own outside the pool's subnet", () => {
    const c = validateConfig({ hosts: HOSTS });
    if (!c.ok) throw new Error("fixture");
    const hostC = c.config.hosts.c as NonNullable<typeof c.config.hosts.c>;
    const f = new Failures();
    resolveHostPools([named({ hostPool: "other", gateway4: "203.0.113.1" })], hostC, f);
    expect(f.list).toContainEqual({
      property: "nics[0].gateway4",
      reason: expect.stringMatching(/^with host "c"'s address pool: 203\.0\.113\.1 is outside/),
    });
  });
});

describe("check with a NIC naming a host's pool", () => {
  it("on one host, resolves the NIC: the preview's NICs are an inline pool NIC's", () => {
    const r = check({ host: "b", nics: [{ addressPool: "public" }] });
    expect(r.failures).toEqual([]);
    expect(r.inputs.nics).toMatchObject([
      {
        bridge: "br-b",
        addressPool: { ranges: ["198.51.100.18-198.51.100.30/28"] },
        hostPool: "public",
        gateway4: "198.51.100.17",
        nameservers: ["9.9.9.9"],
      },
    ]);
  });

  it("over a pool of hosts, refuses a host lacking the pool, naming the field and the host", () => {
    const r = check({ host: { pool: ["a", "b", "c"] }, nics: [{ addressPool: "public" }] });
    expect(r.failures).toEqual([
      {
        property: "nics[0].addressPool",
        reason: expect.stringMatching(
          /^host "c" has no address pool "public" \(kvm:hosts c\.addressPools: other\)/,
        ),
      },
    ]);
  });

  it("over a pool of hosts that all have it, leaves the NIC named: placement picks the host at create", () => {
    const r = check({ host: { pool: ["a", "b"] }, nics: [{ addressPool: "public" }] });
    expect(r.failures).toEqual([]);
    expect(r.inputs.nics).toMatchObject([{ hostPool: "public", addresses: [] }]);
    expect((r.inputs.nics as NicSpec[])[0]?.addressPool).toBeUndefined();
  });

  it("refuses on one host what contradicts the pool, naming the field", () => {
    const r = check({ host: "a", nics: [{ addressPool: "public", bridge: "br0" }] });
    expect(r.failures.map((x) => x.property)).toEqual(["nics[0].bridge"]);
  });

  it.each<[string, unknown, number, number, string | undefined]>([
    // a holds 13, b holds 13: 26 over the two.
    ["25 members and a batch of 1 over a and b", { pool: ["a", "b"] }, 25, 1, undefined],
    ["26 members and a batch of 1 over a and b", { pool: ["a", "b"] }, 26, 1, "holds 26"],
    ["13 members and a batch of 1 on a alone", "a", 13, 1, "holds 13"],
  ])("counts the pools of the candidate hosts for a fleet: %s", (_what, host, size, batch, problem) => {
    const r = check({
      host,
      nics: [{ addressPool: "public" }],
      rotation: { maxAge: "7d", batch, group: "fleet", size },
    });
    const room = r.failures.filter((x) => x.property === "nics[0].addressPool");
    if (problem === undefined) expect(room).toEqual([]);
    else expect(room[0]?.reason).toContain(problem);
  });
});

describe("a ProxyFleet's room over its hosts' pools, judged in the program", () => {
  const config = stackConfig();
  const hosts = [config.hosts.a, config.hosts.b] as NonNullable<typeof config.hosts.a>[];
  it.each<[string, number, number, string | undefined]>([
    ["25 members and a batch of 1: 26 addresses over a and b", 25, 1, undefined],
    [
      "30 members and a batch of 1",
      30,
      1,
      'nics[0].addressPool "public" of hosts a, b holds in all 26 addresses per family; 30 members and a batch of 1 replacements need 31',
    ],
  ])("%s", (_what, size, batch, problem) => {
    expect(poolRoomProblem([{ addressPool: "public" }], size, batch, hosts)).toBe(problem);
  });

  it("passes a named pool when the hosts are not known in the program (check judges each member)", () => {
    expect(poolRoomProblem([{ addressPool: "public" }], 500, 1)).toBeUndefined();
  });
});

describe("diff of a VM on its host's pool", () => {
  /** The runtime configured with `hosts`: diff resolves the new NICs by the VM's host. */
  const runtime = async (hosts: Record<string, unknown>) => {
    const r = new KvmProxyRuntime();
    await r.configure({
      config: new Map(
        Object.entries({ "kvm:hosts": JSON.stringify(hosts), "kvm:images": JSON.stringify(IMAGES) }),
      ),
    } as never);
    return r;
  };
  const withRanges = (ranges: string[]) => ({
    ...HOSTS,
    a: { uri: SOCKET, addressPools: { public: { ranges, gateway4: "203.0.113.1", bridge: "br-a" } } },
  });
  const POOLED = { host: { pool: ["a", "b"] }, nics: [{ addressPool: "public" }] };

  /** The state after a create placed it on a and took 203.0.113.5 from a's pool. */
  const made: Record<string, unknown> = (() => {
    const c = check(POOLED);
    const config = validateConfig({ hosts: HOSTS });
    if (!config.ok) throw new Error("fixture");
    const nics = resolveHostPools(c.inputs.nics as NicSpec[], config.config.hosts.a as never) as NicSpec[];
    const inputs = { ...c.inputs, nics: [{ ...nics[0], addresses: ["203.0.113.5/28"] }] };
    return {
      ...inputs,
      ...outputsFrom(inputs as never, { host: "a", name: c.inputs.name as string, state: "running" }),
    };
  })();
  const news = () => ({ ...check(POOLED, made).inputs, __provider: made.__provider });

  it.each<[string, string[], string[]]>([
    ["the same ranges: no change", ["203.0.113.2-203.0.113.14/28"], []],
    ["ranges narrowed yet still holding its address: no change", ["203.0.113.4-203.0.113.8/28"], []],
    ["ranges that no longer hold its address: replaced", ["203.0.113.6-203.0.113.14/28"], ["nics"]],
  ])("%s", async (_what, ranges, replaces) => {
    const r = await runtime(withRanges(ranges));
    const d = await r.diff(`kvm://a/${String(made.name)}`, made, news());
    expect(d.replaces).toEqual(replaces);
    if (replaces.length === 0) expect(d.changes).toBe(false);
    await r.close();
  });

  it("with the inputs unresolved, the pure diff would replace: the runtime's resolution is what keeps it", () => {
    expect(diffProxy(decodeState(made), news()).replaces).toEqual(["nics"]);
  });
});

describe("create of a proxy over a pool of hosts naming a host's pool", () => {
  it("builds the spec for the host placement chose: that host's ranges, gateway, nameservers and bridge, squid told of its gateway", async () => {
    const r = new KvmProxyRuntime();
    await r.configure({
      config: new Map(
        Object.entries({ "kvm:hosts": JSON.stringify(HOSTS), "kvm:images": JSON.stringify(IMAGES) }),
      ),
    } as never);
    const real = r.ops();
    let built: CreateSpec | undefined;
    // The operations stand in: placement "chooses" b, and the provision stops once the spec is built.
    Object.assign(r, {
      ops: () => ({
        hosts: real.hosts,
        provision: async (_spec: CreateSpec, options: ProvisionOptions) => {
          built = options.forHost?.("b");
          throw new Error("stopped after placement");
        },
      }),
    });
    const c = check({ host: { pool: ["a", "b"] }, nics: [{ addressPool: "public" }] });
    expect(c.failures).toEqual([]);
    await expect(r.create(c.inputs)).rejects.toThrow("stopped after placement");
    expect(built?.host).toBe("b");
    expect(built?.nics).toMatchObject([
      {
        bridge: "br-b",
        addresses: [],
        addressPool: { ranges: ["198.51.100.18-198.51.100.30/28"] },
        gateway4: "198.51.100.17",
        nameservers: ["9.9.9.9"],
      },
    ]);
    expect(built?.proxy?.onLink).toContain("198.51.100.17");
    await real.hosts.closeAll();
  });
});
