/**
 * Names the provider derives: domain names (validation and autonaming),
 * per-VM volume names, and the cached-image volume names with their
 * partial-upload marker. All pure.
 */
import { createHash } from "node:crypto";
import { ProviderError } from "../../errors";
import type { ImageFormat, ImageIdentity } from "../config/image";

/** Longest domain name accepted: a DNS label, so the name can double as the guest's hostname. */
export const DOMAIN_NAME_MAX = 63;

const DOMAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Why `name` is not an acceptable domain name, or undefined when it is.
 *
 * The rule: 1–63 characters of ASCII letters, digits, `-`, `_` and `.`,
 * starting with a letter or digit. Libvirt itself accepts almost anything
 * except `/`, but the name also becomes volume file names
 * (`<name>-root.qcow2`), the second path segment of the provider ID and
 * usually the guest hostname, so it is kept to characters that are safe in
 * all of them; a leading `.` or `-` would make hidden files or look like a
 * command-line option. Case is preserved (libvirt names are case-sensitive).
 */
export function domainNameProblem(name: unknown): string | undefined {
  if (typeof name !== "string" || name === "") return "must be a non-empty string";
  if (name.length > DOMAIN_NAME_MAX)
    return `must be at most ${DOMAIN_NAME_MAX} characters (got ${name.length})`;
  if (!DOMAIN_NAME.test(name)) {
    return "may contain only letters, digits, '-', '_' and '.', and must start with a letter or digit";
  }
  return undefined;
}

/** True when `name` satisfies {@link domainNameProblem}'s rule. */
export function isValidDomainName(name: unknown): name is string {
  return domainNameProblem(name) === undefined;
}

/** Bytes of randomness {@link autoDomainName} uses (8 hex characters). */
export const AUTONAME_RANDOM_BYTES = 4;

/**
 * A domain name derived from a Pulumi resource name plus a random suffix,
 * like Pulumi's own autonaming: `web-proxy` → `web-proxy-3f9a01bc`.
 *
 * Pure: the caller supplies the random bytes (at least
 * {@link AUTONAME_RANDOM_BYTES}; only that many are used). The resource name
 * is lower-cased, runs of characters outside `[a-z0-9._-]` become `-`, leading
 * and trailing separators are dropped, and it is shortened so the whole name
 * fits {@link DOMAIN_NAME_MAX}. A name with nothing usable left becomes
 * `proxy`. The result always satisfies {@link domainNameProblem}.
 */
export function autoDomainName(resourceName: string, random: Uint8Array): string {
  if (random.length < AUTONAME_RANDOM_BYTES) {
    throw new ProviderError(
      "permanent",
      `autoDomainName needs ${AUTONAME_RANDOM_BYTES} random bytes, got ${random.length}`,
    );
  }
  const suffix = Buffer.from(random.subarray(0, AUTONAME_RANDOM_BYTES)).toString("hex");
  const room = DOMAIN_NAME_MAX - suffix.length - 1;
  const trim = (s: string) => s.replace(/^[._-]+/, "").replace(/[._-]+$/, "");
  let base = trim(resourceName.toLowerCase().replace(/[^a-z0-9._-]+/g, "-"));
  base = trim(base.slice(0, room));
  if (base === "") base = "proxy";
  return `${base}-${suffix}`;
}

// ---------------------------------------------------------------------------
// Per-VM volumes
// ---------------------------------------------------------------------------

/**
 * The tag of one owner's per-VM volumes: the first 8 hex characters of the
 * SHA-256 of its URN. Two stacks creating one domain name at once get
 * different volumes, so neither can delete or rewrite the other's disks;
 * one resource's retries get the same ones, so a create converges.
 */
export function ownerTag(ownerUrn: string): string {
  return createHash("sha256").update(ownerUrn).digest("hex").slice(0, 8);
}

/**
 * The per-VM qcow2 overlay volume: `<domain>-<owner tag>-root.qcow2`, or
 * without an owner `<domain>-root.qcow2` (the name of VMs made before the
 * volumes were tagged; delete still knows it).
 */
export function overlayVolumeName(domain: string, ownerUrn?: string): string {
  return `${checkedDomain(domain)}${tagPart(ownerUrn)}-root.qcow2`;
}

/** The per-VM NoCloud seed volume: `<domain>-<owner tag>-seed.iso` (untagged as for {@link overlayVolumeName}). */
export function seedVolumeName(domain: string, ownerUrn?: string): string {
  return `${checkedDomain(domain)}${tagPart(ownerUrn)}-seed.iso`;
}

/** The names of every volume that belongs to one VM of `ownerUrn` (untagged without one). */
export function perVmVolumeNames(domain: string, ownerUrn?: string): string[] {
  return [overlayVolumeName(domain, ownerUrn), seedVolumeName(domain, ownerUrn)];
}

function tagPart(ownerUrn: string | undefined): string {
  return ownerUrn === undefined ? "" : `-${ownerTag(ownerUrn)}`;
}

function checkedDomain(domain: string): string {
  const problem = domainNameProblem(domain);
  if (problem !== undefined) {
    throw new ProviderError("permanent", `invalid domain name ${JSON.stringify(domain)}: ${problem}`);
  }
  return domain;
}

// ---------------------------------------------------------------------------
// Cached images
// ---------------------------------------------------------------------------

/** Prefix of every cached-image volume (and its upload marker). */
export const CACHED_IMAGE_PREFIX = "kvmp-image-";
/** Prefix of every baked-image volume (and its bake marker): a cached image with the proxy's packages installed. */
export const BAKED_IMAGE_PREFIX = "kvmp-baked-";
/** Prefix of a bake's builder domain and its seed volume. */
export const BAKE_BUILDER_PREFIX = "kvmp-bake-";

/** Suffix of the marker volume that says "this image's upload has not completed". */
export const PARTIAL_SUFFIX = ".partial";

/** What names a cached image: where it came from, its pinned checksum and its format (not the firmware: one file boots either way). */
export type CachedImageIdentity = Pick<ImageIdentity, "url" | "sha256" | "format">;

/**
 * The first 16 hex characters of SHA-256 over `url`, a newline and the
 * checksum (empty when unpinned). Pinning a different checksum for the same
 * URL gives a different cache entry, so a changed image is never mistaken for
 * the cached one.
 */
export function imageCacheKey(image: Pick<ImageIdentity, "url" | "sha256">): string {
  return createHash("sha256")
    .update(`${image.url}\n${(image.sha256 ?? "").toLowerCase()}`)
    .digest("hex")
    .slice(0, 16);
}

/** The cached-image volume: `kvmp-image-<16 hex>.<format>`, shared by every VM on the pool using that image. */
export function cachedImageVolumeName(image: CachedImageIdentity): string {
  return `${CACHED_IMAGE_PREFIX}${imageCacheKey(image)}.${image.format}`;
}

/**
 * The marker volume of an image upload in progress: `<image volume>.partial`.
 *
 * Libvirt cannot rename volumes, so an upload cannot go to a temporary name
 * and be renamed when complete. Instead the cache code follows this protocol:
 * 1. create the (tiny, empty) marker volume; 2. create the image volume and
 * upload into it; 3. delete the marker. An image volume is complete only when
 * it exists and its marker does not (see {@link cachedImageState}); anything
 * else is deleted and uploaded again. Creating the marker first also serves
 * as a lock: a second uploader's create fails with "volume exists".
 */
export function partialMarkerVolumeName(imageVolumeName: string): string {
  if (parseCachedImageVolumeName(imageVolumeName) === undefined) {
    throw new ProviderError(
      "permanent",
      `${JSON.stringify(imageVolumeName)} is not a cached-image volume name`,
    );
  }
  return `${imageVolumeName}${PARTIAL_SUFFIX}`;
}

/** What a cached-image volume name (or its marker's name) says. */
export interface ParsedCachedImageName {
  /** The 16-hex cache key. */
  key: string;
  /** A baked image (`kvmp-baked-`) rather than a stock one (`kvmp-image-`). */
  baked: boolean;
  format: ImageFormat;
  /** True for the partial-upload marker rather than the image itself. */
  partial: boolean;
  /** The image volume's name (without the marker suffix). */
  imageVolumeName: string;
}

const CACHED_NAME = /^kvmp-(image|baked)-([0-9a-f]{16})\.(qcow2|raw)(\.partial)?$/;

/**
 * Parses a cached or baked image volume name, or its marker's name;
 * undefined for any other name. Lets pool sweeps recognise cache entries and
 * stale markers.
 */
export function parseCachedImageVolumeName(name: string): ParsedCachedImageName | undefined {
  const m = CACHED_NAME.exec(name);
  if (!m) return undefined;
  const baked = m[1] === "baked";
  const key = m[2] as string;
  const format = m[3] as ImageFormat;
  if (baked && format !== "qcow2") return undefined;
  return {
    key,
    baked,
    format,
    partial: m[4] !== undefined,
    imageVolumeName: `${baked ? BAKED_IMAGE_PREFIX : CACHED_IMAGE_PREFIX}${key}.${format}`,
  };
}

/**
 * The baked-image volume of bake key `key` (16 hex, guest/bake-script.ts
 * bakeKey): `kvmp-baked-<key>.qcow2`, a qcow2 over the cached stock image,
 * complete by the same marker protocol as a cached image.
 */
export function bakedImageVolumeName(key: string): string {
  return `${BAKED_IMAGE_PREFIX}${checkedKey(key)}.qcow2`;
}

/** The transient builder domain of bake key `key`: `kvmp-bake-<key>`. */
export function bakeBuilderName(key: string): string {
  return `${BAKE_BUILDER_PREFIX}${checkedKey(key)}`;
}

/** The builder's seed volume: `kvmp-bake-<key>-seed.iso`. */
export function bakeSeedVolumeName(key: string): string {
  return `${BAKE_BUILDER_PREFIX}${checkedKey(key)}-seed.iso`;
}

/** The bake key of a builder domain's name, or undefined for any other name. */
export function parseBakeBuilderName(name: string): string | undefined {
  return /^kvmp-bake-([0-9a-f]{16})$/.exec(name)?.[1];
}

function checkedKey(key: string): string {
  if (!/^[0-9a-f]{16}$/.test(key))
    throw new ProviderError("permanent", `${JSON.stringify(key)} is not a bake key`);
  return key;
}

/** The state of one cache entry, from which volumes exist. */
export type CachedImageState = "complete" | "absent" | "partial";

/**
 * Decides a cache entry's state: complete only when the image volume exists
 * and no marker does. A marker (with or without the image) means an upload
 * was interrupted or is running: the entry must not be used.
 */
export function cachedImageState(existing: { image: boolean; marker: boolean }): CachedImageState {
  if (existing.marker) return "partial";
  return existing.image ? "complete" : "absent";
}
