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
 */
import { chmodSync, rmSync } from "node:fs";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { parseMetadata } from "../../../provider/kvm/domain/metadata";
import type { HostPool } from "../../../provider/kvm/host/hosts";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { type AddressPool, inPool } from "../../../provider/kvm/network/address-pool";
import { canonicalNic, deriveMac, type NicSpec } from "../../../provider/kvm/network/nic";
import { staticBridgeOf, type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  hostPool,
  imageConfig,
  makeQcow2,
  ownedBy,
  scratchDir,
  uniqueName,
  virsh,
  virshQuiet,
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

function poolNic(name: string, addressPool: AddressPool): NicSpec {
  return canonicalNic({
    bridge,
    mac: deriveMac(`${name}/0`),
    addresses: [],
    addressPool,
    gateway4: "192.0.2.1",
    nameservers: [],
    primary: true,
  });
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
