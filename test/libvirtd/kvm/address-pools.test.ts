/**
 * Address pools against the real libvirtd (kvm/host/address-pools.ts): NICs
 * on the test host's static bridge (kvmpbr1, 192.0.2.0/24 and
 * 2001:db8:14::/64) taking their addresses from ranges no other test uses.
 * Nothing boots (a tiny image): what is shown is who gets which address,
 * what the domains record, and the reservations in between.
 *
 * "Two processes" are two KvmOperations with host pools of their own: two
 * connections, two in-process chains, so only the host-side lock keeps them
 * apart, as for two stacks' `pulumi up` at once.
 *
 * Pools declared on the hosts: two host keys, `one` and `two`, both the test
 * host, each with its own `public` pool (its own /28 and gateway, as two
 * hypervisors of a hosting company would have). A NIC naming the pool is
 * placed on a pool of one host (so placement is forced) and takes that
 * host's ranges, gateway and attachment: what the domain XML, the metadata
 * and the seed's network-config carry. In this file, as its reservations
 * share the storage pool with the others here.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../../provider/kvm/config/host-config";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { parseMetadata } from "../../../provider/kvm/domain/metadata";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { type AddressPool, inPool } from "../../../provider/kvm/network/address-pool";
import { resolveHostPools } from "../../../provider/kvm/network/host-pools";
import { canonicalNic, deriveMac, type NicSpec } from "../../../provider/kvm/network/nic";
import { type CheckedNic, decodeNics } from "../../../provider/kvm/network/nic-rules";
import { staticBridgeOf, type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  betweenReads,
  hostPool,
  imageConfig,
  makeQcow2,
  ownedBy,
  scratchDir,
  uniqueName,
  virsh,
  virshQuiet,
  vmVolumes,
} from "./ops-helpers";

let host: TestHost;
let scratch: string;
let image: ImageConfig;
let bridge: string;
const domains = new Set<string>();
const pools: HostPool[] = [];
const retry = { maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 30_000 };

/** A pool of five IPv4 addresses, and one of two of each family. */
const FIVE: AddressPool = { ranges: ["192.0.2.100-192.0.2.104/24"] };
const DUAL: AddressPool = { ranges: ["192.0.2.105-192.0.2.106/24", "2001:db8:14::105-2001:db8:14::106/64"] };
const SEGMENT = () => `bridge:${bridge}`;

function ops(): KvmOperations {
  const pool = hostPool(host);
  pools.push(pool);
  return new KvmOperations(pool, { retry });
}

function poolNic(name: string, addressPool: AddressPool): CheckedNic {
  return decodeNics([
    canonicalNic({
      bridge,
      mac: deriveMac(`${name}/0`),
      addresses: [],
      addressPool,
      gateway4: "192.0.2.1",
      nameservers: [],
      primary: true,
    }),
  ])[0] as CheckedNic;
}

function spec(name: string, addressPool: AddressPool) {
  domains.add(name);
  return { ...baseSpec("local", name, image), nics: [poolNic(name, addressPool)] };
}

/** The addresses domain `name`'s metadata records. */
function recorded(name: string): string[] {
  const m = parseMetadata(virsh(host, "dumpxml", name));
  return (m?.addresses ?? []).map((a) => `${a.segment} ${a.cidr}`);
}

function reservations(): string[] {
  return virsh(host, "vol-list", host.poolName)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((v) => v.startsWith("kvmp-ipr-"));
}

function removeByHand(name: string): void {
  virshQuiet(host, "destroy", name);
  virshQuiet(host, "undefine", "--nvram", name);
  for (const v of virsh(host, "vol-list", host.poolName).split("\n")) {
    const vol = v.trim().split(/\s+/)[0] ?? "";
    if (vol.startsWith(`${name}-`) || vol.startsWith(`kvmp-ipr-${name}@`))
      virshQuiet(host, "vol-delete", "--pool", host.poolName, vol);
  }
}

beforeAll(() => {
  host = testHost();
  bridge = staticBridgeOf(host).name;
  scratch = scratchDir(host, "kvm-pools");
  chmodSync(scratch, 0o755);
  const img = makeQcow2(scratch, "pools", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterEach(async () => {
  await Promise.allSettled(pools.splice(0).map((p) => p.closeAll()));
});

afterAll(() => {
  for (const d of domains) removeByHand(d);
  virshQuiet(host, "vol-delete", "--pool", host.poolName, ImageCache.volumeName(image));
  rmSync(scratch, { recursive: true, force: true });
});

describe("address pools on the host", () => {
  it("two processes provisioning six VMs at once from a pool of five: five distinct addresses, the sixth refused naming the pool, nothing of it left, no reservation left", async () => {
    const [a, b] = [ops(), ops()];
    const names = Array.from({ length: 6 }, (_, i) => uniqueName(`pool${i}`));
    const results = await Promise.allSettled(
      names.map((n, i) => (i % 2 === 0 ? a : b).provision(spec(n, FIVE), { waitForIp: false })),
    );
    const made = results.flatMap((r, i) =>
      r.status === "fulfilled" ? [[names[i] as string, r.value] as const] : [],
    );
    const refused = results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
    expect(made).toHaveLength(5);
    expect(refused).toEqual([
      expect.stringMatching(
        /no free address on bridge:kvmpbr1 for .*: all 5 IPv4 addresses of the pool \(192\.0\.2\.100-192\.0\.2\.104\/24\) are taken/,
      ),
    ]);
    const addresses = made.map(([, s]) => s.createdNics?.[0]?.addresses[0]);
    expect(new Set(addresses).size).toBe(5);
    for (const cidr of addresses) expect(inPool(FIVE, cidr as string), cidr).toBe(true);
    // Each domain records its address on the segment; the refused one left no domain.
    for (const [name, s] of made)
      expect(recorded(name)).toEqual([`${SEGMENT()} ${s.createdNics?.[0]?.addresses[0]}`]);
    const lost = names.find((n) => !made.some(([m]) => m === n)) as string;
    expect(virsh(host, "list", "--all", "--name")).not.toContain(lost);
    expect(reservations()).toEqual([]);
    expect(
      [...(await a.addresses.taken(SEGMENT(), ["local"]))].filter((x) => inPool(FIVE, x)).sort(),
    ).toEqual(addresses.map((c) => (c as string).split("/")[0]).sort());
    // A deleted VM's address is free again, and the next create takes the lowest free one.
    const [firstName, first] =
      made.find(([, s]) => s.createdNics?.[0]?.addresses[0] === "192.0.2.100/24") ?? [];
    expect(first).toBeDefined();
    await a.delete("local", firstName as string, ownedBy(firstName as string));
    const next = uniqueName("poolnext");
    const again = await b.provision(spec(next, FIVE), { waitForIp: false });
    expect(again.createdNics?.[0]?.addresses).toEqual(["192.0.2.100/24"]);
  });

  it("five processes allocating at the same instant from a pool of five get five distinct addresses: the host-side lock, not luck", async () => {
    const all = Array.from({ length: 5 }, () => ops());
    const names = all.map(() => uniqueName("poolrace"));
    // Each waits after its count until all five have counted (at most 1 s): without the lock all
    // five would see the same address free; with it, each waits its turn (and its 1 s).
    let counting = 0;
    const barrier = new Promise<void>((resolve) => {
      for (const o of all) {
        o.addresses.counted = () => {
          counting += 1;
          if (counting === all.length) resolve();
          return Promise.race([barrier, new Promise<void>((r) => setTimeout(r, 1_000))]);
        };
      }
    });
    const got = await Promise.all(
      all.map((o, i) =>
        o.addresses.allocate(
          names[i] as string,
          "local",
          ["local"],
          [poolNic(names[i] as string, { ranges: ["192.0.2.108-192.0.2.112/24"] })],
        ),
      ),
    );
    try {
      const addresses = got.map((g) => g.nics[0]?.addresses[0]);
      expect(new Set(addresses).size).toBe(5);
      expect(reservations().filter((r) => names.some((n) => r.startsWith(`kvmp-ipr-${n}@`)))).toHaveLength(5);
    } finally {
      await Promise.all(got.map((g, i) => (all[i] as KvmOperations).addresses.release(g)));
    }
    expect(reservations()).toEqual([]);
  });

  it("counts the address of a create that defines its domain and drops its reservation between the count's two reads, whichever comes first", async () => {
    const [a, b] = [ops(), ops()];
    const lv = (pools.at(-1) as HostPool).libvirt("local");
    const ONE_ADDRESS: AddressPool = { ranges: ["192.0.2.118-192.0.2.118/24"] };
    const name = uniqueName("poolbetween");
    // The other process's whole create (reserve, define, drop the reservation) lands between b's reads.
    const ran = betweenReads(lv, () => a.provision(spec(name, ONE_ADDRESS), { waitForIp: false }));
    const taken = await b.addresses.taken(SEGMENT(), ["local"]);
    expect(ran()).toBe(true);
    expect(recorded(name)).toEqual([`${SEGMENT()} 192.0.2.118/24`]);
    expect(reservations()).toEqual([]);
    expect(taken.has("192.0.2.118")).toBe(true);
    await a.delete("local", name, ownedBy(name));
  });

  it("a dual-stack pool gives one address of each family; its reservation (IPv6 in the volume name) stands until the define, then goes", async () => {
    const o = ops();
    const name = uniqueName("pooldual");
    let atDefine: string[] = [];
    const s = await o.provision(spec(name, DUAL), {
      waitForIp: false,
      onStep: (step) => {
        if (step === "define") atDefine = reservations();
      },
    });
    expect(s.createdNics?.[0]?.addresses).toEqual(["192.0.2.105/24", "2001:db8:14::105/64"]);
    expect(atDefine.sort()).toEqual(
      [
        expect.stringMatching(new RegExp(`^kvmp-ipr-${name}@192\\.0\\.2\\.105@\\d+$`)),
        expect.stringMatching(new RegExp(`^kvmp-ipr-${name}@2001:db8:14::105@\\d+$`)),
      ].sort(),
    );
    expect(reservations()).toEqual([]);
    expect(recorded(name)).toEqual([`${SEGMENT()} 192.0.2.105/24`, `${SEGMENT()} 2001:db8:14::105/64`]);
  });

  it("counts a reservation of a create in flight (another process's), and removes one older than a day and an hour", async () => {
    const o = ops();
    const now = Math.floor(Date.now() / 1000);
    const fresh = `kvmp-ipr-kvmpt-inflight-${process.pid}@192.0.2.106@${now}`;
    const stale = `kvmp-ipr-kvmpt-crashed-${process.pid}@192.0.2.107@${now - 26 * 3600}`;
    for (const v of [fresh, stale]) virsh(host, "vol-create-as", host.poolName, v, "1");
    try {
      const taken = await o.addresses.taken(SEGMENT(), ["local"]);
      expect(taken.has("192.0.2.106")).toBe(true);
      expect(taken.has("192.0.2.107")).toBe(false);
      expect(reservations()).toEqual([fresh]);
    } finally {
      for (const v of [fresh, stale]) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
    }
  });
});

/** Each host's `public` pool: ranges no other test uses, in a /28 of its own, with its own gateway. */
const ONE = { ranges: ["192.0.2.162-192.0.2.166/28"], gateway4: "192.0.2.161" };
const TWO = { ranges: ["192.0.2.178-192.0.2.182/28"], gateway4: "192.0.2.177", nameservers: ["192.0.2.53"] };

/** `one` gives the bridge in its pool; `two` leaves it to the host's own NIC (its `bridge`). */
function operations(): KvmOperations {
  const common = { uri: `unix://${host.socketPath}`, domainType: "qemu", pool: host.poolName };
  const hosts = parseConfig({
    hosts: {
      one: { ...common, network: host.network, addressPools: { public: { ...ONE, bridge } } },
      two: { ...common, bridge, addressPools: { public: TWO } },
    },
  }).hosts;
  const pool = new HostPool(hosts);
  pools.push(pool);
  return new KvmOperations(pool, { retry });
}

/** A NIC as check leaves it over a pool of hosts: the pool named, not yet taken. */
function namedNic(name: string): CheckedNic {
  return decodeNics([
    canonicalNic({
      mac: deriveMac(`${name}/0`),
      addresses: [],
      hostPool: "public",
      nameservers: [],
      primary: true,
    }),
  ])[0] as CheckedNic;
}

/** Provisions `name` placed on `key` (a pool of that one host), its NIC resolved on the host placement chose. */
function provisionOn(o: KvmOperations, key: string, name: string) {
  domains.add(name);
  const spec = { ...baseSpec(key, name, image), nics: [namedNic(name)] };
  return o.provision(spec, {
    pool: [key],
    waitForIp: false,
    forHost: (chosen) => {
      const nics = resolveHostPools(spec.nics, o.hosts.config(chosen));
      if (nics === undefined) throw new Error(`host ${chosen} lacks the pool`);
      return { ...spec, nics };
    },
  });
}

function seedFile(name: string, file: string): string {
  const iso = path.join(host.poolPath, vmVolumes(name).seed);
  return execFileSync("isoinfo", ["-R", "-i", iso, "-x", `/${file}`], { stdio: "pipe" }).toString();
}

describe("address pools declared on the hosts", () => {
  it("two proxies placed on two hosts take their addresses, gateway and attachment from their own host's pool", async () => {
    const o = operations();
    const [a, b] = [uniqueName("hpone"), uniqueName("hptwo")];
    const onOne = await provisionOn(o, "one", a);
    const onTwo = await provisionOn(o, "two", b);
    expect(onOne.host).toBe("one");
    expect(onTwo.host).toBe("two");

    const nicOne = onOne.createdNics?.[0] as NicSpec;
    const nicTwo = onTwo.createdNics?.[0] as NicSpec;
    expect(nicOne).toMatchObject({ bridge, gateway4: ONE.gateway4, addressPool: { ranges: ONE.ranges } });
    expect(nicTwo).toMatchObject({ bridge, gateway4: TWO.gateway4, nameservers: TWO.nameservers });
    expect(inPool({ ranges: ONE.ranges }, nicOne.addresses[0] as string), nicOne.addresses[0]).toBe(true);
    expect(inPool({ ranges: TWO.ranges }, nicTwo.addresses[0] as string), nicTwo.addresses[0]).toBe(true);

    for (const [name, nic, pool] of [
      [a, nicOne, ONE],
      [b, nicTwo, TWO],
    ] as const) {
      const address = nic.addresses[0] as string;
      // The domain: on the pool's bridge, its metadata recording the address on that segment.
      const xml = virsh(host, "dumpxml", name);
      expect(xml).toContain(`<source bridge='${bridge}'/>`);
      expect(parseMetadata(xml)?.addresses).toEqual([{ segment: `bridge:${bridge}`, cidr: address }]);
      // The seed's network-config: the address and the route through its own host's gateway.
      const net = seedFile(name, "network-config");
      expect(net).toContain(address);
      expect(net).toContain(pool.gateway4);
      const other = pool === ONE ? TWO : ONE;
      expect(net).not.toContain(other.gateway4);
    }
    expect(seedFile(b, "network-config")).toContain("192.0.2.53");
  });
});
