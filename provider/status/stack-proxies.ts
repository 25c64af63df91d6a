/**
 * The proxies a stack holds, from `pulumi stack export --show-secrets`:
 * every KvmProxy resource of either door (the dynamic provider's type and
 * the plugin's), with its provider ID, its outputs and, for a ProxyFleet's
 * member, the fleet's name. Pure. The text holds decrypted secrets: nothing
 * here quotes it.
 */
import { parseStackExport } from "../gc/pulumi-json";
import { isObject } from "../kvm/fields";
import { SECRET_SIG } from "../plugin/property-values";
import { PROXY_FLEET_TYPE } from "../program/proxy-fleet";
import { KVM_PROXY_TYPE } from "../resource/args";
import { nameOfUrn } from "../resource/retirement";
import { KVM_PROXY_TOKEN } from "../schema/properties";

/** A KvmProxy of the stack, as its state records it. */
export interface StackProxy {
  urn: string;
  /** The provider ID (`host/name`). */
  id: string;
  /** Its name in the program (the URN's last part). */
  name: string;
  fleet?: string;
  door: Door;
  /** A plugin proxy's explicit provider, by name: it reads no stack config of its own. */
  explicitProvider?: string;
  outputs: Record<string, unknown>;
  /** Its inputs: a plugin proxy's host given in full is kept there, not in its outputs. */
  inputs: Record<string, unknown>;
}

const PROXY_TYPES: ReadonlySet<string> = new Set([KVM_PROXY_TYPE, KVM_PROXY_TOKEN]);

/**
 * `v` with every secret `{<sig>, plaintext}` of `stack export --show-secrets`
 * (the signature key the engine's RPCs mark secrets with)
 * replaced by its value (the plaintext is JSON), as the provider received it.
 */
export function revealed(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(revealed);
  if (!isObject(v)) return v;
  if (SECRET_SIG in v && typeof v.plaintext === "string") {
    try {
      return revealed(JSON.parse(v.plaintext));
    } catch {
      return undefined;
    }
  }
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, revealed(x)]));
}

/** Which door made a proxy: the dynamic provider's (config `kvm:`) or the plugin's (config `kvmproxy:`). */
export type Door = "dynamic" | "plugin";

/**
 * The name of an explicit provider a plugin proxy was made with, or
 * undefined for the default provider (which reads the stack's config).
 */
function explicitProvider(reference: string | undefined): string | undefined {
  if (reference === undefined) return undefined;
  const parts = reference.split("::");
  const name = parts[parts.length - 2];
  // The engine names a default provider `default` or `default_<version>` (`default_0_9_0`).
  return name === undefined || /^default(_\d+_\d+_\d+\S*)?$/.test(name) ? undefined : name;
}

/** The proxies of the export, in the state's order; resources marked for deletion are left out. */
export function stackProxies(text: string): StackProxy[] {
  const { resources } = parseStackExport(text, true);
  const typeOf = new Map(resources.map((r) => [r.urn, r.type]));
  return resources.flatMap((r): StackProxy[] => {
    if (r.type === undefined || !PROXY_TYPES.has(r.type) || r.delete === true) return [];
    if (r.id === undefined || r.id === "") return [];
    const door: Door = r.type === KVM_PROXY_TOKEN ? "plugin" : "dynamic";
    const explicit = door === "plugin" ? explicitProvider(r.provider) : undefined;
    return [
      {
        urn: r.urn,
        id: r.id,
        name: nameOfUrn(r.urn),
        door,
        ...(explicit !== undefined ? { explicitProvider: explicit } : {}),
        ...(r.parent !== undefined && typeOf.get(r.parent) === PROXY_FLEET_TYPE
          ? { fleet: nameOfUrn(r.parent) }
          : {}),
        outputs: (revealed(r.outputs ?? {}) as Record<string, unknown> | undefined) ?? {},
        inputs: (revealed(r.inputs ?? {}) as Record<string, unknown> | undefined) ?? {},
      },
    ];
  });
}
