/**
 * `check` for where a proxy goes and how long it lives: `host` (one key of
 * `kvm:hosts`; a host given in full, `{key, uri, ...}` with the fields of a
 * `kvm:hosts` entry, so another resource of the program can make it; or
 * `{pool: [keys]}` to be placed on the one with the most room at create) and
 * `rotation` (`{maxAge, batch}`: replaced once older than maxAge, at most
 * `batch` of a fleet per `up`).
 */
import { configKeyProblem, type HostConfig } from "../kvm/config/host-config";
import { secretName } from "../kvm/config/image";
import { hashSpec } from "../kvm/domain/metadata";
import { parseDuration } from "../kvm/duration";
import { isObject } from "../kvm/fields";
import { Failures, quote } from "../kvm/validation";
import { UNKNOWN } from "./args";
import { parseHostEntry, type StackConfig } from "./stack-config";

/** One host key of the stack config, checked; failures at `property`. */
function hostKey(f: Failures, property: string, v: unknown, config: StackConfig): HostConfig | undefined {
  if (v === UNKNOWN) return undefined;
  if (typeof v !== "string" || v === "") {
    f.fail(property, "must be a string: a key of the stack config kvm:hosts");
    return undefined;
  }
  const broken = Object.hasOwn(config.hostFailures, v) ? config.hostFailures[v] : undefined;
  if (broken !== undefined) {
    for (const x of broken) f.fail(property, `stack config ${x.property}: ${x.reason}`);
    return undefined;
  }
  const host = Object.hasOwn(config.hosts, v) ? config.hosts[v] : undefined;
  if (host === undefined) {
    const known = Object.keys(config.hosts);
    f.fail(
      property,
      `unknown host ${quote(v)}: not a key of the stack config kvm:hosts (configured: ${
        known.length > 0 ? known.join(", ") : "none"
      })`,
    );
  }
  return host;
}

/**
 * Records that `owner` gives host `key` the connection whose digest is
 * `connection`; returns the owner that gave that key another connection
 * first, if any (the runtime keeps the claims of one program's proxies).
 */
export type HostClaim = (key: string, connection: string, owner: string) => string | undefined;

/** Who checks a host given in full, and where its key's claims go; none: not checked across resources. */
export interface HostClaimContext {
  claim: HostClaim;
  /** The resource's URN (its name when the URN is not known). */
  owner: string;
}

/** A host given in full: an object naming its `key` or its `uri` (a pool names neither). */
export function isHostEntry(v: unknown): v is Record<string, unknown> {
  return isObject(v) && ("key" in v || "uri" in v);
}

/**
 * A host given in full, `{key, uri, ...}`: the fields of a `kvm:hosts` entry
 * under the same rules, plus `key`, its name in provider IDs, placement and
 * the image cache (the key it has, or would have, in `kvm:hosts`: a stack
 * may move between the two forms without replacing anything). Values not
 * known yet (preview) are passed over. Failures at `host.<field>`.
 * Returns the host config when every value is known and valid.
 */
export function checkHostEntry(
  f: Failures,
  v: Record<string, unknown>,
  config: StackConfig,
  /** The input's path: `host`, or `host.pool[i]`. */
  at = "host",
  claims?: HostClaimContext,
): HostConfig | undefined {
  const field = (x: string) => `${at}.${x}`;
  const { key, ...entry } = v;
  if (key === UNKNOWN) return undefined;
  const keyProblem =
    key === undefined || key === null
      ? "is required: the host's name in provider IDs and placement (its key in kvm:hosts, if it has one)"
      : configKeyProblem(key);
  if (keyProblem !== undefined) {
    f.fail(field("key"), keyProblem);
    return undefined;
  }
  if (JSON.stringify(entry).includes(UNKNOWN)) return undefined;
  const own = new Failures();
  const host = parseHostEntry(key as string, entry, own, config.sharedSshKey);
  // The engine prints a failing top-level input's value beside the reason: a host in full may hold a key.
  for (const x of own.list) f.fail(x.property === "" ? secretName(at) : field(x.property), x.reason);
  if (host === undefined) return undefined;
  const configured = Object.hasOwn(config.hosts, host.key) ? config.hosts[host.key] : undefined;
  if (configured !== undefined && JSON.stringify(configured) !== JSON.stringify(host)) {
    f.fail(
      field("key"),
      `${quote(host.key)} is also a key of the stack config kvm:hosts, set up otherwise there: give host: ${quote(host.key)}, the same settings, or another key`,
    );
    return undefined;
  }
  // One key names one connection in the runtime's host pool: another resource giving the key
  // otherwise would send this one's creates and deletes to whichever registered last. The
  // digest is of the parsed host with its keys sorted, so key order does not count and no key
  // material is kept.
  const other = claims?.claim(host.key, hashSpec(host), claims.owner);
  if (other !== undefined) {
    f.fail(
      field("key"),
      `${quote(host.key)} is also given by the resource ${quote(other.split("::").pop() ?? other)} with another connection (uri, key material or settings): one key names one host, so give the same host there or another key`,
    );
    return undefined;
  }
  return host;
}

/**
 * `host`: a key, a host in full (`{key, uri, ...}`), or `{pool: [keys or
 * hosts in full]}` (non-empty, no key twice). Returns the one host's config
 * when `host` names one and it is known and valid (undefined for a pool).
 */
export function checkHost(
  f: Failures,
  v: unknown,
  config: StackConfig,
  claims?: HostClaimContext,
): HostConfig | undefined {
  if (v === undefined || v === null || v === "") {
    f.fail("host", "is required: a key of the stack config kvm:hosts, {key, uri, ...}, or {pool: [keys]}");
    return undefined;
  }
  if (v === UNKNOWN) return undefined;
  if (isHostEntry(v)) return checkHostEntry(f, v, config, "host", claims);
  if (typeof v === "string") return hostKey(f, "host", v, config);
  // Failures about a whole value that is no key are named so that the engine prints no value:
  // the engine prints a failing top-level input beside the reason, and this one may hold a key.
  const shapes =
    "a key of the stack config kvm:hosts, a host in full {key, uri, ...}, or a pool {pool: [...]}";
  if (!isObject(v)) {
    f.fail(secretName("host"), `must be ${shapes}`);
    return undefined;
  }
  for (const k of Object.keys(v)) if (k !== "pool") f.fail(`host.${k}`, "unknown property (known: pool)");
  const pool = v.pool;
  if (pool === UNKNOWN) return;
  if (pool === undefined || pool === null) {
    f.fail(secretName("host"), `must be ${shapes}: it names neither key, uri nor pool`);
    return;
  }
  if (!Array.isArray(pool) || pool.length === 0) {
    f.fail("host.pool", "must be a non-empty list of keys of the stack config kvm:hosts");
    return;
  }
  const seen = new Set<unknown>();
  pool.forEach((item, i) => {
    const k = isHostEntry(item) ? item.key : item;
    if (k !== UNKNOWN && seen.has(k)) f.fail(`host.pool[${i}]`, `${quote(String(k))} is listed twice`);
    seen.add(k);
    if (isHostEntry(item)) checkHostEntry(f, item, config, `host.pool[${i}]`, claims);
    else hostKey(f, `host.pool[${i}]`, item, config);
  });
  return undefined;
}

/** The host keys `host` names: the key, a full host's key, or its pool's (what is not a string is left out). */
export function hostKeysOf(v: unknown): string[] {
  if (typeof v === "string") return [v];
  if (isHostEntry(v)) return typeof v.key === "string" ? [v.key] : [];
  const pool = isObject(v) ? v.pool : undefined;
  if (!Array.isArray(pool)) return [];
  return pool
    .map((item) => (isHostEntry(item) ? item.key : item))
    .filter((k): k is string => typeof k === "string");
}

/** The rotation of a proxy after check. */
export interface CheckedRotation {
  /** Seconds. */
  maxAge: number;
  /** Most proxies of one group replaced per `up` (default 1). */
  batch: number;
  /** The fleet the proxy belongs to (its members rotate together), when one. */
  group?: string;
  /** The fleet's size: when every member has been seen, its rotations are decided. */
  size?: number;
}

const ROTATION_FIELDS = ["maxAge", "batch", "group", "size"];
/** Shortest maxAge accepted: a proxy rotated every few minutes is churn, not rotation. */
const MIN_MAX_AGE_SECONDS = 60;

/** `rotation`: `{maxAge, batch, group, size}` (the last two set by ProxyFleet). */
export function checkRotation(f: Failures, v: unknown): CheckedRotation | undefined {
  if (v === undefined || v === null || v === UNKNOWN) return undefined;
  if (!isObject(v)) {
    f.fail("rotation", 'must be {maxAge, batch}, e.g. {maxAge: "7d", batch: 2}');
    return undefined;
  }
  for (const k of Object.keys(v)) {
    if (!ROTATION_FIELDS.includes(k))
      f.fail(`rotation.${k}`, `unknown property (known: ${ROTATION_FIELDS.join(", ")})`);
  }
  const maxAge = parseDuration(v.maxAge);
  if (v.maxAge === UNKNOWN) return undefined;
  if (maxAge === undefined || maxAge < MIN_MAX_AGE_SECONDS) {
    f.fail(
      "rotation.maxAge",
      `must be a duration of at least ${MIN_MAX_AGE_SECONDS}s, such as "7d" or "12h"`,
    );
    return undefined;
  }
  const int = (field: "batch" | "size", def: number | undefined): number | undefined => {
    const x = v[field];
    if (x === undefined || x === null) return def;
    if (typeof x !== "number" || !Number.isInteger(x) || x < 1) {
      f.fail(`rotation.${field}`, "must be a positive integer");
      return def;
    }
    return x;
  };
  const group = v.group;
  if (group !== undefined && (typeof group !== "string" || group === "")) {
    f.fail("rotation.group", "must be a non-empty string");
  }
  const size = int("size", undefined);
  return {
    maxAge,
    batch: int("batch", 1) ?? 1,
    ...(typeof group === "string" && group !== "" ? { group } : {}),
    ...(size !== undefined ? { size } : {}),
  };
}

/**
 * The configs of every host `host` may place the proxy on (the one host,
 * or each of its pool's), when each is known and valid (read as check
 * reads them, failures left to checkHost); undefined otherwise.
 */
export function candidateHosts(v: unknown, config: StackConfig): HostConfig[] | undefined {
  const one = (item: unknown): HostConfig | undefined => {
    if (typeof item === "string") return Object.hasOwn(config.hosts, item) ? config.hosts[item] : undefined;
    if (!isHostEntry(item) || typeof item.key !== "string" || JSON.stringify(item).includes(UNKNOWN))
      return undefined;
    const { key, ...entry } = item;
    return parseHostEntry(key, entry, new Failures(), config.sharedSshKey);
  };
  const items = isObject(v) && !isHostEntry(v) ? (v as Record<string, unknown>).pool : [v];
  if (!Array.isArray(items) || items.length === 0) return undefined;
  const hosts = items.map(one);
  return hosts.every((h) => h !== undefined) ? (hosts as HostConfig[]) : undefined;
}
