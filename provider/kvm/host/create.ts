/**
 * One attempt at creating a VM: the steps of {@link createOnce}, in order,
 * each converging rather than assuming. An existing domain of the name is
 * only started (after checking whose it is); otherwise the image is cached
 * on the host (and baked, when its recipe asks: image-bake.ts), the overlay
 * and the seed made afresh, the domain
 * defined with our metadata and started. KvmOperations.create retries it.
 */
import { Readable } from "node:stream";
import { ProviderError } from "../../errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool, StorageVol } from "../../libvirt/types";
import type { ImageFormat, ImageIdentity } from "../config/image";
import { buildDomainXml, type ParsedDomain, parseDomainXml } from "../domain/domain-xml";
import type { MetadataOwner, ProxyMetadata } from "../domain/metadata";
import { overlayVolumeName, seedVolumeName } from "../domain/names";
import { formatProviderId } from "../domain/provider-id";
import { buildOverlayVolumeXml, buildSeedVolumeXml, GIB } from "../domain/volume-xml";
import { buildSeed, type SeedSpec } from "../guest/seed";
import { bare } from "../network/ip";
import { attachmentOf, segmentOf } from "../network/nic";
import { resolveHostNics } from "../network/nic-rules";
import { type CreateStep, type ProgressListener, report } from "../progress";
import { issuedAtCreate, servedTls } from "../tls/proxy-tls";
import type { DefineLedger } from "./define-ledger";
import { DomainTakenError, lookupDomain, managedMetadata, startDomain } from "./domains";
import type { HostPool } from "./hosts";
import type { ImageBaker } from "./image-bake";
import type { ImageCache } from "./image-cache";
import { checkNicsOnHost } from "./interfaces";
import { inactivePoolError, noPoolError } from "./pools";
import type { RetryEnv } from "./retry";
import { createFreshVolume, volumePath } from "./volumes";

/** What create needs for one VM: the seed's parts plus the machine and its record. */
export interface CreateSpec extends SeedSpec {
  /** Host key from the provider configuration. */
  host: string;
  /** The image the VM boots from (the cached copy backs its overlay). */
  image: ImageIdentity;
  /** The image reference as the resource gave it (key or URL), recorded in the metadata. */
  imageRef: string;
  /** The builder's user-data of the image's bake recipe (from the stack config; only its digest is recorded). */
  bakeUserData?: string;
  memoryMiB: number;
  vcpus: number;
  /** Requested root disk size; the overlay is at least the image's virtual size. */
  diskGiB: number;
  owner: MetadataOwner;
  /** The hash of everything that, changed, rebuilds the VM; recorded and compared when converging. */
  specHash: string;
  proxyPort: number;
  tags?: Record<string, string>;
  /** Addresses a pool NIC must not take (blocked ones), canonical. */
  avoidAddresses?: readonly string[];
}

/** What create reports. */
export interface CreateResult {
  host: string;
  name: string;
  providerId: string;
  uuid: string;
  /** The NIC's MAC address (lower case). */
  mac: string | undefined;
  /** False when the domain already existed and was only started. */
  defined: boolean;
  /** The domain's live XML, read once it was started (parsed). */
  domain: ParsedDomain;
  /** True when this create uploaded the base image. */
  imageUploaded: boolean;
  /** The baked volume the VM's disk is backed by, for an image with a bake recipe. */
  bakedImage?: string;
}

/** Options of a create. */
export interface CreateOptions {
  /** Runs before each step; a throw or rejection aborts the create there. */
  onStep?: (step: CreateStep) => void | Promise<void>;
  /** Receives progress: each step, and the image upload's bytes. */
  onProgress?: ProgressListener;
  /** Creation time recorded in the metadata (default now). */
  now?: () => Date;
  /**
   * Whose existing domain of the name create may converge onto: "own" (the
   * default) only a domain whose metadata names `spec.owner` and the same
   * spec hash, else {@link DomainTakenError}; "any" whatever it is (the
   * caller knows it is its own, e.g. restarting the VM its state records,
   * whose URN a stack rename may have changed).
   */
  adopt?: "own" | "any";
  /**
   * Ends the create early: checked before each step and each retry, and
   * given to the seed upload and to this create's wait for the cached image.
   * A libvirt call already running ends on its own deadline (callTimeout).
   * The rejection carries the signal's reason.
   */
  signal?: AbortSignal;
}

/** What one attempt works with. */
export interface CreateContext {
  hosts: HostPool;
  images: ImageCache;
  baker: ImageBaker;
  ledger: DefineLedger;
  env: RetryEnv;
}

/** One attempt at creating (or converging) VM `spec.name` and starting it. */
export async function createOnce(
  ctx: CreateContext,
  spec: CreateSpec,
  options: CreateOptions,
): Promise<CreateResult> {
  const { signal } = options;
  const step = async (s: CreateStep): Promise<void> => {
    signal?.throwIfAborted();
    // The bake step is shown only for an image that has a recipe; it runs (and may be cut at) for every create.
    if (s !== "bake" || spec.image.bake !== undefined) report(options.onProgress, { kind: "step", step: s });
    await options.onStep?.(s);
  };
  const host = ctx.hosts.config(spec.host);
  const lv = ctx.hosts.libvirt(spec.host);
  const base = { host: spec.host, name: spec.name, providerId: formatProviderId(spec.host, spec.name) };

  await step("lookup-domain");
  const late = await ctx.ledger.settle(lv, spec.host, spec.name);
  const existing = typeof late === "object" ? late : await lookupDomain(lv, spec.name);
  if (existing !== undefined) {
    // Converge only onto our own: after a failed attempt, the domain found
    // may be another create's of the same name (another stack) that won.
    if (options.adopt !== "any") {
      const m = await managedMetadata(lv, existing);
      if (m?.owner.urn !== spec.owner.urn) throw new DomainTakenError(spec.host, spec.name, m?.owner.urn);
      if (m.specHash !== spec.specHash) {
        throw new ProviderError(
          "permanent",
          `domain ${spec.name} on host ${spec.host} was built from other inputs (spec hash ${m.specHash.slice(0, 12)}, ` +
            `these inputs ${spec.specHash.slice(0, 12)}); delete it or choose another name`,
        );
      }
    }
    await step("start");
    await startDomain(lv, existing);
    const parsed = parseDomainXml(await lv.domainGetXmlDesc(existing));
    return {
      ...base,
      uuid: existing.uuid,
      mac: parsed.mac,
      defined: false,
      imageUploaded: false,
      domain: parsed,
    };
  }

  // The host's pool and what each NIC attaches to, checked before anything is made on the host.
  await step("pool");
  const pool = await ctx.hosts.pool(spec.host);
  if (pool === undefined) throw noPoolError(spec.host, host.pool);
  await ctx.hosts.passedOnce(spec.host, `pool ${host.pool}`, async () => {
    if (!(await lv.storagePoolIsActive(pool))) throw inactivePoolError(spec.host, host.pool);
  });
  const nics = resolveHostNics(spec.nics, host.nic);
  const fromHost = spec.nics.map((n) => attachmentOf(n).kind === "host");
  // A network that is missing or stopped, a macvtap parent or an nwfilter the host lacks fails here, naming the NIC.
  const asked = nics.map((n, i) => [attachmentOf(n), n.filter, fromHost[i]]);
  await ctx.hosts.passedOnce(spec.host, `nics ${JSON.stringify(asked)}`, () =>
    checkNicsOnHost(lv, spec.host, nics, fromHost),
  );

  await step("image");
  const loc = { host: spec.host, lv, pool };
  // Other creates may share this upload: the signal ends this create's wait, not the upload.
  const cached = () =>
    untilAborted(
      ctx.images.ensure(loc, spec.image, {
        ...(options.onProgress !== undefined ? { onProgress: options.onProgress } : {}),
      }),
      signal,
    );
  let image = await cached();

  await step("bake");
  const { bake } = spec.image;
  const baked = (stock: typeof image) =>
    bake === undefined
      ? Promise.resolve(undefined)
      : untilAborted(
          ctx.baker.ensure(
            { ...loc, hostConfig: host },
            {
              image: { ...spec.image, bake },
              stock,
              ...(spec.bakeUserData !== undefined ? { userData: spec.bakeUserData } : {}),
            },
            options.onProgress !== undefined ? { onProgress: options.onProgress } : {},
          ),
          signal,
        );
  let bakedImage = await baked(image);
  const backing = () =>
    bakedImage !== undefined
      ? { path: bakedImage.path, format: "qcow2" as const, virtualSize: bakedImage.virtualSize }
      : { path: image.path, format: spec.image.format, virtualSize: image.virtualSize };

  await step("overlay");
  let overlay: StorageVol;
  try {
    overlay = await freshOverlay(ctx, lv, pool, spec, backing());
  } catch (err) {
    // An image this connection remembered may be gone since: look for it afresh, once.
    const forgotBaked = bakedImage !== undefined && ctx.baker.forget(loc, bakedImage.name);
    const forgotImage = ctx.images.forget(loc, image.name);
    if (!forgotBaked && !forgotImage) throw err;
    image = await cached();
    bakedImage = await baked(image);
    overlay = await freshOverlay(ctx, lv, pool, spec, backing());
  }

  await step("seed-volume");
  const iso = buildSeed(withServedTls(spec, (options.now ?? (() => new Date()))()));
  const seedName = seedVolumeName(spec.name, spec.owner.urn);
  const seed = await createFreshVolume(lv, pool, seedName, buildSeedVolumeXml(seedName, iso.length), ctx.env);

  await step("seed-upload");
  await lv.storageVolUpload(seed, Readable.from([iso]), signal === undefined ? {} : { signal });

  await step("paths");
  const diskPath = await volumePath(lv, overlay);
  const seedPath = await volumePath(lv, seed);

  await step("define");
  const metadata: ProxyMetadata = {
    owner: spec.owner,
    image: {
      ref: spec.imageRef,
      url: spec.image.url,
      format: spec.image.format,
      ...(spec.image.sha256 !== undefined ? { sha256: spec.image.sha256 } : {}),
      ...(bake !== undefined && bakedImage !== undefined ? { bake, baked: bakedImage.name } : {}),
    },
    specHash: spec.specHash,
    createdAt: (options.now ?? (() => new Date()))().toISOString(),
    proxyPort: spec.proxyPort,
    diskGiB: spec.diskGiB,
    memoryMiB: spec.memoryMiB,
    vcpus: spec.vcpus,
    storagePool: host.pool,
    tags: spec.tags ?? {},
    addresses: nics.flatMap((n) => n.addresses.map((cidr) => ({ segment: segmentOf(n) as string, cidr }))),
  };
  const xml = buildDomainXml({
    name: spec.name,
    domainType: host.domainType,
    memoryMiB: spec.memoryMiB,
    vcpus: spec.vcpus,
    firmware: spec.image.firmware,
    diskPath,
    seedPath,
    nics,
    metadata,
  });
  const dom = await ctx.ledger.define(lv, spec.host, spec.name, xml);

  await step("start");
  await startDomain(lv, dom);
  const parsed = parseDomainXml(await lv.domainGetXmlDesc(dom));
  return {
    ...base,
    uuid: dom.uuid,
    mac: parsed.mac,
    defined: true,
    imageUploaded: image.uploaded,
    ...(bakedImage !== undefined ? { bakedImage: bakedImage.name } : {}),
    domain: parsed,
  };
}

/**
 * A fresh per-VM overlay over the cached image. Create reaches this step only
 * when no domain of this name exists, so an overlay already there is a cut
 * attempt's leftover (possibly over another image): it is replaced, as the
 * seed is, without a lookup first.
 */
function freshOverlay(
  ctx: CreateContext,
  lv: Libvirt,
  pool: StoragePool,
  spec: CreateSpec,
  backing: { path: string; format: ImageFormat; virtualSize: number },
): Promise<StorageVol> {
  const name = overlayVolumeName(spec.name, spec.owner.urn);
  const xml = buildOverlayVolumeXml({
    name,
    backingPath: backing.path,
    backingFormat: backing.format,
    imageVirtualSizeBytes: backing.virtualSize,
    requestedSizeBytes: spec.diskGiB * GIB,
  });
  return createFreshVolume(lv, pool, name, xml, ctx.env);
}

/**
 * `spec` with the certificate its proxy serves: issued now by the proxy's CA
 * for the VM's static addresses (a pool's taken by now), its key made here
 * and written only into the seed; or the one given.
 */
function withServedTls(spec: CreateSpec, now: Date): CreateSpec {
  const tls = spec.proxy?.tls;
  if (spec.proxy === undefined || tls === undefined || !issuedAtCreate(tls)) return spec;
  const addresses = [...new Set(spec.nics.flatMap((n) => n.addresses.map(bare)))];
  if (addresses.length === 0) {
    throw new ProviderError(
      "permanent",
      `the proxy's certificate names the VM's static addresses, and ${spec.name} has none (proxy.tls)`,
    );
  }
  return { ...spec, proxy: { ...spec.proxy, tls: servedTls(tls, addresses, now) } };
}

/** `p`, or the signal's reason as soon as it aborts (`p` runs on; its outcome is then ignored). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

export { CREATE_STEPS, type CreateStep } from "../progress";
