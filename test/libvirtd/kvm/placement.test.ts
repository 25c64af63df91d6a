/**
 * Placement's count against the real libvirtd (kvm/host/placer.ts): what a
 * host entry holds is read from the host, its domains and the reservations
 * of creates not defined yet. The entry here is a storage pool of its own,
 * so the count holds only this file's VMs. Nothing boots (a tiny image).
 *
 * "Two processes" are two KvmOperations on two connections, as for two
 * stacks' `pulumi up` at once.
 */
import { chmodSync, mkdirSync, rmSync } from "node:fs";
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
});
