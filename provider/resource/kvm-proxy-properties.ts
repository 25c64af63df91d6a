/**
 * Every property of KvmProxy, declared once. An input's row holds its schema
 * type and default, whether it is secret, whether changing it rebuilds the VM
 * or updates it in place, and how diff compares it; an output's row holds its
 * type and who sees it. Read from here: the schema and the reference pages
 * (provider/schema/), the replace and update lists, diff's comparisons
 * (diff.ts), the secrets the class and the plugin mark, the spec hash's
 * inputs, and the outputs the class exposes. Descriptions are the TSDoc of
 * KvmProxyArgs and KvmProxyOutputs (one text for tooltips, schema and docs).
 *
 * Adding an input: its field in KvmProxyArgs (and CheckedInputs), its row
 * here (the type check fails without it), and its checker: the row's
 * `check` for a value checked alone, else a function in check.ts and the
 * shape check gives it in checked-inputs.ts. Pure.
 */

import { MAX_MEMORY_MIB, MAX_VCPUS, MIN_MEMORY_MIB } from "../kvm/domain/domain-xml";
import {
  ANY,
  BOOLEAN,
  INTEGER,
  type Prop,
  STRING,
  STRING_MAP,
  STRINGS,
  type Table,
  type TypeSpec,
  typeRef as t,
} from "../schema/type-spec";
import { DEFAULTS, type KvmProxyArgs, MAX_DISK_GIB } from "./args";
import type { KvmProxyCredentialUrls, KvmProxyOutputs } from "./outputs";

/** What changing an input does to the VM. */
export type Change = "replace" | "update";

/**
 * How diff tells an input changed (diff.ts implements each):
 * - `value`: the old output against the new checked input, key order aside;
 * - `host`: the host the proxy is on against where the new `host` puts it
 *   (a changed way to reach the same host updates in place);
 * - `image`: the image as resolved (a changed `kvm:images` entry too);
 * - `macAddress`: only a fixed MAC counts (libvirt's own is no change);
 * - `nics`: as built (rate limits update in place; a pool that lost the address replaces);
 * - `seed`: the SHA-256 of the bytes, whichever of the text and base64 forms gave them;
 * - `seedBase64`: compared under its text form's row (`seed`);
 * - `proxy`: the block without the password, and the password by its hash.
 */
export type Comparison = "value" | "host" | "image" | "macAddress" | "nics" | "seed" | "seedBase64" | "proxy";

/**
 * A check that needs nothing but the value (check.ts applies it): an integer
 * in a range, or a boolean; absent, the row's default.
 */
export type ValueCheck = { integer: { min: number; max: number } } | "boolean";

/** Why `v` fails `check` (the words check and the decoder of checked inputs both say), or undefined. */
export function valueProblem(check: ValueCheck, v: unknown): string | undefined {
  if (check === "boolean") return typeof v === "boolean" ? undefined : "must be true or false";
  const { min, max } = check.integer;
  if (typeof v !== "number" || !Number.isInteger(v)) return `must be an integer from ${min} to ${max}`;
  return v < min || v > max ? `must be an integer from ${min} to ${max} (got ${v})` : undefined;
}

/** One input of KvmProxy. */
export interface InputProperty extends Prop {
  change: Change;
  /** The input's check when it needs nothing else; otherwise check.ts has its own. */
  check?: ValueCheck;
  /** Default `value`. */
  compare?: Comparison;
  /** What a state written before the input existed stands for (diff compares the new value with it). */
  stateDefault?: (olds: Readonly<Record<string, unknown>>) => unknown;
}

/** One output of KvmProxy. */
export interface OutputProperty extends Prop {
  /**
   * `derived`: computed from a secret (a digest, a hash, key material): a
   * secret output of the dynamic provider, never returned by the plugin.
   * `internal`: what the provider keeps for itself (the resolved image, the
   * owner, whether check chose the name): in the schema, not in the class. `program`: made by the class in the program,
   * never by the provider.
   */
  role?: "derived" | "internal" | "program";
}

const waitForIp: TypeSpec = { oneOf: [BOOLEAN, STRING] };

const replace = (type: TypeSpec, extra: Omit<InputProperty, "type" | "change"> = {}): InputProperty => ({
  type,
  change: "replace",
  ...extra,
});
const update = (type: TypeSpec, extra: Omit<InputProperty, "type" | "change"> = {}): InputProperty => ({
  type,
  change: "update",
  ...extra,
});
type Role = NonNullable<OutputProperty["role"]>;
/** An output's row, its role kept in the row's type (the class's outputs are derived from it). */
const out = (
  type: TypeSpec,
  extra: Omit<OutputProperty, "type" | "role"> = {},
): OutputProperty & { role?: undefined } => ({
  type,
  ...extra,
});
const withRole =
  <R extends Role>(role: R) =>
  (type: TypeSpec, extra: Omit<OutputProperty, "type" | "role"> = {}): OutputProperty & { role: R } => ({
    type,
    ...extra,
    role,
  });
const derived = withRole("derived");
const internal = withRole("internal");
const madeByClass = withRole("program");

/** The inputs of KvmProxy, in the order the schema and the reference list them. */
export const KVM_PROXY_INPUT_PROPERTIES: Table<KvmProxyArgs, InputProperty> = {
  host: replace({ oneOf: [STRING, t("HostInput"), t("HostPool")] }, { compare: "host" }),
  image: replace({ oneOf: [STRING, t("InlineImage")] }, { compare: "image" }),
  userData: replace(STRING, { secret: true, compare: "seed" }),
  userDataBase64: replace(STRING, { secret: true, compare: "seedBase64" }),
  vendorData: replace(STRING, { secret: true, compare: "seed" }),
  vendorDataBase64: replace(STRING, { secret: true, compare: "seedBase64" }),
  installGuestAgent: replace(BOOLEAN, {
    default: DEFAULTS.installGuestAgent,
    check: "boolean",
    stateDefault: () => DEFAULTS.installGuestAgent,
  }),
  memoryMiB: replace(INTEGER, {
    default: DEFAULTS.memoryMiB,
    check: { integer: { min: MIN_MEMORY_MIB, max: MAX_MEMORY_MIB } },
  }),
  vcpus: replace(INTEGER, { default: DEFAULTS.vcpus, check: { integer: { min: 1, max: MAX_VCPUS } } }),
  diskGiB: replace(INTEGER, { default: DEFAULTS.diskGiB, check: { integer: { min: 1, max: MAX_DISK_GIB } } }),
  network: replace(STRING),
  bridge: replace(STRING),
  macAddress: replace(STRING, { compare: "macAddress" }),
  nics: replace({ type: "array", items: t("Nic") }, { compare: "nics" }),
  networkConfig: replace(STRING),
  name: replace(STRING),
  proxy: replace(t("Proxy"), { compare: "proxy" }),
  // No schema default for the port: SDKs would fill in both `proxy.port` and its shorthand
  // `proxyPort`, which check refuses together; the provider's default (3128) applies.
  proxyPort: replace(INTEGER),
  healthCheck: update(
    { oneOf: [BOOLEAN, t("HealthCheck")] },
    { stateDefault: (olds) => (olds.waitForIp === false ? false : {}) },
  ),
  egressCheck: update(t("EgressCheck")),
  waitForIp: update(waitForIp, { stateDefault: () => DEFAULTS.waitForIp }),
  timeouts: update(t("Timeouts"), {
    stateDefault: () => ({ create: DEFAULTS.createSeconds, delete: DEFAULTS.deleteSeconds }),
  }),
  keepOnFailure: update(BOOLEAN, { default: DEFAULTS.keepOnFailure, check: "boolean" }),
  tags: update(STRING_MAP, { stateDefault: () => ({}) }),
  rotation: update(t("Rotation")),
};

/**
 * The outputs of KvmProxy: the provider's and the two the class makes. What
 * check resolved (the image, the NICs, the proxy block, the rotation, the
 * owner) has an object type of its own (outputs.ts), held to the state's
 * types in schema/properties.ts; only a host given in full, a derived
 * secret the schema does not publish, is `Any`.
 */
export const KVM_PROXY_OUTPUT_PROPERTIES = {
  host: out(STRING),
  hostPool: out(STRINGS),
  hostConnection: derived(ANY),
  image: out({ oneOf: [STRING, t("InlineImage")] }),
  resolvedImage: internal(t("ResolvedImage")),
  installGuestAgent: out(BOOLEAN),
  memoryMiB: out(INTEGER),
  vcpus: out(INTEGER),
  diskGiB: out(INTEGER),
  network: out(STRING),
  bridge: out(STRING),
  nics: out({ type: "array", items: t("ResolvedNic") }),
  networkConfig: out(STRING),
  name: out(STRING),
  autoname: internal(BOOLEAN),
  proxy: out(t("PublicProxy")),
  proxyPort: out(INTEGER),
  healthCheck: out({ oneOf: [BOOLEAN, t("HealthCheck")] }),
  egressCheck: out(t("EgressCheck")),
  waitForIp: out(waitForIp),
  timeouts: out({ type: "object", additionalProperties: { type: "number" } }),
  keepOnFailure: out(BOOLEAN),
  tags: out(STRING_MAP),
  rotation: out(t("ResolvedRotation")),
  owner: internal(t("Owner")),
  createdAt: out(STRING),
  bakedImage: out(STRING),
  proxyPasswordHash: derived(STRING),
  health: out(t("ProxyHealth")),
  userDataSha256: derived(STRING),
  vendorDataSha256: derived(STRING),
  adoptedSpecHash: derived(STRING),
  domainName: out(STRING),
  uuid: out(STRING),
  ipAddress: out(STRING),
  ipv6Address: out(STRING),
  ipAddresses: out({ type: "array", items: t("NicAddresses") }),
  macAddress: out(STRING),
  proxyUrl: out(STRING),
  proxyCaCertificate: out(STRING),
  socksUrl: out(STRING),
  egressAddress: out(STRING),
  state: out(STRING),
  keptAfterFailure: out(t("KeptAfterFailure")),
  proxyUrlWithCredentials: madeByClass(STRING, { secret: true }),
  socksUrlWithCredentials: madeByClass(STRING, { secret: true }),
} satisfies Table<KvmProxyOutputs & KvmProxyCredentialUrls, OutputProperty>;

type OutputRows = typeof KVM_PROXY_OUTPUT_PROPERTIES;

/** The outputs the KvmProxy class exposes from the provider: every output without a role. */
export type ClassOutputName = {
  [K in keyof OutputRows]: OutputRows[K] extends { role: Role } ? never : K;
}[keyof OutputRows];

type InputName = keyof KvmProxyArgs;
const inputNames = Object.keys(KVM_PROXY_INPUT_PROPERTIES) as InputName[];
const outputNames = Object.keys(KVM_PROXY_OUTPUT_PROPERTIES) as (keyof OutputRows)[];

/** The inputs whose row's `check` is their whole check. */
export const VALUE_CHECKED: readonly InputName[] = inputNames.filter(
  (k) => KVM_PROXY_INPUT_PROPERTIES[k].check !== undefined,
);

/** Every input property a KvmProxy accepts. */
export const INPUT_PROPERTIES: readonly InputName[] = inputNames;

/**
 * Input properties whose change rebuilds the VM. `image` also covers a
 * changed image config behind a key (url, format, firmware, sha256).
 */
export const REPLACE_PROPERTIES: readonly InputName[] = inputNames.filter(
  (k) => KVM_PROXY_INPUT_PROPERTIES[k].change === "replace",
);

/** Input properties updated in place (no rebuild). */
export const UPDATE_PROPERTIES: readonly InputName[] = inputNames.filter(
  (k) => KVM_PROXY_INPUT_PROPERTIES[k].change === "update",
);

/**
 * Outputs computed from a secret (the password's hash, the seed digests, a
 * host's key material, an import's spec hash): the state keeps them, the
 * provider's diff, read and delete need them. The provider plugin returns
 * none of them to a program (the Node.js SDK prints every output a program
 * receives with `--debug`); it derives them from the resource's old inputs.
 */
export const SECRET_DERIVED_OUTPUTS: readonly string[] = outputNames.filter(
  (k) => KVM_PROXY_OUTPUT_PROPERTIES[k].role === "derived",
);

/** Inputs and outputs that are always stored as secrets (user content may hold credentials). */
export const SECRET_OUTPUTS: readonly string[] = [
  ...inputNames.filter((k) => KVM_PROXY_INPUT_PROPERTIES[k].secret === true),
  ...SECRET_DERIVED_OUTPUTS,
];

/** The outputs the KvmProxy class exposes from the provider (its props' keys): every output without a role. */
export const CLASS_OUTPUTS = outputNames.filter(
  (k): k is ClassOutputName => KVM_PROXY_OUTPUT_PROPERTIES[k].role === undefined,
);
