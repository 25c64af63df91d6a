/**
 * Retiring proxies on demand, from the stack config (reviewable there, and
 * written by `pulumi-kvm-proxy retire` and `block`):
 *
 * - `kvm:retire`: resource name → `{reason, before}`: the proxy of that name
 *   (a KvmProxy, or a ProxyFleet's member such as `edge-2`) whose VM was
 *   made before `before` is replaced at the next `up`. Its replacement is
 *   made later, so the entry is spent once it is replaced and may stay.
 * - `kvm:blockedAddresses`: address → `{reason, since, until}`: a proxy made
 *   before `since` and holding the address (a NIC's, the egress address its
 *   check saw, its outgoing address) is replaced at the next `up`, and no
 *   address pool hands the address out until `until`.
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
  /**
   * Epoch ms: when it was blocked. Only VMs made before it are replaced: a
   * replacement that holds the address again (a static address, a shared
   * egress address) is not replaced at every `up`.
   */
  since: number;
}

/** The longest reason kept: a line of preview, not a report. */
export const MAX_REASON_LENGTH = 200;
/** How far in the future `before` or `since` may be: a clock a little ahead, not a date to come. */
const BEFORE_SLACK_MS = 5 * 60_000;

/** Why `v` cannot be a reason, or undefined. */
export function reasonProblem(v: unknown): string | undefined {
  if (typeof v !== "string" || v.trim() === "") return "must be a non-empty string: why, shown at preview";
  if (v.length > MAX_REASON_LENGTH) return `must be at most ${MAX_REASON_LENGTH} characters`;
  // Control and format characters (C0, C1, bidi overrides, zero-width) and line separators: a preview line
  // must read as what it says.
  if (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(v))
    return "must be one line without control, format or bidirectional characters";
  return undefined;
}

/**
 * An unquoted YAML time in the stack's config file (`before: 2026-12-07T10:00:00Z`)
 * reaches the provider as Go's text of it: `2026-12-07 10:00:00 +0000 UTC`.
 */
const GO_TIME = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?) ([+-]\d{2})(\d{2})(?: [A-Za-z0-9+-]+)?$/;

function timeOf(v: unknown): number | undefined {
  if (typeof v !== "string") return undefined;
  const go = GO_TIME.exec(v);
  const text = go !== null ? `${go[1]}T${go[2]}${go[3]}:${go[4]}` : v;
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(text)) return undefined;
  const t = Date.parse(text);
  return Number.isNaN(t) ? undefined : t;
}

/** A time field of an entry: its purpose, shown when it is not a time. */
interface TimeField {
  example: string;
  purpose: string;
}

/**
 * The entries of one config map (`key` → `{reason, <time fields>}`), each
 * entry's reason and times read, every failure named by its path. `keyOf`
 * gives the entry's canonical key, or a reason the key is refused.
 */
function parseEntries<F extends string>(
  raw: unknown,
  key: string,
  keyName: string,
  times: Readonly<Record<F, TimeField>>,
  keyOf: (k: string) => { key: string } | { problem: string },
): {
  entries: { key: string; at: string; reason: string; times: Record<F, number> }[];
  failures: ValidationFailure[];
} {
  const fields = ["reason", ...Object.keys(times)];
  const shape = `{${fields.join(", ")}}`;
  const entries: { key: string; at: string; reason: string; times: Record<F, number> }[] = [];
  const failures: ValidationFailure[] = [];
  if (!given(raw)) return { entries, failures };
  if (!isObject(raw)) {
    failures.push({ property: key, reason: `must be an object: ${keyName} → ${shape}` });
    return { entries, failures };
  }
  for (const [k, entry] of Object.entries(raw)) {
    const at = `${key}.${k}`;
    const canonical = keyOf(k);
    if ("problem" in canonical) {
      failures.push({ property: at, reason: canonical.problem });
      continue;
    }
    if (!isObject(entry)) {
      failures.push({ property: at, reason: `must be ${shape}` });
      continue;
    }
    const before = failures.length;
    const bad = (field: string, reason: string) => failures.push({ property: `${at}.${field}`, reason });
    for (const f of Object.keys(entry))
      if (!fields.includes(f)) bad(f, `unknown property (known: ${fields.join(", ")})`);
    const reason = reasonProblem(entry.reason);
    if (reason !== undefined) bad("reason", reason);
    const read = {} as Record<F, number>;
    for (const [f, t] of Object.entries(times) as [F, TimeField][]) {
      const v = timeOf(entry[f]);
      if (v === undefined) bad(f, `must be a time such as ${t.example}: ${t.purpose}`);
      else read[f] = v;
    }
    if (failures.length === before)
      entries.push({ key: canonical.key, at, reason: entry.reason as string, times: read });
  }
  return { entries, failures };
}

/** `kvm:retire`'s entries, and the failures of those that do not parse (at `key.<name>.<field>`). */
export function parseRetirements(
  raw: unknown,
  key: string,
  now: number,
): { values: Record<string, Retirement>; failures: ValidationFailure[] } {
  const { entries, failures } = parseEntries(
    raw,
    key,
    "resource name",
    { before: { example: "2026-12-07T10:00:00Z", purpose: "VMs made before it are replaced" } },
    (name) => ({ key: name }),
  );
  const values: Record<string, Retirement> = {};
  for (const e of entries) {
    if (e.times.before > now + BEFORE_SLACK_MS) {
      failures.push({
        property: `${e.at}.before`,
        reason: "must not be in the future: the replacement would be made before it too, and replaced again",
      });
    } else values[e.key] = { reason: e.reason, before: e.times.before };
  }
  return { values, failures };
}

/** `kvm:blockedAddresses`' entries by canonical address, and the failures of those that do not parse. */
export function parseBlockedAddresses(
  raw: unknown,
  key: string,
  now: number,
): { values: Record<string, BlockedAddress>; failures: ValidationFailure[] } {
  const { entries, failures } = parseEntries(
    raw,
    key,
    "address",
    {
      since: {
        example: "2026-12-07T10:00:00Z",
        purpose: "when it was blocked (VMs made before it are replaced)",
      },
      until: {
        example: "2026-12-14T10:00:00Z",
        purpose: "the address is kept out of service until then",
      },
    },
    (address) => {
      const canonical = canonicalIp(address);
      return canonical === undefined ? { problem: "is not an IPv4 or IPv6 address" } : { key: canonical };
    },
  );
  const values: Record<string, BlockedAddress> = {};
  for (const e of entries) {
    if (e.times.since > now + BEFORE_SLACK_MS) {
      failures.push({
        property: `${e.at}.since`,
        reason:
          "must not be in the future: every VM holding the address would be replaced at every up until then",
      });
    } else if (e.times.since > e.times.until) {
      failures.push({ property: `${e.at}.until`, reason: "must not be before since" });
    } else values[e.key] = { reason: e.reason, ...e.times };
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
 * Whether a replacement of the recorded VM would hold `address` again: it
 * holds it other than through an address pool (a static NIC address, its
 * outgoing address, a DHCP lease of a MAC the user gave, or an egress
 * address it shares through NAT).
 */
export function holdsAgainWhenReplaced(olds: RecordedState, address: string): boolean {
  const is = (text: string | undefined) => text !== undefined && canonicalIp(bare(text)) === address;
  const nics = olds.nics ?? [];
  if (nics.some((n) => n.addressPool === undefined && (n.addresses ?? []).some(is))) return true;
  if (is(olds.proxy?.outgoingAddress)) return true;
  // A DHCP NIC with the MAC the user gave gets the same lease back.
  const fixedMacs = new Set(
    nics
      .filter(
        (n) => n.macAddress !== undefined && n.addressPool === undefined && (n.addresses ?? []).length === 0,
      )
      .map((n) => n.macAddress),
  );
  if ((olds.ipAddresses ?? []).some((n) => fixedMacs.has(n.mac) && (n.addresses ?? []).some(is))) return true;
  const onOwnNic = [...nics, ...(olds.ipAddresses ?? [])].some((n) => (n.addresses ?? []).some(is));
  return is(olds.egressAddress) && !onOwnNic;
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
    // A VM made since the block holds the address again by design (a static address): not replaced again.
    if (b !== undefined && b.until > now && !Number.isNaN(created) && created < b.since) {
      return {
        key: "blockedAddresses",
        note: `replacing: its address ${a} is blocked until ${new Date(b.until).toISOString()} (kvm:blockedAddresses): ${b.reason}`,
      };
    }
  }
  return undefined;
}
