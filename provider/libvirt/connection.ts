import { ProviderError } from "../errors";
import type { Transport } from "../transport/types";
import { type CallRequest, RpcClient } from "./client";
import { AuthType, DrvFeature, PACKET_HEADER_SIZE } from "./constants";
import { type ConnectionClosedError, LibvirtError, ProtocolError } from "./errors";
import { Keepalive, type KeepaliveClock, type KeepaliveOptions } from "./keepalive";
import { type Procedure, Procedures } from "./procedures";
import { summarizeArgs, type TraceHook } from "./trace";
import { type UploadOptions, type UploadSource, uploadStream } from "./upload";
import { XdrReader, XdrWriter } from "./xdr";

export interface CallOptions {
  /** Deadline for this call's reply in ms (default: the connection's callTimeoutMs). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Something that can run typed procedures: what the Libvirt facade needs. */
export interface RpcCaller {
  call<A, R>(proc: Procedure<A, R>, args: A, options?: CallOptions): Promise<R>;
  /** Runs a procedure that opens an upload stream and feeds it `source`; resolves with bytes sent. */
  upload<A>(
    proc: Procedure<A, void>,
    args: A,
    source: UploadSource,
    options?: UploadOptions,
  ): Promise<number>;
  /**
   * Runs a procedure that opens a read stream; the server's data goes to
   * `onData` until the stream ends or the returned handle closes it.
   */
  readStream<A>(
    proc: Procedure<A, void>,
    args: A,
    onData: (chunk: Buffer) => void,
    options?: CallOptions,
  ): Promise<ReadStream>;
}

/** A read stream in progress. */
export interface ReadStream {
  /** Resolves when the stream has ended, with its failure if any. */
  ended(): Promise<Error | null>;
  /** Ends it from this side (never throws). */
  close(): Promise<void>;
}

export interface LibvirtConnectionOptions {
  transport: Transport;
  /** Driver URI passed to connect_open (default 'qemu:///system'). */
  uri?: string;
  /** Default per-call deadline in ms (default 60 s). */
  callTimeoutMs?: number;
  /** Invoked once per call after it settles (including the handshake calls). Must not throw. */
  onCall?: TraceHook;
  /**
   * libvirt keepalive (keepalive.ts), when the daemon supports it: a daemon
   * silent for intervalMs × count (default 5 s × 3) is declared dead, the
   * calls on it fail transiently and the next call reconnects. false: off.
   */
  keepalive?: KeepaliveOptions | false;
  /** The keepalive's timers (tests). */
  keepaliveClock?: KeepaliveClock;
}

const DEFAULT_URI = "qemu:///system";
const CLOSE_TIMEOUT_MS = 5_000;

/** Encodes args, runs the call, decodes and checks the reply. */
function invoke<A, R>(client: RpcClient, proc: Procedure<A, R>, args: A, opts: CallOptions): Promise<R> {
  let req: CallRequest;
  try {
    req = request(proc, args, opts);
  } catch (err) {
    return Promise.reject(err);
  }
  return client.call(req).then((body) => decodeReply(proc, body));
}

function request<A, R>(proc: Procedure<A, R>, args: A, opts: CallOptions): CallRequest {
  // Headroom for the packet header: the client writes it in place and sends one buffer.
  const w = new XdrWriter(256, PACKET_HEADER_SIZE);
  proc.encodeArgs(w, args);
  const frame = w.finishFrame();
  return {
    program: proc.program,
    version: proc.version,
    proc: proc.proc,
    body: frame.subarray(PACKET_HEADER_SIZE),
    frame,
    call: proc.call,
    timeoutMs: opts.timeoutMs,
    signal: opts.signal,
  };
}

function decodeReply<A, R>(proc: Procedure<A, R>, body: Buffer): R {
  try {
    const r = new XdrReader(body);
    const value = proc.decodeReply(r);
    r.end();
    return value;
  } catch (err) {
    if (err instanceof ProtocolError) throw new ProtocolError(`reply to ${proc.call}: ${err.message}`);
    throw err;
  }
}

/**
 * One logical connection to a libvirt driver (transport + driver URI).
 *
 * It connects lazily on the first call (auth_list, then connect_open), shares
 * one RpcClient between all callers (concurrent first callers share a single
 * handshake), and after the stream drops it reconnects on the next call. Calls
 * in flight when the stream drops fail with a transient ConnectionClosedError;
 * they are not replayed, since libvirt calls are not all idempotent.
 */
export class LibvirtConnection implements RpcCaller {
  readonly uri: string;
  private readonly transport: Transport;
  private readonly callTimeoutMs: number | undefined;
  private readonly onCall: TraceHook | undefined;
  private readonly keepaliveOptions: KeepaliveOptions | false;
  private readonly keepaliveClock: KeepaliveClock | undefined;
  private client: RpcClient | null = null;
  private keepaliveOf: { client: RpcClient; keepalive: Keepalive } | null = null;
  private connecting: Promise<RpcClient> | null = null;
  private closed = false;
  private connects = 0;

  constructor(options: LibvirtConnectionOptions) {
    this.transport = options.transport;
    this.uri = options.uri ?? DEFAULT_URI;
    this.callTimeoutMs = options.callTimeoutMs;
    this.onCall = options.onCall;
    this.keepaliveOptions = options.keepalive ?? {};
    this.keepaliveClock = options.keepaliveClock;
  }

  /** e.g. 'qemu:///system via unix:/var/run/libvirt/libvirt-sock'. */
  get description(): string {
    return `${this.uri} via ${this.transport.description}`;
  }

  /** True while an open RpcClient exists (for tests and diagnostics). */
  get connected(): boolean {
    return this.client !== null && !this.client.closed;
  }

  /**
   * How many times this connection has connected (0 before the first): what
   * a handle cached per connection (a storage pool's) is keyed on.
   */
  get generation(): number {
    return this.connects;
  }

  /** The current stream's keepalive; undefined when not connected or the daemon has none. */
  get keepalive(): Keepalive | undefined {
    const k = this.keepaliveOf;
    return k !== null && k.client === this.client && !k.client.closed ? k.keepalive : undefined;
  }

  call<A, R>(proc: Procedure<A, R>, args: A, options: CallOptions = {}): Promise<R> {
    const client = this.client;
    // Connected: call straight away, without waiting a turn for getClient()'s promise.
    if (client !== null && !client.closed && !this.closed) return this.callOn(client, proc, args, options);
    return this.getClient().then((c) => this.callOn(c, proc, args, options));
  }

  private callOn<A, R>(client: RpcClient, proc: Procedure<A, R>, args: A, options: CallOptions): Promise<R> {
    // No withDefaults(): the client was made with callTimeoutMs as its default deadline.
    if (!this.onCall) return invoke(client, proc, args, options);
    return this.traced(proc, args, () => invoke(client, proc, args, options));
  }

  async upload<A>(
    proc: Procedure<A, void>,
    args: A,
    source: UploadSource,
    options: UploadOptions = {},
  ): Promise<number> {
    const client = await this.getClient();
    const opts = { ...options, timeoutMs: options.timeoutMs ?? this.callTimeoutMs };
    let bytes = 0;
    return this.traced(
      proc,
      args,
      async () => {
        bytes = await uploadStream(client, request(proc, args, opts), source, opts);
        return bytes;
      },
      () => bytes,
    );
  }

  async readStream<A>(
    proc: Procedure<A, void>,
    args: A,
    onData: (chunk: Buffer) => void,
    options: CallOptions = {},
  ): Promise<ReadStream> {
    const client = await this.getClient();
    const opts = { ...options, timeoutMs: options.timeoutMs ?? this.callTimeoutMs };
    const stream = await this.traced(proc, args, () => client.startRead(request(proc, args, opts), onData));
    return { ended: () => stream.whenEnded(), close: () => stream.abort() };
  }

  /**
   * Sends connect_close (so the daemon releases the driver connection), then
   * closes the stream and the transport. Later calls fail permanently.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const client = this.connecting ? await this.connecting.catch(() => null) : this.client;
    this.client = null;
    if (client && !client.closed) {
      try {
        await this.traced(Procedures.connectClose, undefined, () =>
          invoke(client, Procedures.connectClose, undefined, { timeoutMs: CLOSE_TIMEOUT_MS }),
        );
      } catch {
        // Best effort: the stream is closed below either way.
      }
      client.close();
    }
    await this.transport.close();
  }

  private withDefaults(options: CallOptions): CallOptions {
    return { ...options, timeoutMs: options.timeoutMs ?? this.callTimeoutMs };
  }

  private getClient(): Promise<RpcClient> {
    if (this.closed) {
      return Promise.reject(new ProviderError("permanent", `connection to ${this.description} was closed`));
    }
    if (this.client && !this.client.closed) return Promise.resolve(this.client);
    if (!this.connecting) {
      this.connecting = this.connect().finally(() => {
        this.connecting = null;
      });
    }
    return this.connecting;
  }

  private async connect(): Promise<RpcClient> {
    const stream = await this.transport.open();
    const client = new RpcClient(stream, { defaultTimeoutMs: this.callTimeoutMs });
    try {
      const opts = this.withDefaults({});
      const types = await this.traced(Procedures.authList, undefined, () =>
        invoke(client, Procedures.authList, undefined, opts),
      );
      // An empty list means the daemon wants no authentication, like a list holding 'none'.
      if (types.length > 0 && !types.includes(AuthType.NONE)) {
        const names = types.map((t) =>
          t === AuthType.SASL ? "sasl" : t === AuthType.POLKIT ? "polkit" : `${t}`,
        );
        throw new ProviderError(
          "permanent",
          `libvirtd at ${this.transport.description} requires ${names.join("/")} authentication; ` +
            "this client only supports 'none' (connect as root on the unix socket, or over SSH as root)",
        );
      }
      await this.traced(Procedures.connectOpen, { name: this.uri, flags: 0 }, () =>
        invoke(client, Procedures.connectOpen, { name: this.uri, flags: 0 }, opts),
      );
      if (this.keepaliveOptions !== false) await this.startKeepalive(client, opts);
    } catch (err) {
      client.close();
      throw err;
    }
    if (this.closed) {
      client.close();
      throw new ProviderError("permanent", `connection to ${this.description} was closed`);
    }
    client.onClose(() => {
      if (this.client === client) this.client = null;
    });
    this.client = client;
    this.connects++;
    return client;
  }

  /**
   * Asks libvirtd whether it speaks the keepalive program (which also starts
   * its own PINGs to us, as for libvirt's client) and, if so, starts ours.
   * libvirt's client asks before connect_open; libvirtd answers it after too
   * and starts the same pings (test/libvirtd/reliability/keepalive.test.ts).
   */
  private async startKeepalive(client: RpcClient, opts: CallOptions): Promise<void> {
    const args = { feature: DrvFeature.PROGRAM_KEEPALIVE };
    const supported = await this.traced(Procedures.connectSupportsFeature, args, () =>
      invoke(client, Procedures.connectSupportsFeature, args, opts),
    ).catch((err: unknown) => {
      // A daemon that cannot answer has no keepalive; a dropped stream still fails the connect.
      if (err instanceof LibvirtError) return false;
      throw err;
    });
    if (!supported || this.keepaliveOptions === false) return;
    const dead = (err: ConnectionClosedError): void => {
      client.close(err);
      // Over SSH the session under the channel is most likely dead too: the next call opens a new one.
      this.transport.close().catch(() => {});
    };
    const keepalive = new Keepalive(
      client,
      this.description,
      dead,
      this.keepaliveOptions,
      this.keepaliveClock,
    );
    keepalive.start();
    this.keepaliveOf = { client, keepalive };
  }

  private async traced<A, R>(
    proc: Procedure<A, unknown>,
    args: A,
    run: () => Promise<R>,
    bytes?: () => number,
  ): Promise<R> {
    if (!this.onCall) return run();
    const started = performance.now();
    let error: Error | undefined;
    try {
      return await run();
    } catch (err) {
      error = err as Error;
      throw err;
    } finally {
      try {
        this.onCall({
          call: proc.call,
          args: summarizeArgs(args),
          durationMs: performance.now() - started,
          ...(error ? { error } : {}),
          ...(bytes ? { bytes: bytes() } : {}),
        });
      } catch {
        // A broken trace hook must not break libvirt calls.
      }
    }
  }
}
