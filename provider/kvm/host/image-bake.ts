/**
 * Baked images: a cached stock image with the proxy's packages installed,
 * made once per host and recipe by a builder VM, so that proxies boot from it
 * ready to configure instead of installing at their own first boot.
 *
 * The baked volume (`kvmp-baked-<key>.qcow2`, names.ts) is a qcow2 over the
 * cached stock image and is itself the builder's disk: what the builder
 * installed stays in it, and proxies' overlays are backed by it. It counts
 * as complete by the image cache's marker protocol: created while its
 * `.partial` marker exists (the lease, image-lease.ts, heartbeat included),
 * complete once the marker is removed. So keeping the disk is removing the
 * marker: nothing is copied or flattened.
 *
 * One bake, in its steps (each a point a test may cut at):
 * 1. `builder-define`: a builder of this key left by a holder that died is
 *    removed; the baked volume and the builder's seed are made afresh (the
 *    seed: the recipe's user-data, and the bake script as vendor-data,
 *    guest/bake-script.ts); the builder domain is defined, with the host's
 *    NIC, and started, its serial console read from then on.
 * 2. `boot`: the builder installs, cleans itself and powers off; the wait
 *    polls its state (and reports progress) until it is shut off, up to
 *    `bakeTimeoutMs`.
 * 3. `shutdown`: the builder is undefined (with its NVRAM) and the result
 *    line read from its console (bake-script.ts).
 * 4. `keep`: on success the seed goes and the marker is released. A failure
 *    anywhere deletes the baked volume, then the seed and the builder, and
 *    releases the marker only once the volume is gone (as an upload does):
 *    a later bake never trusts a cut one.
 *
 * Within one process, concurrent creates needing the same bake on the same
 * host share it (and its progress). Across processes the marker's lease
 * decides: one process bakes, the others wait while its heartbeat moves.
 * A baked image found or made is remembered per pool handle, as the image
 * cache remembers its images.
 *
 * A builder left behind (its process died, or its bake was cut short) is
 * found and removed here too (`leftoverBuilders`, `removeBuilder`), for the
 * operations' image prune and the orphan sweep.
 */
import { Readable } from "node:stream";
import { ProviderError } from "../../errors";
import { DomainState } from "../../libvirt/constants";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain, StoragePool, StorageVol } from "../../libvirt/types";
import type { HostConfig } from "../config/host-config";
import type { BakeRecipe, ImageIdentity } from "../config/image";
import { buildDomainXml, parseDomainXml } from "../domain/domain-xml";
import {
  bakeBuilderName,
  bakedImageVolumeName,
  bakeSeedVolumeName,
  cachedImageState,
  parseBakeBuilderName,
  partialMarkerVolumeName,
} from "../domain/names";
import { isActiveState } from "../domain/states";
import { buildOverlayVolumeXml, buildSeedVolumeXml } from "../domain/volume-xml";
import { bakeKey, buildBakeScript, parseBakeResult } from "../guest/bake-script";
import { consoleLines } from "../guest/console-text";
import { buildSeed } from "../guest/seed";
import { shorthandNic } from "../network/nic";
import { decodeNics, resolveHostNics } from "../network/nic-rules";
import { type ProgressListener, report } from "../progress";
import { ConsoleTail } from "./console";
import { lookupDomain, removeDomain } from "./domains";
import type { CachedImage, CacheLocation } from "./image-cache";
import { type HeldLease, LeaseLostError, type LeaseTiming, takeLease } from "./image-lease";
import { PoolFills } from "./pool-fills";
import { type RetryEnv, sleep } from "./retry";
import {
  createFreshVolume,
  deleteVolume,
  deleteVolumeByName,
  hasCode,
  lookupVolume,
  volumeInfo,
  volumePath,
} from "./volumes";

/** A bake's steps, in order; a step hook runs before each (tests cut bakes short there). */
export const BAKE_STEPS = ["builder-define", "boot", "shutdown", "keep"] as const;
export type BakeStep = (typeof BAKE_STEPS)[number];

/** A baked image ready to back overlays. */
export interface BakedImage {
  /** The baked volume's name in the pool. */
  name: string;
  /** Absolute path: what overlays name as backing file (a qcow2). */
  path: string;
  /** Virtual disk size in bytes (the stock image's). */
  virtualSize: number;
  /** True when this call baked it (false: found complete, or shared another caller's bake). */
  baked: boolean;
}

/** Where a bake runs: the image cache's location, plus the host's domain type and NIC. */
export interface BakeLocation extends CacheLocation {
  hostConfig: Pick<HostConfig, "domainType" | "nic">;
}

/** What to bake. */
export interface BakeRequest {
  /** The image, with its recipe. */
  image: ImageIdentity & { bake: BakeRecipe };
  /** The builder's user-data (the text whose digest the recipe holds), when the recipe has one. */
  userData?: string;
  /** The cached stock image the baked volume is backed by. */
  stock: CachedImage;
}

/** Options of {@link ImageBaker.ensure}. */
export interface BakeOptions {
  /** Receives the bake's progress (also when this call waits for another's bake of the same image). */
  onProgress?: ProgressListener;
  /** Runs before each step of a bake this call makes; a throw aborts the bake there (tests). */
  onStep?: (step: BakeStep) => void | Promise<void>;
}

/** Options of {@link ImageBaker}. */
export interface ImageBakerOptions {
  lease?: LeaseTiming;
  retryEnv?: RetryEnv;
  /** How long a builder may run before the bake fails (default 30 minutes: package installs under TCG). */
  bakeTimeoutMs?: number;
  /** How often the builder's state is read (default 2 s). */
  pollMs?: number;
  /** The builder's memory (default 1024 MiB: apt's solver wants more than a proxy needs). */
  memoryMiB?: number;
}

/** The bake of one image on one host: its key and the names it uses. */
export function bakeNames(stockVolumeName: string, recipe: BakeRecipe) {
  const key = bakeKey(stockVolumeName, recipe);
  const volume = bakedImageVolumeName(key);
  return {
    key,
    volume,
    marker: partialMarkerVolumeName(volume),
    builder: bakeBuilderName(key),
    seed: bakeSeedVolumeName(key),
  };
}

/** A bake builder left behind (by a process that died, or a bake cut short), and its bake's key. */
export interface LeftoverBuilder {
  dom: Domain;
  key: string;
}

/** Bakes images on hosts, one bake per host and recipe at a time. */
export class ImageBaker {
  /** One bake per volume in flight; complete baked volumes remembered per pool handle (pool-fills.ts). */
  private readonly fills = new PoolFills<BakedImage>();
  private readonly options: ImageBakerOptions;

  constructor(options: ImageBakerOptions = {}) {
    this.options = options;
  }

  /**
   * The complete baked image of `req`, baking it first when it is absent or
   * partial. Callers arriving while this process bakes the same image on the
   * same pool wait for that bake.
   */
  ensure(loc: BakeLocation, req: BakeRequest, options: BakeOptions = {}): Promise<BakedImage> {
    if (req.image.bake.userDataMac !== undefined && req.userData === undefined) {
      return Promise.reject(
        new ProviderError(
          "permanent",
          "the bake recipe names a user-data that the stack config no longer holds",
        ),
      );
    }
    const names = bakeNames(req.stock.name, req.image.bake);
    return this.fills
      .run(loc, names.volume, options.onProgress, (progress) =>
        this.ensureNow(loc, req, names, options, progress),
      )
      .then(({ value, own }) => (own ? value : { ...value, baked: false }));
  }

  /** Stops trusting what this connection remembers of baked volume `name`; true when something was remembered. */
  forget(loc: Pick<CacheLocation, "pool">, name: string): boolean {
    return this.fills.forget(loc, name);
  }

  /** True while this process bakes `name` (a baked volume) into the location's pool. */
  baking(loc: Pick<CacheLocation, "host" | "pool">, name: string): boolean {
    return this.fills.running(loc, name);
  }

  /**
   * Builders on the location's host whose bake is over and that nothing will
   * finish: shut off, booting from this pool's baked volume (domains are
   * host-wide, markers per pool), without that volume's marker, and not
   * baking in this process.
   */
  async leftoverBuilders(loc: CacheLocation): Promise<LeftoverBuilder[]> {
    const { lv, pool } = loc;
    const out: LeftoverBuilder[] = [];
    for (const dom of await lv.connectListAllDomains(0)) {
      const key = parseBakeBuilderName(dom.name);
      if (key === undefined) continue;
      const baked = bakedImageVolumeName(key);
      if (this.baking(loc, baked)) continue;
      // A running builder, or a marker, means a bake may be going on in another process (whose
      // builder may live in another pool); the next bake of the key removes what a dead one left.
      const state = await lv.domainGetState(dom).catch(() => undefined);
      if (state === undefined || isActiveState(state.state)) continue;
      // Domains are host-wide, markers live in a pool: a builder whose disk is not this pool's baked
      // volume belongs to another pool's bake, which may be between its define and its start.
      if (!(await builderDiskIn(lv, pool, dom, baked))) continue;
      if ((await lookupVolume(lv, pool, partialMarkerVolumeName(baked))) !== undefined) continue;
      out.push({ dom, key });
    }
    return out;
  }

  /** Removes a leftover builder and its seed; the names of what went. */
  async removeBuilder(loc: Pick<CacheLocation, "lv" | "pool">, b: LeftoverBuilder): Promise<string[]> {
    const removed: string[] = [];
    if (await removeDomain(loc.lv, b.dom)) removed.push(b.dom.name);
    if (await deleteVolumeByName(loc.lv, loc.pool, bakeSeedVolumeName(b.key)))
      removed.push(bakeSeedVolumeName(b.key));
    return removed;
  }

  private async ensureNow(
    loc: BakeLocation,
    req: BakeRequest,
    names: ReturnType<typeof bakeNames>,
    options: BakeOptions,
    onProgress: ProgressListener,
  ): Promise<BakedImage> {
    const { lv, pool } = loc;
    const started = performance.now();
    for (;;) {
      const vol = await lookupVolume(lv, pool, names.volume);
      const marker = await lookupVolume(lv, pool, names.marker);
      const state = cachedImageState({ image: vol !== undefined, marker: marker !== undefined });
      if (state === "complete" && vol !== undefined && (await volumeInfo(lv, vol)) !== undefined) {
        return {
          name: names.volume,
          path: await volumePath(lv, vol),
          virtualSize: req.stock.virtualSize,
          baked: false,
        };
      }
      if (marker !== undefined) {
        report(onProgress, {
          kind: "bake",
          host: loc.host,
          phase: "waiting",
          elapsedMs: performance.now() - started,
        });
      }
      const outcome = await takeLease(loc, names.marker, this.options.lease, this.options.retryEnv);
      if (outcome.kind === "released") continue;
      return this.bake(loc, req, names, outcome.lease, options, onProgress, started);
    }
  }

  private async bake(
    loc: BakeLocation,
    req: BakeRequest,
    names: ReturnType<typeof bakeNames>,
    lease: HeldLease,
    options: BakeOptions,
    onProgress: ProgressListener,
    started: number,
  ): Promise<BakedImage> {
    const { lv, pool } = loc;
    const env = this.options.retryEnv ?? {};
    const step = async (s: BakeStep) => options.onStep?.(s);
    const progress = (phase: "booting" | "installing" | "finishing") =>
      report(onProgress, { kind: "bake", host: loc.host, phase, elapsedMs: performance.now() - started });
    let vol: StorageVol | undefined;
    let builder: Domain | undefined;
    let console: ConsoleTail | undefined;
    try {
      await step("builder-define");
      progress("booting");
      const leftover = await lookupDomain(lv, names.builder);
      if (leftover !== undefined) await removeDomain(lv, leftover);
      vol = await createFreshVolume(
        lv,
        pool,
        names.volume,
        buildOverlayVolumeXml({
          name: names.volume,
          backingPath: req.stock.path,
          backingFormat: req.image.format,
          imageVirtualSizeBytes: req.stock.virtualSize,
          requestedSizeBytes: req.stock.virtualSize,
        }),
        env,
      );
      const nic = resolveHostNics(decodeNics([shorthandNic(undefined, undefined)]), loc.hostConfig.nic);
      const iso = buildSeed({
        name: names.builder,
        userData: req.userData ?? "",
        vendorData: buildBakeScript(req.image.bake),
        installGuestAgent: false,
        nics: nic,
      });
      const seed = await createFreshVolume(
        lv,
        pool,
        names.seed,
        buildSeedVolumeXml(names.seed, iso.length),
        env,
      );
      await lv.storageVolUpload(seed, Readable.from([iso]));
      const xml = buildDomainXml({
        name: names.builder,
        domainType: loc.hostConfig.domainType,
        memoryMiB: this.options.memoryMiB ?? 1024,
        vcpus: 1,
        firmware: req.image.firmware,
        diskPath: await volumePath(lv, vol),
        seedPath: await volumePath(lv, seed),
        nics: nic,
      });
      builder = await lv.domainDefineXml(xml);
      await lv.domainCreate(builder);
      console = await ConsoleTail.open(lv, builder);
      if (console === undefined) {
        throw new ProviderError(
          "permanent",
          `the console of bake builder ${names.builder} could not be opened`,
        );
      }

      await step("boot");
      const timeoutMs = this.options.bakeTimeoutMs ?? 30 * 60_000;
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        // Gone (NO_DOMAIN) counts as stopped; any other failure ends the bake as it is (transient or not).
        const state = await lv.domainGetState(builder).catch((err: unknown) => {
          if (hasCode(err, ErrorCode.NO_DOMAIN)) return undefined;
          throw err;
        });
        if (state === undefined || state.state === DomainState.SHUTOFF || state.state === DomainState.CRASHED)
          break;
        if (performance.now() >= deadline) {
          throw new ProviderError(
            "transient",
            `bake builder ${names.builder} on host ${loc.host} did not finish within ${Math.round(
              timeoutMs / 60_000,
            )} minutes; last console lines:\n${lastLines(console.text())}`,
          );
        }
        progress(
          /Reading package lists|kvm-proxy-bake|modules:final/.test(console.text())
            ? "installing"
            : "booting",
        );
        await (env.sleep ?? sleep)(this.options.pollMs ?? 2_000);
      }

      await step("shutdown");
      progress("finishing");
      await console.stop();
      const result = parseBakeResult(console.text());
      await removeDomain(lv, builder);
      builder = undefined;
      if (result === undefined || !result.ok) {
        const why = result === undefined ? "it stopped without saying how the install went" : result.reason;
        const lines =
          result === undefined || result.ok ? lastLines(console.text()) : lastLines(result.lines.join("\n"));
        throw new ProviderError(
          "permanent",
          `baking image ${req.image.url} on host ${loc.host} failed: ${why}${lines !== "" ? `; the builder's last lines:\n${lines}` : ""}`,
        );
      }

      await step("keep");
      await deleteVolumeByName(lv, pool, names.seed);
      const path = await volumePath(lv, vol);
      if (!(await lease.release())) throw new LeaseLostError(names.marker);
      return { name: names.volume, path, virtualSize: req.stock.virtualSize, baked: true };
    } catch (err) {
      await console?.stop();
      // Best effort; the marker goes only once the baked volume is gone (it would pass for complete).
      if (builder !== undefined) await removeDomain(lv, builder).catch(() => undefined);
      else
        await lookupDomain(lv, names.builder)
          .then((d) => (d !== undefined ? removeDomain(lv, d) : false))
          .catch(() => undefined);
      const gone = await (vol !== undefined
        ? deleteVolume(lv, vol)
        : deleteVolumeByName(lv, pool, names.volume)
      ).then(
        () => true,
        () => false,
      );
      await deleteVolumeByName(lv, pool, names.seed).catch(() => undefined);
      if (gone) await lease.release().catch(() => lease.abandon());
      else lease.abandon();
      throw err;
    }
  }
}

/** The console's last lines, for an error: escapes dropped, credentials masked (console-text.ts). */
function lastLines(text: string): string {
  return consoleLines(text).join("\n");
}

/** Whether the builder `dom` boots from this pool's volume `volume` (false when either is gone). */
async function builderDiskIn(lv: Libvirt, pool: StoragePool, dom: Domain, volume: string): Promise<boolean> {
  const vol = await lookupVolume(lv, pool, volume);
  if (vol === undefined) return false;
  let xml: string;
  try {
    xml = await lv.domainGetXmlDesc(dom);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return false;
    throw err;
  }
  return parseDomainXml(xml).diskPath === (await volumePath(lv, vol));
}
