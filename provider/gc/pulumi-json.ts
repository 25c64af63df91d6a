/**
 * Readers of the Pulumi CLI's JSON output that gc relies on: `stack ls
 * --json`, `stack export` and `config --json`. Each checks the shape it
 * needs and throws a permanent ProviderError otherwise, so a changed CLI
 * output never silently turns into "this stack holds nothing".
 */
import { messageOf, ProviderError } from "../errors";
import { inPluginNamespace } from "../schema/config-namespace";
import type { PendingOperation, StackRef, StackState, StateResource } from "./classify";

/** The CLI printed something gc cannot read. Permanent. */
export class CliOutputError extends ProviderError {
  constructor(what: string, reason: string) {
    super("permanent", `unexpected output of ${what}: ${reason}`);
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `secret`: the text may hold secrets, so the parser's message (which quotes it) is left out. */
function parseJson(what: string, text: string, secret = false): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const detail = secret ? "" : ` (${messageOf(err)})`;
    throw new CliOutputError(what, `not JSON${detail}`);
  }
}

/**
 * `pulumi stack ls --json [--all]`: names are short (`dev`) for stacks of
 * the current project and qualified (`org/project/dev`) for others; a
 * two-part `org/dev` belongs to the current project.
 */
export function parseStackList(text: string, currentProject: string): StackRef[] {
  const what = "pulumi stack ls --json";
  const doc = parseJson(what, text);
  if (!Array.isArray(doc)) throw new CliOutputError(what, "not an array");
  return doc.map((entry, i) => {
    if (!isObject(entry) || typeof entry.name !== "string" || entry.name === "") {
      throw new CliOutputError(what, `entry ${i} has no name`);
    }
    const ref = entry.name;
    const parts = ref.split("/");
    if (parts.length === 3) return { project: parts[1] as string, stack: parts[2] as string, ref };
    if (parts.length <= 2) return { project: currentProject, stack: parts[parts.length - 1] as string, ref };
    throw new CliOutputError(what, `stack name ${JSON.stringify(ref)} has too many parts`);
  });
}

/** The current stack from `pulumi stack ls --json` (the entry marked current), if any. */
export function currentStack(text: string): string | undefined {
  const doc = parseJson("pulumi stack ls --json", text);
  if (!Array.isArray(doc)) return undefined;
  const cur = doc.find((e) => isObject(e) && e.current === true) as { name?: unknown } | undefined;
  return typeof cur?.name === "string" ? cur.name : undefined;
}

/**
 * `pulumi stack export`: the resources (URN, ID, type, parent, provider,
 * inputs, outputs, marked for deletion) and pending operations. A stack that was
 * never updated has no resources. `secrets`: the text is the export
 * `--show-secrets` gives, never quoted.
 */
export function parseStackExport(text: string, secrets = false): Extract<StackState, { kind: "read" }> {
  const what = "pulumi stack export";
  const doc = parseJson(what, text, secrets);
  if (!isObject(doc) || !isObject(doc.deployment)) throw new CliOutputError(what, "no deployment object");
  const dep = doc.deployment;
  const list = (field: string): unknown[] => {
    const v = dep[field];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) throw new CliOutputError(what, `${field} is not an array`);
    return v;
  };
  const resources: StateResource[] = list("resources").map((r, i) => {
    if (!isObject(r) || typeof r.urn !== "string") throw new CliOutputError(what, `resource ${i} has no urn`);
    const out: StateResource = { urn: r.urn };
    if (typeof r.id === "string") out.id = r.id;
    // The owner its VM was made with: another URN after a move by alias (to the plugin's type, say).
    const owner = [r.outputs, r.inputs].map((p) => (isObject(p) ? p.owner : undefined)).find(isObject);
    if (typeof owner?.urn === "string" && owner.urn !== r.urn) out.ownerUrn = owner.urn;
    if (r.delete === true) out.delete = true;
    for (const k of ["type", "parent", "provider"] as const) if (typeof r[k] === "string") out[k] = r[k];
    if (isObject(r.inputs)) out.inputs = r.inputs;
    if (isObject(r.outputs)) out.outputs = r.outputs;
    return out;
  });
  const pending: PendingOperation[] = list("pending_operations").map((p, i) => {
    if (!isObject(p) || !isObject(p.resource) || typeof p.resource.urn !== "string") {
      throw new CliOutputError(what, `pending operation ${i} has no resource urn`);
    }
    return { urn: p.resource.urn, type: typeof p.type === "string" ? p.type : "unknown" };
  });
  return { kind: "read", resources, pending };
}

/**
 * `pulumi config --json --show-secrets`: a reader of full keys (`kvm:hosts`)
 * for readStackConfig. Structured values come from `objectValue`, others
 * from `value`. A `kvm:` key the stack does not set is read from the
 * provider plugin's namespace (`kvmproxy:hosts`). The text holds decrypted
 * secrets: callers must never print it.
 */
export function configReader(text: string): (key: string) => unknown {
  const doc = parseJson("pulumi config --json", text, true);
  if (!isObject(doc)) throw new CliOutputError("pulumi config --json", "not an object");
  return (key) => {
    const entry = doc[key] ?? doc[inPluginNamespace(key)];
    if (!isObject(entry)) return undefined;
    return entry.objectValue !== undefined ? entry.objectValue : entry.value;
  };
}
