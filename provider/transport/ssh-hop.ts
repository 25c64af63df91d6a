/**
 * One authenticated ssh2 connection to one SSH server: the target host, or a
 * jump host on the way to it. Every hop is verified the same way: its host key
 * against its known_hosts (no trust on first use), key types known for it
 * offered first; its credentials loaded lazily and cached once they worked.
 * A hop reached through another travels over a channel of that one (`sock`).
 *
 * Errors are ProviderErrors classified transient or permanent; a jump host's
 * carry `jump host <its ssh:// URI>: ` in front, so a failure names its hop.
 */
import type { Duplex } from "node:stream";
import { Client, type ConnectConfig, type ParsedKey, type ServerHostKeyAlgorithm } from "ssh2";
import { messageOf, ProviderError, TimeoutError } from "../errors";
import { later } from "../timers";
import type { CredentialLoader, LoadedCredentials } from "./credentials";
import { SSH_TIMING } from "./defaults";
import { hostPort } from "./host-port";
import { hostKeyError } from "./known-hosts";

export interface SshKeepalive {
  /** Interval between keepalive requests on an idle connection. */
  intervalMs: number;
  /** Unanswered keepalives before the connection is dropped. */
  countMax?: number;
}

/** Where a hop is: host (name or address, as known_hosts names it), port and login. */
export interface SshEndpoint {
  host: string;
  port: number;
  user: string;
}

export interface HopConnectOptions {
  credentials: CredentialLoader;
  /** Deadline for TCP connect + SSH handshake + authentication. */
  connectTimeoutMs: number;
  keepalive: SshKeepalive | false;
  /** A stream to the hop through the previous one (a direct-tcpip channel); else a TCP connection. */
  sock?: Duplex;
  /** Set for jump hosts: errors start with `jump host <uri>: `. */
  jumpHost?: boolean;
}

export const DEFAULT_KEEPALIVE_COUNT = SSH_TIMING.keepalive.countMax;

/** ssh2's host key algorithms for each key type as known_hosts names it. */
const HOST_KEY_ALGOS: Record<string, ServerHostKeyAlgorithm[]> = {
  "ssh-ed25519": ["ssh-ed25519"],
  "ecdsa-sha2-nistp256": ["ecdsa-sha2-nistp256"],
  "ecdsa-sha2-nistp384": ["ecdsa-sha2-nistp384"],
  "ecdsa-sha2-nistp521": ["ecdsa-sha2-nistp521"],
  "ssh-rsa": ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"],
};
const ALL_HOST_KEY_ALGOS = Object.values(HOST_KEY_ALGOS).flat();

/** `ssh://user@host:port` (IPv6 literals bracketed): how messages name a hop. Never holds secrets. */
export function describeEndpoint(ep: SshEndpoint): string {
  return `ssh://${ep.user}@${hostPort(ep.host, ep.port)}`;
}

function errCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String(err.code) : undefined;
}

function errLevel(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "level" in err ? String(err.level) : undefined;
}

/** The same error with `jump host <uri>: ` in front (kind, class and cause kept). */
export function asJumpHostError(err: ProviderError, ep: SshEndpoint): ProviderError {
  const prefix = `jump host ${describeEndpoint(ep)}: `;
  if (err.message.startsWith(prefix)) return err;
  if (err instanceof TimeoutError) return new TimeoutError(`${prefix}${err.waitingFor}`, err.timeoutMs);
  return new ProviderError(err.kind, `${prefix}${err.message}`, { cause: err.cause ?? err });
}

/** Connects and authenticates to one hop; resolves with the ready client. */
export async function connectHop(ep: SshEndpoint, options: HopConnectOptions): Promise<Client> {
  try {
    return await connectOnce(ep, options);
  } catch (err) {
    const e =
      err instanceof ProviderError
        ? err
        : new ProviderError(
            "transient",
            `SSH connection to ${describeEndpoint(ep)} failed: ${messageOf(err)}`,
          );
    // Keys or known_hosts may have been rotated: re-read them next time.
    if (!e.transient) options.credentials.forget();
    throw options.jumpHost ? asJumpHostError(e, ep) : e;
  }
}

async function connectOnce(ep: SshEndpoint, options: HopConnectOptions): Promise<Client> {
  const creds = await options.credentials.load();
  const client = new Client();
  let hostKeyFailure: ProviderError | undefined;
  const agentErrors: string[] = [];
  const description = describeEndpoint(ep);

  const config: ConnectConfig = {
    host: ep.host,
    port: ep.port,
    username: ep.user,
    readyTimeout: options.connectTimeoutMs,
    strictVendor: false,
    authHandler: authMethods(ep.user, creds),
    algorithms: { serverHostKey: hostKeyAlgorithms(ep, creds) },
    hostVerifier: (key: Buffer): boolean => {
      const result = creds.knownHosts.check(ep.host, ep.port, key);
      hostKeyFailure = hostKeyError(result, ep.host, ep.port, key, creds.knownHosts.source);
      return hostKeyFailure === undefined;
    },
  };
  if (options.sock) config.sock = options.sock;
  if (options.keepalive) {
    config.keepaliveInterval = options.keepalive.intervalMs;
    config.keepaliveCountMax = options.keepalive.countMax ?? DEFAULT_KEEPALIVE_COUNT;
  }

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
        agentErrors.push(messageOf(err));
        return;
      }
      fail(classifyConnectError(err, ep, options, hostKeyFailure, agentErrors));
    });
    client.on("close", () => {
      fail(
        hostKeyFailure ??
          new ProviderError("transient", `SSH connection to ${description} closed during the handshake`),
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
      fail(new ProviderError("permanent", `SSH configuration for ${description}: ${messageOf(err)}`));
    }
  });
  options.credentials.remember(creds);
  return client;
}

function authMethods(user: string, creds: LoadedCredentials): NonNullable<ConnectConfig["authHandler"]> {
  const methods: Array<
    | { type: "publickey"; username: string; key: ParsedKey }
    | { type: "agent"; username: string; agent: string }
  > = [];
  if (creds.key) methods.push({ type: "publickey", username: user, key: creds.key });
  if (creds.agentSocket) methods.push({ type: "agent", username: user, agent: creds.agentSocket });
  return methods;
}

/** Puts the key types known_hosts holds for this hop first, as ssh does, so a host with several keys offers a known one. */
function hostKeyAlgorithms(ep: SshEndpoint, creds: LoadedCredentials): ServerHostKeyAlgorithm[] {
  const known = creds.knownHosts.knownKeyTypes(ep.host, ep.port).flatMap((t) => HOST_KEY_ALGOS[t] ?? []);
  return [...new Set([...known, ...ALL_HOST_KEY_ALGOS])];
}

function classifyConnectError(
  err: Error,
  ep: SshEndpoint,
  options: HopConnectOptions,
  hostKeyFailure: ProviderError | undefined,
  agentErrors: readonly string[],
): ProviderError {
  if (hostKeyFailure) return hostKeyFailure;
  const description = describeEndpoint(ep);
  const level = errLevel(err);
  const code = errCode(err);
  if (level === "client-timeout") {
    return new TimeoutError(`SSH connection and login to ${description}`, options.connectTimeoutMs);
  }
  // sshd hangs up with "Too many authentication failures" once MaxAuthTries keys were refused.
  if (level === "client-authentication" || /too many authentication failures/i.test(err.message)) {
    const agentNote = agentErrors.length > 0 ? ` (agent: ${agentErrors.join("; ")})` : "";
    return new ProviderError(
      "permanent",
      `SSH authentication as ${ep.user} to ${ep.host}:${ep.port} failed: the server accepted ` +
        `none of the offered credentials (${options.credentials.describe()})${agentNote}. Check that the ` +
        `public key is in ${ep.user}'s authorized_keys on the host.`,
      { cause: err },
    );
  }
  if (level === "client-socket" || level === "client-dns") {
    // Refused, unreachable, reset, timed out: the host may come back. A name that
    // does not resolve is a configuration error.
    const kind = code === "ENOTFOUND" ? "permanent" : "transient";
    return new ProviderError(kind, `cannot reach ${description}: ${err.message}`, { cause: err });
  }
  if (level === "handshake" && /no matching/i.test(err.message)) {
    return new ProviderError("permanent", `SSH handshake with ${description} failed: ${err.message}`, {
      cause: err,
    });
  }
  return new ProviderError("transient", `SSH connection to ${description} failed: ${err.message}`, {
    cause: err,
  });
}

/**
 * Opens a direct-tcpip channel from `client` (a connected hop) to host:port:
 * the stream the next hop's SSH connection runs over. A refusal (the jump
 * host cannot reach it, or forwarding is off there) is transient when the
 * server says the connection failed, permanent when forwarding is prohibited.
 */
export function forwardThrough(
  client: Client,
  via: SshEndpoint,
  to: SshEndpoint,
  timeoutMs: number,
): Promise<Duplex> {
  const what = `jump host ${describeEndpoint(via)}`;
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = later(() => {
      done = true;
      reject(new TimeoutError(`${what}: a connection to ${to.host}:${to.port}`, timeoutMs));
    }, timeoutMs);
    const settle = (err: Error | undefined, channel?: Duplex): void => {
      if (done) {
        channel?.destroy();
        return;
      }
      done = true;
      clearTimeout(timer);
      if (channel) {
        resolve(channel);
        return;
      }
      const message = messageOf(err);
      const kind = /prohibited/i.test(message) ? "permanent" : "transient";
      reject(
        new ProviderError(kind, `${what} could not open a connection to ${to.host}:${to.port}: ${message}`, {
          cause: err,
        }),
      );
    };
    try {
      // The originator address is informational (RFC 4254 7.2); OpenSSH only logs it.
      client.forwardOut("127.0.0.1", 0, to.host, to.port, (err, channel) => settle(err, channel));
    } catch (err) {
      settle(err as Error);
    }
  });
}
