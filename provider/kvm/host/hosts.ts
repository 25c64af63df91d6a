/**
 * The configured libvirt hosts and one shared connection to each.
 *
 * A host's transport (unix socket or SSH) and LibvirtConnection are built on
 * first use and shared by every caller; the connection itself connects lazily
 * and reconnects after a drop. closeAll() ends them politely (connect_close,
 * then the transport).
 */
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { ProviderError } from "../../errors";
import { LibvirtConnection } from "../../libvirt/connection";
import { Libvirt } from "../../libvirt/libvirt";
import type { StoragePool } from "../../libvirt/types";
import type { CredentialOptions } from "../../transport/credentials";
import { hostPort } from "../../transport/host-port";
import { type JumpHop, JumpHosts } from "../../transport/jump";
import { OpenSshTransport } from "../../transport/openssh";
import { SshTransport } from "../../transport/ssh";
import type { Transport } from "../../transport/types";
import { UnixSocketTransport } from "../../transport/unix";
import type { HostConfig, SshAuthConfig } from "../config/host-config";
import { CallTracer } from "./call-tracer";
import { PoolHandles } from "./pools";

/** The host key is not in the provider configuration. Permanent: only a config change helps. */
export class HostNotConfiguredError extends ProviderError {
  readonly host: string;

  constructor(host: string, known: readonly string[]) {
    super(
      "permanent",
      `host ${JSON.stringify(host)} is not in the provider configuration (configured: ${
        known.length > 0 ? known.join(", ") : "none"
      })`,
    );
    this.host = host;
  }
}

/** `~/x` → `<home>/x`; other paths unchanged. */
export function expandHome(p: string): string {
  return p === "~" ? os.homedir() : p.startsWith("~/") ? path.join(os.homedir(), p.slice(2)) : p;
}

/** The credential options of SSH material as configured (`~` expanded; the transports load files lazily). */
function credentialOptions(ssh: SshAuthConfig): CredentialOptions {
  return {
    ...(ssh.privateKey !== undefined ? { privateKey: ssh.privateKey } : {}),
    ...(ssh.privateKeyPath !== undefined ? { privateKeyPath: expandHome(ssh.privateKeyPath) } : {}),
    ...(ssh.passphrase !== undefined ? { passphrase: ssh.passphrase } : {}),
    ...(ssh.agentSocket !== undefined ? { agentSocket: expandHome(ssh.agentSocket) } : {}),
    ...(ssh.knownHosts !== undefined ? { knownHosts: ssh.knownHosts } : {}),
    ...(ssh.knownHostsPath !== undefined ? { knownHostsPath: expandHome(ssh.knownHostsPath) } : {}),
  };
}

/** What transports of one HostPool share: the jump host connections. */
export interface SharedReach {
  jumpHosts?: JumpHosts;
}

/**
 * Builds the transport a host's URI and reach name: a unix socket, or SSH
 * through ssh2 (the default) or the system's OpenSSH, directly or through
 * jump hosts. SSH material is loaded lazily by the transport.
 */
export function buildTransport(host: HostConfig, shared: SharedReach = {}): Transport {
  const ep = host.endpoint;
  if (ep.kind === "unix") return new UnixSocketTransport(ep.socketPath);
  const reach = host.reach ?? { transport: "ssh2", jump: [] };
  const jump: JumpHop[] = reach.jump.map((h) => ({
    host: h.host,
    port: h.port,
    user: h.user,
    ...credentialOptions(h.ssh),
  }));
  const common = {
    host: ep.host,
    port: ep.port,
    user: ep.user,
    socketPath: ep.socketPath,
    jump,
    ...credentialOptions(host.ssh ?? {}),
  };
  if (reach.transport === "openssh") {
    // A user or port the URI leaves out is left to the ssh_config (User, Port), as plain ssh does.
    const url = new URL(host.uri);
    const { user, port, ...rest } = common;
    return new OpenSshTransport({
      ...rest,
      ...(url.username !== "" ? { user } : {}),
      ...(url.port !== "" ? { port } : {}),
      ...(reach.sshConfig !== undefined ? { sshConfig: expandHome(reach.sshConfig) } : {}),
    });
  }
  return new SshTransport({
    ...common,
    driverUri: host.driverUri,
    ...(shared.jumpHosts !== undefined ? { jumpHosts: shared.jumpHosts } : {}),
  });
}

/** Options of {@link HostPool}. */
export interface HostPoolOptions {
  /** Logs libvirt calls; default: a tracer at the KVMP_LOG level writing to stderr. */
  tracer?: CallTracer;
  /** Per-call deadline passed to each connection. */
  callTimeoutMs?: number;
  /** Builds a host's transport (default {@link buildTransport}); tests use it to cut connections. */
  transportFor?: (host: HostConfig) => Transport;
}

interface Entry {
  transport: Transport;
  connection: LibvirtConnection;
  libvirt: Libvirt;
  pool: PoolHandles;
  /** Checks passed on this host (see {@link HostPool.passedOnce}), each with the connection generation it passed on. */
  passed: Map<string, { generation: number | undefined; done: Promise<void> }>;
}

/** One shared, lazily connected libvirt connection per configured host. */
export class HostPool {
  readonly tracer: CallTracer;
  private readonly hosts: Record<string, HostConfig>;
  private readonly options: HostPoolOptions;
  private readonly entries = new Map<string, Entry>();
  /** Jump host connections, shared by every host behind the same hop. */
  private readonly jumpHosts = new JumpHosts();

  constructor(hosts: Readonly<Record<string, HostConfig>>, options: HostPoolOptions = {}) {
    this.hosts = { ...hosts };
    this.options = options;
    this.tracer = options.tracer ?? new CallTracer();
  }

  /** The configured host keys. */
  get keys(): string[] {
    return Object.keys(this.hosts);
  }

  /** True when `key` is a configured host. */
  has(key: string): boolean {
    return Object.hasOwn(this.hosts, key);
  }

  /** The host's configuration; throws HostNotConfiguredError for an unknown key. */
  config(key: string): HostConfig {
    if (!this.has(key)) throw new HostNotConfiguredError(key, this.keys);
    return this.hosts[key] as HostConfig;
  }

  /** The shared typed API for `key` (built on first use). */
  libvirt(key: string): Libvirt {
    return this.entry(key).libvirt;
  }

  /** The shared connection for `key` (built on first use, connected on the first call). */
  connection(key: string): LibvirtConnection {
    return this.entry(key).connection;
  }

  /**
   * The handle of the host's configured storage pool, or undefined when the
   * host has none of that name: looked up once per host and connection
   * (pools.ts), again when libvirtd stops knowing the handle.
   */
  pool(key: string): Promise<StoragePool | undefined> {
    return this.entry(key).pool.get();
  }

  /**
   * Runs `check` (what must hold on host `key` before a create: its pool
   * started, a NIC's network started) once per connection: a check that
   * passed is not asked again until the connection is made anew; one that
   * failed, or is in flight on a connection since dropped, is. What changes
   * in between surfaces as libvirt's own error, with its hint (libvirt-hints.ts).
   */
  passedOnce(key: string, name: string, check: () => Promise<void>): Promise<void> {
    const { connection, passed } = this.entry(key);
    const generation = () => (connection.connected ? connection.generation : -1);
    const known = passed.get(name);
    // In flight (no generation yet), or passed on this connection: shared.
    if (known !== undefined && (known.generation === undefined || known.generation === generation()))
      return known.done;
    const done = check();
    const entry: { generation: number | undefined; done: Promise<void> } = { generation: undefined, done };
    passed.set(name, entry);
    done.then(
      () => {
        entry.generation = generation();
      },
      () => {
        if (passed.get(name) === entry) passed.delete(name);
      },
    );
    return done;
  }

  /**
   * Makes `host` known under its key (a host a resource gives in full): the
   * same settings again change nothing; other settings (a new address or
   * key) replace the old, whose connection is closed, and the next call
   * connects with the new ones. True when it was new or changed.
   */
  register(host: HostConfig): boolean {
    const known = Object.hasOwn(this.hosts, host.key) ? this.hosts[host.key] : undefined;
    if (known !== undefined && JSON.stringify(known) === JSON.stringify(host)) return false;
    this.hosts[host.key] = host;
    const entry = this.entries.get(host.key);
    this.entries.delete(host.key);
    void entry?.connection.close().catch(() => undefined);
    return true;
  }

  /**
   * A TCP connection from host `key` to `address:port`, over the SSH
   * connection its libvirt calls use (direct-tcpip): what a probe takes to a
   * guest on a network only its host routes to. Undefined for a host this
   * machine is (a unix socket), where a direct connection is the same.
   */
  tunnel(key: string, address: string, port: number): Promise<Duplex> | undefined {
    const { transport } = this.entry(key);
    const opening = transport.openTcp?.(address, port);
    return opening && this.tracer.tunnel(key, hostPort(address, port), opening);
  }

  /** Closes every connection made so far; later calls build fresh ones. */
  async closeAll(): Promise<void> {
    const entries = [...this.entries.values()];
    this.entries.clear();
    await Promise.allSettled(entries.map((e) => e.connection.close()));
    await this.jumpHosts.closeAll();
  }

  private entry(key: string): Entry {
    const existing = this.entries.get(key);
    if (existing) return existing;
    const host = this.config(key);
    const transport =
      this.options.transportFor?.(host) ?? buildTransport(host, { jumpHosts: this.jumpHosts });
    const hook = this.tracer.hook(key);
    const connection = new LibvirtConnection({
      transport,
      uri: host.driverUri,
      // The host's own setting wins over the pool's default.
      ...optionalTimeout(host.callTimeoutMs ?? this.options.callTimeoutMs),
      ...(hook ? { onCall: hook } : {}),
    });
    // A dropped connection's handle is not reused: the next lookup reconnects and asks again.
    const pool = new PoolHandles(host.pool, () => (connection.connected ? connection.generation : -1));
    const entry = {
      transport,
      connection,
      libvirt: new Libvirt(pool.caller(this.tracer.wrap(key, connection))),
      pool,
      passed: new Map(),
    };
    this.entries.set(key, entry);
    return entry;
  }
}

function optionalTimeout(ms: number | undefined): { callTimeoutMs?: number } {
  return ms === undefined ? {} : { callTimeoutMs: ms };
}
