/**
 * Placement's count against the real libvirtd (kvm/host/placer.ts): what a
 * host entry holds is read from the host, its domains and the reservations
 * of creates not defined yet. The entry here is a storage pool of its own,
 * so the count holds only this file's VMs. Nothing boots (a tiny image).
 *
 * "Two processes" are two KvmOperations on two connections, as for two
 * stacks' `pulumi up` at once.
 *
 * The memory a host can give is read from the daemon on this machine, so
 * /proc/meminfo here is the kernel's own count to hold it to.
 */
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../../provider/kvm/config/host-config";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  betweenReads,
  imageConfig,
  makeQcow2,
  ownedBy,
  scratchDir,
  uniqueName,
  virsh,
  virshQuiet,
} from "./ops-helpers";

const POOL = `kvmpt-placement-${process.pid}`;
const retry = { maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 30_000 };

let host: TestHost;
let scratch: string;
let image: ImageConfig;
const pools: HostPool[] = [];
const domains = new Set<string>();

function ops(): { ops: KvmOperations; hosts: HostPool } {
  const config = parseConfig({
    hosts: {
      local: { uri: `unix://${host.socketPath}`, domainType: "qemu", pool: POOL, network: host.network },
    },
  });
  const hosts = new HostPool(config.hosts);
  pools.push(hosts);
  return { ops: new KvmOperations(hosts, { retry }), hosts };
}

beforeAll(() => {
  host = testHost();
  scratch = scratchDir(host, "placement");
  chmodSync(scratch, 0o755);
  const dir = path.join(scratch, "pool");
  mkdirSync(dir);
  virsh(host, "pool-create-as", POOL, "dir", "--target", dir);
  const img = makeQcow2(scratch, "placement", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterEach(async () => {
  await Promise.allSettled(pools.splice(0).map((p) => p.closeAll()));
});

afterAll(() => {
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  virshQuiet(host, "pool-destroy", POOL);
  rmSync(scratch, { recursive: true, force: true });
});

describe("placement's count on the host", () => {
  it("counts a create that defines its domain and drops its reservation between the count's two reads, whichever comes first", async () => {
    const a = ops();
    const b = ops();
    const lv = b.hosts.libvirt("local");
    const name = uniqueName("placebetween");
    domains.add(name);
    const spec = { ...baseSpec("local", name, image), memoryMiB: 160 };
    // The other process's whole placed create (reserve, define, drop the reservation) lands between
    // b's reads.
    const ran = betweenReads(lv, () => a.ops.provision(spec, { pool: ["local"], waitForIp: false }));
    const usage = await b.ops.placer.usageOf("local");
    expect(ran()).toBe(true);
    expect(virsh(host, "vol-list", POOL)).not.toMatch(/kvmp-rsv-/);
    expect({ proxies: usage.proxies, memoryMiB: usage.memoryMiB, vcpus: usage.vcpus }).toEqual({
      proxies: 1,
      memoryMiB: 160,
      vcpus: 1,
    });
    await a.ops.delete("local", name, ownedBy(name));
  });

  it("the memory it offers a create is the host's free memory, buffers and page cache (not free memory alone), as the kernel counts them", async () => {
    // A GiB written here sits in the page cache: the host has that much more to give than it has free.
    const file = path.join(scratch, "page-cache.bin");
    const fd = openSync(file, "w");
    const chunk = Buffer.alloc(8 * 2 ** 20, 1);
    for (let i = 0; i < 128; i++) writeSync(fd, chunk);
    closeSync(fd);
    try {
      const { ops: o } = ops();
      const before = meminfoMiB();
      const usage = await o.placer.usageOf("local");
      const after = meminfoMiB();
      const given = usage.availableMemoryMiB as number;
      const sum = (m: typeof before) => m.MemFree + m.Buffers + m.Cached;
      // Other files run beside this one: the figure lies within what the kernel said just before and after.
      expect(given).toBeGreaterThanOrEqual(Math.min(sum(before), sum(after)) - 256);
      expect(given).toBeLessThanOrEqual(Math.max(sum(before), sum(after)) + 256);
      expect(given - Math.max(before.MemFree, after.MemFree)).toBeGreaterThanOrEqual(768);
    } finally {
      rmSync(file, { force: true });
    }
  });
});

/** /proc/meminfo's MemFree, Buffers and Cached, in MiB. */
function meminfoMiB(): { MemFree: number; Buffers: number; Cached: number } {
  const text = readFileSync("/proc/meminfo", "utf8");
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1]);
  return { MemFree: kib("MemFree") / 1024, Buffers: kib("Buffers") / 1024, Cached: kib("Cached") / 1024 };
}
