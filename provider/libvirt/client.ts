import type { Duplex } from "node:stream";
import { ProviderError, TimeoutError } from "../errors";
import { later, timerDelay } from "../timers";
import { awaitReply } from "../transport/types";
import { decodeError } from "./codec";
import { PACKET_HEADER_SIZE, PacketStatus, PacketType } from "./constants";
import { ConnectionClosedError, ProtocolError } from "./errors";
import { encodeHeader, encodePacket, type Packet, PacketDecoder, sealPacket } from "./packet";

/** The setting that gives each call its deadline, as a timeout names it (the host config's `callTimeout`). */
const CALL_TIMEOUT_SETTING = "the host's callTimeout";

/** One call as the RPC layer sees it: numbers, encoded args, and a name for errors. */
export interface CallRequest {
  program: number;
  version: number;
  proc: number;
  /** Encoded args (XDR). */
  body: Buffer;
  /**
   * Optional: the same bytes as `body` preceded by PACKET_HEADER_SIZE free
   * bytes, in one buffer (XdrWriter's headroom). The header is then written in
   * place and the packet goes out without another allocation or copy.
   */
  frame?: Buffer;
  /** Public libvirt name, used in errors and timeouts, e.g. 'virDomainLookupByName'. */
  call: string;
  /** Deadline for the reply; defaults to the client's defaultTimeoutMs. 0 disables it. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RpcClientOptions {
  /** Default per-call deadline in ms (default 60 s). */
  defaultTimeoutMs?: number;
}

interface Pending {
  call: string;
  program: number;
  /** The promise's own functions: settle through RpcClient.resolveEntry/rejectEntry. */
  resolve: (body: Buffer) => void;
  reject: (err: Error) => void;
  settled: boolean;
  /** When the reply is due, on the client's clock; 0 when the call has no deadline or has settled. */
  deadline: number;
  timeoutMs: number;
  signal?: AbortSignal;
  onAbort?: () => void;
  /** Set for stream calls: packets for this serial after the reply go to it. */
  stream?: OutgoingStream;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const U32_MAX = 0xffff_ffff;

/**
 * Speaks libvirt's RPC framing over one byte stream: many calls in flight,
 * replies matched by serial. It knows nothing about procedures beyond numbers
 * and a name; typing lives in procedures.ts.
 *
 * When the stream ends or fails every pending call is rejected at once with a
 * transient ConnectionClosedError; the client is then dead (callers make a new
 * one). close() sends nothing: ending a libvirt connection politely is the
 * connect_close procedure, which is the caller's business.
 */
export class RpcClient {
  private readonly decoder = new PacketDecoder();
  private readonly pending = new Map<number, Pending>();
  private readonly closeListeners: ((err: Error) => void)[] = [];
  private nextSerial = 1;
  private failure: Error | null = null;
  /** performance.now() when bytes last arrived: the keepalive's measure of life (one write per chunk). */
  lastInboundAt = performance.now();
  /** Receives MESSAGE packets (keepalive, events); without it they are dropped. */
  onMessage: ((p: Packet) => void) | undefined;
  private readonly defaultTimeoutMs: number;
  /**
   * One timer for every deadline (not one per call): it is due at the earliest
   * deadline known when it was armed, and each firing rejects what is overdue
   * and re-arms for the next. A call settling leaves it alone, so a busy
   * connection arms about one timer per timeout period, not one per call.
   */
  private timer: NodeJS.Timeout | null = null;
  private timerDue = 0;
  /** Calls with a deadline awaiting their reply; the timer holds the process open only while there are some. */
  private armed = 0;

  constructor(
    private readonly stream: Duplex,
    options: RpcClientOptions = {},
  ) {
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
    stream.on("data", (chunk: Buffer) => this.onData(chunk));
    stream.on("error", (err: Error) =>
      this.fail(new ConnectionClosedError(`connection to libvirtd failed: ${err.message}`, { cause: err })),
    );
    stream.on("end", () => this.fail(new ConnectionClosedError("connection to libvirtd closed by the peer")));
    stream.on("close", () => this.fail(new ConnectionClosedError("connection to libvirtd closed")));
  }

  /** True once the stream has ended or close() was called. */
  get closed(): boolean {
    return this.failure !== null;
  }

  /** Number of calls and streams awaiting the server. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** Runs `listener` once when the client dies, with the error pending calls were rejected with. */
  onClose(listener: (err: Error) => void): void {
    if (this.failure) listener(this.failure);
    else this.closeListeners.push(listener);
  }

  /** Sends a CALL and resolves with the REPLY body; rejects with LibvirtError, TimeoutError or ConnectionClosedError. */
  call(req: CallRequest): Promise<Buffer> {
    return this.send(req);
  }

  /**
   * Starts a call that opens an upload stream (e.g. storage_vol_upload): sends
   * the CALL, waits for its REPLY, and returns the stream to write data into.
   */
  async startUpload(req: CallRequest): Promise<OutgoingStream> {
    const stream = new OutgoingStream(this, req);
    await this.send(req, stream);
    return stream;
  }

  /**
   * Starts a call that opens a read stream (e.g. domain_open_console): sends
   * the CALL, waits for its REPLY; the server's data packets then go to
   * `onData`. The stream's end (or failure) is {@link OutgoingStream.whenEnded}.
   */
  async startRead(req: CallRequest, onData: (chunk: Buffer) => void): Promise<OutgoingStream> {
    const stream = new OutgoingStream(this, req, onData);
    await this.send(req, stream);
    return stream;
  }

  /** Destroys the stream; pending calls reject with `reason` (a ConnectionClosedError by default). Sends nothing. */
  close(reason?: Error): void {
    this.fail(reason ?? new ConnectionClosedError("connection to libvirtd closed by the client"));
  }

  private send(req: CallRequest, stream?: OutgoingStream): Promise<Buffer> {
    if (this.failure) return Promise.reject(this.failure);
    const signal = req.signal;
    if (signal?.aborted) return Promise.reject(abortError(signal, req.call));
    const serial = this.allocateSerial();
    const timeoutMs = req.timeoutMs ?? this.defaultTimeoutMs;
    return new Promise<Buffer>((resolve, reject) => {
      const entry: Pending = {
        call: req.call,
        program: req.program,
        resolve,
        reject,
        settled: false,
        deadline: 0,
        timeoutMs,
      };
      if (stream) {
        entry.stream = stream;
        stream.attach(serial);
      }
      this.pending.set(serial, entry);
      if (timeoutMs > 0) this.arm(entry, timeoutMs);
      if (signal) {
        const onAbort = (): void => {
          if (this.pending.get(serial) === entry) this.pending.delete(serial);
          this.rejectEntry(entry, abortError(signal, req.call));
        };
        entry.signal = signal;
        entry.onAbort = onAbort;
        signal.addEventListener("abort", onAbort, { once: true });
      }
      try {
        this.stream.write(callPacket(req, serial));
      } catch (err) {
        this.pending.delete(serial);
        this.rejectEntry(entry, err instanceof Error ? err : new ProviderError("permanent", String(err)));
      }
    });
  }

  private resolveEntry(entry: Pending, body: Buffer): void {
    if (this.settle(entry)) entry.resolve(body);
  }

  private rejectEntry(entry: Pending, err: Error): void {
    if (this.settle(entry)) entry.reject(err);
  }

  /** Marks `entry` settled and drops its deadline and abort listener; false if it already was. */
  private settle(entry: Pending): boolean {
    if (entry.settled) return false;
    entry.settled = true;
    if (entry.deadline !== 0) {
      entry.deadline = 0;
      // Idle: let the process exit although the timer is still armed.
      if (--this.armed === 0) this.timer?.unref();
    }
    if (entry.onAbort) entry.signal?.removeEventListener("abort", entry.onAbort);
    return true;
  }

  private arm(entry: Pending, timeoutMs: number): void {
    const now = performance.now();
    entry.deadline = now + timeoutMs;
    this.armed++;
    if (this.timer === null) this.schedule(entry.deadline, now);
    else if (entry.deadline < this.timerDue) {
      clearTimeout(this.timer);
      this.schedule(entry.deadline, now);
    } else if (this.armed === 1) this.timer.ref();
  }

  private schedule(due: number, now: number): void {
    // When the timer fires: `due`, or sooner when its delay is clamped (timers.ts); the sweep then re-arms.
    const delay = timerDelay(due - now);
    this.timerDue = now + delay;
    this.timer = later(() => this.sweep(), delay);
  }

  /** The timer fired: rejects every overdue call with a TimeoutError naming it, re-arms for the next deadline. */
  private sweep(): void {
    this.timer = null;
    // A timer does not fire before its delay has passed, even if the clock reads a little earlier (rounding, fake timers).
    const now = Math.max(performance.now(), this.timerDue);
    let next = Number.POSITIVE_INFINITY;
    for (const [serial, e] of this.pending) {
      if (e.deadline === 0) continue;
      if (e.deadline <= now) {
        // A late reply finds no entry and is dropped.
        this.pending.delete(serial);
        // The client's default deadline is the host's `callTimeout` setting; a call's own one is the caller's.
        const setting = e.timeoutMs === this.defaultTimeoutMs ? CALL_TIMEOUT_SETTING : undefined;
        this.rejectEntry(e, new TimeoutError(`reply to ${e.call}`, e.timeoutMs, setting));
      } else if (e.deadline < next) next = e.deadline;
    }
    if (next !== Number.POSITIVE_INFINITY) this.schedule(next, now);
  }

  private allocateSerial(): number {
    // Serials are uint32; skip any still in use after a wrap.
    for (;;) {
      const s = this.nextSerial;
      this.nextSerial = s >= U32_MAX ? 1 : s + 1;
      if (!this.pending.has(s)) return s;
    }
  }

  /** @internal Writes one packet made of header + pieces; resolves when the transport can take more. */
  writePacket(header: Parameters<typeof encodeHeader>[0], pieces: readonly Buffer[]): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    let len = 0;
    for (const p of pieces) len += p.length;
    // Header and pieces go out in one synchronous run, so no other packet can interleave.
    let ok = this.stream.write(encodeHeader(header, len));
    for (const p of pieces) ok = this.stream.write(p);
    if (ok) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const done = (err?: Error): void => {
        this.stream.off("drain", onDrain);
        this.stream.off("close", onClose);
        if (err) reject(err);
        else resolve();
      };
      const onDrain = (): void => done();
      const onClose = (): void =>
        done(this.failure ?? new ConnectionClosedError("connection to libvirtd closed"));
      this.stream.on("drain", onDrain);
      this.stream.on("close", onClose);
    });
  }

  /** @internal A reply is awaited with nothing more to send: the transport must not hold the end back (types.ts). */
  readonly awaitReply = (): (() => void) => awaitReply(this.stream);

  /** @internal Stops routing packets for a finished stream. */
  release(serial: number): void {
    this.pending.delete(serial);
  }

  private onData(chunk: Buffer): void {
    if (this.failure) return;
    this.lastInboundAt = performance.now();
    let packets: Packet[];
    try {
      packets = this.decoder.push(chunk);
    } catch (err) {
      // Framing is lost: nothing later on this stream can be trusted.
      this.fail(err as Error);
      return;
    }
    for (const p of packets) this.dispatch(p);
  }

  private dispatch(p: Packet): void {
    const { header } = p;
    // MESSAGE packets answer no call (keepalive, events). Anything else we did
    // not ask for is dropped; a reply whose call already timed out lands here too.
    if (header.type === PacketType.MESSAGE) {
      this.onMessage?.(p);
      return;
    }
    const entry = this.pending.get(header.serial);
    if (!entry) return;
    if (entry.stream?.started) {
      entry.stream.onPacket(p);
      return;
    }
    if (header.type !== PacketType.REPLY && header.type !== PacketType.REPLY_WITH_FDS) return;
    if (header.prog !== entry.program) {
      this.pending.delete(header.serial);
      this.rejectEntry(
        entry,
        new ProtocolError(`reply to ${entry.call} carries program 0x${header.prog.toString(16)}`),
      );
      return;
    }
    if (header.status === PacketStatus.OK) {
      // Stream calls keep their serial: stream packets follow.
      if (entry.stream) entry.stream.started = true;
      else this.pending.delete(header.serial);
      this.resolveEntry(entry, p.body);
      return;
    }
    this.pending.delete(header.serial);
    this.rejectEntry(entry, decodeError(p.body, entry.call));
  }

  private fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const entries = [...this.pending.values()];
    this.pending.clear();
    for (const e of entries) {
      if (e.stream?.started) e.stream.onConnectionLost(err);
      else this.rejectEntry(e, err);
    }
    if (!this.stream.destroyed) this.stream.destroy();
    for (const l of this.closeListeners.splice(0)) l(err);
  }
}

/** The CALL packet for `req`: its frame sealed in place when it has one, else header and body copied together. */
function callPacket(req: CallRequest, serial: number): Buffer {
  const header = {
    prog: req.program,
    vers: req.version,
    proc: req.proc,
    type: PacketType.CALL,
    serial,
    status: PacketStatus.OK,
  };
  const frame = req.frame;
  if (frame !== undefined && frame.length === req.body.length + PACKET_HEADER_SIZE) {
    return sealPacket(header, frame);
  }
  return encodePacket(header, req.body);
}

function abortError(signal: AbortSignal, call: string): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason;
  return new ProviderError("permanent", `${call} aborted`);
}

/**
 * A libvirt stream (STREAM packets carrying the call's serial). Upload: data
 * packets have status CONTINUE; finish() sends OK and waits for the server's
 * confirmation; abort() sends ERROR. Read (with `onData`): the server's data
 * packets go to it until the server ends the stream or abort() ends it here.
 *
 * libvirtd reports a failed write either as a STREAM ERROR or as a REPLY
 * ERROR for the serial (remote_daemon_stream.c uses both); either fails the
 * stream with the decoded LibvirtError.
 */
export class OutgoingStream {
  /** @internal True once the CALL's REPLY OK arrived. */
  started = false;
  private serial = 0;
  private error: Error | null = null;
  private ended = false;
  private waiter: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private endWaiters: ((err: Error | null) => void)[] = [];
  private done: { err: Error | null } | undefined;

  constructor(
    private readonly client: RpcClient,
    private readonly req: CallRequest,
    /** For a read stream: receives the server's data. */
    private readonly onData?: (chunk: Buffer) => void,
  ) {}

  /** Resolves when the stream has ended (the server's end, an abort, a lost connection), with its failure if any. */
  whenEnded(): Promise<Error | null> {
    if (this.done !== undefined) return Promise.resolve(this.done.err);
    return new Promise((resolve) => this.endWaiters.push(resolve));
  }

  /** @internal */
  attach(serial: number): void {
    this.serial = serial;
  }

  /** The server's or connection's error, once the stream has failed. */
  get failure(): Error | null {
    return this.error;
  }

  /** Sends one data packet made of `pieces` (total below the packet maximum). */
  async write(pieces: readonly Buffer[]): Promise<void> {
    if (this.error) throw this.error;
    if (this.ended) throw new ProviderError("permanent", `${this.req.call}: write after the stream ended`);
    await this.client.writePacket(this.header(PacketStatus.CONTINUE), pieces);
    if (this.error) throw this.error;
  }

  /** Ends the stream and waits for the server to confirm everything was written. */
  async finish(timeoutMs = this.req.timeoutMs ?? DEFAULT_TIMEOUT_MS): Promise<void> {
    if (this.error) throw this.error;
    this.ended = true;
    const confirmed = this.waitForConfirmation(timeoutMs, `confirmation of ${this.req.call}`);
    // Handled here too: when the write below fails, nobody awaits it.
    confirmed.catch(() => {});
    const replied = this.client.awaitReply();
    try {
      await this.client.writePacket(this.header(PacketStatus.OK), []);
      await confirmed;
    } finally {
      replied();
    }
  }

  /** Tells the server to discard the stream; waits briefly for its acknowledgement, never throws. */
  async abort(timeoutMs = 5_000): Promise<void> {
    // After a server-side error the server has already dropped the stream.
    if (this.ended || this.error || this.client.closed) {
      this.client.release(this.serial);
      this.markDone(this.error);
      return;
    }
    this.ended = true;
    // Ended by us: the server's acknowledgement (an error reply, "stream aborted at client request") is no failure.
    this.markDone(null);
    const acknowledged = this.waitForConfirmation(timeoutMs, `abort of ${this.req.call}`).catch(() => {});
    try {
      await this.client.writePacket(this.header(PacketStatus.ERROR), []);
      await acknowledged;
    } catch {
      // The connection is gone; there is nothing left to abort.
    } finally {
      this.client.release(this.serial);
      this.markDone(null);
    }
  }

  private markDone(err: Error | null): void {
    if (this.done !== undefined) return;
    this.done = { err };
    for (const w of this.endWaiters.splice(0)) w(err);
  }

  /** @internal */
  onPacket(p: Packet): void {
    const { type, status } = p.header;
    if (
      this.onData !== undefined &&
      type === PacketType.STREAM &&
      status === PacketStatus.CONTINUE &&
      p.body.length > 0
    ) {
      try {
        this.onData(p.body);
      } catch {
        // A reader that throws loses its data, not the stream.
      }
      return;
    }
    if (status === PacketStatus.ERROR && (type === PacketType.STREAM || type === PacketType.REPLY)) {
      this.settle(decodeError(p.body, this.req.call));
      return;
    }
    // STREAM OK (or an empty CONTINUE) is the server closing its side.
    if (type === PacketType.STREAM && (status === PacketStatus.OK || p.body.length === 0)) {
      if (this.ended || this.onData !== undefined) this.settle(null);
      else
        this.settle(
          new ProtocolError(`${this.req.call}: server ended the stream before the upload finished`),
        );
    }
    // Data packets (download direction) are not expected on an upload; ignored.
  }

  /** @internal */
  onConnectionLost(err: Error): void {
    this.settle(err);
  }

  private settle(err: Error | null): void {
    this.client.release(this.serial);
    if (err && !this.error) this.error = err;
    this.markDone(err);
    const w = this.waiter;
    this.waiter = null;
    if (!w) return;
    if (err) w.reject(err);
    else w.resolve();
  }

  private waitForConfirmation(timeoutMs: number, what: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs > 0) {
        timer = later(() => {
          this.waiter = null;
          reject(new TimeoutError(what, timeoutMs));
        }, timeoutMs);
      }
      this.waiter = {
        resolve: () => {
          if (timer) clearTimeout(timer);
          resolve();
        },
        reject: (e) => {
          if (timer) clearTimeout(timer);
          reject(e);
        },
      };
    });
  }

  private header(status: PacketStatus) {
    return {
      prog: this.req.program,
      vers: this.req.version,
      proc: this.req.proc,
      type: PacketType.STREAM,
      serial: this.serial,
      status,
    };
  }
}
