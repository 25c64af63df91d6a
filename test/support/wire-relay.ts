/**
 * A fault-injecting relay between our client and libvirtd.
 *
 * It listens on a unix socket, forwards every byte to the real daemon's
 * socket, and parses libvirt's framing in both directions with our own
 * decoder and encoder (provider/libvirt/packet.ts), so it can name each call
 * and act on it: cut both sockets before or after a given call, refuse new
 * connections after a cut, stall a call, answer a call with a crafted
 * remote_error, cut an upload after K bytes of stream data, or blackhole a
 * connection (stop forwarding both ways and close nothing, as a host that
 * lost power or a NAT that dropped the flow). It exists
 * because the real daemon cannot be made to fail at an exact call on demand;
 * everything it does not inject comes from the real libvirtd.
 */
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { writeRemoteError } from "../../provider/libvirt/codec";
import {
  KEEPALIVE_PROGRAM,
  KeepaliveProcedure,
  PacketStatus,
  PacketType,
} from "../../provider/libvirt/constants";
import { encodeHeader, encodePacket, type Packet, PacketDecoder } from "../../provider/libvirt/packet";
import { procedureByNumber } from "../../provider/libvirt/procedures";
import { XdrWriter } from "../../provider/libvirt/xdr";

/** One client CALL seen by the relay. */
export interface RelayCall {
  /** 0-based position among every CALL since the last reset(), across connections. */
  index: number;
  /** Connection number (0-based, since the last reset()). */
  conn: number;
  /** Protocol name, e.g. 'domain_define_xml' (or 'proc-<n>' for one we do not describe). */
  name: string;
  serial: number;
}

/** One packet seen by the relay, in either direction. */
export interface RelayRecord {
  conn: number;
  direction: "to-daemon" | "to-client";
  type: number;
  status: number;
  name: string;
  serial: number;
  bodyBytes: number;
  /** Set when the packet was swallowed by a blackholed connection. */
  dropped?: true;
}

/** A fault for one CALL. */
export type CallFault =
  /** Cut both sockets: "before" the call reaches libvirtd, or "after" libvirtd answered (reply dropped). */
  | { kind: "cut"; mode: "before" | "after" }
  /**
   * Hold the call for `ms`, then forward it; later packets on the connection
   * pass meanwhile (a daemon slow on one call still answers others).
   */
  | { kind: "stall"; ms: number }
  /** Answer with a remote_error (status ERROR) instead of forwarding. */
  | { kind: "error"; code: number; domain: number; message: string }
  /** Swallow the call and blackhole its connection (see WireRelay.blackholeAll). */
  | { kind: "blackhole" };

/** A fault on an upload's STREAM packets (client to daemon). */
export type StreamFault =
  /** Forward exactly `atByte` bytes of stream data, then cut (a packet may be cut in the middle). */
  | { kind: "cut-at-byte"; atByte: number }
  /** Cut at the finish packet: "before" it reaches libvirtd, or "after" (confirmation dropped). */
  | { kind: "cut-at-finish"; mode: "before" | "after" };

export interface WireRelayOptions {
  /** The real libvirtd socket. */
  target: string;
  /** Folder for the relay's socket (default: a fresh tmp folder). */
  dir?: string;
}

interface Link {
  conn: number;
  client: net.Socket;
  daemon: net.Socket;
  /** Serials whose reply must not be delivered: the relay cuts when it arrives. */
  cutOnReply: Set<number>;
  /** Set once the link is closed; queued packets are dropped. */
  dead: boolean;
  /** Nothing is forwarded either way and neither side learns of the other's close. */
  blackholed: boolean;
}

/** Public name of a procedure number, for records. */
function nameOf(prog: number, proc: number): string {
  if (prog === KEEPALIVE_PROGRAM) {
    return proc === KeepaliveProcedure.PING
      ? "keepalive_ping"
      : proc === KeepaliveProcedure.PONG
        ? "keepalive_pong"
        : `keepalive-${proc}`;
  }
  return procedureByNumber(prog, proc)?.name ?? `proc-${proc}`;
}

export class WireRelay {
  readonly socketPath: string;
  readonly calls: RelayCall[] = [];
  readonly records: RelayRecord[] = [];
  /** Chooses a fault per CALL; undefined forwards it untouched. */
  onCall: ((call: RelayCall) => CallFault | undefined) | undefined;
  /** A fault on the next upload's data (applies once). */
  streamFault: StreamFault | undefined;
  /** After any cut, new connections are closed at once (the client cannot heal by reconnecting). */
  refuseAfterCut = false;
  /** While true, new connections are closed at once. */
  refusing = false;
  /** Number of cuts made since the last reset(). */
  cuts = 0;
  /** Number of connections blackholed since the last reset(). */
  blackholes = 0;
  /** Connections accepted (including refused ones) since the last reset(). */
  connections = 0;
  /** Stream data bytes forwarded to the daemon since the last reset(). */
  streamBytes = 0;
  /** streamBytes when the last cut happened. */
  streamBytesAtCut: number | undefined;

  private readonly dir: string;
  private readonly ownsDir: boolean;
  private readonly target: string;
  private readonly server: net.Server;
  private readonly links = new Set<Link>();
  private readonly waiters: { match: (r: RelayRecord) => boolean; resolve: (r: RelayRecord) => void }[] = [];

  constructor(options: WireRelayOptions) {
    this.target = options.target;
    this.ownsDir = options.dir === undefined;
    this.dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), "kvmp-relay-"));
    this.socketPath = path.join(this.dir, "relay.sock");
    this.server = net.createServer((c) => this.accept(c));
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.socketPath, () => {
        this.server.off("error", reject);
        resolve();
      });
    });
  }

  async stop(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    if (this.ownsDir) rmSync(this.dir, { recursive: true, force: true });
  }

  /** Clears records, counters and faults (the listening socket stays). */
  reset(): void {
    this.calls.length = 0;
    this.records.length = 0;
    this.onCall = undefined;
    this.streamFault = undefined;
    this.refuseAfterCut = false;
    this.refusing = false;
    this.cuts = 0;
    this.connections = 0;
    this.streamBytes = 0;
    this.streamBytesAtCut = undefined;
    this.blackholes = 0;
  }

  /** Call names in order since the last reset(). */
  get callNames(): string[] {
    return this.calls.map((c) => c.name);
  }

  /** Cuts every open connection (as a dropped network would). */
  cutAll(): void {
    for (const l of [...this.links]) this.cut(l);
  }

  /**
   * Blackholes every open connection: from now on nothing is forwarded in
   * either direction and neither socket is closed; when libvirtd gives up on
   * it and closes, the client is not told (as behind a dead host or a NAT
   * that dropped the flow). The client closing its side still releases the
   * daemon's. New connections are forwarded normally.
   */
  blackholeAll(): void {
    for (const l of this.links) this.blackhole(l);
  }

  private blackhole(link: Link): void {
    if (link.blackholed || link.dead) return;
    link.blackholed = true;
    this.blackholes += 1;
  }

  private accept(client: net.Socket): void {
    const conn = this.connections++;
    if (this.refusing) {
      client.destroy();
      return;
    }
    const daemon = net.createConnection({ path: this.target });
    const link: Link = { conn, client, daemon, cutOnReply: new Set(), dead: false, blackholed: false };
    this.links.add(link);
    const end = (): void => this.close(link);
    client.on("error", end);
    client.on("close", end);
    // Behind a blackhole the client never learns that libvirtd closed.
    const daemonEnd = (): void => {
      if (link.blackholed) daemon.destroy();
      else this.close(link);
    };
    daemon.on("error", daemonEnd);
    daemon.on("close", daemonEnd);
    this.pump(link, client, daemon, (p) => this.fromClient(link, p));
    this.pump(link, daemon, client, (p) => this.fromDaemon(link, p));
  }

  /**
   * Reads packets from `from` and hands each to `handle` in order; a handler
   * that returns a promise (a stall) holds the packets behind it.
   */
  private pump(
    link: Link,
    from: net.Socket,
    to: net.Socket,
    handle: (p: Packet) => Buffer[] | Promise<Buffer[]> | undefined,
  ): void {
    const decoder = new PacketDecoder();
    let chain: Promise<void> = Promise.resolve();
    from.on("data", (chunk: Buffer) => {
      let packets: Packet[];
      try {
        packets = decoder.push(chunk);
      } catch {
        this.cut(link);
        return;
      }
      for (const p of packets) {
        chain = chain.then(async () => {
          if (link.dead) return;
          const out = await handle(p);
          if (link.dead || out === undefined) return;
          let ok = true;
          for (const b of out) ok = to.write(b) && ok;
          if (!ok) {
            // Backpressure: stop reading until the other side drains.
            from.pause();
            to.once("drain", () => from.resume());
          }
        });
      }
    });
  }

  /** Resolves with the first record (past or future) matching `match`. */
  until(match: (r: RelayRecord) => boolean): Promise<RelayRecord> {
    const found = this.records.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ match, resolve }));
  }

  private record(link: Link, direction: RelayRecord["direction"], p: Packet): void {
    const r: RelayRecord = {
      conn: link.conn,
      direction,
      type: p.header.type,
      status: p.header.status,
      name: nameOf(p.header.prog, p.header.proc),
      serial: p.header.serial,
      bodyBytes: p.body.length,
      ...(link.blackholed ? { dropped: true as const } : {}),
    };
    this.records.push(r);
    for (const w of this.waiters.filter((x) => x.match(r))) {
      this.waiters.splice(this.waiters.indexOf(w), 1);
      w.resolve(r);
    }
  }

  private fromClient(link: Link, p: Packet): Buffer[] | Promise<Buffer[]> | undefined {
    this.record(link, "to-daemon", p);
    if (link.blackholed) return undefined;
    const raw = (): Buffer[] => [encodeHeader(p.header, p.body.length), p.body];
    if (p.header.type === PacketType.STREAM) return this.streamPacket(link, p, raw);
    if (p.header.type !== PacketType.CALL) return raw();
    const call: RelayCall = {
      index: this.calls.length,
      conn: link.conn,
      name: nameOf(p.header.prog, p.header.proc),
      serial: p.header.serial,
    };
    this.calls.push(call);
    const fault = this.onCall?.(call);
    if (fault === undefined) return raw();
    switch (fault.kind) {
      case "blackhole":
        this.blackhole(link);
        return undefined;
      case "cut":
        if (fault.mode === "before") {
          this.cut(link);
          return undefined;
        }
        link.cutOnReply.add(p.header.serial);
        return raw();
      case "stall":
        setTimeout(() => {
          if (link.dead || link.blackholed) return;
          for (const b of raw()) link.daemon.write(b);
        }, fault.ms);
        return undefined;
      case "error": {
        const w = new XdrWriter();
        writeRemoteError(w, {
          code: fault.code,
          domain: fault.domain,
          message: fault.message,
          level: 2,
          str1: fault.message,
          str2: null,
          str3: null,
          int1: -1,
          int2: -1,
        });
        const reply: Packet = {
          header: { ...p.header, type: PacketType.REPLY, status: PacketStatus.ERROR },
          body: w.finish(),
        };
        this.record(link, "to-client", reply);
        link.client.write(encodePacket(reply.header, reply.body));
        return undefined;
      }
    }
  }

  private streamPacket(link: Link, p: Packet, raw: () => Buffer[]): Buffer[] | undefined {
    const fault = this.streamFault;
    const isData = p.header.status === PacketStatus.CONTINUE;
    if (fault?.kind === "cut-at-byte" && isData) {
      const room = fault.atByte - this.streamBytes;
      if (room < p.body.length) {
        this.streamFault = undefined;
        if (room <= 0) {
          // At a packet boundary: nothing of this packet leaves.
          this.cut(link);
          return undefined;
        }
        // The part before the cut reaches the daemon, then the line drops mid-packet.
        this.streamBytes += room;
        this.cut(link, Buffer.concat(raw()).subarray(0, 28 + room));
        return undefined;
      }
    }
    if (fault !== undefined && !isData && p.header.status === PacketStatus.OK) {
      // The finish packet: every data byte went through.
      const cutNow = fault.kind === "cut-at-byte" || fault.mode === "before";
      this.streamFault = undefined;
      if (cutNow) {
        this.cut(link);
        return undefined;
      }
      link.cutOnReply.add(p.header.serial);
      return raw();
    }
    if (isData) this.streamBytes += p.body.length;
    return raw();
  }

  private fromDaemon(link: Link, p: Packet): Buffer[] | undefined {
    this.record(link, "to-client", p);
    if (link.blackholed) return undefined;
    const isReply = p.header.type === PacketType.REPLY || p.header.type === PacketType.STREAM;
    if (isReply && link.cutOnReply.has(p.header.serial)) {
      this.cut(link);
      return undefined;
    }
    return [encodeHeader(p.header, p.body.length), p.body];
  }

  /** Cuts both sockets; `last` (part of a packet) still reaches the daemon first. */
  private cut(link: Link, last?: Buffer): void {
    if (link.dead) return;
    this.cuts += 1;
    this.streamBytesAtCut = this.streamBytes;
    if (this.refuseAfterCut) this.refusing = true;
    // Dead at once: nothing queued behind the cut may be forwarded while `last` drains.
    link.dead = true;
    if (last === undefined) this.close(link);
    else link.daemon.write(last, () => this.close(link));
  }

  private close(link: Link): void {
    link.dead = true;
    this.links.delete(link);
    link.client.destroy();
    link.daemon.destroy();
  }
}
