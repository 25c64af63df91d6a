/**
 * The NoCloud seed: an ISO 9660 image labelled `cidata` whose root holds
 * `meta-data`, `user-data` and optionally `vendor-data` and `network-config`.
 *
 * The image is written here, byte by byte, rather than by genisoimage or a
 * library, so that it is deterministic and carries every name form a reader
 * may look for:
 *
 * - the primary volume descriptor's tree has ISO 9660 level 1 names
 *   (`USER_DAT.;1`) with Rock Ridge entries (SUSP `SP`/`CE` in the root's
 *   `.` record, an `ER` naming RRIP_1991A, and `RR`/`NM`/`PX`/`TF` on every
 *   record) carrying the real names (`user-data`). Linux prefers these.
 * - a Joliet supplementary volume descriptor (escape sequence `%/E`, UCS-2
 *   level 3) points at a second directory tree whose names are the real names
 *   in UCS-2 big-endian, for readers that only know Joliet (`isoinfo -J`,
 *   Windows). A Go-built seed without Joliet is what `isoinfo -J` rejected in
 *   terraform-provider-libvirt #1197.
 *
 * Layout (2048-byte logical sectors; all numbers both-endian where ECMA-119
 * asks for it):
 *
 * | sector      | content                                           |
 * |-------------|---------------------------------------------------|
 * | 0-15        | system area, zero                                 |
 * | 16          | primary volume descriptor                         |
 * | 17          | Joliet supplementary volume descriptor            |
 * | 18          | volume descriptor set terminator                  |
 * | 19, 20      | primary tree's L (little-endian), M (big-endian) path tables |
 * | 21, 22      | Joliet tree's L and M path tables                 |
 * | 23...       | primary root directory (Rock Ridge)               |
 * | next        | SUSP continuation area holding the `ER` entry     |
 * | next...     | Joliet root directory                             |
 * | next...     | file data: one contiguous extent per file, in name order, each starting on a sector |
 * | last 150    | zero padding (see PADDING_SECTORS)                |
 *
 * Both trees point at the same file extents. Every timestamp is
 * {@link SEED_ISO_TIMESTAMP}, so the same inputs always give the same bytes.
 *
 * Pure: no I/O. The caller uploads the returned buffer.
 */
import { ProviderError } from "../../errors";
import {
  asciiField,
  both16,
  both32,
  ceEntry,
  descriptorTime,
  erEntry,
  nmEntry,
  pxEntry,
  RR_NM,
  RR_PX,
  RR_TF,
  recordingTime,
  rrEntry,
  spEntry,
  tfEntry,
  ucs2be,
  ucs2Field,
} from "./iso9660";

/** ISO 9660 logical sector (and logical block) size. */
export const ISO_SECTOR_BYTES = 2048;

/** The volume label cloud-init's NoCloud datasource looks for (also the Joliet volume id). */
export const SEED_VOLUME_ID = "cidata";

/**
 * The largest accepted size of any one seed file (after UTF-8 encoding), 16 MiB.
 *
 * cloud-init sets no limit for NoCloud, but the seed is built in memory and
 * streamed to the host, and clouds cap user-data far lower (EC2 16 KiB, Azure
 * 64 KiB). Anything bigger is almost certainly a mistake (a disk image pasted
 * as user-data) and should fetch its payload from the network instead.
 */
export const MAX_SEED_FILE_BYTES = 16 * 1024 * 1024;

export { SEED_ISO_TIMESTAMP } from "./iso9660";

/** The files of a NoCloud seed. Strings are written as UTF-8; Buffers byte for byte. */
export interface SeedIsoFiles {
  /** `meta-data`: YAML with at least `instance-id` (see {@link buildMetaData}). */
  metaData: string | Buffer;
  /** `user-data`: the user's cloud-init data in any format, written untouched. */
  userData: string | Buffer;
  /** `vendor-data`: omitted from the image when undefined; written (even empty) otherwise. */
  vendorData?: string | Buffer;
  /** `network-config`: omitted from the image when undefined. */
  networkConfig?: string | Buffer;
}

/** The four NoCloud file names with their ISO 9660 level 1 (8.3, upper case, `;1`) forms. */
const SEED_NAMES = {
  metaData: { name: "meta-data", iso: "META_DAT.;1" },
  userData: { name: "user-data", iso: "USER_DAT.;1" },
  vendorData: { name: "vendor-data", iso: "VENDOR_D.;1" },
  networkConfig: { name: "network-config", iso: "NETWORK_.;1" },
} as const;

/** Application identifier recorded in both volume descriptors. */
const APPLICATION_ID = "PULUMI-KVM-PROXY";

/**
 * Builds the NoCloud seed ISO for the given files.
 *
 * The result is a complete ISO 9660 image (with Rock Ridge and Joliet) whose
 * root directory lists `meta-data`, `user-data`, and `vendor-data` /
 * `network-config` when given. File contents are stored exactly as passed.
 * The output is a pure function of the inputs: the same files give the same
 * bytes.
 *
 * @throws ProviderError (permanent) naming the file when a file is larger than
 *   {@link MAX_SEED_FILE_BYTES}.
 */
export function buildSeedIso(files: SeedIsoFiles): Buffer {
  const entries: SeedEntry[] = [];
  for (const key of ["metaData", "userData", "vendorData", "networkConfig"] as const) {
    const value = files[key];
    if (value === undefined) continue;
    const data = typeof value === "string" ? Buffer.from(value, "utf8") : value;
    const names = SEED_NAMES[key];
    if (data.length > MAX_SEED_FILE_BYTES) {
      throw new ProviderError(
        "permanent",
        `seed file ${names.name} is ${data.length} bytes, over the limit of ${MAX_SEED_FILE_BYTES} bytes`,
      );
    }
    entries.push({
      name: names.name,
      isoId: Buffer.from(names.iso, "ascii"),
      jolietId: ucs2be(names.name),
      data,
      extent: 0,
    });
  }
  return writeImage(entries);
}

/**
 * Builds the NoCloud `meta-data` document:
 *
 * ```yaml
 * instance-id: "<instanceId>"
 * local-hostname: "<localHostname>"
 * ```
 *
 * Values are YAML double-quoted scalars with every non-ASCII character
 * escaped (`\uXXXX`), so the document is ASCII and reads back identically in
 * YAML 1.1 (PyYAML, which cloud-init uses) and YAML 1.2. A new instance-id
 * makes cloud-init treat the next boot as a first boot.
 *
 * @throws ProviderError (permanent) when the instance id is empty or holds
 *   control characters or unpaired surrogates, or the hostname is not an
 *   RFC 1123 host name.
 */
export function buildMetaData(opts: { instanceId: string; localHostname: string }): string {
  const { instanceId, localHostname } = opts;
  if (instanceId.length === 0 || hasControlCharacter(instanceId)) {
    throw new ProviderError(
      "permanent",
      `instance-id ${JSON.stringify(instanceId)} must be non-empty and free of control characters`,
    );
  }
  if (/[\ud800-\udfff]/u.test(instanceId)) {
    throw new ProviderError("permanent", "instance-id contains an unpaired UTF-16 surrogate");
  }
  if (!isHostname(localHostname)) {
    throw new ProviderError(
      "permanent",
      `local-hostname ${JSON.stringify(localHostname)} is not a valid host name (RFC 1123: dot-separated labels of letters, digits and inner hyphens, each at most 63 characters, at most 253 in all)`,
    );
  }
  return `instance-id: ${yamlQuote(instanceId)}\nlocal-hostname: ${yamlQuote(localHostname)}\n`;
}

/** True when `value` holds a C0 control, DEL or a C1 control character. */
function hasControlCharacter(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) return true;
  }
  return false;
}

function isHostname(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false;
  return name.split(".").every((label) => /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(label));
}

/** A YAML double-quoted scalar with only ASCII inside (every escape used is valid in YAML 1.1 and 1.2). */
function yamlQuote(value: string): string {
  let out = '"';
  for (const ch of value) {
    const cp = ch.codePointAt(0) ?? 0;
    if (ch === '"' || ch === "\\") out += `\\${ch}`;
    else if (cp >= 0x20 && cp < 0x7f) out += ch;
    else if (cp <= 0xffff) out += `\\u${cp.toString(16).padStart(4, "0")}`;
    else out += `\\U${cp.toString(16).padStart(8, "0")}`;
  }
  return `${out}"`;
}

// ---------------------------------------------------------------------------
// Image writer

interface SeedEntry {
  /** The real name, e.g. `user-data`. */
  name: string;
  /** ISO 9660 level 1 file identifier, e.g. `USER_DAT.;1`. */
  isoId: Buffer;
  /** Joliet file identifier: the real name in UCS-2 big-endian. */
  jolietId: Buffer;
  data: Buffer;
  /** First sector of the file's extent, set during layout. */
  extent: number;
}

/** Fixed sector numbers of the descriptors and path tables. */
const PVD_SECTOR = 16;
const SVD_SECTOR = 17;
const TERMINATOR_SECTOR = 18;
const PRIMARY_L_PATH_SECTOR = 19;
const PRIMARY_M_PATH_SECTOR = 20;
const JOLIET_L_PATH_SECTOR = 21;
const JOLIET_M_PATH_SECTOR = 22;
const FIRST_DIRECTORY_SECTOR = 23;

/**
 * Zero sectors appended after the last file and counted in the volume size:
 * mkisofs/genisoimage's default `-pad` of 300 KiB. Read-ahead on CD-ROM block
 * devices can run past the last file, and libisoburn (xorriso) sees no session
 * at all ("0 data blocks") in a volume of 32 sectors or fewer, which a small
 * seed would otherwise be.
 */
const PADDING_SECTORS = 150;

/** Path table of a tree with only a root: one 10-byte record. */
const PATH_TABLE_BYTES = 10;

/** POSIX modes recorded in Rock Ridge PX: read-only files and directories. */
const DIR_MODE = 0o040555;
const FILE_MODE = 0o100444;

interface Layout {
  primaryRoot: number;
  primaryRootSectors: number;
  continuation: number;
  jolietRoot: number;
  jolietRootSectors: number;
  totalSectors: number;
}

function writeImage(unsorted: SeedEntry[]): Buffer {
  // ECMA-119 9.3 orders directory records by file identifier; for these
  // names (no name is a prefix of another) that is plain byte order, and the
  // Joliet names happen to sort the same way, but each tree is sorted on its own.
  const primary = [...unsorted].sort((a, b) => Buffer.compare(a.isoId, b.isoId));
  const joliet = [...unsorted].sort((a, b) => Buffer.compare(a.jolietId, b.jolietId));

  // Record lengths do not depend on extents, so a first pass sizes the directories.
  const sizing: Layout = {
    primaryRoot: 0,
    primaryRootSectors: 1,
    continuation: 0,
    jolietRoot: 0,
    jolietRootSectors: 1,
    totalSectors: 0,
  };
  const primaryRootSectors = packRecords(primaryRecords(primary, sizing)).length / ISO_SECTOR_BYTES;
  const jolietRootSectors = packRecords(jolietRecords(joliet, sizing)).length / ISO_SECTOR_BYTES;

  const primaryRoot = FIRST_DIRECTORY_SECTOR;
  const continuation = primaryRoot + primaryRootSectors;
  const jolietRoot = continuation + 1;
  let next = jolietRoot + jolietRootSectors;
  for (const entry of primary) {
    // An empty file gets the next free sector as its (zero-length) extent, as
    // genisoimage does; the trailing padding keeps that sector inside the volume.
    entry.extent = next;
    next += Math.ceil(entry.data.length / ISO_SECTOR_BYTES);
  }
  const layout: Layout = {
    primaryRoot,
    primaryRootSectors,
    continuation,
    jolietRoot,
    jolietRootSectors,
    totalSectors: next + PADDING_SECTORS,
  };

  const image = Buffer.alloc(layout.totalSectors * ISO_SECTOR_BYTES);
  const at = (sector: number) => sector * ISO_SECTOR_BYTES;

  volumeDescriptor(layout, false).copy(image, at(PVD_SECTOR));
  volumeDescriptor(layout, true).copy(image, at(SVD_SECTOR));
  terminator().copy(image, at(TERMINATOR_SECTOR));
  pathTable(layout.primaryRoot, "L").copy(image, at(PRIMARY_L_PATH_SECTOR));
  pathTable(layout.primaryRoot, "M").copy(image, at(PRIMARY_M_PATH_SECTOR));
  pathTable(layout.jolietRoot, "L").copy(image, at(JOLIET_L_PATH_SECTOR));
  pathTable(layout.jolietRoot, "M").copy(image, at(JOLIET_M_PATH_SECTOR));
  packRecords(primaryRecords(primary, layout)).copy(image, at(layout.primaryRoot));
  erEntry().copy(image, at(layout.continuation));
  packRecords(jolietRecords(joliet, layout)).copy(image, at(layout.jolietRoot));
  for (const entry of primary) entry.data.copy(image, at(entry.extent));
  return image;
}

/** Primary tree root: `.` (with SP, RR, PX, TF, CE), `..`, then the files, each with RR, NM, PX, TF. */
function primaryRecords(entries: SeedEntry[], layout: Layout): Buffer[] {
  const dirExtent = layout.primaryRoot;
  const dirSize = layout.primaryRootSectors * ISO_SECTOR_BYTES;
  const dot = directoryRecord({
    extent: dirExtent,
    size: dirSize,
    directory: true,
    id: Buffer.from([0]),
    systemUse: Buffer.concat([
      spEntry(),
      rrEntry(RR_PX | RR_TF),
      pxEntry(DIR_MODE, 2),
      tfEntry(),
      ceEntry(layout.continuation, 0, erEntry().length),
    ]),
  });
  const dotdot = directoryRecord({
    extent: dirExtent,
    size: dirSize,
    directory: true,
    id: Buffer.from([1]),
    systemUse: Buffer.concat([rrEntry(RR_PX | RR_TF), pxEntry(DIR_MODE, 2), tfEntry()]),
  });
  const files = entries.map((e) =>
    directoryRecord({
      extent: e.extent,
      size: e.data.length,
      directory: false,
      id: e.isoId,
      systemUse: Buffer.concat([
        rrEntry(RR_PX | RR_NM | RR_TF),
        nmEntry(e.name),
        pxEntry(FILE_MODE, 1),
        tfEntry(),
      ]),
    }),
  );
  return [dot, dotdot, ...files];
}

/** Joliet tree root: `.`, `..` and the files under their UCS-2 names; no system use fields. */
function jolietRecords(entries: SeedEntry[], layout: Layout): Buffer[] {
  const dirExtent = layout.jolietRoot;
  const dirSize = layout.jolietRootSectors * ISO_SECTOR_BYTES;
  return [
    directoryRecord({ extent: dirExtent, size: dirSize, directory: true, id: Buffer.from([0]) }),
    directoryRecord({ extent: dirExtent, size: dirSize, directory: true, id: Buffer.from([1]) }),
    ...entries.map((e) =>
      directoryRecord({ extent: e.extent, size: e.data.length, directory: false, id: e.jolietId }),
    ),
  ];
}

/** Lays records into whole sectors; a record never crosses a sector boundary (ECMA-119 6.8.1.1). */
function packRecords(records: Buffer[]): Buffer {
  const sectors: Buffer[] = [];
  let current = Buffer.alloc(ISO_SECTOR_BYTES);
  let used = 0;
  for (const record of records) {
    if (used + record.length > ISO_SECTOR_BYTES) {
      sectors.push(current);
      current = Buffer.alloc(ISO_SECTOR_BYTES);
      used = 0;
    }
    record.copy(current, used);
    used += record.length;
  }
  sectors.push(current);
  return Buffer.concat(sectors);
}

/** ECMA-119 9.1 directory record. */
function directoryRecord(r: {
  extent: number;
  size: number;
  directory: boolean;
  id: Buffer;
  systemUse?: Buffer;
}): Buffer {
  const idPad = r.id.length % 2 === 0 ? 1 : 0;
  let systemUse = r.systemUse ?? Buffer.alloc(0);
  if ((33 + r.id.length + idPad + systemUse.length) % 2 === 1) {
    systemUse = Buffer.concat([systemUse, Buffer.alloc(1)]);
  }
  const length = 33 + r.id.length + idPad + systemUse.length;
  if (length > 255) throw new Error(`directory record for ${r.id.toString("latin1")} is ${length} bytes`);
  const b = Buffer.alloc(length);
  b[0] = length;
  b[1] = 0; // extended attribute record length
  both32(b, 2, r.extent);
  both32(b, 10, r.size);
  recordingTime().copy(b, 18);
  b[25] = r.directory ? 0x02 : 0x00;
  b[26] = 0; // file unit size (not interleaved)
  b[27] = 0; // interleave gap
  both16(b, 28, 1); // volume sequence number
  b[32] = r.id.length;
  r.id.copy(b, 33);
  systemUse.copy(b, 33 + r.id.length + idPad);
  return b;
}

/** ECMA-119 8.4 (primary) or 8.5 (supplementary, Joliet) volume descriptor. */
function volumeDescriptor(layout: Layout, joliet: boolean): Buffer {
  const b = Buffer.alloc(ISO_SECTOR_BYTES);
  const text = (offset: number, length: number, value: string) =>
    (joliet ? ucs2Field(value, length) : asciiField(value, length)).copy(b, offset);
  b[0] = joliet ? 2 : 1;
  b.write("CD001", 1, "ascii");
  b[6] = 1; // version
  text(8, 32, ""); // system identifier
  text(40, 32, SEED_VOLUME_ID);
  both32(b, 80, layout.totalSectors);
  if (joliet) b.write("%/E", 88, "ascii"); // UCS-2 level 3
  both16(b, 120, 1); // volume set size
  both16(b, 124, 1); // volume sequence number
  both16(b, 128, ISO_SECTOR_BYTES);
  both32(b, 132, PATH_TABLE_BYTES);
  b.writeUInt32LE(joliet ? JOLIET_L_PATH_SECTOR : PRIMARY_L_PATH_SECTOR, 140);
  b.writeUInt32BE(joliet ? JOLIET_M_PATH_SECTOR : PRIMARY_M_PATH_SECTOR, 148);
  const rootSector = joliet ? layout.jolietRoot : layout.primaryRoot;
  const rootSectors = joliet ? layout.jolietRootSectors : layout.primaryRootSectors;
  directoryRecord({
    extent: rootSector,
    size: rootSectors * ISO_SECTOR_BYTES,
    directory: true,
    id: Buffer.from([0]),
  }).copy(b, 156);
  text(190, 128, ""); // volume set identifier
  text(318, 128, ""); // publisher
  text(446, 128, ""); // data preparer
  text(574, 128, APPLICATION_ID);
  text(702, 37, ""); // copyright file
  text(739, 37, ""); // abstract file
  text(776, 37, ""); // bibliographic file
  descriptorTime(true).copy(b, 813); // creation
  descriptorTime(true).copy(b, 830); // modification
  descriptorTime(false).copy(b, 847); // expiration: not specified
  descriptorTime(false).copy(b, 864); // effective: not specified
  b[881] = 1; // file structure version
  return b;
}

function terminator(): Buffer {
  const b = Buffer.alloc(ISO_SECTOR_BYTES);
  b[0] = 255;
  b.write("CD001", 1, "ascii");
  b[6] = 1;
  return b;
}

/** ECMA-119 9.4 path table with the root as its only directory, padded to a sector. */
function pathTable(rootSector: number, kind: "L" | "M"): Buffer {
  const b = Buffer.alloc(ISO_SECTOR_BYTES);
  b[0] = 1; // length of directory identifier
  b[1] = 0; // extended attribute record length
  if (kind === "L") {
    b.writeUInt32LE(rootSector, 2);
    b.writeUInt16LE(1, 6); // parent directory number
  } else {
    b.writeUInt32BE(rootSector, 2);
    b.writeUInt16BE(1, 6);
  }
  b[8] = 0; // root identifier; b[9] is padding
  return b;
}
