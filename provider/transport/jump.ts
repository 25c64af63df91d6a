/**
 * Jump hosts (bastions) for the ssh2 transport: the SSH connections on the
 * way to a target, shared by every target behind them.
 *
 * A chain is a list of hops, the first dialled directly, each next one
 * reached through a direct-tcpip channel of the one before (what OpenSSH's
 * ProxyJump does). Each hop has its own known_hosts and credentials and is
 * verified exactly like a target (ssh-hop.ts). One {@link JumpHosts}
 * registry (a HostPool owns one) keeps one connection per distinct hop (same
 * chain before it, endpoint and credentials) and counts its users: a target
 * connection holds a lease on its last hop for its whole life, each hop holds
 * one on the hop before it, and a hop nobody leases any more is closed. A hop
 * whose connection drops is forgotten; the next target connect dials it again.
 */
import { createHash } from "node:crypto";
import type { Client } from "ssh2";
import { ProviderError } from "../errors";
import { later } from "../timers";
import { CredentialLoader, type CredentialOptions } from "./credentials";
import {
  connectHop,
  forwardThrough,
  type HopConnectOptions,
  type SshEndpoint,
  type SshKeepalive,
} from "./ssh-hop";

/** One jump host: where it is and how to log in and verify it. */
export interface JumpHop extends SshEndpoint, CredentialOptions {}

/** Settings a chain's hops share with the target that uses them. */
export interface HopSettings {
  connectTimeoutMs: number;
  keepalive: SshKeepalive | false;
}

/** A use of a connected hop; release() once, when the connection through it has ended. */
export interface JumpLease {
  readonly client: Client;
  readonly hop: JumpHop;
  release(): void;
}

interface Entry {
  readonly key: string;
  readonly hop: JumpHop;
  readonly credentials: CredentialLoader;
  refs: number;
  client?: Client;
  connecting?: Promise<Client>;
  /** The lease this hop holds on the hop before it. */
  parent?: JumpLease;
  /** No new lease may use it (closed, closing, or dropped from the registry). */
  dead: boolean;
  closed: boolean;
}

/** A digest naming a hop's credentials: entries differ when they do, secrets never leave it. */
function identity(hop: JumpHop, parentKey: string): string {
  const h = createHash("sha256");
  const fields: (keyof JumpHop)[] = [
    "host",
    "port",
    "user",
    "privateKey",
    "privateKeyPath",
    "passphrase",
    "agentSocket",
    "knownHosts",
    "knownHostsPath",
  ];
  h.update(parentKey);
  for (const f of fields) h.update(`\0${f}=${hop[f] === undefined ? "" : String(hop[f])}`);
  return h.digest("hex");
}

export class JumpHosts {
  readonly #entries = new Map<string, Entry>();

  /** Connections currently open (for tests and diagnostics). */
  get open(): number {
    let n = 0;
    for (const e of this.#entries.values()) if (e.client !== undefined && !e.dead) n++;
    return n;
  }

  /**
   * A lease on the last hop of `chain`, connecting (through the hops before
   * it) whatever is not connected yet. Callers arriving while a hop connects
   * share that attempt.
   */
  async acquire(chain: readonly JumpHop[], settings: HopSettings): Promise<JumpLease> {
    if (chain.length === 0) throw new ProviderError("permanent", "a jump chain needs at least one hop");
    let parentKey = "";
    const keys = chain.map((hop) => {
      parentKey = identity(hop, parentKey);
      return parentKey;
    });
    return this.#lease(chain, keys, chain.length - 1, settings);
  }

  /** Closes every hop connection; leases still held become dead (their users see their connections close). */
  async closeAll(): Promise<void> {
    const entries = [...this.#entries.values()];
    this.#entries.clear();
    await Promise.allSettled(entries.map((e) => this.#end(e)));
  }

  async #lease(
    chain: readonly JumpHop[],
    keys: string[],
    i: number,
    settings: HopSettings,
  ): Promise<JumpLease> {
    const key = keys[i] as string;
    const hop = chain[i] as JumpHop;
    let entry = this.#entries.get(key);
    if (entry === undefined || entry.dead) {
      entry = { key, hop, credentials: new CredentialLoader(hop), refs: 0, dead: false, closed: false };
      this.#entries.set(key, entry);
    }
    const e = entry;
    e.refs++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      e.refs--;
      if (e.refs === 0) void this.#end(e);
    };
    try {
      const client = await this.#connected(e, chain, keys, i, settings);
      return { client, hop, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  #connected(
    e: Entry,
    chain: readonly JumpHop[],
    keys: string[],
    i: number,
    settings: HopSettings,
  ): Promise<Client> {
    if (e.client !== undefined && !e.dead) return Promise.resolve(e.client);
    e.connecting ??= this.#connect(e, chain, keys, i, settings).finally(() => {
      e.connecting = undefined;
    });
    return e.connecting;
  }

  async #connect(
    e: Entry,
    chain: readonly JumpHop[],
    keys: string[],
    i: number,
    settings: HopSettings,
  ): Promise<Client> {
    const options: HopConnectOptions = {
      credentials: e.credentials,
      connectTimeoutMs: settings.connectTimeoutMs,
      keepalive: settings.keepalive,
      jumpHost: true,
    };
    let parent: JumpLease | undefined;
    if (i > 0) {
      parent = await this.#lease(chain, keys, i - 1, settings);
      try {
        options.sock = await forwardThrough(parent.client, parent.hop, e.hop, settings.connectTimeoutMs);
      } catch (err) {
        parent.release();
        throw err;
      }
    }
    let client: Client;
    try {
      client = await connectHop(e.hop, options);
    } catch (err) {
      options.sock?.destroy();
      parent?.release();
      throw err;
    }
    if (e.refs === 0 || this.#entries.get(e.key) !== e) {
      // Everyone gave up while it connected.
      client.end();
      parent?.release();
      throw new ProviderError("transient", "jump host connection no longer wanted");
    }
    e.client = client;
    e.parent = parent;
    client.on("error", () => undefined);
    client.once("close", () => {
      e.dead = true;
      e.closed = true;
      if (this.#entries.get(e.key) === e) this.#entries.delete(e.key);
      e.parent?.release();
      e.parent = undefined;
    });
    return client;
  }

  async #end(e: Entry): Promise<void> {
    e.dead = true;
    if (this.#entries.get(e.key) === e) this.#entries.delete(e.key);
    const client = e.client;
    if (client === undefined || e.closed) return;
    await new Promise<void>((resolve) => {
      const timer = later(() => {
        client.destroy();
        resolve();
      }, 5_000);
      timer.unref();
      client.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
      client.end();
    });
  }
}
