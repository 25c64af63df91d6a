import { MAX_MESSAGE_SIZE, PACKET_HEADER_SIZE, type PacketStatus, type PacketType } from "./constants";
import { ProtocolError } from "./errors";

/** virNetMessageHeader. */
export interface PacketHeader {
  prog: number;
  vers: number;
  proc: number;
  type: PacketType;
  serial: number;
  status: PacketStatus;
}

export interface Packet {
  header: PacketHeader;
  body: Buffer;
}

function checkSize(total: number): void {
  if (total - 4 > MAX_MESSAGE_SIZE) {
    throw new ProtocolError(
      `packet of ${total} bytes exceeds the protocol maximum of ${MAX_MESSAGE_SIZE + 4}`,
    );
  }
}

/** Writes the length word and the header into the first 28 bytes of `target`; `total` counts them. */
function writeHeader(target: Buffer, header: PacketHeader, total: number): void {
  target.writeUInt32BE(total, 0);
  target.writeUInt32BE(header.prog, 4);
  target.writeUInt32BE(header.vers, 8);
  target.writeInt32BE(header.proc, 12);
  target.writeUInt32BE(header.type, 16);
  target.writeUInt32BE(header.serial, 20);
  target.writeUInt32BE(header.status, 24);
}

/** The 28 bytes that precede a body of `bodyLength` bytes: length word + header. */
export function encodeHeader(header: PacketHeader, bodyLength: number): Buffer {
  const total = PACKET_HEADER_SIZE + bodyLength;
  checkSize(total);
  const b = Buffer.allocUnsafe(PACKET_HEADER_SIZE);
  writeHeader(b, header, total);
  return b;
}

/** One contiguous packet, one allocation; for large stream bodies write encodeHeader() and the body separately. */
export function encodePacket(header: PacketHeader, body: Uint8Array = Buffer.alloc(0)): Buffer {
  const total = PACKET_HEADER_SIZE + body.length;
  checkSize(total);
  const b = Buffer.allocUnsafe(total);
  writeHeader(b, header, total);
  b.set(body, PACKET_HEADER_SIZE);
  return b;
}

/**
 * Completes a packet whose body was encoded behind {@link PACKET_HEADER_SIZE}
 * reserved bytes (XdrWriter's headroom): the header is written in place, so
 * the packet costs no further allocation or copy. Returns `frame` itself.
 */
export function sealPacket(header: PacketHeader, frame: Buffer): Buffer {
  if (frame.length < PACKET_HEADER_SIZE) {
    throw new ProtocolError(`a packet frame needs ${PACKET_HEADER_SIZE} header bytes, got ${frame.length}`);
  }
  checkSize(frame.length);
  writeHeader(frame, header, frame.length);
  return frame;
}

function decodeHeader(b: Buffer, at: number): PacketHeader {
  return {
    prog: b.readUInt32BE(at),
    vers: b.readUInt32BE(at + 4),
    proc: b.readInt32BE(at + 8),
    type: b.readUInt32BE(at + 12) as PacketType,
    serial: b.readUInt32BE(at + 16),
    status: b.readUInt32BE(at + 20) as PacketStatus,
  };
}

/**
 * Reassembles packets from a byte stream cut anywhere (one byte at a time, or
 * many packets in one chunk). Incoming chunks are kept as a list and joined
 * only once a whole packet is present, so large packets cost one copy.
 */
export class PacketDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** Length of the packet being assembled, once its length word has arrived. */
  private expected = 0;

  /** Feeds bytes; returns every packet they complete. Throws ProtocolError on a bad length. */
  push(chunk: Buffer): Packet[] {
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const out: Packet[] = [];
    for (;;) {
      if (this.expected === 0) {
        if (this.buffered < 4) break;
        const len = this.peekLength();
        if (len < PACKET_HEADER_SIZE) {
          throw new ProtocolError(
            `packet length ${len} is shorter than the ${PACKET_HEADER_SIZE}-byte header`,
          );
        }
        if (len - 4 > MAX_MESSAGE_SIZE) {
          throw new ProtocolError(
            `packet length ${len} exceeds the protocol maximum of ${MAX_MESSAGE_SIZE + 4}`,
          );
        }
        this.expected = len;
      }
      if (this.buffered < this.expected) break;
      const whole = this.take(this.expected);
      this.expected = 0;
      out.push({ header: decodeHeader(whole, 4), body: whole.subarray(PACKET_HEADER_SIZE) });
    }
    return out;
  }

  /** Bytes received but not yet part of a complete packet. */
  get pending(): number {
    return this.buffered;
  }

  private peekLength(): number {
    const first = this.chunks[0] as Buffer;
    if (first.length >= 4) return first.readUInt32BE(0);
    const head = Buffer.concat(this.chunks, Math.min(this.buffered, 4));
    return head.readUInt32BE(0);
  }

  private take(n: number): Buffer {
    const first = this.chunks[0] as Buffer;
    let result: Buffer;
    if (first.length >= n) {
      // Common case: the packet sits inside one chunk; no copy.
      result = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      result = Buffer.allocUnsafe(n);
      let off = 0;
      let i = 0;
      // Index, then splice once: shifting per chunk is quadratic when a packet arrives in tiny pieces.
      while (off < n) {
        const c = this.chunks[i] as Buffer;
        const use = Math.min(c.length, n - off);
        c.copy(result, off, 0, use);
        off += use;
        if (use === c.length) i++;
        else this.chunks[i] = c.subarray(use);
      }
      this.chunks.splice(0, i);
    }
    this.buffered -= n;
    return result;
  }
}
