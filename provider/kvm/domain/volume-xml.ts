/**
 * Storage volume XML for virStorageVolCreateXML: the per-VM qcow2 overlay
 * over a cached image, the raw NoCloud seed, and the cached image itself.
 * Sizes are always given in bytes.
 */
import { IMAGE_FORMATS, type ImageFormat } from "../config/image";
import { Failures } from "../validation";
import { el, forbiddenXmlCharacter, serializeXml } from "./xml";

/** Bytes in one GiB. */
export const GIB = 1024 ** 3;

function checkName(name: unknown, f: Failures): void {
  if (typeof name !== "string" || name === "" || name.length > 255) {
    f.fail("name", "must be a volume name of 1-255 characters");
    return;
  }
  if (name.includes("/") || name === "." || name === "..")
    f.fail("name", "must not contain '/' or be '.' or '..'");
  else if (forbiddenXmlCharacter(name) !== undefined) f.fail("name", "contains a control character");
}

function checkBytes(value: unknown, field: string, f: Failures, min = 1): void {
  if (!Number.isSafeInteger(value) || (value as number) < min) {
    f.fail(field, `must be a whole number of bytes, at least ${min}`);
  }
}

/**
 * The overlay's capacity: the larger of the image's virtual size and the
 * requested disk size, in bytes. An overlay can never be smaller than its
 * backing image, so a request below the image size yields the image size.
 */
export function overlayCapacityBytes(imageVirtualSizeBytes: number, requestedBytes: number): number {
  return Math.max(imageVirtualSizeBytes, requestedBytes);
}

/** What {@link buildOverlayVolumeXml} needs. */
export interface OverlayVolumeSpec {
  /** Volume name, e.g. `web-1-root.qcow2`. */
  name: string;
  /** Absolute path of the cached image (virStorageVolGetPath of the cache volume). */
  backingPath: string;
  /** Format of the cached image: qcow2 or raw. */
  backingFormat: ImageFormat;
  /** Virtual size of the cached image in bytes (virStorageVolGetInfo capacity). */
  imageVirtualSizeBytes: number;
  /** Requested root disk size in bytes. */
  requestedSizeBytes: number;
}

/**
 * Builds the per-VM overlay: a qcow2 volume with `<compat>1.1</compat>`
 * (libvirt otherwise creates compat 0.10) backed by the cached image through
 * `<backingStore>` with its path and format, capacity
 * {@link overlayCapacityBytes} in bytes and no preallocation. Throws
 * ValidationError listing every bad field.
 */
export function buildOverlayVolumeXml(spec: OverlayVolumeSpec): string {
  const f = new Failures();
  checkName(spec.name, f);
  if (typeof spec.backingPath !== "string" || !spec.backingPath.startsWith("/")) {
    f.fail("backingPath", "must be an absolute path");
  } else if (forbiddenXmlCharacter(spec.backingPath) !== undefined) {
    f.fail("backingPath", "contains a control character");
  }
  if (!IMAGE_FORMATS.includes(spec.backingFormat))
    f.fail("backingFormat", `must be one of ${IMAGE_FORMATS.join(", ")}`);
  checkBytes(spec.imageVirtualSizeBytes, "imageVirtualSizeBytes", f);
  checkBytes(spec.requestedSizeBytes, "requestedSizeBytes", f);
  f.throwIfAny("invalid overlay volume");
  return serializeXml(
    el(
      "volume",
      { type: "file" },
      el("name", {}, spec.name),
      el(
        "capacity",
        { unit: "bytes" },
        overlayCapacityBytes(spec.imageVirtualSizeBytes, spec.requestedSizeBytes),
      ),
      el("allocation", { unit: "bytes" }, 0),
      el("target", {}, el("format", { type: "qcow2" }), el("compat", {}, "1.1")),
      el("backingStore", {}, el("path", {}, spec.backingPath), el("format", { type: spec.backingFormat })),
    ),
  );
}

/**
 * Builds a raw volume of `sizeBytes` for the NoCloud seed ISO (the upload
 * then fills it). Throws ValidationError on a bad name or size.
 */
export function buildSeedVolumeXml(name: string, sizeBytes: number): string {
  const f = new Failures();
  checkName(name, f);
  checkBytes(sizeBytes, "sizeBytes", f);
  f.throwIfAny("invalid seed volume");
  return serializeXml(
    el(
      "volume",
      { type: "file" },
      el("name", {}, name),
      el("capacity", { unit: "bytes" }, sizeBytes),
      el("allocation", { unit: "bytes" }, 0),
      el("target", {}, el("format", { type: "raw" })),
    ),
  );
}

/** What {@link buildCachedImageVolumeXml} needs. */
export interface CachedImageVolumeSpec {
  /** The cache volume name (names.ts cachedImageVolumeName), or its partial-upload marker. */
  name: string;
  format: ImageFormat;
  capacityBytes: number;
  /** Defaults to 0 (sparse); the upload writes the bytes. */
  allocationBytes?: number;
}

/**
 * Builds the volume a cached image is uploaded into, with the given format,
 * capacity and allocation (bytes). libvirt 9.0's upload writes from the offset
 * but never truncates, so the image cache creates this volume raw with a
 * capacity of 1 byte and lets the upload grow it; libvirt's refresh then sees
 * the image's own format and virtual size. Throws ValidationError on bad fields.
 */
export function buildCachedImageVolumeXml(spec: CachedImageVolumeSpec): string {
  const f = new Failures();
  checkName(spec.name, f);
  if (!IMAGE_FORMATS.includes(spec.format)) f.fail("format", `must be one of ${IMAGE_FORMATS.join(", ")}`);
  checkBytes(spec.capacityBytes, "capacityBytes", f);
  if (spec.allocationBytes !== undefined) checkBytes(spec.allocationBytes, "allocationBytes", f, 0);
  f.throwIfAny("invalid cached-image volume");
  return serializeXml(
    el(
      "volume",
      { type: "file" },
      el("name", {}, spec.name),
      el("capacity", { unit: "bytes" }, spec.capacityBytes),
      el("allocation", { unit: "bytes" }, spec.allocationBytes ?? 0),
      el("target", {}, el("format", { type: spec.format })),
    ),
  );
}
