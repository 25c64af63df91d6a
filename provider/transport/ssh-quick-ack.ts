/**
 * No delayed-ACK stall at the end of an upload over SSH (bench/notes.md,
 * "Scaling"): measured on one connection, a 360 KiB upload waited about
 * 40 ms, sometimes 80, for libvirtd's confirmation.
 *
 * Two things hold it back, one on each side of the TCP connection:
 * - ours: the stream's end packet (and a short last data segment) waits in
 *   our kernel under Nagle's algorithm until the data before it is
 *   acknowledged, which sshd's kernel may delay;
 * - sshd's: OpenSSH sends a CHANNEL_WINDOW_ADJUST once it has consumed
 *   3 x 32 KiB of the channel. Under Nagle on sshd's socket, libvirtd's reply
 *   then waits behind that small unacknowledged segment until our kernel's
 *   delayed ACK fires (40 ms), since we send nothing in between.
 * {@link QuickAck.begin} (called by the RPC layer before an upload's end
 * packet, through the stream's `awaitReply`) turns TCP_NODELAY on, so what
 * is queued goes out at once, and answers each WINDOW_ADJUST that arrives
 * meanwhile with an SSH_MSG_IGNORE, whose segment carries our ACK at once.
 * TCP_NODELAY goes off again with the first bytes that arrive after the reply
 * (the next call, sent meanwhile, is not held behind our unacknowledged
 * IGNORE either). Neither alone removed the wait (bench/notes.md); RPC calls
 * never use it, so their rates are those of Nagle.
 *
 * ssh2 has no public way to send SSH_MSG_IGNORE or to see WINDOW_ADJUST
 * messages: this reaches into ssh2 1.17's Protocol object (pinned in
 * package.json; test/unit/transport/quick-ack.test.ts checks the IGNORE
 * reaches a server). Without those internals only the TCP_NODELAY half works.
 */
import type { Socket } from "node:net";
import type { Client } from "ssh2";

const SSH_MSG_IGNORE = 2;

interface PacketWriter {
  allocStart: number;
  alloc(size: number): Buffer;
  finalize(packet: Buffer): Buffer;
}

interface ProtocolInternals {
  _packetRW?: { write?: PacketWriter };
  _handlers?: Record<string, unknown>;
}

interface ClientInternals {
  _protocol?: ProtocolInternals;
  _sock?: Socket;
}

type SendPacket = (proto: unknown, packet: Buffer) => void;

function loadSendPacket(): SendPacket | undefined {
  try {
    // An internal module of ssh2 (its package has no exports map, so the path resolves).
    const utils = require("ssh2/lib/protocol/utils.js") as { sendPacket?: unknown };
    return typeof utils.sendPacket === "function" ? (utils.sendPacket as SendPacket) : undefined;
  } catch {
    return undefined;
  }
}

const sendPacket = loadSendPacket();

export class QuickAck {
  #active = 0;
  /** SSH_MSG_IGNORE packets sent (tests). */
  ignoresSent = 0;
  readonly #socket: Socket | undefined;
  readonly #proto: ProtocolInternals | undefined;

  /** Hooks into a connected ssh2 client (call once, after 'ready'). */
  constructor(client: Client) {
    const c = client as unknown as ClientInternals;
    // Through a jump host the client runs over a channel, not a TCP socket: no TCP_NODELAY to set.
    this.#socket = typeof c._sock?.setNoDelay === "function" ? c._sock : undefined;
    this.#proto = c._protocol;
    const handlers = this.#proto?._handlers;
    const original = handlers?.CHANNEL_WINDOW_ADJUST;
    if (handlers && typeof original === "function" && this.#canIgnore()) {
      handlers.CHANNEL_WINDOW_ADJUST = (...args: unknown[]) => {
        (original as (...a: unknown[]) => void)(...args);
        if (this.#active > 0) this.#sendIgnore();
      };
    }
  }

  /** True when both halves work with this ssh2 (the IGNORE half needs its internals). */
  get complete(): boolean {
    return this.#canIgnore() && this.#socket !== undefined;
  }

  /**
   * Until the returned function is called (once the awaited reply is in):
   * queued bytes go out at once, and window adjustments are acknowledged at once.
   */
  begin(): () => void {
    this.#active++;
    this.#socket?.setNoDelay(true);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#active--;
      if (this.#active > 0) return;
      const socket = this.#socket;
      socket?.once("data", () => {
        if (this.#active === 0 && !socket.destroyed) socket.setNoDelay(false);
      });
    };
  }

  #canIgnore(): boolean {
    const w = this.#proto?._packetRW?.write;
    return sendPacket !== undefined && w !== undefined && typeof w.alloc === "function";
  }

  #sendIgnore(): void {
    const w = this.#proto?._packetRW?.write;
    if (!w || !sendPacket) return;
    try {
      const p = w.allocStart;
      // byte SSH_MSG_IGNORE, string data (empty)
      const packet = w.alloc(5);
      packet[p] = SSH_MSG_IGNORE;
      packet.writeUInt32BE(0, p + 1);
      sendPacket(this.#proto, w.finalize(packet));
      this.ignoresSent++;
    } catch {
      // An optimisation only: the reply still comes, 40 ms later.
    }
  }
}
