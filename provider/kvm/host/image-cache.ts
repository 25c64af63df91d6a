/**
 * The image cache on each host: a base image is uploaded once into the host's
 * pool, under a name derived from its identity (names.ts), and every VM on
 * that host boots from an overlay backed by it.
 *
 * Completeness follows names.ts's marker protocol: 1. create the tiny
 * `<image>.partial` marker volume (exclusively: the lease); 2. create the
 * image volume and stream the verified bytes into it; 3. delete the marker. An image volume counts only
 * while no marker exists, so an upload cut at any point (process killed,
 * connection lost, checksum mismatch) is never taken as complete: the next
 * create deletes both and uploads again.
 *
 * The image volume is created raw with capacity 1 byte: an upload writes over
 * a volume's file without truncating it (measured on libvirt 9.0), so a
 * bigger pre-created file (a qcow2 header from qemu-img, a sparse raw of the
 * announced size) could leave trailing bytes. libvirt re-probes the format
 * and capacity when it refreshes the pool after the upload stream closes.
 *
 * Within one process, concurrent creates needing the same image on the same
 * host share one in-flight upload. Across processes the marker is a lease
 * the host arbitrates (image-lease.ts): one process uploads, the others wait
 * while its heartbeat moves, and take over only when it stops.
 *
 * An image found or made complete is remembered per pool handle, which
 * lives for one connection (pools.ts): later creates on that connection ask
 * libvirt nothing about it (two lookups and an info each otherwise). A
 * reconnect looks again. A remembered image removed since (by the orphan
 * sweep, by hand) shows when an overlay over it cannot be made: the caller
 * {@link ImageCache.forget}s it and ensures again.
 */
import { pipeline, type Readable, Transform } from "node:stream";
import { ProviderError } from "../../errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool, StorageVol } from "../../libvirt/types";
import { type ImageIdentity, imageSourceOf } from "../config/image";
import {
  type CachedImageIdentity,
  cachedImageState,
  cachedImageVolumeName,
  parseCachedImageVolumeName,
  partialMarkerVolumeName,
} from "../domain/names";
import { buildCachedImageVolumeXml } from "../domain/volume-xml";
import { type ProgressListener, report } from "../progress";
import { type OpenedImage, type OpenImageOptions, openImageSource, verifiedStream } from "./download";
import { type HeldLease, LeaseLostError, type LeaseTiming, takeLease } from "./image-lease";
import { PoolFills } from "./pool-fills";
import type { RetryEnv } from "./retry";
import {
  createFreshVolume,
  deleteVolume,
  deleteVolumeByName,
  lookupVolume,
  refreshPool,
  volumeInfo,
  volumePath,
} from "./volumes";

/** A cached image ready to back overlays. */
export interface CachedImage {
  /** The image volume's name in the pool. */
  name: string;
  volume: StorageVol;
  /** Absolute path (volumes.ts volumePath): what overlays name as backing file. */
  path: string;
  /** Virtual disk size in bytes. */
  virtualSize: number;
  /** True when this call uploaded it (false: found complete in the pool, or shared another caller's upload). */
  uploaded: boolean;
}

/** Where the cache lives: one host's libvirt and pool. */
export interface CacheLocation {
  host: string;
  lv: Libvirt;
  pool: StoragePool;
}

/** Opens an image's bytes. */
export type ImageOpener = (image: ImageIdentity, options: OpenImageOptions) => Promise<OpenedImage>;

/** Options of {@link ImageCache}. */
export interface ImageCacheOptions {
  /** Default {@link openImageSource}; tests inject sources that fail mid-way. */
  open?: ImageOpener;
  /** Deadline for the upload's initial reply, each drain and the final confirmation (ms). */
  uploadTimeoutMs?: number;
  retryEnv?: RetryEnv;
  /** Timing of the lease on a cache fill that other processes may want too (image-lease.ts). */
  lease?: LeaseTiming;
}

/** Options of {@link ImageCache.ensure}. */
export interface EnsureOptions {
  /** Receives the upload's progress (also when this call waits for another's upload of the same image). */
  onProgress?: ProgressListener;
}

/** Per-host cache of base images, with one in-flight upload per host and image. */
export class ImageCache {
  /** One upload per image in flight; complete images remembered per pool handle (pool-fills.ts). */
  private readonly fills = new PoolFills<CachedImage>();
  /** Virtual sizes learned from our own uploads, so no pool refresh is needed to know them. */
  private readonly sizes = new Map<string, number>();
  private readonly options: ImageCacheOptions;

  constructor(options: ImageCacheOptions = {}) {
    this.options = options;
  }

  /** The cache volume name for an image. */
  static volumeName(image: CachedImageIdentity): string {
    return cachedImageVolumeName(image);
  }

  /**
   * Returns the complete cached image, uploading it first when it is absent
   * or partial. Callers arriving while this process uploads the same image
   * to the same pool wait for that upload instead of starting their own.
   */
  ensure(loc: CacheLocation, image: ImageIdentity, options: EnsureOptions = {}): Promise<CachedImage> {
    const name = ImageCache.volumeName(image);
    return this.fills
      .run(loc, name, options.onProgress, (progress) => this.ensureNow(loc, image, name, progress))
      .then(({ value, own }) => (own ? value : { ...value, uploaded: false }));
  }

  /**
   * Stops trusting what this connection remembers of image volume `name`
   * (an overlay over it could not be made: it may be gone). True when
   * something was remembered.
   */
  forget(loc: Pick<CacheLocation, "pool">, name: string): boolean {
    return this.fills.forget(loc, name);
  }

  /** True while this process uploads `name` into the location's pool. */
  uploading(loc: Pick<CacheLocation, "host" | "pool">, name: string): boolean {
    return this.fills.running(loc, name);
  }

  /**
   * Deletes cached and baked images (and stale markers) in the pool whose
   * volume name is not in `inUse`, skipping entries this process is
   * uploading and those `busy` names (bakes in flight). Returns the names
   * deleted.
   */
  async prune(
    loc: CacheLocation,
    inUse: ReadonlySet<string>,
    busy: (name: string) => boolean = () => false,
  ): Promise<string[]> {
    const vols = await loc.lv.storagePoolListAllVolumes(loc.pool);
    const removed: string[] = [];
    // Images before markers, so an interrupted prune leaves markers (= partial, never reused).
    const ordered = [...vols].sort(
      (a, b) => Number(a.name.endsWith(".partial")) - Number(b.name.endsWith(".partial")),
    );
    for (const vol of ordered) {
      const parsed = parseCachedImageVolumeName(vol.name);
      if (parsed === undefined) continue;
      if (this.uploading(loc, parsed.imageVolumeName) || busy(parsed.imageVolumeName)) continue;
      if (!parsed.partial && inUse.has(parsed.imageVolumeName)) continue;
      if (parsed.partial && inUse.has(parsed.imageVolumeName)) {
        // A marker beside an image a VM uses: leave both (the image may still be in use by a running VM).
        continue;
      }
      if (await deleteVolume(loc.lv, vol)) removed.push(vol.name);
      this.sizes.delete(this.key(loc, parsed.imageVolumeName));
      this.forget(loc, parsed.imageVolumeName);
    }
    return removed;
  }

  private key(loc: Pick<CacheLocation, "host" | "pool">, name: string): string {
    return `${loc.host}\0${loc.pool.name}\0${name}`;
  }

  private async ensureNow(
    loc: CacheLocation,
    image: ImageIdentity,
    name: string,
    onProgress: ProgressListener,
  ): Promise<CachedImage> {
    const { lv, pool } = loc;
    const markerName = partialMarkerVolumeName(name);
    for (;;) {
      let vol = await lookupVolume(lv, pool, name);
      let marker = await lookupVolume(lv, pool, markerName);
      let state = cachedImageState({ image: vol !== undefined, marker: marker !== undefined });
      let info = vol !== undefined && state === "complete" ? await volumeInfo(lv, vol) : undefined;
      if (state === "complete" && info === undefined) {
        // Listed but its file is gone: refresh so libvirt forgets it, then look again.
        await refreshPool(lv, pool, this.options.retryEnv);
        vol = await lookupVolume(lv, pool, name);
        marker = await lookupVolume(lv, pool, markerName);
        state = cachedImageState({ image: vol !== undefined, marker: marker !== undefined });
        info = vol !== undefined && state === "complete" ? await volumeInfo(lv, vol) : undefined;
      }
      if (state === "complete" && vol !== undefined && info !== undefined) {
        const path = await volumePath(lv, vol);
        let virtualSize = this.sizes.get(this.key(loc, name));
        if (virtualSize === undefined) {
          // Capacity 1 is the size we created it with: libvirt has not re-read the
          // file since the upload (its post-upload refresh skips while other jobs run).
          if (info.capacity <= 1) {
            await refreshPool(lv, pool, this.options.retryEnv);
            info = (await volumeInfo(lv, vol)) ?? info;
          }
          virtualSize = info.capacity;
        }
        return { name, volume: vol, path, virtualSize, uploaded: false };
      }
      // Partial or absent: the lease decides who fills it (image-lease.ts); a live holder is waited for.
      const outcome = await takeLease(loc, markerName, this.options.lease, this.options.retryEnv);
      if (outcome.kind === "released") continue;
      return this.upload(loc, image, name, outcome.lease, onProgress);
    }
  }

  private async upload(
    loc: CacheLocation,
    image: ImageIdentity,
    name: string,
    lease: HeldLease,
    onProgress: ProgressListener,
  ): Promise<CachedImage> {
    const { lv, pool } = loc;
    let vol: StorageVol | undefined;
    let stream: Readable | undefined;
    try {
      // What a dead holder left goes first; the marker (ours now) keeps it from counting as complete.
      vol = await createFreshVolume(
        lv,
        pool,
        name,
        buildCachedImageVolumeXml({ name, format: "raw", capacityBytes: 1 }),
        this.options.retryEnv,
      );
      const opened = await (this.options.open ?? defaultOpen)(image, {});
      const verified = verifiedStream(opened, {
        format: image.format,
        label: image.url,
        ...(image.sha256 !== undefined ? { sha256: image.sha256 } : {}),
      });
      stream = counted(verified.stream, opened.length, onProgress);
      await lv.storageVolUpload(vol, stream, {
        ...(this.options.uploadTimeoutMs !== undefined ? { timeoutMs: this.options.uploadTimeoutMs } : {}),
      });
      const result = verified.verifier.result;
      if (result === undefined) {
        throw new ProviderError("transient", `upload of ${image.url} ended before the image was verified`);
      }
      const path = await volumePath(lv, vol);
      // Only now is the image complete: remove the marker, if the lease is still ours.
      if (!(await lease.release())) throw new LeaseLostError(partialMarkerVolumeName(name));
      this.sizes.set(this.key(loc, name), result.virtualSize);
      return { name, volume: vol, path, virtualSize: result.virtualSize, uploaded: true };
    } catch (err) {
      stream?.destroy();
      // Best effort. The marker goes only once the image is gone: an image
      // left without its marker would pass for complete.
      // The image volume may exist although its create's reply never came: look it up by name then.
      const imageGone = await (vol !== undefined
        ? deleteVolume(lv, vol)
        : deleteVolumeByName(lv, pool, name)
      ).then(
        () => true,
        () => false,
      );
      if (imageGone) await lease.release().catch(() => lease.abandon());
      else lease.abandon();
      throw err;
    }
  }
}

const defaultOpen: ImageOpener = (image, options) => openImageSource(imageSourceOf(image.url), options);

/**
 * `source` passed through unchanged, reporting the bytes that went by. A
 * pipeline: an error on either side destroys both (an aborted upload still
 * releases the source).
 */
function counted(source: Readable, totalBytes: number | undefined, onProgress: ProgressListener): Readable {
  const started = performance.now();
  let bytes = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length;
      report(onProgress, {
        kind: "image-upload",
        bytes,
        elapsedMs: performance.now() - started,
        ...(totalBytes !== undefined ? { totalBytes } : {}),
      });
      done(null, chunk);
    },
  });
  pipeline(source, counter, () => {});
  return counter;
}
