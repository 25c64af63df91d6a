/**
 * The image cache's fill lease against the real libvirtd (image-lease.ts).
 * "Another process" is played by virsh: it makes the marker volume and grows
 * it (its heartbeat), or stops; our process never registered that marker as
 * its own, exactly as a second `pulumi up` would see it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { partialMarkerVolumeName } from "../../../provider/kvm/domain/names";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { refreshPoolByHand, type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  hostPool,
  ImageServer,
  imageConfig,
  makeQcow2,
  ownedBy,
  scratchDir,
  sha256File,
  TraceLog,
  uniqueName,
  virsh,
  virshQuiet,
} from "./ops-helpers";

let host: TestHost;
let scratch: string;
let server: ImageServer;
const cleanups: (() => void | Promise<void>)[] = [];
/** Short lease times: the behaviour is the same, the test waits less. */
const LEASE = { heartbeatMs: 200, staleMs: 1_500, pollMs: 100 };

beforeAll(async () => {
  host = testHost();
  scratch = scratchDir(host, "lease");
  server = new ImageServer();
  await server.start();
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** A fresh image served over HTTP (a cache entry of its own), and a KvmOperations with the short lease. */
function setup(tag: string) {
  const dir = mkdtempSync(path.join(scratch, `${tag}-`));
  const img = makeQcow2(dir, tag, 2);
  const url = `/${tag}-${process.pid}.qcow2`;
  server.files.set(url, img.path);
  const image: ImageConfig = imageConfig({ url: server.url(url), sha256: img.sha256 });
  const volume = ImageCache.volumeName(image);
  const marker = partialMarkerVolumeName(volume);
  const log = new TraceLog();
  const pool = hostPool(host, { tracer: log.tracer });
  const ops = new KvmOperations(pool, { images: new ImageCache({ lease: LEASE }) });
  const name = uniqueName(tag);
  cleanups.push(async () => {
    await ops.delete("local", name, ownedBy(name)).catch(() => undefined);
    virshQuiet(host, "vol-delete", "--pool", host.poolName, marker);
    virshQuiet(host, "vol-delete", "--pool", host.poolName, volume);
    await pool.closeAll();
  });
  return { img, image, volume, marker, log, ops, name, url };
}

/** Plays the other process: makes the marker at `count` bytes, sparse as ours are (libvirt grows only past the allocation). */
function otherMakesMarker(marker: string, count: number): void {
  virsh(host, "vol-create-as", host.poolName, marker, `${count}`, "--allocation", "0", "--format", "raw");
}

function capacityOf(vol: string): number {
  const out = virsh(host, "vol-info", "--pool", host.poolName, "--bytes", vol);
  return Number(/Capacity:\s+(\d+)/.exec(out)?.[1]);
}

describe("the image cache fill lease", () => {
  it("waits while another process's marker keeps beating, then uses the image that process completed: no upload of its own", async () => {
    const s = setup("lease-live");
    otherMakesMarker(s.marker, 2 ** 20);
    let count = 2 ** 20;
    const beat = setInterval(() => {
      count += 1;
      virsh(host, "vol-resize", "--pool", host.poolName, s.marker, `${count}`);
    }, 150);
    let finished = false;
    const created = s.ops.create(baseSpec("local", s.name, s.image)).finally(() => {
      finished = true;
    });
    try {
      // Well past staleMs, the other process still beats: nothing may have been taken over.
      await new Promise((r) => setTimeout(r, 3 * LEASE.staleMs));
      expect(finished).toBe(false);
      expect(s.log.uploads(s.volume)).toBe(0);
      // The other process completes the image, then drops its marker.
      virsh(host, "vol-create-as", host.poolName, s.volume, "1", "--format", "raw");
      virsh(host, "vol-upload", "--pool", host.poolName, s.volume, s.img.path);
      await refreshPoolByHand(host);
    } finally {
      clearInterval(beat);
    }
    virsh(host, "vol-delete", "--pool", host.poolName, s.marker);
    const done = await created;
    expect(done.imageUploaded).toBe(false);
    expect(s.log.uploads(s.volume)).toBe(0);
    expect(sha256File(path.join(host.poolPath, s.volume))).toBe(s.img.sha256);
  });

  it("takes over a marker whose heartbeat stopped once staleMs passed unchanged, and uploads once", async () => {
    const s = setup("lease-dead");
    otherMakesMarker(s.marker, 2 ** 20 + 5000);
    const done = await s.ops.create(baseSpec("local", s.name, s.image));
    expect(done.imageUploaded).toBe(true);
    // It watched the marker (one read per poll) before taking it over, not at once.
    const reads = s.log.records.filter(
      (r) => r.call === "virStorageVolGetInfo" && r.fields.some((f) => f.endsWith(`/${s.marker}`)),
    );
    expect(reads.length).toBeGreaterThanOrEqual(LEASE.staleMs / LEASE.pollMs - 2);
    expect(s.log.uploads(s.volume)).toBe(1);
    expect(sha256File(path.join(host.poolPath, s.volume))).toBe(s.img.sha256);
    expect(virsh(host, "vol-list", host.poolName)).not.toContain(s.marker);
  });

  it("beats while it uploads: the marker's count grows, and it is gone once the image is complete", async () => {
    const s = setup("lease-beat");
    server.holdAfter.set(s.url, 64 * 1024);
    const created = s.ops.create(baseSpec("local", s.name, s.image));
    let first: number | undefined;
    for (let i = 0; i < 100 && first === undefined; i++) {
      await new Promise((r) => setTimeout(r, 100));
      if (virsh(host, "vol-list", host.poolName).includes(s.marker)) first = capacityOf(s.marker);
    }
    expect(first).toBeGreaterThan(1);
    await new Promise((r) => setTimeout(r, 4 * LEASE.heartbeatMs));
    expect(capacityOf(s.marker)).toBeGreaterThan(first as number);
    server.holdAfter.delete(s.url);
    server.releaseHeld();
    // The held body is cut short: that attempt fails (never counted complete) and the create's retry uploads it whole.
    const done = await created;
    expect(done.imageUploaded).toBe(true);
    expect(s.log.uploads(s.volume)).toBe(2);
    expect(sha256File(path.join(host.poolPath, s.volume))).toBe(s.img.sha256);
    expect(virsh(host, "vol-list", host.poolName)).not.toContain(s.marker);
  });
});
