import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { testHost } from "../../support/test-host";
import { connectionPerTest, rawVolumeXml, removeVolume, transports, uniqueName } from "./support";

const GiB = 1024 ** 3;
const CHUNK = 1024 * 1024;
const RING_SLOTS = 16;

/**
 * A 1 GiB pseudo-random source that never exists in memory whole. Chunks are
 * cut from a 16 MiB ring allocated before the baseline is taken, each stamped
 * with its index and hashed as it is produced. Reusing the ring keeps the
 * generator itself from making garbage (Node only collects Buffer memory
 * after tens of MiB, which would blur the measurement), and it doubles as a
 * check: had the uploader held on to more than 16 MiB of source, the reused
 * slots would have changed under it and the hashes would differ.
 */
function generatedSource(total: number) {
  const ring = randomBytes(RING_SLOTS * CHUNK);
  const hash = createHash("sha256");
  let peakRss = 0;
  let i = 0;
  const readable = new Readable({
    highWaterMark: CHUNK,
    read() {
      if (i * CHUNK >= total) {
        this.push(null);
        return;
      }
      const slot = i % RING_SLOTS;
      const chunk = ring.subarray(slot * CHUNK, (slot + 1) * CHUNK);
      chunk.writeUInt32BE(i, 0);
      hash.update(chunk);
      i++;
      peakRss = Math.max(peakRss, process.memoryUsage.rss());
      this.push(chunk);
    },
  });
  return { readable, digest: () => hash.digest("hex"), peakRss: () => peakRss };
}

async function fileSha256(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file, { highWaterMark: CHUNK })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

describe.each(transports)("1 GiB upload over $name", ({ name: transportName, make }) => {
  const t = connectionPerTest(make, removeVolume);

  it("streams 1 GiB with RSS growing by less than 64 MiB, and the bytes arrive intact", {
    timeout: 300_000,
  }, async () => {
    const pool = await t.lv.storagePoolLookupByName(testHost().poolName);
    const name = uniqueName("big");
    t.created.push(name);
    const vol = await t.lv.storageVolCreateXml(pool, rawVolumeXml(name, GiB), 0);

    const source = generatedSource(GiB);
    const baseline = process.memoryUsage.rss(); // after the ring is allocated
    const started = performance.now();
    const sent = await t.lv.storageVolUpload(vol, source.readable);
    const seconds = (performance.now() - started) / 1000;
    const growth = Math.max(source.peakRss(), process.memoryUsage.rss()) - baseline;

    expect(sent).toBe(GiB);
    expect(growth).toBeLessThan(64 * 1024 * 1024);
    expect(await fileSha256(await t.lv.storageVolGetPath(vol))).toBe(source.digest());
    // Reported for the record; never asserted (shared machines are noisy).
    console.log(
      `[${transportName}] 1 GiB upload: ${(GiB / 1e6 / seconds).toFixed(0)} MB/s, RSS growth ${(growth / 2 ** 20).toFixed(1)} MiB`,
    );
  });
});
