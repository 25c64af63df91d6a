/**
 * The byte-level pieces of the seed ISO (seed-iso.ts): System Use Sharing
 * Protocol and Rock Ridge entries, and ECMA-119 field encodings (both-endian
 * integers, dates, a- and d-character fields, UCS-2 for Joliet). Pure.
 */
/**
 * The one timestamp recorded everywhere in the image (volume descriptors,
 * directory records, Rock Ridge `TF`): the Unix epoch, 1970-01-01T00:00:00Z,
 * as reproducible builds do with SOURCE_DATE_EPOCH=0. Nothing in cloud-init
 * reads these times; fixing them is what makes two builds of the same inputs
 * byte-identical (the Go seed stamped the build time and differed each time).
 */
export const SEED_ISO_TIMESTAMP: Date = new Date(0);

/** Rock Ridge RR flags (RRIP 1.09/1.10): which entries a record carries. */
export const RR_PX = 0x01;
export const RR_NM = 0x08;
export const RR_TF = 0x80;

/** Rock Ridge TF flags: modify, access and attribute-change times, 7-byte form. */
export const TF_MODIFY_ACCESS_ATTRIBUTES = 0x0e;

/** The ER entry's extension identifier, descriptor and source for Rock Ridge (RRIP_1991A). */
export const RRIP_ID = "RRIP_1991A";
export const RRIP_DESCRIPTOR =
  "THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS";
export const RRIP_SOURCE =
  "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN PRIMARY VOLUME DESCRIPTOR FOR CONTACT INFORMATION.";

// --- System Use Sharing Protocol and Rock Ridge entries -------------------

export function suspEntry(signature: string, version: number, body: Buffer): Buffer {
  const b = Buffer.alloc(4 + body.length);
  b.write(signature, 0, "ascii");
  b[2] = b.length;
  b[3] = version;
  body.copy(b, 4);
  return b;
}

/** SUSP SP: marks SUSP in use, only in the root's `.` record; no bytes skipped. */
export function spEntry(): Buffer {
  return suspEntry("SP", 1, Buffer.from([0xbe, 0xef, 0]));
}

/** SUSP CE: where the rest of this record's system use entries continue. */
export function ceEntry(sector: number, offset: number, length: number): Buffer {
  const body = Buffer.alloc(24);
  both32(body, 0, sector);
  both32(body, 8, offset);
  both32(body, 16, length);
  return suspEntry("CE", 1, body);
}

/** SUSP ER: declares the Rock Ridge extension (RRIP_1991A), read from the continuation area. */
export function erEntry(): Buffer {
  const id = Buffer.from(RRIP_ID, "ascii");
  const descriptor = Buffer.from(RRIP_DESCRIPTOR, "ascii");
  const source = Buffer.from(RRIP_SOURCE, "ascii");
  const head = Buffer.from([id.length, descriptor.length, source.length, 1]);
  return suspEntry("ER", 1, Buffer.concat([head, id, descriptor, source]));
}

/** Rock Ridge RR: which Rock Ridge entries the record carries (Linux ignores NM unless flagged here). */
export function rrEntry(flags: number): Buffer {
  return suspEntry("RR", 1, Buffer.from([flags]));
}

/** Rock Ridge NM: the real file name, in one piece (flags 0). */
export function nmEntry(name: string): Buffer {
  return suspEntry("NM", 1, Buffer.concat([Buffer.from([0]), Buffer.from(name, "ascii")]));
}

/** Rock Ridge PX (RRIP 1.10 form): mode, link count, uid 0, gid 0. */
export function pxEntry(mode: number, links: number): Buffer {
  const body = Buffer.alloc(32);
  both32(body, 0, mode);
  both32(body, 8, links);
  both32(body, 16, 0);
  both32(body, 24, 0);
  return suspEntry("PX", 1, body);
}

/** Rock Ridge TF: modify, access and attribute times, all {@link SEED_ISO_TIMESTAMP}. */
export function tfEntry(): Buffer {
  const t = recordingTime();
  return suspEntry("TF", 1, Buffer.concat([Buffer.from([TF_MODIFY_ACCESS_ATTRIBUTES]), t, t, t]));
}

// --- Field encodings -------------------------------------------------------

/** ECMA-119 7.3.3: 32-bit little-endian then big-endian. */
export function both32(b: Buffer, offset: number, value: number): void {
  b.writeUInt32LE(value, offset);
  b.writeUInt32BE(value, offset + 4);
}

/** ECMA-119 7.2.3: 16-bit little-endian then big-endian. */
export function both16(b: Buffer, offset: number, value: number): void {
  b.writeUInt16LE(value, offset);
  b.writeUInt16BE(value, offset + 2);
}

/** ECMA-119 9.1.5: years since 1900, month, day, hour, minute, second, GMT offset (15-minute units). */
export function recordingTime(): Buffer {
  const t = SEED_ISO_TIMESTAMP;
  return Buffer.from([
    t.getUTCFullYear() - 1900,
    t.getUTCMonth() + 1,
    t.getUTCDate(),
    t.getUTCHours(),
    t.getUTCMinutes(),
    t.getUTCSeconds(),
    0,
  ]);
}

/** ECMA-119 8.4.26.1: "YYYYMMDDHHMMSScc" digits and a GMT offset byte; all zero digits = not specified. */
export function descriptorTime(specified: boolean): Buffer {
  const b = Buffer.alloc(17);
  if (!specified) {
    b.write("0".repeat(16), 0, "ascii");
    return b;
  }
  const t = SEED_ISO_TIMESTAMP;
  const two = (n: number) => String(n).padStart(2, "0");
  const digits =
    String(t.getUTCFullYear()).padStart(4, "0") +
    two(t.getUTCMonth() + 1) +
    two(t.getUTCDate()) +
    two(t.getUTCHours()) +
    two(t.getUTCMinutes()) +
    two(t.getUTCSeconds()) +
    two(Math.floor(t.getUTCMilliseconds() / 10));
  b.write(digits, 0, "ascii");
  b[16] = 0; // GMT
  return b;
}

/** An a-/d-character field: ASCII, space padded. */
export function asciiField(value: string, length: number): Buffer {
  const b = Buffer.alloc(length, 0x20);
  b.write(value, 0, "ascii");
  return b;
}

/** A Joliet text field: UCS-2 big-endian, padded with UCS-2 spaces; an odd last byte stays zero. */
export function ucs2Field(value: string, length: number): Buffer {
  const b = Buffer.alloc(length);
  const encoded = ucs2be(value);
  for (let i = 0; i + 1 < length; i += 2) {
    if (i < encoded.length) {
      b[i] = encoded[i] ?? 0;
      b[i + 1] = encoded[i + 1] ?? 0;
    } else {
      b[i] = 0x00;
      b[i + 1] = 0x20;
    }
  }
  return b;
}

/** UCS-2 big-endian bytes of an ASCII/BMP string. */
export function ucs2be(value: string): Buffer {
  const b = Buffer.alloc(value.length * 2);
  for (let i = 0; i < value.length; i++) b.writeUInt16BE(value.charCodeAt(i), i * 2);
  return b;
}
