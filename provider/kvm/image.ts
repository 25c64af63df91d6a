/**
 * Images: what a VM boots from. One identity ({@link ImageIdentity}) is used
 * everywhere an image is named: the stack config's `kvm:images` entries, an
 * image given inline or by URL, the image `check` resolves into the inputs,
 * the create spec, the image cache's volume name and (without the firmware,
 * which the domain XML carries) the VM's metadata. Where the bytes come from
 * is derived from the canonical URL ({@link imageSourceOf}). Pure.
 */
import { fileURLToPath, pathToFileURL } from "node:url";
import { isObject, optEnum, optString, rejectUnknown } from "./fields";
import { Failures } from "./validation";

/** Disk image formats the provider handles. */
export type ImageFormat = "qcow2" | "raw";
/** Guest firmware: UEFI (OVMF, auto-selected by libvirt) or legacy BIOS (SeaBIOS). */
export type Firmware = "uefi" | "bios";

export const IMAGE_FORMATS: readonly ImageFormat[] = ["qcow2", "raw"];
export const FIRMWARES: readonly Firmware[] = ["uefi", "bios"];
export const DEFAULT_IMAGE_FORMAT: ImageFormat = "qcow2";
export const DEFAULT_FIRMWARE: Firmware = "uefi";

/** One image, defaults applied. */
export interface ImageIdentity {
  /** Canonical URL: an http(s) URL normalised by WHATWG URL, or a `file://` URL for local files. */
  url: string;
  format: ImageFormat;
  firmware: Firmware;
  /** Lower-case hex SHA-256 of the image file, when pinned. */
  sha256?: string;
}

/** An image of the stack config: the identity plus the key it is configured under. */
export interface ImageConfig extends ImageIdentity {
  /** The key under `kvm:images`; undefined for an image given directly by URL. */
  key?: string;
}

/** Where an image's bytes come from. */
export type ImageSource = { kind: "http"; url: string } | { kind: "file"; path: string };

/** The source of a canonical image URL (as {@link parseImageUrl} produced it). */
export function imageSourceOf(url: string): ImageSource {
  return url.startsWith("file:") ? { kind: "file", path: fileURLToPath(url) } : { kind: "http", url };
}

const IMAGE_FIELDS = ["url", "format", "firmware", "sha256"] as const;

/**
 * Parses an image location: `https://`, `http://`, `file:///abs/path` or an
 * absolute local path. Returns the canonical URL (local paths become
 * `file://` URLs, so both spellings of one file share a cache entry).
 * Records failures under `f` at `field`.
 */
export function parseImageUrl(raw: string, f: Failures, field = "url"): { url: string } | undefined {
  if (raw.startsWith("/")) {
    return { url: pathToFileURL(raw).href };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    f.fail(field, "must be an https://, http:// or file: URL, or an absolute local path");
    return undefined;
  }
  if (url.protocol === "https:" || url.protocol === "http:") {
    if (url.username !== "" || url.password !== "") {
      f.fail(field, "must not carry credentials (the URL is recorded in the VM's metadata)");
      return undefined;
    }
    if (url.hash !== "") {
      f.fail(field, "must not have a #fragment");
      return undefined;
    }
    return { url: url.href };
  }
  if (url.protocol === "file:") {
    if (url.host !== "" && url.host !== "localhost") {
      f.fail(field, "file: URLs must name a local file (file:///path)");
      return undefined;
    }
    return { url: pathToFileURL(fileURLToPath(url)).href };
  }
  f.fail(
    field,
    `scheme ${JSON.stringify(url.protocol.replace(/:$/, ""))} is not supported; use https, http or file`,
  );
  return undefined;
}

/**
 * Validates one image entry, applying defaults (format qcow2, firmware uefi).
 * `f` is positioned at `images.<key>` (or wherever the caller wants failures).
 */
export function parseImage(key: string | undefined, input: unknown, f: Failures): ImageConfig | undefined {
  const before = f.list.length;
  if (!isObject(input)) {
    f.fail(undefined, "must be an object");
    return undefined;
  }
  rejectUnknown(input, IMAGE_FIELDS, f);
  const rawUrl = optString(input, "url", f);
  if (rawUrl === undefined && input.url === undefined) f.fail("url", "is required");
  const location = rawUrl === undefined ? undefined : parseImageUrl(rawUrl, f);
  const format = optEnum(input, "format", IMAGE_FORMATS, f) ?? DEFAULT_IMAGE_FORMAT;
  const firmware = optEnum(input, "firmware", FIRMWARES, f) ?? DEFAULT_FIRMWARE;
  let sha256 = optString(input, "sha256", f);
  if (sha256 !== undefined) {
    if (!/^[0-9a-fA-F]{64}$/.test(sha256)) f.fail("sha256", "must be 64 hexadecimal characters");
    sha256 = sha256.toLowerCase();
  }
  if (f.list.length > before || location === undefined) return undefined;
  const image: ImageConfig = { url: location.url, format, firmware };
  if (key !== undefined) image.key = key;
  if (sha256 !== undefined) image.sha256 = sha256;
  return image;
}

/**
 * Resolves a resource's image reference: a key of `images`, or a direct
 * location (https://, http://, file: URL or absolute path) which gets the
 * same defaults as a configured image (qcow2, UEFI, unpinned). Anything that
 * contains `:` or starts with `/` is taken as a location. Throws a
 * ValidationError at `property` (default `image`) for an unknown key or a bad
 * location.
 */
export function resolveImage(
  ref: unknown,
  images: Readonly<Record<string, ImageConfig>>,
  property = "image",
): ImageConfig {
  const f = new Failures();
  if (typeof ref !== "string" || ref === "") {
    f.fail(property, "must be an image key or an image URL");
    f.throwIfAny();
  }
  const r = ref as string;
  if (r.includes(":") || r.startsWith("/")) {
    const location = parseImageUrl(r, f, property);
    f.throwIfAny();
    return {
      url: (location as { url: string }).url,
      format: DEFAULT_IMAGE_FORMAT,
      firmware: DEFAULT_FIRMWARE,
    };
  }
  const image = Object.hasOwn(images, r) ? images[r] : undefined;
  if (image === undefined) {
    const known = Object.keys(images);
    f.fail(
      property,
      `unknown image key ${JSON.stringify(r)} (configured: ${known.length ? known.join(", ") : "none"}); ` +
        "or give an https://, http://, file: URL or absolute path",
    );
    f.throwIfAny();
  }
  return image as ImageConfig;
}
