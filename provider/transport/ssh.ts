/**
 * SSH transport: byte streams to a remote libvirtd over one shared SSH connection.
 *
 * Each open() is a new channel on the same ssh2 Client (connected lazily; callers
 * that arrive while it connects share that attempt; a dropped connection is
 * replaced on the next open). A channel is first asked as OpenSSH
 * `direct-streamlocal@openssh.com` to the daemon's socket; if the server refuses
 * it, the channel is an exec of `virt-ssh-helper <driverUri>` instead (what
 * libvirt's own qemu+ssh does) and later opens on that connection go straight
 * there.
 *
 * A host behind jump hosts (`jump`) is reached through a direct-tcpip channel
 * of the last one; the jump connections are shared by every transport built
 * with the same {@link JumpHosts} registry (jump.ts), and each hop is verified
 * exactly like the target (ssh-hop.ts).
 *
 * strictVendor is off: ssh2 would otherwise only try stream-local forwarding with
 * servers whose banner says OpenSSH. Any server that lacks it must refuse the
 * channel type (RFC 4254 5.1), which lands in the same fallback, so the only cost
 * is one round trip per connection, and compatible non-OpenSSH servers work.
 *
 * OpenSSH answers "forwarding disabled" and "no such socket" alike (reason 2,
 * "open failed"), so any refusal goes to the helper, which also knows hosts
 * whose socket lives elsewhere (modular daemons). If the helper itself fails,
 * the returned stream errors with its stderr.
 */
import type { Duplex } from "node:stream";
import type { Client, ClientChannel } from "ssh2";
import { messageOf, ProviderError, TimeoutError } from "../errors";
import { later } from "../timers";
import { CredentialLoader, type CredentialOptions } from "./credentials";
import { LIBVIRT_DEFAULTS, SSH_TIMING } from "./defaults";
import { hostPort } from "./host-port";
import { type JumpHop, JumpHosts, type JumpLease } from "./jump";
import { connectHop, describeEndpoint, forwardThrough, type SshKeepalive } from "./ssh-hop";
import { QuickAck } from "./ssh-quick-ack";
import type { ReplyHint, Transport } from "./types";

export type { SshKeepalive } from "./ssh-hop";

export interface SshTransportOptions extends CredentialOptions {
  host: string;
  port?: number;
  user?: string;
  /** libvirtd's socket on the remote host, for stream-local forwarding. */
  socketPath?: string;
  /** URI handed to virt-ssh-helper when stream-local forwarding is refused. */
  driverUri?: string;
  /** Deadline for TCP connect + SSH handshake + authentication, and for each channel open. */
  connectTimeoutMs?: number;
  /** false disables keepalives. */
  keepalive?: SshKeepalive | false;
  /** Jump hosts to go through, the first dialled directly (OpenSSH's ProxyJump order). */
  jump?: readonly JumpHop[];
  /** Where jump connections are shared (default: a registry of this transport's own). */
  jumpHosts?: JumpHosts;
  /** false: no quick acknowledgements at an upload's end (ssh-quick-ack.ts); for the benchmark's reference. */
  quickAck?: boolean;
}

export const SSH_DEFAULTS = {
  port: LIBVIRT_DEFAULTS.sshPort,
  user: LIBVIRT_DEFAULTS.sshUser,
  socketPath: LIBVIRT_DEFAULTS.socketPath,
  driverUri: LIBVIRT_DEFAULTS.driverUri,
  connectTimeoutMs: SSH_TIMING.connectTimeoutMs,
  keepalive: SSH_TIMING.keepalive,
} as const;

interface Connection {
  readonly client: Client;
  readonly quickAck: QuickAck;
  closed: boolean;
  /** The server refused direct-streamlocal once: use virt-ssh-helper for the rest of this connection. */
  streamLocalRefused: boolean;
}

/** Quotes one argument for the remote POSIX shell. */
function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

export class SshTransport implements Transport {
  readonly description: string;
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly socketPath: string;
  readonly driverUri: string;
  readonly connectTimeoutMs: number;
  readonly keepalive: SshKeepalive | false;
  readonly jump: readonly JumpHop[];
  readonly #jumpHosts: JumpHosts;
  readonly #quickAck: boolean;
  readonly #credentials: CredentialLoader;
  #current: Connection | undefined;
  #connecting: Promise<Connection> | undefined;

  constructor(options: SshTransportOptions) {
    if (!options.host) throw new ProviderError("permanent", "SSH transport needs a host");
    this.host = options.host;
    this.port = options.port ?? SSH_DEFAULTS.port;
    if (!Number.isInteger(this.port) || this.port < 1 || this.port > 65535) {
      throw new ProviderError("permanent", `invalid SSH port ${options.port}`);
    }
    this.user = options.user ?? SSH_DEFAULTS.user;
    this.socketPath = options.socketPath ?? SSH_DEFAULTS.socketPath;
    this.driverUri = options.driverUri ?? SSH_DEFAULTS.driverUri;
    this.connectTimeoutMs = options.connectTimeoutMs ?? SSH_DEFAULTS.connectTimeoutMs;
    this.keepalive = options.keepalive ?? SSH_DEFAULTS.keepalive;
    this.jump = [...(options.jump ?? [])];
    this.#jumpHosts = options.jumpHosts ?? new JumpHosts();
    this.#quickAck = options.quickAck ?? true;
    this.description = describeEndpoint(this);
    // Reads nothing yet: key and known_hosts files are read at the first connect.
    this.#credentials = new CredentialLoader(options);
  }
  async open(): Promise<Duplex> {
    const conn = await this.#connection();
    try {
      return await this.#openChannel(conn);
    } catch (err) {
      // The connection died under us (idle drop noticed only now): one fresh try.
      if (!conn.closed) throw err;
      return this.#openChannel(await this.#connection());
    }
  }

  async openTcp(host: string, port: number): Promise<Duplex> {
    const conn = await this.#connection();
    const what = hostPort(host, port);
    const r = await this.#channelRequest(conn, what, (cb) =>
      conn.client.forwardOut("127.0.0.1", 0, host, port, cb),
    );
    if (r.channel) return r.channel;
    const err = new ProviderError(
      "transient",
      `${this.description} could not connect to ${what}: ${r.refusal}`,
    );
    // Nothing listens there: said as a direct connection would say it.
    if (/refused|connect failed/i.test(r.refusal ?? "")) Object.assign(err, { code: "ECONNREFUSED" });
    throw err;
  }

  async close(): Promise<void> {
    const pending = this.#connecting;
    if (pending) await pending.catch(() => undefined);
    const conn = this.#current;
    this.#current = undefined;
    if (!conn || conn.closed) return;
    await new Promise<void>((resolve) => {
      // end() sends SSH_MSG_DISCONNECT; give the server a moment to close, then cut.
      const timer = later(() => {
        conn.client.destroy();
        resolve();
      }, 5_000);
      conn.client.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
      conn.client.end();
    });
  }

  #connection(): Promise<Connection> {
    if (this.#current && !this.#current.closed) return Promise.resolve(this.#current);
    if (!this.#connecting) {
      this.#connecting = this.#connect().finally(() => {
        this.#connecting = undefined;
      });
    }
    return this.#connecting;
  }

  async #connect(): Promise<Connection> {
    let lease: JumpLease | undefined;
    let client: Client;
    try {
      let sock: Duplex | undefined;
      if (this.jump.length > 0) {
        const settings = { connectTimeoutMs: this.connectTimeoutMs, keepalive: this.keepalive };
        lease = await this.#jumpHosts.acquire(this.jump, settings);
        sock = await forwardThrough(lease.client, lease.hop, this, this.connectTimeoutMs);
      }
      client = await connectHop(this, {
        credentials: this.#credentials,
        connectTimeoutMs: this.connectTimeoutMs,
        keepalive: this.keepalive,
        ...(sock ? { sock } : {}),
      });
    } catch (err) {
      lease?.release();
      throw err;
    }
    const conn: Connection = {
      client,
      quickAck: new QuickAck(client),
      closed: false,
      streamLocalRefused: false,
    };
    client.on("error", () => undefined);
    client.once("close", () => {
      conn.closed = true;
      if (this.#current === conn) this.#current = undefined;
      lease?.release();
    });
    this.#current = conn;
    return conn;
  }

  async #openChannel(conn: Connection): Promise<Duplex> {
    if (!conn.streamLocalRefused) {
      const forwarded = await this.#channelRequest(conn, `libvirtd socket ${this.socketPath}`, (cb) =>
        conn.client.openssh_forwardOutStreamLocal(this.socketPath, cb),
      );
      if (forwarded.channel) return this.#hinted(forwarded.channel, conn);
      conn.streamLocalRefused = true;
    }
    const command = `virt-ssh-helper ${shellQuote(this.driverUri)}`;
    const helper = await this.#channelRequest(conn, command, (cb) => conn.client.exec(command, cb));
    if (!helper.channel) {
      // A refused session channel is a limit (MaxSessions) that frees up; a refused exec is policy.
      const kind = /channel open failure/i.test(helper.refusal ?? "") ? "transient" : "permanent";
      throw new ProviderError(
        kind,
        `${this.description} refused both stream-local forwarding to ${this.socketPath} and running ${command}: ${helper.refusal}`,
      );
    }
    return this.#hinted(this.#watchHelper(helper.channel, command), conn);
  }

  #hinted<T extends Duplex>(channel: T, conn: Connection): T {
    return this.#quickAck ? withReplyHint(channel, conn) : channel;
  }

  /**
   * Asks for one channel. Resolves with the channel, or with the server's refusal
   * text; rejects (transient) when the connection is gone or the reply is late.
   */
  #channelRequest(
    conn: Connection,
    what: string,
    request: (cb: (err: Error | undefined, channel: ClientChannel) => void) => void,
  ): Promise<{ channel?: ClientChannel; refusal?: string }> {
    return new Promise((resolve, reject) => {
      let done = false;
      const timer = later(() => {
        done = true;
        reject(new TimeoutError(`SSH channel to ${what} on ${this.description}`, this.connectTimeoutMs));
      }, this.connectTimeoutMs);
      const lost = (err: unknown) =>
        new ProviderError("transient", `SSH connection to ${this.description} was lost: ${messageOf(err)}`, {
          cause: err,
        });
      try {
        request((err, channel) => {
          if (done) {
            // Too late: the caller has moved on.
            channel?.close();
            return;
          }
          done = true;
          clearTimeout(timer);
          if (!err) resolve({ channel });
          else if (conn.closed || /No response from server|Not connected/.test(err.message))
            reject(lost(err));
          else resolve({ refusal: err.message });
        });
      } catch (err) {
        // ssh2 throws "Not connected" synchronously once the socket is gone.
        done = true;
        clearTimeout(timer);
        conn.closed = true;
        if (this.#current === conn) this.#current = undefined;
        reject(lost(err));
      }
    });
  }

  /** Drains the helper's stderr and turns a failed exit into a stream error carrying it. */
  #watchHelper(channel: ClientChannel, command: string): Duplex {
    let stderr = "";
    channel.stderr.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString("utf8")).slice(-2000);
    });
    channel.on("exit", (code: number | null, signal?: string) => {
      // After the consumer ended the stream, however the helper went is of no interest.
      if (code === 0 || channel.writableEnded || channel.destroyed) return;
      // 127: the shell found no virt-ssh-helper, so libvirt's client side is not installed there.
      const kind = code === 127 ? "permanent" : "transient";
      const status = code === null || code === undefined ? `signal ${signal ?? "?"}` : `status ${code}`;
      const err = new ProviderError(
        kind,
        `${command} on ${this.description} exited with ${status}${stderr ? `: ${stderr.trim()}` : ""}`,
      );
      // ssh2's Channel.destroy() takes no error, so report it the way a socket would
      // (but never as an unhandled 'error' that would take the process down).
      if (channel.listenerCount("error") > 0) channel.emit("error", err);
      channel.destroy();
    });
    return channel;
  }
}

/** Gives the RPC layer the connection's quick acknowledgements (transport/types.ts ReplyHint). */
function withReplyHint<T extends Duplex>(channel: T, conn: Connection): T & ReplyHint {
  const hinted = channel as T & ReplyHint;
  hinted.awaitReply = () => conn.quickAck.begin();
  return hinted;
}
