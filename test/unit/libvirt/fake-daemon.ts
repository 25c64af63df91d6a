import { Duplex } from "node:stream";
import { Procedures, RpcClient, XdrWriter } from "../../../provider/libvirt";
import type { CallRequest } from "../../../provider/libvirt/client";
import { writeRemoteError } from "../../../provider/libvirt/codec";
import { PacketStatus, PacketType, REMOTE_PROGRAM } from "../../../provider/libvirt/constants";
import type { RemoteErrorFields } from "../../../provider/libvirt/errors";
import {
  encodePacket,
  type Packet,
  PacketDecoder,
  type PacketHeader,
} from "../../../provider/libvirt/packet";

/**
 * An in-process peer speaking libvirt's real framing, for unit tests of the
 * client. It decodes what the client sends and lets the test answer; it is not
 * a model of libvirtd (integration tests use the real daemon).
 */

class Side extends Duplex {
  peer!: Side;
  /** When set, writes complete only when release() is called: a peer that stopped reading. */
  held: (() => void)[] | null = null;

  constructor() {
    super({ writableHighWaterMark: 64 * 1024 });
  }

  override _read(): void {}

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.peer.push(chunk);
    if (this.held) this.held.push(() => cb());
    else cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.peer.push(null);
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (!this.peer.destroyed) this.peer.destroy();
    cb(err);
  }
}

/** Two connected Duplex ends: bytes written to one are read from the other. */
export function duplexPair(): [Side, Side] {
  const a = new Side();
  const b = new Side();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

export function errorBody(fields: Partial<RemoteErrorFields> & { code: number }): Buffer {
  const w = new XdrWriter();
  writeRemoteError(w, {
    domain: 10,
    message: null,
    level: 2,
    str1: null,
    str2: null,
    str3: null,
    int1: -1,
    int2: -1,
    ...fields,
  });
  return w.finish();
}

export type Handler = (p: Packet, daemon: FakeDaemon) => void;

export class FakeDaemon {
  readonly received: Packet[] = [];
  private readonly decoder = new PacketDecoder();
  private readonly queue: Packet[] = [];
  private waiting: ((p: Packet) => void)[] = [];

  constructor(
    readonly socket: Side,
    private readonly handler?: Handler,
  ) {
    socket.on("data", (chunk: Buffer) => {
      for (const p of this.decoder.push(chunk)) {
        this.received.push(p);
        if (this.handler) this.handler(p, this);
        else {
          const w = this.waiting.shift();
          if (w) w(p);
          else this.queue.push(p);
        }
      }
    });
    socket.on("error", () => {});
  }

  /** The next packet the client sends. */
  next(): Promise<Packet> {
    const p = this.queue.shift();
    if (p) return Promise.resolve(p);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  async nextN(n: number): Promise<Packet[]> {
    const out: Packet[] = [];
    for (let i = 0; i < n; i++) out.push(await this.next());
    return out;
  }

  send(header: PacketHeader, body: Buffer = Buffer.alloc(0)): void {
    this.socket.write(encodePacket(header, body));
  }

  /** Answers `call` with a REPLY carrying `body` (status OK) or an error body (status ERROR). */
  reply(call: Packet, body: Buffer = Buffer.alloc(0), status: PacketStatus = PacketStatus.OK): void {
    this.send({ ...call.header, type: PacketType.REPLY, status }, body);
  }

  replyError(call: Packet, fields: Partial<RemoteErrorFields> & { code: number }): void {
    this.reply(call, errorBody(fields), PacketStatus.ERROR);
  }

  /** Sends a STREAM packet for `call`'s serial. */
  stream(call: Packet, status: PacketStatus, body: Buffer = Buffer.alloc(0)): void {
    this.send({ ...call.header, type: PacketType.STREAM, status }, body);
  }

  /** Simulates the daemon vanishing. */
  drop(): void {
    this.socket.destroy();
  }
}

/** Deterministic PRNG (mulberry32) so random splits are reproducible. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An RpcClient (no default deadline) wired to a FakeDaemon through a duplex pair. */
export function clientWithDaemon() {
  const [clientEnd, serverEnd] = duplexPair();
  const client = new RpcClient(clientEnd, { defaultTimeoutMs: 0 });
  const daemon = new FakeDaemon(serverEnd);
  return { client, daemon, clientEnd, serverEnd };
}

/** A storage_vol_upload call of a made-up volume, as the client would send it. */
export function uploadRequest(): CallRequest {
  const w = new XdrWriter();
  Procedures.storageVolUpload.encodeArgs(w, {
    vol: { pool: "p", name: "v", key: "k" },
    offset: 0,
    length: 0,
    flags: 0,
  });
  return { program: REMOTE_PROGRAM, version: 1, proc: 208, body: w.finish(), call: "virStorageVolUpload" };
}
