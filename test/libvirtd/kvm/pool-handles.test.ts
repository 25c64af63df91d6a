/**
 * The host's storage pool handle (host/pools.ts): looked up once per host and
 * connection, shared by concurrent callers, and looked up again when libvirtd
 * no longer knows it: a pool destroyed and created again under its name has
 * a new UUID, and libvirtd resolves handles by UUID. Against the real daemon,
 * on a pool of this file's own.
 */
import { chmodSync, mkdirSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../../provider/kvm/config/host-config";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { ErrorCode } from "../../../provider/libvirt/error-codes";
import { LibvirtError } from "../../../provider/libvirt/errors";
import { type TestHost, testHost } from "../../support/test-host";
import { CuttableTransports, scratchDir, TraceLog, virsh, virshQuiet } from "./ops-helpers";

const POOL = `kvmpt-handles-${process.pid}`;
let host: TestHost;
let dir: string;
let hosts: HostPool;
let log: TraceLog;
let cuts: CuttableTransports;

function createPool(): void {
  // A transient dir pool: pool-create-as gives it a fresh UUID every time.
  virsh(host, "pool-create-as", POOL, "dir", "--target", dir);
}

function destroyPool(): void {
  virshQuiet(host, "pool-destroy", POOL);
}

function calls(name: string, since = 0): number {
  return log.records.slice(since).filter((r) => r.call === name).length;
}

beforeAll(() => {
  host = testHost();
  dir = path.join(scratchDir(host, "pool-handles"), "pool");
  mkdirSync(dir, { recursive: true });
  chmodSync(path.dirname(dir), 0o755);
  createPool();
});

afterEach(async () => {
  await hosts?.closeAll();
});

afterAll(() => {
  destroyPool();
});

function freshHosts(): HostPool {
  log = new TraceLog();
  const config = parseConfig({
    hosts: { local: { uri: `unix://${host.socketPath}`, domainType: "qemu", pool: POOL } },
  });
  cuts = new CuttableTransports();
  hosts = new HostPool(config.hosts, { tracer: log.tracer, transportFor: cuts.factory });
  return hosts;
}

describe("the host's pool handle", () => {
  it("is looked up once for many callers, at once and later", async () => {
    const h = freshHosts();
    const first = await Promise.all(Array.from({ length: 10 }, () => h.pool("local")));
    const later = await h.pool("local");
    expect(new Set([...first, later].map((p) => p?.uuid)).size).toBe(1);
    expect(later?.name).toBe(POOL);
    expect(calls("virStoragePoolLookupByName")).toBe(1);
  });

  it("is looked up again on the next connection", async () => {
    const h = freshHosts();
    await h.pool("local");
    // The stream drops (libvirtd restarted, a cut): the next call reconnects.
    cuts.cut();
    while (h.connection("local").connected) await new Promise((r) => setImmediate(r));
    const again = await h.pool("local");
    await h.pool("local");
    expect(again?.name).toBe(POOL);
    expect(calls("virStoragePoolLookupByName")).toBe(2);
  });

  it("follows a pool recreated under its name: the call on the old handle is re-issued with the new one", async () => {
    const h = freshHosts();
    const lv = h.libvirt("local");
    const old = await h.pool("local");
    expect(old).toBeDefined();
    destroyPool();
    createPool();
    const fresh = virsh(host, "pool-uuid", POOL).trim();
    expect(fresh).not.toBe(old?.uuid);
    const before = log.records.length;
    // The caller still holds the handle it got before the pool was recreated.
    const vols = await lv.storagePoolListAllVolumes(old as NonNullable<typeof old>);
    expect(Array.isArray(vols)).toBe(true);
    const seen = log.records
      .slice(before)
      .map((r) => `${r.call}${r.error ? ` ${(r.error as LibvirtError).codeName}` : ""}`);
    expect(seen).toEqual([
      "virStoragePoolListAllVolumes VIR_ERR_NO_STORAGE_POOL",
      "virStoragePoolLookupByName",
      "virStoragePoolListAllVolumes",
    ]);
    expect((await h.pool("local"))?.uuid).toBe(fresh);
    // Later calls with the old handle get the new one at once: no refusal, no lookup.
    const mark = log.records.length;
    await lv.storagePoolListAllVolumes(old as NonNullable<typeof old>);
    expect(log.records.slice(mark).map((r) => r.call)).toEqual(["virStoragePoolListAllVolumes"]);
    expect(log.records.slice(mark).every((r) => r.error === undefined)).toBe(true);
  });

  it("a pool that is gone stays an error, and the handle is undefined until the pool is back", async () => {
    const h = freshHosts();
    const lv = h.libvirt("local");
    const old = await h.pool("local");
    destroyPool();
    try {
      const err = await lv.storagePoolListAllVolumes(old as NonNullable<typeof old>).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LibvirtError);
      expect((err as LibvirtError).code).toBe(ErrorCode.NO_STORAGE_POOL);
      expect(await h.pool("local")).toBeUndefined();
    } finally {
      createPool();
    }
    expect((await h.pool("local"))?.name).toBe(POOL);
  });
});
