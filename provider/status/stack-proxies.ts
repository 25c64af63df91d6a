/**
 * The proxies a stack holds, from `pulumi stack export --show-secrets`:
 * every KvmProxy resource of either door (the dynamic provider's type and
 * the plugin's), with its provider ID, its outputs and, for a ProxyFleet's
 * member, the fleet's name. Pure. The text holds decrypted secrets: nothing
 * here quotes it.
 */
import { CliOutputError } from "../gc/pulumi-json";
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
  outputs: Record<string, unknown>;
}

const PROXY_TYPES: ReadonlySet<string> = new Set([KVM_PROXY_TYPE, KVM_PROXY_TOKEN]);

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The proxies of the export, in the state's order; resources marked for deletion are left out. */
export function stackProxies(text: string): StackProxy[] {
  const what = "pulumi stack export";
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    // The text holds secrets: the parser's message, which quotes it, is left out.
    throw new CliOutputError(what, "not JSON");
  }
  if (!isObject(doc) || !isObject(doc.deployment)) throw new CliOutputError(what, "no deployment object");
  const resources = doc.deployment.resources ?? [];
  if (!Array.isArray(resources)) throw new CliOutputError(what, "resources is not an array");
  const typeOf = new Map<string, string>();
  for (const r of resources) {
    if (isObject(r) && typeof r.urn === "string" && typeof r.type === "string") typeOf.set(r.urn, r.type);
  }
  const out: StackProxy[] = [];
  resources.forEach((r, i) => {
    if (!isObject(r) || typeof r.urn !== "string") throw new CliOutputError(what, `resource ${i} has no urn`);
    if (typeof r.type !== "string" || !PROXY_TYPES.has(r.type) || r.delete === true) return;
    if (typeof r.id !== "string" || r.id === "") return;
    const parent = typeof r.parent === "string" ? r.parent : undefined;
    out.push({
      urn: r.urn,
      id: r.id,
      name: nameOfUrn(r.urn),
      ...(parent !== undefined && typeOf.get(parent) === PROXY_FLEET_TYPE
        ? { fleet: nameOfUrn(parent) }
        : {}),
      outputs: isObject(r.outputs) ? r.outputs : {},
    });
  });
  return out;
}
