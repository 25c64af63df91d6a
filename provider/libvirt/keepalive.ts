/**
 * libvirt's keepalive program on one connection (src/rpc/virkeepalive.c is
 * libvirt's own): notices a peer that vanished without closing (a host that
 * lost power, a NAT or firewall that dropped the flow) within a fixed bound,
 * instead of at the next call's deadline.
 *
 * - Any bytes from libvirtd count as life (RpcClient stamps `lastInboundAt`
 *   per chunk), not only PONGs: a busy connection sends no PING at all.
 * - After `intervalMs` without inbound bytes a PING goes out, and again after
 *   each further interval; after `count` intervals without any, the stream is
 *   closed with a transient ConnectionClosedError, which every pending call
 *   receives and after which LibvirtConnection reconnects on the next call.
 * - libvirtd PINGs us as well once we asked connect_supports_feature for the
 *   keepalive program; each PING is answered with a PONG.
 *
 * One timer per connection, re-armed only when it fires; nothing per call.
 */

import { durationText } from "../errors";
import { later } from "../timers";
import {
  KEEPALIVE_PROGRAM,
  KEEPALIVE_PROTOCOL_VERSION,
  KeepaliveProcedure,
  PacketStatus,
  PacketType,
} from "./constants";
import { ConnectionClosedError } from "./errors";
import type { Packet, PacketHeader } from "./packet";

export interface KeepaliveOptions {
  /** Silence after which a PING is sent, and the period of the checks (default 5 s, as libvirt's). */
  intervalMs?: number;
  /** Silent intervals after which the connection is declared dead (default 3: 15 s in all). */
  count?: number;
}

export const KEEPALIVE_DEFAULTS: Required<KeepaliveOptions> = { intervalMs: 5_000, count: 3 };

/** The timers the keepalive uses; injectable for tests. `now` must be the clock of `lastInboundAt`. */
export interface KeepaliveClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realClock: KeepaliveClock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => later(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** What the keepalive needs of a connection: RpcClient has all of it. */
export interface KeepalivePeer {
  readonly lastInboundAt: number;
  onMessage: ((p: Packet) => void) | undefined;
  writePacket(header: PacketHeader, pieces: readonly Buffer[]): Promise<void>;
  onClose(listener: (err: Error) => void): void;
}

/** The bound, in ms, after which a silent peer is declared dead. */
export function keepaliveBoundMs(options: KeepaliveOptions = {}): number {
  const { intervalMs, count } = { ...KEEPALIVE_DEFAULTS, ...options };
  return intervalMs * count;
}

export class Keepalive {
  readonly intervalMs: number;
  readonly count: number;
  private timer: unknown = null;
  /** When the armed timer is due, on the clock. */
  private due = 0;
  private stopped = false;
  /** PINGs sent (for tests and diagnostics). */
  pingsSent = 0;
  /** PONGs sent in answer to the peer's PINGs. */
  pongsSent = 0;

  /**
   * @param dead called once when the peer is declared dead, with the error to
   *   close the connection with (the caller closes the stream and transport).
   */
  constructor(
    private readonly peer: KeepalivePeer,
    private readonly description: string,
    private readonly dead: (err: ConnectionClosedError) => void,
    options: KeepaliveOptions = {},
    private readonly clock: KeepaliveClock = realClock,
  ) {
    this.intervalMs = options.intervalMs ?? KEEPALIVE_DEFAULTS.intervalMs;
    this.count = options.count ?? KEEPALIVE_DEFAULTS.count;
    if (!(this.intervalMs > 0) || !Number.isInteger(this.count) || this.count < 1) {
      throw new RangeError(
        `keepalive needs intervalMs > 0 and count >= 1, got ${this.intervalMs} and ${this.count}`,
      );
    }
  }

  get boundMs(): number {
    return this.intervalMs * this.count;
  }

  /** Answers the peer's PINGs and arms the timer; stops by itself when the connection closes. */
  start(): void {
    const previous = this.peer.onMessage;
    this.peer.onMessage = (p) => {
      if (p.header.prog === KEEPALIVE_PROGRAM) this.onKeepalive(p);
      else previous?.(p);
    };
    this.peer.onClose(() => this.stop());
    if (!this.stopped) this.arm(this.peer.lastInboundAt + this.intervalMs);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
  }

  private onKeepalive(p: Packet): void {
    const { vers, proc } = p.header;
    // PONGs need no handling: their bytes already counted as life.
    if (vers !== KEEPALIVE_PROTOCOL_VERSION || proc !== KeepaliveProcedure.PING || this.stopped) return;
    this.pongsSent++;
    this.send(KeepaliveProcedure.PONG);
  }

  private arm(due: number): void {
    this.due = due;
    this.timer = this.clock.setTimeout(() => this.check(), Math.max(0, due - this.clock.now()));
  }

  private check(): void {
    this.timer = null;
    if (this.stopped) return;
    // Read once: a PING's answer may arrive (and move it) before this method ends.
    const last = this.peer.lastInboundAt;
    // A timer does not fire before its delay, even if the clock reads a little earlier (rounding).
    const silentMs = Math.max(this.clock.now(), this.due) - last;
    if (silentMs >= this.boundMs) {
      this.stop();
      this.dead(
        new ConnectionClosedError(
          `libvirtd at ${this.description} sent nothing for ${durationText(silentMs)} ` +
            `(keepalive: ${this.count} × ${durationText(this.intervalMs)} without a reply); the connection is considered dead`,
        ),
      );
      return;
    }
    if (silentMs >= this.intervalMs) {
      this.pingsSent++;
      this.send(KeepaliveProcedure.PING);
    }
    // The next whole interval of silence; the last one is the bound itself.
    const next = Math.min((Math.floor(silentMs / this.intervalMs) + 1) * this.intervalMs, this.boundMs);
    this.arm(last + next);
  }

  private send(proc: number): void {
    const header = {
      prog: KEEPALIVE_PROGRAM,
      vers: KEEPALIVE_PROTOCOL_VERSION,
      proc,
      type: PacketType.MESSAGE,
      serial: 0,
      status: PacketStatus.OK,
    };
    // A failed write means the stream is going down; its close reaches the pending calls.
    this.peer.writePacket(header, []).catch(() => {});
  }
}
