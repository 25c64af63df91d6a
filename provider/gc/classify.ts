/**
 * The orphan sweep's decision, kept pure: given the managed domains found on
 * the hosts (with our metadata), the stacks that exist and what each owning
 * stack's checkpoint holds, say for every domain whether it is held by its
 * stack, an orphan, unknown (we could not tell), too young to judge, or of
 * another project. Deletion follows only from "orphan"; every doubt ends in
 * "unknown".
 */
import type { ProxyMetadata } from "../kvm/domain/metadata";
import { parseProviderId } from "../kvm/domain/provider-id";

/** A managed domain as listed on a host. */
export interface ManagedDomain {
  host: string;
  name: string;
  uuid: string;
  /** `kvm://<host>/<name>`, with the host key of the configuration gc runs with. */
  providerId: string;
  metadata: ProxyMetadata;
}

/** One existing stack, as `pulumi stack ls` names it. */
export interface StackRef {
  project: string;
  stack: string;
  /** What `--stack` takes to address it (short for the current project, else org/project/stack). */
  ref: string;
}

/** One resource of a checkpoint, reduced to what ownership needs. */
export interface StateResource {
  urn: string;
  id?: string;
  /** Marked for deletion by an earlier update (still the stack's to delete). */
  delete?: boolean;
  /** The URN of the owner its VM was made with, when the resource has another one now (a move by alias). */
  ownerUrn?: string;
  type?: string;
  parent?: string;
  /** Its provider reference (`<provider URN>::<provider ID>`). */
  provider?: string;
  /** As recorded: secrets stay as the export gives them. */
  inputs?: Record<string, unknown>;
  outputs?: Record<string, unknown>;
}

/** An operation an interrupted update left in the checkpoint. */
export interface PendingOperation {
  urn: string;
  /** `creating`, `updating`, `deleting`, `reading`, `importing`, ... */
  type: string;
}

/** What reading a stack's checkpoint gave. */
export type StackState =
  | { kind: "read"; resources: StateResource[]; pending: PendingOperation[] }
  | { kind: "unreadable"; error: string };

/**
 * The verdicts. Only `orphan` may ever be deleted. `too-young` is an orphan
 * younger than the minimum age; `other-project` was not judged at all, nor
 * was `unknown-backend`: its stack lives in another Pulumi backend than the
 * one this run reads, where it would look gone.
 */
export type Verdict = "orphan" | "held" | "unknown" | "too-young" | "other-project" | "unknown-backend";

/** A domain with its verdict and the reason for it. */
export interface Classified {
  domain: ManagedDomain;
  verdict: Verdict;
  reason: string;
  /** Milliseconds since the metadata's creation time (negative when it lies in the future). */
  ageMs: number;
}

/** Everything the decision needs. */
export interface GcInput {
  domains: readonly ManagedDomain[];
  /** The Pulumi project gc runs in. */
  project: string;
  /** Judge domains of other projects too (their stacks must then be in `stacks`). */
  allProjects: boolean;
  /** Orphans younger than this are skipped: an `up` may be creating them before its checkpoint is written. */
  minAgeMs: number;
  now: Date;
  /** Every existing stack in scope, or the error that kept us from listing them. */
  stacks: readonly StackRef[] | { error: string };
  /** Checkpoints by {@link stackKey}; an existing stack missing here counts as unreadable. */
  states: ReadonlyMap<string, StackState>;
  /** The identity of the backend this run reads (resource/backend.ts), when it can be told. */
  backend?: string;
}

/** Map key of a stack: `project/stack`. */
export function stackKey(project: string, stack: string): string {
  return `${project}/${stack}`;
}

/** True when gc judges domains of `project` at all. */
function inScope(input: Pick<GcInput, "project" | "allProjects">, project: string): boolean {
  return input.allProjects || project === input.project;
}

/** The stacks whose checkpoints the decision needs: existing stacks that own an in-scope domain. */
export function stacksToRead(input: Omit<GcInput, "states" | "now" | "minAgeMs" | "backend">): StackRef[] {
  if (!Array.isArray(input.stacks)) return [];
  const wanted = new Set(
    input.domains
      .filter((d) => inScope(input, d.metadata.owner.project))
      .map((d) => stackKey(d.metadata.owner.project, d.metadata.owner.stack)),
  );
  return (input.stacks as readonly StackRef[]).filter((s) => wanted.has(stackKey(s.project, s.stack)));
}

/** Classifies every domain; the order of `input.domains` is kept. */
export function classify(input: GcInput): Classified[] {
  const existing = Array.isArray(input.stacks)
    ? new Set((input.stacks as readonly StackRef[]).map((s) => stackKey(s.project, s.stack)))
    : undefined;
  return input.domains.map((domain) => {
    const ageMs = input.now.getTime() - Date.parse(domain.metadata.createdAt);
    const { verdict, reason } = judge(input, existing, domain);
    if (verdict === "orphan" && ageMs < input.minAgeMs) {
      return { domain, ageMs, verdict: "too-young", reason: `younger than the minimum age; ${reason}` };
    }
    return { domain, ageMs, verdict, reason };
  });
}

function judge(
  input: GcInput,
  existing: ReadonlySet<string> | undefined,
  domain: ManagedDomain,
): { verdict: Verdict; reason: string } {
  const { project, stack, urn } = domain.metadata.owner;
  if (!inScope(input, project)) {
    return { verdict: "other-project", reason: `belongs to project ${project} (see --all-projects)` };
  }
  const backend = domain.metadata.owner.backend;
  if (backend !== undefined && backend !== input.backend) {
    return {
      verdict: "unknown-backend",
      reason: `its stack lives in another Pulumi backend (${backend}; this run reads ${input.backend ?? "one it cannot tell"}): not judged`,
    };
  }
  if (existing === undefined) {
    return {
      verdict: "unknown",
      reason: `stacks could not be listed: ${(input.stacks as { error: string }).error}`,
    };
  }
  const key = stackKey(project, stack);
  if (!existing.has(key)) return { verdict: "orphan", reason: "stack no longer exists" };
  const state = input.states.get(key);
  if (state === undefined) return { verdict: "unknown", reason: `state of stack ${stack} was not read` };
  if (state.kind === "unreadable") {
    return { verdict: "unknown", reason: `state of stack ${stack} could not be read: ${state.error}` };
  }
  const pending = state.pending.find((p) => p.urn === urn);
  if (pending !== undefined) {
    // An interrupted update may hold this VM without a checkpoint entry; the
    // stack's owner settles it (pulumi refresh / stack export), not gc.
    return { verdict: "held", reason: `pending ${pending.type} operation in stack ${stack}` };
  }
  // A resource moved by an alias keeps the owner its VM's metadata names.
  const entries = state.resources.filter((r) => r.urn === urn || r.ownerUrn === urn);
  if (entries.length === 0) return { verdict: "orphan", reason: `URN not in stack ${stack}` };
  if (entries.some((r) => r.id === domain.providerId)) {
    const marked = entries.every((r) => r.id !== domain.providerId || r.delete === true);
    return { verdict: "held", reason: marked ? "held, marked for deletion by the stack" : "held" };
  }
  if (entries.some((r) => r.id === undefined || r.id === "")) {
    return { verdict: "unknown", reason: `stack ${stack} holds this URN without an ID` };
  }
  // The same domain name under another host key: the owner stack may name
  // this host differently from the config gc runs with. Never delete on doubt.
  const sameName = entries.find((r) => idName(r.id) === domain.name);
  if (sameName !== undefined) {
    return {
      verdict: "unknown",
      reason: `stack ${stack} holds this URN as ${sameName.id} (another host key for this host?)`,
    };
  }
  const ids = entries.map((r) => r.id).join(", ");
  return { verdict: "orphan", reason: `stack ${stack} holds this URN as ${ids}` };
}

/** The domain name of a provider ID, or undefined when it is not one. */
function idName(id: string | undefined): string | undefined {
  try {
    return parseProviderId(id).name;
  } catch {
    return undefined;
  }
}
