import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { StorageVolType } from "../../../provider/libvirt";
import { testHost } from "../../support/test-host";
import { connectionPerTest, rawVolumeXml, removeVolume, transports, uniqueName, virsh } from "./support";

const sha256 = (b: Buffer): string => createHash("sha256").update(b).digest("hex");

describe.each(transports)("storage volumes over $name", ({ make }) => {
  const t = connectionPerTest(make, removeVolume);

  async function createVolume(capacity: number) {
    const pool = await t.lv.storagePoolLookupByName(testHost().poolName);
    const name = uniqueName("vol");
    t.created.push(name);
    return { pool, vol: await t.lv.storageVolCreateXml(pool, rawVolumeXml(name, capacity), 0) };
  }

  it("creates a volume, reports its path and size, and deletes it", async () => {
    const { pool, vol } = await createVolume(3 * 1024 * 1024);
    expect(vol.pool).toBe(testHost().poolName);
    const volPath = await t.lv.storageVolGetPath(vol);
    expect(volPath).toBe(path.join(testHost().poolPath, vol.name));
    expect(vol.key).toBe(volPath);
    expect(virsh(["vol-path", "--pool", pool.name, vol.name]).trim()).toBe(volPath);

    const info = await t.lv.storageVolGetInfo(vol);
    expect(info).toMatchObject({ type: StorageVolType.FILE, capacity: 3 * 1024 * 1024 });
    expect((await t.lv.storageVolLookupByName(pool, vol.name)).key).toBe(vol.key);
    expect(await t.lv.storagePoolListAllVolumes(pool)).toContainEqual(vol);

    await t.lv.storageVolDelete(vol, 0);
    await expect(t.lv.storageVolLookupByName(pool, vol.name)).rejects.toMatchObject({
      code: 50,
      codeName: "VIR_ERR_NO_STORAGE_VOL",
      call: "virStorageVolLookupByName",
    });
  });

  it("uploads bytes that land in the pool unchanged", async () => {
    // Not a multiple of the packet size, and sent in uneven source chunks.
    const data = randomBytes(2_500_003);
    const { vol } = await createVolume(data.length);
    const chunks = [data.subarray(0, 1), data.subarray(1, 700_001), data.subarray(700_001)];
    const sent = await t.lv.storageVolUpload(vol, Readable.from(chunks), { length: data.length });
    expect(sent).toBe(data.length);
    const onDisk = readFileSync(await t.lv.storageVolGetPath(vol));
    expect(sha256(onDisk)).toBe(sha256(data));
  });

  it("uploads at an offset, leaving the bytes before it alone", async () => {
    const { vol } = await createVolume(8192);
    const head = randomBytes(4096);
    const tail = randomBytes(4096);
    await t.lv.storageVolUpload(vol, [head]);
    await t.lv.storageVolUpload(vol, [tail], { offset: 4096, length: 4096 });
    const onDisk = readFileSync(await t.lv.storageVolGetPath(vol));
    expect(sha256(onDisk)).toBe(sha256(Buffer.concat([head, tail])));
  });

  it("a source that fails aborts the upload and surfaces the source's error", async () => {
    const { vol } = await createVolume(1024 * 1024);
    const boom = new Error("image download interrupted");
    async function* failing() {
      yield randomBytes(300_000);
      throw boom;
    }
    await expect(t.lv.storageVolUpload(vol, failing())).rejects.toBe(boom);
    // The connection stays usable after the abort.
    expect((await t.lv.storageVolGetInfo(vol)).capacity).toBe(1024 * 1024);
  });

  it("uploading to a volume that does not exist fails with NO_STORAGE_VOL", async () => {
    const err = await t.lv
      .storageVolUpload({ pool: testHost().poolName, name: "kvmpt-nope", key: "/nonexistent/kvmpt-nope" }, [
        Buffer.from("x"),
      ])
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ codeName: "VIR_ERR_NO_STORAGE_VOL", call: "virStorageVolUpload" });
  });
});
