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
import {
  Client,
  type ClientChannel,
  type ConnectConfig,
  type ParsedKey,
  type ServerHostKeyAlgorithm,
} from "ssh2";
import { ProviderError, TimeoutError } from "../errors";
import { CredentialLoader, type CredentialOptions, type LoadedCredentials } from "./credentials";
import { LIBVIRT_DEFAULTS } from "./defaults";
import { hostKeyError } from "./known-hosts";
import type { Transport } from "./types";

export interface SshKeepalive {
  /** Interval between keepalive requests on an idle connection. */
  intervalMs: number;
  /** Unanswered keepalives before the connection is dropped. */
  countMax?: number;
}

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
}

export const SSH_DEFAULTS = {
  port: LIBVIRT_DEFAULTS.sshPort,
  user: LIBVIRT_DEFAULTS.sshUser,
  socketPath: LIBVIRT_DEFAULTS.socketPath,
  driverUri: LIBVIRT_DEFAULTS.driverUri,
  connectTimeoutMs: 20_000,
  keepalive: { intervalMs: 15_000, countMax: 3 },
} as const;

/** ssh2's host key algorithms for each key type as known_hosts names it. */
const HOST_KEY_ALGOS: Record<string, ServerHostKeyAlgorithm[]> = {
  "ssh-ed25519": ["ssh-ed25519"],
  "ecdsa-sha2-nistp256": ["ecdsa-sha2-nistp256"],
  "ecdsa-sha2-nistp384": ["ecdsa-sha2-nistp384"],
  "ecdsa-sha2-nistp521": ["ecdsa-sha2-nistp521"],
  "ssh-rsa": ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"],
};
const ALL_HOST_KEY_ALGOS = Object.values(HOST_KEY_ALGOS).flat();

interface Connection {
  readonly client: Client;
  closed: boolean;
  /** The server refused direct-streamlocal once: use virt-ssh-helper for the rest of this connection. */
  streamLocalRefused: boolean;
}

/** Quotes one argument for the remote POSIX shell. */
function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

function errCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String(err.code) : undefined;
}

function errLevel(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "level" in err ? String(err.level) : undefined;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
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
    const hostPart = this.host.includes(":") ? `[${this.host}]` : this.host;
    this.description = `ssh://${this.user}@${hostPart}:${this.port}`;
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

  async close(): Promise<void> {
    const pending = this.#connecting;
    if (pending) await pending.catch(() => undefined);
    const conn = this.#current;
    this.#current = undefined;
    if (!conn || conn.closed) return;
    await new Promise<void>((resolve) => {
      // end() sends SSH_MSG_DISCONNECT; give the server a moment to close, then cut.
      const timer = setTimeout(() => {
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
    const creds = await this.#credentials.load();
    const client = new Client();
    const conn: Connection = { client, closed: false, streamLocalRefused: false };
    let hostKeyFailure: ProviderError | undefined;
    const agentErrors: string[] = [];

    const config: ConnectConfig = {
      host: this.host,
      port: this.port,
      username: this.user,
      readyTimeout: this.connectTimeoutMs,
      strictVendor: false,
      authHandler: this.#authMethods(creds),
      algorithms: { serverHostKey: this.#hostKeyAlgorithms(creds) },
      hostVerifier: (key: Buffer): boolean => {
        const result = creds.knownHosts.check(this.host, this.port, key);
        hostKeyFailure = hostKeyError(result, this.host, this.port, key, creds.knownHosts.source);
        return hostKeyFailure === undefined;
      },
    };
    if (this.keepalive) {
      config.keepaliveInterval = this.keepalive.intervalMs;
      config.keepaliveCountMax = this.keepalive.countMax ?? SSH_DEFAULTS.keepalive.countMax;
    }

    try {
      await new Promise<void>((resolve, reject) => {
        let settled = false;
        const fail = (err: ProviderError) => {
          if (settled) return;
          settled = true;
          client.destroy();
          reject(err);
        };
        client.on("error", (err: Error) => {
          if (settled) return;
          // Agent trouble is reported per attempt; authentication goes on with other methods.
          if (errLevel(err) === "agent") {
            agentErrors.push(errMessage(err));
            return;
          }
          fail(this.#classifyConnectError(err, hostKeyFailure, agentErrors));
        });
        client.on("close", () => {
          conn.closed = true;
          if (this.#current === conn) this.#current = undefined;
          fail(
            hostKeyFailure ??
              new ProviderError(
                "transient",
                `SSH connection to ${this.description} closed during the handshake`,
              ),
          );
        });
        client.on("ready", () => {
          if (settled) return;
          settled = true;
          resolve();
        });
        try {
          client.connect(config);
        } catch (err) {
          fail(
            new ProviderError("permanent", `SSH configuration for ${this.description}: ${errMessage(err)}`),
          );
        }
      });
    } catch (err) {
      // Keys or known_hosts may have been rotated: re-read them next time.
      if (err instanceof ProviderError && !err.transient) this.#credentials.forget();
      throw err;
    }
    this.#credentials.remember(creds);
    this.#current = conn;
    return conn;
  }

  #authMethods(creds: LoadedCredentials): NonNullable<ConnectConfig["authHandler"]> {
    const methods: Array<
      | { type: "publickey"; username: string; key: ParsedKey }
      | { type: "agent"; username: string; agent: string }
    > = [];
    if (creds.key) methods.push({ type: "publickey", username: this.user, key: creds.key });
    if (creds.agentSocket) methods.push({ type: "agent", username: this.user, agent: creds.agentSocket });
    return methods;
  }

  /** Puts the key types known_hosts holds for this host first, as ssh does, so a host with several keys offers a known one. */
  #hostKeyAlgorithms(creds: LoadedCredentials): ServerHostKeyAlgorithm[] {
    const known = creds.knownHosts
      .knownKeyTypes(this.host, this.port)
      .flatMap((t) => HOST_KEY_ALGOS[t] ?? []);
    return [...new Set([...known, ...ALL_HOST_KEY_ALGOS])];
  }

  #classifyConnectError(
    err: Error,
    hostKeyFailure: ProviderError | undefined,
    agentErrors: readonly string[],
  ): ProviderError {
    if (hostKeyFailure) return hostKeyFailure;
    const level = errLevel(err);
    const code = errCode(err);
    if (level === "client-timeout") {
      return new TimeoutError(`SSH connection and login to ${this.description}`, this.connectTimeoutMs);
    }
    // sshd hangs up with "Too many authentication failures" once MaxAuthTries keys were refused.
    if (level === "client-authentication" || /too many authentication failures/i.test(err.message)) {
      const agentNote = agentErrors.length > 0 ? ` (agent: ${agentErrors.join("; ")})` : "";
      return new ProviderError(
        "permanent",
        `SSH authentication as ${this.user} to ${this.host}:${this.port} failed: the server accepted ` +
          `none of the offered credentials (${this.#credentials.describe()})${agentNote}. Check that the ` +
          `public key is in ${this.user}'s authorized_keys on the host.`,
        { cause: err },
      );
    }
    if (level === "client-socket" || level === "client-dns") {
      // Refused, unreachable, reset, timed out: the host may come back. A name that
      // does not resolve is a configuration error.
      const kind = code === "ENOTFOUND" ? "permanent" : "transient";
      return new ProviderError(kind, `cannot reach ${this.description}: ${err.message}`, { cause: err });
    }
    if (level === "handshake" && /no matching/i.test(err.message)) {
      return new ProviderError("permanent", `SSH handshake with ${this.description} failed: ${err.message}`, {
        cause: err,
      });
    }
    return new ProviderError("transient", `SSH connection to ${this.description} failed: ${err.message}`, {
      cause: err,
    });
  }

  async #openChannel(conn: Connection): Promise<Duplex> {
    if (!conn.streamLocalRefused) {
      const forwarded = await this.#channelRequest(conn, `libvirtd socket ${this.socketPath}`, (cb) =>
        conn.client.openssh_forwardOutStreamLocal(this.socketPath, cb),
      );
      if (forwarded.channel) return forwarded.channel;
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
    return this.#watchHelper(helper.channel, command);
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
      const timer = setTimeout(() => {
        done = true;
        reject(new TimeoutError(`SSH channel to ${what} on ${this.description}`, this.connectTimeoutMs));
      }, this.connectTimeoutMs);
      const lost = (err: unknown) =>
        new ProviderError("transient", `SSH connection to ${this.description} was lost: ${errMessage(err)}`, {
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
