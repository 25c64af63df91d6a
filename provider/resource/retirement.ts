/**
 * Retiring proxies on demand, from the stack config (reviewable there, and
 * written by `pulumi-kvm-proxy retire` and `block`):
 *
 * - `kvm:retire`: resource name → `{reason, before}`: the proxy of that name
 *   (a KvmProxy, or a ProxyFleet's member such as `edge-2`) whose VM was
 *   made before `before` is replaced at the next `up`. Its replacement is
 *   made later, so the entry is spent once it is replaced and may stay.
 * - `kvm:blockedAddresses`: address → `{reason, until}`: a proxy holding the
 *   address (a NIC's, the egress address its check saw, its outgoing
 *   address) is replaced at the next `up`, and no address pool hands the
 *   address out until `until`.
 *
 * A replacement is made before the VM it replaces is deleted, unless they
 * would collide (diff.ts collisions). Shapes are checked here, each failure
 * named by its config path (a bad entry fails every proxy's check: nothing
 * is created). Pure.
 */
import { given, isObject } from "../kvm/fields";
import { bare, canonicalIp } from "../kvm/network/ip";
import type { ValidationFailure } from "../kvm/validation";
import type { RecordedState } from "./recorded-state";

/** A proxy to retire. */
export interface Retirement {
  reason: string;
  /** Epoch ms: VMs made before it are replaced. */
  before: number;
}

/** An address kept out of service. */
export interface BlockedAddress {
  reason: string;
  /** Epoch ms: until when. */
  until: number;
}

/** The longest reason kept: a line of preview, not a report. */
export const MAX_REASON_LENGTH = 200;
/** How far in the future `before` may be: a clock a little ahead, not a date to come. */
const BEFORE_SLACK_MS = 5 * 60_000;

/** Why `v` cannot be a reason, or undefined. */
export function reasonProblem(v: unknown): string | undefined {
  if (typeof v !== "string" || v.trim() === "") return "must be a non-empty string: why, shown at preview";
  if (v.length > MAX_REASON_LENGTH) return `must be at most ${MAX_REASON_LENGTH} characters`;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (/[\u0000-\u001f\u007f]/.test(v)) return "must be one line without control characters";
  return undefined;
}

function timeOf(v: unknown): number | undefined {
  if (typeof v !== "string" || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(v))
    return undefined;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : t;
}

/** `kvm:retire`'s entries, and the failures of those that do not parse (at `key.<name>.<field>`). */
export function parseRetirements(
  raw: unknown,
  key: string,
  now: number,
): { values: Record<string, Retirement>; failures: ValidationFailure[] } {
  const values: Record<string, Retirement> = {};
  const failures: ValidationFailure[] = [];
  if (!given(raw)) return { values, failures };
  if (!isObject(raw)) {
    failures.push({ property: key, reason: "must be an object: resource name → {reason, before}" });
    return { values, failures };
  }
  for (const [name, entry] of Object.entries(raw)) {
    const at = `${key}.${name}`;
    if (!isObject(entry)) {
      failures.push({ property: at, reason: "must be {reason, before}" });
      continue;
    }
    const bad = (field: string, reason: string) => failures.push({ property: `${at}.${field}`, reason });
    for (const k of Object.keys(entry))
      if (k !== "reason" && k !== "before") bad(k, "unknown property (known: reason, before)");
    const reason = reasonProblem(entry.reason);
    if (reason !== undefined) bad("reason", reason);
    const before = timeOf(entry.before);
    if (before === undefined)
      bad("before", "must be a time such as 2026-12-07T10:00:00Z: VMs made before it are replaced");
    else if (before > now + BEFORE_SLACK_MS)
      bad(
        "before",
        "must not be in the future: the replacement would be made before it too, and replaced again",
      );
    if (reason === undefined && before !== undefined && before <= now + BEFORE_SLACK_MS) {
      values[name] = { reason: entry.reason as string, before };
    }
  }
  return { values, failures };
}

/** `kvm:blockedAddresses`' entries by canonical address, and the failures of those that do not parse. */
export function parseBlockedAddresses(
  raw: unknown,
  key: string,
): { values: Record<string, BlockedAddress>; failures: ValidationFailure[] } {
  const values: Record<string, BlockedAddress> = {};
  const failures: ValidationFailure[] = [];
  if (!given(raw)) return { values, failures };
  if (!isObject(raw)) {
    failures.push({ property: key, reason: "must be an object: address → {reason, until}" });
    return { values, failures };
  }
  for (const [address, entry] of Object.entries(raw)) {
    const at = `${key}.${address}`;
    const canonical = canonicalIp(address);
    if (canonical === undefined) {
      failures.push({ property: at, reason: "is not an IPv4 or IPv6 address" });
      continue;
    }
    if (!isObject(entry)) {
      failures.push({ property: at, reason: "must be {reason, until}" });
      continue;
    }
    const bad = (field: string, reason: string) => failures.push({ property: `${at}.${field}`, reason });
    for (const k of Object.keys(entry))
      if (k !== "reason" && k !== "until") bad(k, "unknown property (known: reason, until)");
    const reason = reasonProblem(entry.reason);
    if (reason !== undefined) bad("reason", reason);
    const until = timeOf(entry.until);
    if (until === undefined)
      bad(
        "until",
        "must be a time such as 2026-12-14T10:00:00Z: the address is kept out of service until then",
      );
    if (reason === undefined && until !== undefined)
      values[canonical] = { reason: entry.reason as string, until };
  }
  return { values, failures };
}

/** The last part of a URN: the resource's name (what `kvm:retire` is keyed by). */
export function nameOfUrn(urn: string): string {
  const i = urn.lastIndexOf("::");
  return i === -1 ? urn : urn.slice(i + 2);
}

/** The addresses blocked at `now`. */
export function blockedNow(blocked: Readonly<Record<string, BlockedAddress>>, now: number): string[] {
  return Object.entries(blocked)
    .filter(([, b]) => b.until > now)
    .map(([a]) => a);
}

/** Every address the recorded VM holds or sends from, canonical. */
export function addressesHeld(olds: RecordedState): string[] {
  const texts = [
    ...(olds.nics ?? []).flatMap((n) => n.addresses ?? []),
    ...(olds.ipAddresses ?? []).flatMap((n) => n.addresses ?? []),
    ...(olds.egressAddress !== undefined ? [olds.egressAddress] : []),
    ...(olds.proxy?.outgoingAddress !== undefined ? [olds.proxy.outgoingAddress] : []),
  ];
  return [...new Set(texts.flatMap((t) => canonicalIp(bare(t)) ?? []))];
}

/**
 * Why proxy `name` (the state `olds` records) is replaced at this `up` on
 * demand, or undefined: a retirement of its name made after its VM, or an
 * address it holds blocked now. The replace key names the config.
 */
export function retiredNow(
  olds: RecordedState,
  name: string,
  retire: Readonly<Record<string, Retirement>>,
  blocked: Readonly<Record<string, BlockedAddress>>,
  now: number,
): { key: "retire" | "blockedAddresses"; note: string } | undefined {
  const r = retire[name];
  const created = typeof olds.createdAt === "string" ? Date.parse(olds.createdAt) : Number.NaN;
  if (r !== undefined && !Number.isNaN(created) && created < r.before) {
    return { key: "retire", note: `replacing: retired (kvm:retire.${name}): ${r.reason}` };
  }
  for (const a of addressesHeld(olds)) {
    const b = blocked[a];
    if (b !== undefined && b.until > now) {
      return {
        key: "blockedAddresses",
        note: `replacing: its address ${a} is blocked until ${new Date(b.until).toISOString()} (kvm:blockedAddresses): ${b.reason}`,
      };
    }
  }
  return undefined;
}
