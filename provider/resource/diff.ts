/**
 * `diff`: which input changes rebuild the VM and which are applied in place.
 *
 * Compares the old outputs (which carry the checked inputs, refreshed with
 * what libvirt reports) with the new checked inputs. The serialized provider
 * (`__provider`) and the owner record are never compared, so upgrading the
 * provider code or renaming the stack does not show as a change.
 */
import { canonicalJson } from "../kvm/domain/metadata";
import { inPool } from "../kvm/network/address-pool";
import { bare } from "../kvm/network/ip";
import type { NicBandwidth, NicSpec } from "../kvm/network/nic";
import { type CheckedInputs, DEFAULTS, hostEntryOf, isUnknown, UNKNOWN } from "./args";
import { hostKeysOf, isHostEntry } from "./check-placement";
import { decodeBase64 } from "./check-seed";
import { decodeChecked } from "./checked-inputs";
import { defaultUserData, legacyDefaultUserData } from "./default-user-data";
import {
  type Change,
  type Comparison,
  INPUT_PROPERTIES,
  KVM_PROXY_INPUT_PROPERTIES,
} from "./kvm-proxy-properties";
import { nicsAsBuilt, proxyPasswordHashOf, publicProxy, seedDigest, specHashOf } from "./mapping";
import type { RecordedState } from "./recorded-state";

/** What diff decided. */
export interface DiffOutcome {
  changes: boolean;
  /** Input properties whose change rebuilds the VM. */
  replaces: string[];
  /** Input properties changed in place. */
  updates: string[];
  /** True when the old VM must be deleted before its replacement is created. */
  deleteBeforeReplace: boolean;
}

type Props = Record<string, unknown>;
type InputName = (typeof INPUT_PROPERTIES)[number];

/** Whether two input values are the same, key order aside (canonical JSON); an unknown new value never is. */
export function same(a: unknown, b: unknown): boolean {
  if (isUnknown(b)) return false;
  if (a === undefined || b === undefined) return a === b;
  try {
    return canonicalJson(a) === canonicalJson(b);
  } catch {
    return false;
  }
}

/*
 * Seed parts are compared by the digest of their bytes: the outputs hold only
 * `<key>Sha256`, and the text and base64 forms of one part are one part (the
 * same bytes given the other way are no change).
 */
function oldDigest(olds: RecordedState, key: string): unknown {
  const d = olds[`${key}Sha256`];
  if (d !== undefined) return d;
  // State written before the outputs dropped the texts.
  const text = olds[key];
  return typeof text === "string" ? seedDigest(text) : undefined;
}

function newDigest(news: Props, key: string): unknown {
  const b64 = news[`${key}Base64`];
  if (b64 !== undefined) return typeof b64 === "string" ? seedDigest(decodeBase64(b64) ?? b64) : b64;
  const text = news[key];
  return typeof text === "string" ? seedDigest(text) : text;
}

/** An old value, or what a state written before its input existed stands for (the input's `stateDefault`). */
function oldValue(olds: RecordedState, key: InputName): unknown {
  const v = olds[key];
  return v !== undefined ? v : KVM_PROXY_INPUT_PROPERTIES[key].stateDefault?.(olds);
}

/**
 * The proxy block changed: compared without the password, which the old
 * outputs hold only as the salted hash (a secret output) and the new inputs
 * as the secret itself, hashed here the same way.
 */
function proxyChanged(olds: RecordedState, news: Props): boolean {
  const want = news.proxy;
  if (isUnknown(want)) return true;
  const oldProxy = olds.proxy;
  if (want === undefined || oldProxy === undefined) return want !== oldProxy;
  const checked = { proxy: want as CheckedInputs["proxy"], name: news.name as string };
  if (!same(oldProxy, publicProxy(checked))) return true;
  return !same(olds.proxyPasswordHash, proxyPasswordHashOf(checked));
}

/**
 * A proxy built with the default user-data of 0.1.0 (which installed squid
 * itself) is not rebuilt because that default changed: its recorded digest
 * is the old default's, and the program still gives no user-data.
 */
function legacyDefaultKept(olds: RecordedState, news: Props): boolean {
  if (news.userData !== defaultUserData() || olds.userDataSha256 === undefined) return false;
  return olds.userDataSha256 === seedDigest(legacyDefaultUserData(olds.proxyPort ?? DEFAULTS.proxyPort));
}

function isPool(v: unknown): v is { pool: unknown } {
  return typeof v === "object" && v !== null && "pool" in v && !isHostEntry(v);
}

/**
 * Whether the new `host` puts the proxy on another host than the one it is
 * on (the state's `host` output: a key). A host given in full is the host
 * of its `key`: moving between `host: "lab"` and `host: {key: "lab", ...}`,
 * or reaching the host another way, moves nothing.
 */
function hostMoved(olds: RecordedState, news: Props): boolean {
  const want = news.host;
  if (isUnknown(want)) return true;
  if (isPool(want)) {
    // A placed proxy stays where it is while its host is in the pool: a changed pool moves nobody else.
    const pool = want.pool;
    return (
      isUnknown(pool) ||
      !Array.isArray(pool) ||
      olds.host === undefined ||
      !hostKeysOf(want).includes(olds.host)
    );
  }
  if (isHostEntry(want)) return isUnknown(want.key) || want.key !== olds.host;
  return !same(olds.host, want);
}

/**
 * The proxy's host is given in full and reached otherwise than the state
 * records (or the state does not record it yet): the host itself, or its
 * entry in the pool.
 */
function connectionChanged(olds: RecordedState, news: Props): boolean {
  const entry =
    olds.host === undefined ? undefined : hostEntryOf(news.host as CheckedInputs["host"], olds.host);
  return entry !== undefined && !same(olds.hostConnection, entry);
}

/** One changed input: the property preview names, and what its change does. */
interface Changed {
  property: string;
  change: Change;
}

/**
 * How each way of comparing an input (its row's `compare`) tells a change:
 * undefined when the input did not change.
 */
const COMPARISONS: Record<
  Comparison,
  (olds: RecordedState, news: Props, key: InputName) => Changed | undefined
> = {
  value: (olds, news, key) =>
    same(oldValue(olds, key), news[key])
      ? undefined
      : { property: key, change: KVM_PROXY_INPUT_PROPERTIES[key].change },
  host: (olds, news) =>
    hostMoved(olds, news)
      ? { property: "host", change: "replace" }
      : connectionChanged(olds, news)
        ? { property: "host", change: "update" }
        : undefined,
  image: (olds, news) => {
    const oldImage = olds.resolvedImage ?? olds.image;
    const newImage = olds.resolvedImage !== undefined ? news.resolvedImage : news.image;
    return same(oldImage, newImage) ? undefined : { property: "image", change: "replace" };
  },
  macAddress: (olds, news) => {
    const want = news.macAddress;
    if (want === undefined) return undefined;
    const have = olds.macAddress;
    return want === UNKNOWN || have === undefined || have.toLowerCase() !== String(want).toLowerCase()
      ? { property: "macAddress", change: "replace" }
      : undefined;
  },
  // Rate limits change in place; anything else about a NIC is fixed at first boot.
  nics: (olds, news) =>
    !same(nicsAsBuilt(olds.nics), nicsAsBuilt(news.nics)) || poolLeft(olds.nics, news.nics)
      ? { property: "nics", change: "replace" }
      : bandwidthChanges(olds.nics, news.nics as NicSpec[] | undefined).length > 0
        ? { property: "nics", change: "update" }
        : undefined,
  seed: (olds, news, key) => {
    if (key === "userData" && legacyDefaultKept(olds, news)) return undefined;
    if (same(oldDigest(olds, key), newDigest(news, key))) return undefined;
    return { property: news[`${key}Base64`] !== undefined ? `${key}Base64` : key, change: "replace" };
  },
  seedBase64: () => undefined,
  proxy: (olds, news) => (proxyChanged(olds, news) ? { property: "proxy", change: "replace" } : undefined),
};

/** Every input whose change diff finds, in the registry's order. */
function changedInputs(olds: RecordedState, news: Props, only?: Change): Changed[] {
  return INPUT_PROPERTIES.flatMap((key) => {
    const row = KVM_PROXY_INPUT_PROPERTIES[key];
    if (only !== undefined && row.change !== only) return [];
    const found = COMPARISONS[row.compare ?? "value"](olds, news, key);
    return found !== undefined ? [found] : [];
  });
}

/**
 * Decides the diff of one KvmProxy.
 *
 * - Each input is compared as its row in kvm-proxy-properties.ts says, and
 *   its change rebuilds the VM or is applied in place as the row says
 *   (docs/reference/kvm-proxy.md marks the former "replaces"). A host
 *   reached another way, and NIC rate limits, update in place.
 * - A VM found stopped by a refresh is updated too (update starts it
 *   again), a degraded proxy probed again.
 * - A VM kept after its create failed (`keptAfterFailure`): replaced,
 *   deleted first, whatever the inputs ({@link keptDiff}).
 * - deleteBeforeReplace only when the replacement would collide with the old
 *   VM on the same host ({@link collisions}): the same user-fixed name, a
 *   fixed MAC or a static address kept. Otherwise (an autoname, derived
 *   MACs, addresses by DHCP) the replacement is created before the old one
 *   is deleted.
 * - A VM adopted by `pulumi import` has in its state what its metadata
 *   holds: no seed digests, but the spec hash it was built from
 *   (`adoptedSpecHash`). New inputs that build the same spec replace
 *   nothing; its tags update in place; the provider's own settings
 *   (healthCheck, waitForIp, timeouts) are taken as the program gives them.
 */
export function diffProxy(olds: RecordedState, news: Props): DiffOutcome {
  const kept = keptDiff(olds, news);
  if (kept !== undefined) return kept;
  const adopted = adoptedDiff(olds, news);
  if (adopted !== undefined) return adopted;
  const changed = changedInputs(olds, news);
  const replaces = changed.filter((c) => c.change === "replace").map((c) => c.property);
  const updates = changed.filter((c) => c.change === "update").map((c) => c.property);
  // A VM found stopped is started again, a degraded proxy probed again (update): `up` shows both.
  const stopped = olds.state === "stopped" || olds.state === "failed" || olds.state === "degraded";
  const replacing = replaces.length > 0;
  return {
    changes: replacing || updates.length > 0 || stopped,
    replaces,
    updates,
    deleteBeforeReplace: replacing && collisions(olds, news).length > 0,
  };
}

/** The output that marks a VM kept after its create failed (`keepOnFailure`). */
export const KEPT_MARK = "keptAfterFailure";

/**
 * The diff of a VM kept after its create failed: whatever the new inputs,
 * it is replaced, and deleted first. It serves nothing, so nothing is lost
 * meanwhile, and it frees what a replacement may need: a fixed name, a
 * static address, room on the host. Undefined for any other VM.
 */
function keptDiff(olds: RecordedState, news: Props): DiffOutcome | undefined {
  if (olds[KEPT_MARK] === undefined) return undefined;
  const updates = changedInputs(olds, news, "update").map((c) => c.property);
  return { changes: true, replaces: [KEPT_MARK], updates, deleteBeforeReplace: true };
}

/** What preview says of a kept VM's replacement, or undefined when `olds` is no kept VM. */
export function keptReplaceNote(olds: RecordedState): string | undefined {
  const mark = olds[KEPT_MARK];
  if (mark === undefined) return undefined;
  const when = typeof mark.failedAt === "string" ? ` at ${mark.failedAt}` : "";
  return `replace (delete first): the VM was kept for inspection after its create failed${when} (keepOnFailure)`;
}

/** The diff of an imported VM whose spec the new inputs build again; undefined otherwise. */
function adoptedDiff(olds: RecordedState, news: Props): DiffOutcome | undefined {
  if (olds.adoptedSpecHash === undefined || isUnknown(news) || news.resolvedImage === undefined) {
    return undefined;
  }
  if (specHashOf(decodeChecked(news)) !== olds.adoptedSpecHash) return undefined;
  const updates = same(olds.tags ?? {}, news.tags ?? {}) ? [] : ["tags"];
  return { changes: updates.length > 0, replaces: [], updates, deleteBeforeReplace: false };
}

/**
 * What a replacement would share with the VM it replaces, so that the old
 * one must go first: the same fixed name, a fixed MAC kept, or a static
 * address kept (two VMs answering ARP/ND for one address, and the old one
 * possibly answering the new one's health check). On one host only; a pooled
 * replacement may land on the same host, so it counts as one. Each item says
 * what is kept, for preview.
 */
export function collisions(olds: RecordedState, news: Props): string[] {
  const sameHost = isPool(news.host) || !hostMoved(olds, news);
  if (!sameHost) return [];
  const out: string[] = [];
  if (news.autoname !== true && same(olds.name, news.name)) out.push(`name ${String(news.name)} kept`);
  const oldMacs = [
    ...givenMacs(olds.nics),
    ...(olds.macAddress !== undefined ? [olds.macAddress.toLowerCase()] : []),
  ];
  const newMacs = [
    ...givenMacs(news.nics),
    ...(typeof news.macAddress === "string" ? [news.macAddress.toLowerCase()] : []),
  ];
  for (const m of newMacs) if (oldMacs.includes(m)) out.push(`MAC ${m} kept`);
  const oldAddresses = staticAddresses(olds.nics);
  for (const a of staticAddresses(news.nics))
    if (oldAddresses.includes(a)) out.push(`static address ${a} kept`);
  return out;
}

/** The static addresses (without prefix) of a NIC list as the state or the checked inputs hold it. */
function staticAddresses(nics: unknown): string[] {
  if (!Array.isArray(nics)) return [];
  return nics.flatMap((n) => {
    const addresses = typeof n === "object" && n !== null ? (n as Props).addresses : undefined;
    return Array.isArray(addresses)
      ? addresses.filter((a): a is string => typeof a === "string").map(bare)
      : [];
  });
}

/**
 * A pool NIC whose address the new pool no longer holds (its ranges shrank
 * or moved): the VM must take another one. NICs compared by position.
 */
function poolLeft(olds: unknown, news: unknown): boolean {
  if (!Array.isArray(olds) || !Array.isArray(news) || isUnknown(news)) return false;
  return news.some((n, i) => {
    const pool = (n as NicSpec | undefined)?.addressPool;
    const had = (olds[i] as NicSpec | undefined)?.addresses;
    return pool !== undefined && Array.isArray(had) && had.some((a) => !inPool(pool, a));
  });
}

/** The MACs the user fixed in `nics` (derived ones change with the name, so they never collide). */
function givenMacs(nics: unknown): string[] {
  if (!Array.isArray(nics)) return [];
  return nics
    .map((n) => (typeof n === "object" && n !== null ? (n as Props).macAddress : undefined))
    .filter((m): m is string => typeof m === "string")
    .map((m) => m.toLowerCase());
}

/** The NICs (by MAC) whose bandwidth differs between the state and the new inputs; `{}` lifts the limits. */
export function bandwidthChanges(
  olds: unknown,
  news: readonly NicSpec[] | undefined,
): [string, NicBandwidth][] {
  const before = new Map<string, unknown>();
  if (Array.isArray(olds)) for (const n of olds as NicSpec[]) before.set(n.mac as string, n.bandwidth);
  return (news ?? []).flatMap((n): [string, NicBandwidth][] =>
    n.mac !== undefined && before.has(n.mac) && !same(before.get(n.mac) ?? {}, n.bandwidth ?? {})
      ? [[n.mac, n.bandwidth ?? {}]]
      : [],
  );
}
