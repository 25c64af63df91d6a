/**
 * Address pools declared on the hosts against the real libvirtd: two host
 * keys, `one` and `two`, both the test host, each with its own `public`
 * pool (its own /28 and gateway, as two hypervisors of a hosting company
 * would have). A NIC naming the pool is placed on a pool of one host (so
 * placement is forced) and takes that host's ranges, gateway and
 * attachment: what the domain XML, the metadata and the seed's
 * network-config carry. Nothing boots (a tiny image).
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
import { inPool } from "../../../provider/kvm/network/address-pool";
import { resolveHostPools } from "../../../provider/kvm/network/host-pools";
import { canonicalNic, deriveMac, type NicSpec } from "../../../provider/kvm/network/nic";
import { staticBridgeOf, type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  imageConfig,
  makeQcow2,
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
function namedNic(name: string): NicSpec {
  return canonicalNic({
    mac: deriveMac(`${name}/0`),
    addresses: [],
    hostPool: "public",
    nameservers: [],
    primary: true,
  });
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
  scratch = scratchDir(host, "kvm-host-pools");
  chmodSync(scratch, 0o755);
  const img = makeQcow2(scratch, "hostpools", 1);
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
