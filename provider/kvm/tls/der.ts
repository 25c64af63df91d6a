/**
 * A minimal DER writer (ITU-T X.690) for what the proxy's certificates hold,
 * one function per ASN.1 type, each returning the whole encoding (tag,
 * length, contents); and the one reading step the leaf needs: the parts of a
 * DER structure, to copy the CA's subject into the leaf's issuer. Pure.
 */

/** Tag, definite length (short form below 128, long form above), contents. */
function tlv(tag: number, contents: Uint8Array): Buffer {
  const n = contents.length;
  let length: number[];
  if (n < 0x80) length = [n];
  else {
    const bytes: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
    length = [0x80 | bytes.length, ...bytes];
  }
  return Buffer.concat([Buffer.from([tag, ...length]), contents]);
}

export function sequence(...items: Uint8Array[]): Buffer {
  return tlv(0x30, Buffer.concat(items));
}

/** SET OF: DER orders the members by their encodings. */
export function set(...items: Uint8Array[]): Buffer {
  return tlv(0x31, Buffer.concat([...items].sort(Buffer.compare)));
}

/**
 * A non-negative INTEGER (bytes are read as an unsigned big-endian number)
 * in its minimal encoding: no leading zero byte but one that keeps a high
 * first bit from reading as a sign.
 */
export function integer(value: bigint | number | Uint8Array): Buffer {
  const big =
    typeof value === "object" ? BigInt(`0x${Buffer.from(value).toString("hex") || "0"}`) : BigInt(value);
  if (big < 0n) throw new Error("der.integer: negative integers are not written here");
  let hex = big.toString(16);
  if (hex.length % 2) hex = `0${hex}`;
  if (/^[89a-f]/.test(hex)) hex = `00${hex}`;
  return tlv(0x02, Buffer.from(hex, "hex"));
}

/** An OBJECT IDENTIFIER from its dotted text. */
export function oid(dotted: string): Buffer {
  if (!/^[0-2]\.(0|[1-9]\d*)(\.(0|[1-9]\d*))*$/.test(dotted)) {
    throw new Error(`der.oid: ${JSON.stringify(dotted)} is not a dotted object identifier`);
  }
  const arcs = dotted.split(".").map(BigInt);
  const [first, second, ...rest] = arcs as [bigint, bigint, ...bigint[]];
  if (first < 2n && second > 39n) throw new Error(`der.oid: ${dotted}: the second arc is over 39`);
  const out: number[] = [];
  for (const arc of [first * 40n + second, ...rest]) {
    // Base 128, most significant group first, every byte but the last with its top bit set.
    const groups = [Number(arc & 0x7fn)];
    for (let v = arc >> 7n; v > 0n; v >>= 7n) groups.unshift(Number(v & 0x7fn) | 0x80);
    out.push(...groups);
  }
  return tlv(0x06, Buffer.from(out));
}

export function utf8String(text: string): Buffer {
  return tlv(0x0c, Buffer.from(text, "utf8"));
}

/** IA5String (ASCII): what a dNSName is. */
export function ia5String(text: string): Buffer {
  if ([...text].some((c) => (c.codePointAt(0) as number) > 0x7f))
    throw new Error("der.ia5String: only ASCII fits an IA5String");
  return tlv(0x16, Buffer.from(text, "ascii"));
}

/**
 * A certificate's time (RFC 5280 4.1.2.5): UTCTime (YYMMDDHHMMSSZ) for the
 * years 1950 to 2049, GeneralizedTime (YYYYMMDDHHMMSSZ) otherwise; whole
 * seconds, UTC.
 */
export function time(date: Date): Buffer {
  const ms = date.getTime();
  if (!Number.isFinite(ms)) throw new Error("der.time: not a valid date");
  const year = date.getUTCFullYear();
  if (year < 0 || year > 9999) throw new Error(`der.time: the year ${year} has no four-digit form`);
  const two = (n: number) => String(n).padStart(2, "0");
  const rest =
    two(date.getUTCMonth() + 1) +
    two(date.getUTCDate()) +
    two(date.getUTCHours()) +
    two(date.getUTCMinutes()) +
    two(date.getUTCSeconds());
  return year >= 1950 && year < 2050
    ? tlv(0x17, Buffer.from(`${two(year % 100)}${rest}Z`, "ascii"))
    : tlv(0x18, Buffer.from(`${String(year).padStart(4, "0")}${rest}Z`, "ascii"));
}

/** A BIT STRING of whole bytes (a key, a signature). */
export function bitString(bytes: Uint8Array): Buffer {
  return tlv(0x03, Buffer.concat([Buffer.from([0]), bytes]));
}

/**
 * A named-bit BIT STRING (such as KeyUsage) with the bits numbered from the
 * first byte's top bit: DER drops trailing zero bits and counts the unused
 * ones in the first contents byte.
 */
export function namedBits(bits: number[]): Buffer {
  if (bits.some((b) => !Number.isInteger(b) || b < 0))
    throw new Error("der.namedBits: bits are numbers >= 0");
  if (bits.length === 0) return tlv(0x03, Buffer.from([0]));
  const highest = Math.max(...bits);
  const bytes = Buffer.alloc(Math.floor(highest / 8) + 1);
  for (const b of bits) bytes[b >> 3] = (bytes[b >> 3] as number) | (0x80 >> (b & 7));
  return tlv(0x03, Buffer.concat([Buffer.from([7 - (highest & 7)]), bytes]));
}

export function octetString(bytes: Uint8Array): Buffer {
  return tlv(0x04, bytes);
}

/** DER's TRUE is 0xff. */
export function boolean(value: boolean): Buffer {
  return tlv(0x01, Buffer.from([value ? 0xff : 0]));
}

/** [n] EXPLICIT: the whole encoding of `inner` inside a constructed context tag. */
export function explicit(n: number, inner: Uint8Array): Buffer {
  return tlv(contextTag(n, true), inner);
}

/** [n] IMPLICIT: `encoded` with its tag replaced by the context tag (constructed if it was). */
export function implicit(n: number, encoded: Uint8Array): Buffer {
  const out = Buffer.from(encoded);
  out[0] = contextTag(n, ((out[0] as number) & 0x20) !== 0);
  return out;
}

function contextTag(n: number, constructed: boolean): number {
  if (!Number.isInteger(n) || n < 0 || n > 30) throw new Error("der: context tags 0-30 only");
  return 0x80 | (constructed ? 0x20 : 0) | n;
}

/** One element read back: its tag and where its whole encoding and its contents lie in the buffer. */
export interface DerElement {
  tag: number;
  /** The whole encoding (tag, length, contents). */
  encoded: Buffer;
  contents: Buffer;
}

/** The element that starts at `offset` of `der` (single-byte tags, definite lengths: what DER allows here). */
export function readElement(der: Buffer, offset = 0): DerElement {
  const fail = (why: string): never => {
    throw new Error(`der: ${why} at byte ${offset}`);
  };
  if (offset + 2 > der.length) fail("truncated element");
  const tag = der[offset] as number;
  if ((tag & 0x1f) === 0x1f) fail("multi-byte tag");
  let length = der[offset + 1] as number;
  let start = offset + 2;
  if (length & 0x80) {
    const count = length & 0x7f;
    if (count === 0 || count > 4) fail("indefinite or over-long length");
    if (start + count > der.length) fail("truncated length");
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + (der[start + i] as number);
    start += count;
  }
  if (start + length > der.length) fail("truncated contents");
  return {
    tag,
    encoded: der.subarray(offset, start + length),
    contents: der.subarray(start, start + length),
  };
}

/** The elements inside a constructed element's contents, in order. */
export function childrenOf(element: DerElement): DerElement[] {
  const out: DerElement[] = [];
  for (let at = 0; at < element.contents.length; ) {
    const child = readElement(element.contents, at);
    out.push(child);
    at += child.encoded.length;
  }
  return out;
}
