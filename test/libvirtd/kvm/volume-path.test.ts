/**
 * A volume's path without a round trip (host/volumes.ts volumePath): the real
 * daemon's dir pool keys a volume by its path, for a volume it created and
 * for one it found by a refresh; a key that is not a path asks
 * virStorageVolGetPath.
 */
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HostPool } from "../../../provider/kvm/host/hosts";
import { refreshPool, volumePath } from "../../../provider/kvm/host/volumes";
import type { Libvirt } from "../../../provider/libvirt/libvirt";
import type { StoragePool } from "../../../provider/libvirt/types";
import { type TestHost, testHost } from "../../support/test-host";
import { hostPool, TraceLog, virshQuiet } from "./ops-helpers";

const CREATED = `kvmpt-volpath-made-${process.pid}.raw`;
const FOUND = `kvmpt-volpath-found-${process.pid}.raw`;

let host: TestHost;
let hosts: HostPool;
let lv: Libvirt;
let pool: StoragePool;
const log = new TraceLog();
const getPaths = () => log.records.filter((r) => r.call === "virStorageVolGetPath").length;

beforeAll(async () => {
  host = testHost();
  hosts = hostPool(host, { tracer: log.tracer });
  lv = hosts.libvirt("local");
  pool = (await hosts.pool("local")) as StoragePool;
});

afterAll(async () => {
  for (const v of [CREATED, FOUND]) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
  await hosts?.closeAll();
});

describe("volumePath", () => {
  it("takes a dir pool's key, which is the path libvirt reports, for a volume it created and one a refresh found", async () => {
    const made = await lv.storageVolCreateXml(
      pool,
      `<volume><name>${CREATED}</name><capacity>1024</capacity><target><format type='raw'/></target></volume>`,
    );
    writeFileSync(path.join(host.poolPath, FOUND), Buffer.alloc(1024));
    await refreshPool(lv, pool);
    const found = await lv.storageVolLookupByName(pool, FOUND);
    for (const vol of [made, found]) {
      const before = getPaths();
      const got = await volumePath(lv, vol);
      expect(getPaths()).toBe(before);
      expect(got).toBe(await lv.storageVolGetPath(vol));
      expect(got).toBe(path.join(host.poolPath, vol.name));
    }
  });

  it("asks libvirt when the key is not a path", async () => {
    const vol = await lv.storageVolLookupByName(pool, CREATED);
    const before = getPaths();
    expect(await volumePath(lv, { ...vol, key: "0b8f3c1e-not-a-path" })).toBe(
      path.join(host.poolPath, CREATED),
    );
    expect(getPaths()).toBe(before + 1);
  });
});
