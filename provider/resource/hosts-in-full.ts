/**
 * What the runtime keeps of hosts given in full (`host: {key, uri, ...}`),
 * beside the host pool they are registered with: which connection each
 * resource of the program gives a key (one key, one host), whether the
 * outputs may keep a host's key material and how (sealed under
 * `kvm:stateKey`, host-connection.ts, in the dynamic door; not at all in the
 * plugin's, which the engine sends the old inputs), and the secret strings
 * every message is cleaned of. Pure apart from node:crypto.
 */
import { ProviderError } from "../errors";
import { type HostConfig, mayCarryKeyMaterial } from "../kvm/config/host-config";
import type { HostEntry } from "./args";
import { isUnknown } from "./args";
import { isHostEntry } from "./check-placement";
import { isSealed, openHostConnection, sealHostConnection } from "./host-connection";
import type { StackConfig } from "./stack-config";
import { SET_STATE_KEY } from "./state-key";

type Props = Record<string, unknown>;

export class HostsInFull {
  /**
   * Whether the outputs keep a host given in full with key material sealed:
   * the dynamic provider's read and delete see only outputs, which a
   * program receives. The provider plugin keeps none (kvm-proxy-plugin.ts).
   */
  seal = true;

  constructor(private readonly config: () => StackConfig) {}

  /**
   * The connection each resource of this program gives a host key
   * (check-placement.ts), per key: a digest, never the key material. A
   * resource checked again replaces its own. Returns the other resource
   * that gave `key` another connection, if one did.
   */
  claim(key: string, connection: string, owner: string): string | undefined {
    const owners = this.claims.get(key) ?? new Map<string, string>();
    this.claims.set(key, owners);
    for (const [other, theirs] of owners) if (other !== owner && theirs !== connection) return other;
    owners.set(owner, connection);
    return undefined;
  }
  private readonly claims = new Map<string, Map<string, string>>();

  /** A host in full whose key material the outputs would keep, and no usable `kvm:stateKey` to seal it under. */
  stateKeyFailures(host: unknown): { property: string; reason: string }[] {
    if (!this.seal || isUnknown(host) || !hostEntriesOf(host).some(mayCarryKeyMaterial)) return [];
    const { stateKey, stateKeyProblem } = this.config();
    if (stateKeyProblem !== undefined) return [{ property: "kvm:stateKey", reason: stateKeyProblem }];
    if (stateKey !== undefined) return [];
    return [
      {
        property: "kvm:stateKey",
        reason:
          "is required: this proxy's host is given in full with key material, which refresh and destroy need " +
          "and the state's outputs keep only sealed under this stack config secret (a program receives every " +
          `output, and the Node.js SDK prints them with --debug). Set it once and keep it: ${SET_STATE_KEY}; ` +
          "or give the key as privateKeyPath or agentSocket, or use the provider plugin",
      },
    ];
  }

  /** `outs` as the state keeps them: a host in full with key material sealed. */
  sealed(outs: Props): Props {
    const entry = outs.hostConnection;
    const { stateKey } = this.config();
    // check refuses such a proxy without the key: only a record written before is read without one.
    if (!this.seal || isSealed(entry) || !mayCarryKeyMaterial(entry) || stateKey === undefined) return outs;
    return { ...outs, hostConnection: sealHostConnection(entry as HostEntry, stateKey) };
  }

  /** The host entry a state's `hostConnection` records: itself, or what its seal holds (a failure says why not). */
  opened(v: unknown): unknown {
    if (!isSealed(v)) return v;
    const r = openHostConnection(v, this.config().stateKey);
    if ("problem" in r) throw new ProviderError("permanent", r.problem);
    return r.entry;
  }

  /** `olds` with their `hostConnection` opened, when it opens (diff compares it with the new host). */
  openedOlds(olds: Props): Props {
    if (!isSealed(olds.hostConnection)) return olds;
    const r = openHostConnection(olds.hostConnection, this.config().stateKey);
    // Unopened, it differs from any host given: an update records it again, sealed under the key set now.
    return "entry" in r ? { ...olds, hostConnection: r.entry } : olds;
  }
}

/** The hosts given in full of a `host` input: itself, or its pool's. */
function hostEntriesOf(host: unknown): unknown[] {
  if (isHostEntry(host)) return [host];
  const pool = typeof host === "object" && host !== null ? (host as { pool?: unknown }).pool : undefined;
  return Array.isArray(pool) ? pool.filter(isHostEntry) : [];
}

/** The secret strings of `hosts` (and of a shared key): private keys, each of their lines, passphrases. */
export function secretStrings(hosts: readonly HostConfig[], sharedKey?: unknown): string[] {
  const out = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v !== "string") return;
    out.add(v);
    for (const line of v.split("\n"))
      if (line.trim().length >= 16 && !line.startsWith("-----")) out.add(line.trim());
  };
  add(sharedKey);
  for (const h of hosts) {
    add(h.ssh?.privateKey);
    add(h.ssh?.passphrase);
    for (const hop of h.reach?.jump ?? []) {
      add(hop.ssh.privateKey);
      add(hop.ssh.passphrase);
    }
  }
  return [...out].filter((v) => v.length >= 4).sort((a, b) => b.length - a.length);
}
