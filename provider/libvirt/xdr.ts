/**
 * XDR (RFC 4506) encoding for the subset libvirt's protocol uses.
 *
 * 64-bit integers (hyper, unsigned hyper) are bigint on the wire API: byte
 * counts and versions fit a JS number, but IDs and flags may not, and silently
 * losing precision is worse than an explicit conversion. Readers offer
 * `uhyperNumber()`/`hyperNumber()` for values that must fit a safe integer and
 * throw a permanent error when they do not.
 *
 * Every variable-length item carries its protocol maximum; a length beyond it,
 * or a read past the end, throws a permanent ProtocolError (malformed input
 * does not become well-formed on retry).
 */

import { ProtocolError } from "./errors";

/** REMOTE_STRING_MAX / VIR_NET_MESSAGE_STRING_MAX on libvirt ≥ 1.x (4 MiB). */
export const REMOTE_STRING_MAX = 4 * 1024 * 1024;
/** VIR_UUID_BUFLEN. */
export const UUID_LEN = 16;

const U32_MAX = 0xffff_ffff;
const I32_MIN = -0x8000_0000;
const I32_MAX = 0x7fff_ffff;
const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

function pad(n: number): number {
  return (4 - (n % 4)) % 4;
}

function invalid(what: string): never {
  throw new ProtocolError(`XDR: ${what}`);
}

export class XdrWriter {
  private buf: Buffer;
  private pos: number;

  /**
   * @param headroom bytes left free before the encoded data, so a caller can
   *   put a packet header there and send header and body as one buffer
   *   (see {@link finishFrame}).
   */
  constructor(
    initialSize = 256,
    private readonly headroom = 0,
  ) {
    this.buf = Buffer.allocUnsafe(Math.max(initialSize, headroom));
    this.pos = headroom;
  }

  /** Bytes written so far (not counting the headroom). */
  get length(): number {
    return this.pos - this.headroom;
  }

  // Doubling keeps total copying linear in the final size.
  private ensure(n: number): void {
    const need = this.pos + n;
    if (need <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < need) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  int(v: number): this {
    if (!Number.isInteger(v) || v < I32_MIN || v > I32_MAX) invalid(`int out of range: ${v}`);
    this.ensure(4);
    this.buf.writeInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }

  uint(v: number): this {
    if (!Number.isInteger(v) || v < 0 || v > U32_MAX) invalid(`unsigned int out of range: ${v}`);
    this.ensure(4);
    this.buf.writeUInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }

  hyper(v: bigint | number): this {
    const b = BigInt(v);
    if (b < I64_MIN || b > I64_MAX) invalid(`hyper out of range: ${v}`);
    this.ensure(8);
    this.buf.writeBigInt64BE(b, this.pos);
    this.pos += 8;
    return this;
  }

  uhyper(v: bigint | number): this {
    const b = BigInt(v);
    if (b < 0n || b > U64_MAX) invalid(`unsigned hyper out of range: ${v}`);
    this.ensure(8);
    this.buf.writeBigUInt64BE(b, this.pos);
    this.pos += 8;
    return this;
  }

  bool(v: boolean): this {
    return this.int(v ? 1 : 0);
  }

  /** Fixed-length opaque: exactly `len` bytes plus padding, no length prefix. */
  fixedOpaque(data: Uint8Array, len: number): this {
    if (data.length !== len) invalid(`fixed opaque needs ${len} bytes, got ${data.length}`);
    this.ensure(len + pad(len));
    this.buf.set(data, this.pos);
    this.pos += len;
    this.zeroPad(len);
    return this;
  }

  /** Variable-length opaque<max>. */
  opaque(data: Uint8Array, max: number): this {
    if (data.length > max) invalid(`opaque of ${data.length} bytes exceeds maximum ${max}`);
    this.uint(data.length);
    this.ensure(data.length + pad(data.length));
    this.buf.set(data, this.pos);
    this.pos += data.length;
    this.zeroPad(data.length);
    return this;
  }

  /** string<max>, UTF-8; the maximum counts bytes, as libvirt does. */
  string(s: string, max = REMOTE_STRING_MAX): this {
    const len = Buffer.byteLength(s, "utf8");
    if (len > max) invalid(`string of ${len} bytes exceeds maximum ${max}`);
    this.uint(len);
    this.ensure(len + pad(len));
    this.buf.write(s, this.pos, len, "utf8");
    this.pos += len;
    this.zeroPad(len);
    return this;
  }

  /** Optional data (`T *`): a presence flag, then the value. */
  optional<T>(v: T | null | undefined, write: (w: this, v: T) => void): this {
    if (v === null || v === undefined) return this.bool(false);
    this.bool(true);
    write(this, v);
    return this;
  }

  /** Variable-length array T<max>. */
  array<T>(items: readonly T[], max: number, write: (w: this, v: T) => void): this {
    if (items.length > max) invalid(`array of ${items.length} items exceeds maximum ${max}`);
    this.uint(items.length);
    for (const item of items) write(this, item);
    return this;
  }

  private zeroPad(len: number): void {
    const p = pad(len);
    if (p === 0) return;
    this.buf.fill(0, this.pos, this.pos + p);
    this.pos += p;
  }

  /** The encoded bytes (a view; the writer must not be used afterwards). */
  finish(): Buffer {
    return this.buf.subarray(this.headroom, this.pos);
  }

  /** The headroom followed by the encoded bytes, in one buffer (a view, like finish()). */
  finishFrame(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}

export class XdrReader {
  private pos: number;

  constructor(
    private readonly buf: Buffer,
    offset = 0,
  ) {
    this.pos = offset;
  }

  get offset(): number {
    return this.pos;
  }

  get remaining(): number {
    return this.buf.length - this.pos;
  }

  private need(n: number, what: string): void {
    if (this.pos + n > this.buf.length) {
      invalid(`truncated ${what}: need ${n} bytes at offset ${this.pos}, have ${this.remaining}`);
    }
  }

  int(): number {
    this.need(4, "int");
    const v = this.buf.readInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  uint(): number {
    this.need(4, "unsigned int");
    const v = this.buf.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  hyper(): bigint {
    this.need(8, "hyper");
    const v = this.buf.readBigInt64BE(this.pos);
    this.pos += 8;
    return v;
  }

  uhyper(): bigint {
    this.need(8, "unsigned hyper");
    const v = this.buf.readBigUInt64BE(this.pos);
    this.pos += 8;
    return v;
  }

  /** An unsigned hyper that must fit a safe JS integer (sizes, versions). */
  uhyperNumber(): number {
    const v = this.uhyper();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) invalid(`unsigned hyper ${v} exceeds the safe integer range`);
    return Number(v);
  }

  hyperNumber(): number {
    const v = this.hyper();
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      invalid(`hyper ${v} exceeds the safe integer range`);
    }
    return Number(v);
  }

  bool(): boolean {
    const v = this.int();
    if (v !== 0 && v !== 1) invalid(`bool must be 0 or 1, got ${v}`);
    return v === 1;
  }

  fixedOpaque(len: number): Buffer {
    this.need(len + pad(len), "fixed opaque");
    // Copy so callers never pin a whole (possibly 32 MiB) packet buffer.
    const v = Buffer.from(this.buf.subarray(this.pos, this.pos + len));
    this.pos += len + pad(len);
    return v;
  }

  /** The next `len` bytes (plus padding) as a view into the packet, for callers that convert them at once. */
  fixedOpaqueView(len: number): Buffer {
    this.need(len + pad(len), "fixed opaque");
    const v = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len + pad(len);
    return v;
  }

  opaque(max: number): Buffer {
    const len = this.uint();
    if (len > max) invalid(`opaque length ${len} exceeds maximum ${max}`);
    return this.fixedOpaque(len);
  }

  string(max = REMOTE_STRING_MAX): string {
    const len = this.uint();
    if (len > max) invalid(`string length ${len} exceeds maximum ${max}`);
    this.need(len + pad(len), "string");
    const v = this.buf.toString("utf8", this.pos, this.pos + len);
    this.pos += len + pad(len);
    return v;
  }

  optional<T>(read: (r: this) => T): T | null {
    return this.bool() ? read(this) : null;
  }

  array<T>(max: number, read: (r: this) => T): T[] {
    const n = this.uint();
    if (n > max) invalid(`array length ${n} exceeds maximum ${max}`);
    // Every element takes at least 4 bytes: a count the body cannot hold is a lie.
    if (n * 4 > this.remaining) invalid(`array length ${n} exceeds the ${this.remaining} bytes left`);
    const out: T[] = [];
    for (let i = 0; i < n; i++) out.push(read(this));
    return out;
  }

  /** Asserts the whole body was consumed: trailing bytes mean we decoded the wrong struct. */
  end(): void {
    if (this.pos !== this.buf.length) invalid(`${this.remaining} unexpected trailing bytes`);
  }
}
