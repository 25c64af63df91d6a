/**
 * The property tables of the `kvmproxy` package's object types and of
 * ProxyFleet and the provider's configuration: one entry per property of
 * the interfaces users write and read (provider/resource/args.ts,
 * provider/program/proxy-fleet.ts), each typed `Table<Interface>` so that a property added to
 * an interface without its entry fails `tsc`. KvmProxy's own inputs and
 * outputs are its property registry's rows
 * (provider/resource/kvm-proxy-properties.ts). Types, secrets and defaults
 * are here; descriptions are the interfaces' TSDoc.
 */

import type { FleetProxyAuth, MemberPasswords, ProxyFleetArgs } from "../program/proxy-fleet";
import type {
  BakeInput,
  CheckedInputs,
  EgressCheck,
  HealthCheck,
  HostAddressPoolInput,
  HostInput,
  HostPoolInput,
  ImageConfigInput,
  InlineImage,
  JumpHopInput,
  NicAddressPoolInput,
  NicBandwidthInput,
  NicDirectInput,
  NicInput,
  OwnerInput,
  ProxyAuth,
  ProxyInput,
  ProxyTlsInput,
  RotationInput,
  SocksInput,
  SshMaterialInput,
  Timeouts,
  TlsKeyPair,
} from "../resource/args";
import { DEFAULTS } from "../resource/args";
import { KVM_PROXY_INPUT_PROPERTIES } from "../resource/kvm-proxy-properties";
import type {
  KeptAfterFailure,
  KvmProxyOutputs,
  NicAddresses,
  ProxyHealth,
  ProxySocks,
  ProxyUser,
  PublicProxy,
  PublicProxyTls,
  ResolvedBake,
  ResolvedImage,
  ResolvedNic,
  ResolvedRotation,
  TlsCertificate,
} from "../resource/outputs";
import {
  BOOLEAN,
  DURATION as duration,
  INTEGER,
  type ObjectTable,
  PACKAGE,
  type Prop,
  STRING,
  STRING_MAP,
  STRINGS as strings,
  type Table,
  type TypeSpec,
  typeRef as t,
} from "./type-spec";

/** The plugin's resource types (the dynamic provider's KvmProxy is `pulumi-nodejs:dynamic:KvmProxy`). */
export const KVM_PROXY_TOKEN = `${PACKAGE}:index:KvmProxy`;
/** The token the ProxyFleet component has in both (PROXY_FLEET_TYPE). */
export const PROXY_FLEET_TOKEN = `${PACKAGE}:index:ProxyFleet`;

const p = (type: TypeSpec, extra: Omit<Prop, "type"> = {}): Prop => ({ type, ...extra });

const inlineImage: Table<InlineImage> = {
  url: p(STRING),
  format: p(STRING, { default: "qcow2" }),
  firmware: p(STRING, { default: "uefi" }),
  sha256: p(STRING),
};

const healthCheck: Table<HealthCheck> = {
  url: p(STRING),
  expectStatus: p(INTEGER, { default: DEFAULTS.expectStatus }),
  via: p(STRING),
  replaceAfter: p(duration),
};

const egressCheck: Table<EgressCheck> = { url: p(STRING) };

const timeouts: Table<Timeouts> = { create: p(duration), delete: p(duration) };

const proxyAuth: Table<ProxyAuth> = { username: p(STRING), password: p(STRING, { secret: true }) };

const socks: Table<SocksInput> = { port: p(INTEGER, { default: DEFAULTS.socksPort }) };

const tlsKeyPair: Table<TlsKeyPair> = { certificate: p(STRING), privateKey: p(STRING, { secret: true }) };
const proxyTls: Table<ProxyTlsInput> = {
  ca: p(t("TlsKeyPair")),
  certificate: p(STRING),
  privateKey: p(STRING, { secret: true }),
};

// No schema default for the port: SDKs would fill in both `proxy.port` and its shorthand
// `proxyPort`, which check refuses together; the provider's default (3128) applies.
const proxy: Table<ProxyInput> = {
  port: p(INTEGER),
  auth: p(t("ProxyAuth")),
  allowedClients: p(strings),
  allowedDestinations: p(strings),
  outgoingAddress: p(STRING),
  publicClientsWithoutAuth: p(BOOLEAN),
  socks: p(t("Socks")),
  tls: p(t("ProxyTls")),
};

const sshMaterial: Table<SshMaterialInput> = {
  knownHosts: p(STRING),
  knownHostsPath: p(STRING),
  privateKey: p(STRING, { secret: true }),
  privateKeyPath: p(STRING),
  agentSocket: p(STRING),
  passphrase: p(STRING, { secret: true }),
};

const hostInput: Table<HostInput> = {
  key: p(STRING),
  uri: p(STRING),
  ...sshMaterial,
  driverUri: p(STRING),
  domainType: p(STRING),
  pool: p(STRING),
  network: p(STRING),
  bridge: p(STRING),
  callTimeout: p(duration),
  capacity: p({ type: "object", additionalProperties: { oneOf: [INTEGER, STRING] } }),
  addressPools: p({ type: "object", additionalProperties: t("HostAddressPool") }),
  transport: p(STRING),
  jump: p({ oneOf: [STRING, t("JumpHop"), { type: "array", items: { oneOf: [STRING, t("JumpHop")] } }] }),
  sshConfig: p(STRING),
};

const jumpHop: Table<JumpHopInput> = { uri: p(STRING), ...sshMaterial };

const imageConfig: Table<ImageConfigInput> = { ...inlineImage, bake: p({ oneOf: [BOOLEAN, t("Bake")] }) };
const bake: Table<BakeInput> = { packages: p(strings), userData: p(STRING, { secret: true }) };

const { key: _key, ...hostConfig } = hostInput;

const hostRef: TypeSpec = { oneOf: [STRING, t("HostInput")] };

const hostPool: Table<HostPoolInput> = { pool: p({ type: "array", items: hostRef }) };

const rotation: Table<RotationInput> = {
  maxAge: p(duration),
  batch: p(INTEGER),
  group: p(STRING),
  size: p(INTEGER),
};

const nicDirect: Table<NicDirectInput> = { dev: p(STRING), mode: p(STRING, { default: "bridge" }) };
const nicBandwidth: Table<NicBandwidthInput> = { inboundKbps: p(INTEGER), outboundKbps: p(INTEGER) };
const nicAddressPool: Table<NicAddressPoolInput> = { ranges: p(strings) };
const hostAddressPool: Table<HostAddressPoolInput> = {
  ranges: p(strings),
  gateway4: p(STRING),
  gateway6: p(STRING),
  nameservers: p(strings),
  network: p(STRING),
  bridge: p(STRING),
  direct: p(t("NicDirect")),
};

const nic: Table<NicInput> = {
  network: p(STRING),
  bridge: p(STRING),
  direct: p(t("NicDirect")),
  macAddress: p(STRING),
  addresses: p(strings),
  addressPool: p({ oneOf: [t("NicAddressPool"), STRING] }),
  gateway4: p(STRING),
  gateway6: p(STRING),
  nameservers: p(strings),
  bandwidth: p(t("NicBandwidth")),
  filter: p(STRING),
  primary: p(BOOLEAN),
};

const health: Table<ProxyHealth> = {
  ok: p(BOOLEAN),
  checkedAt: p(STRING),
  reason: p(STRING),
  failingSince: p(STRING),
};
const nicAddresses: Table<NicAddresses> = { mac: p(STRING), addresses: p(strings) };
const memberPasswords: Table<MemberPasswords> = { secret: p(STRING, { secret: true }) };
const keptAfterFailure: Table<KeptAfterFailure> = { failedAt: p(STRING), reason: p(STRING) };

const publicProxy: Table<PublicProxy> = {
  port: p(INTEGER),
  auth: p(t("ProxyUser")),
  allowedClients: p(strings),
  allowedDestinations: p(strings),
  outgoingAddress: p(STRING),
  publicClientsWithoutAuth: p(BOOLEAN),
  socks: p(t("ProxySocks")),
  tls: p(t("PublicProxyTls")),
};
const proxyUser: Table<ProxyUser> = { username: p(STRING) };
const proxySocks: Table<ProxySocks> = { port: p(INTEGER) };
const publicProxyTls: Table<PublicProxyTls> = { ca: p(t("TlsCertificate")), certificate: p(STRING) };
const tlsCertificate: Table<TlsCertificate> = { certificate: p(STRING) };
const resolvedNic: Table<ResolvedNic> = {
  network: p(STRING),
  bridge: p(STRING),
  direct: p(t("NicDirect")),
  macAddress: p(STRING),
  mac: p(STRING),
  addresses: p(strings),
  addressPool: p(t("NicAddressPool")),
  hostPool: p(STRING),
  gateway4: p(STRING),
  gateway6: p(STRING),
  nameservers: p(strings),
  bandwidth: p(t("NicBandwidth")),
  filter: p(STRING),
  primary: p(BOOLEAN),
};
const resolvedRotation: Table<ResolvedRotation> = {
  maxAge: p(INTEGER),
  batch: p(INTEGER),
  group: p(STRING),
  size: p(INTEGER),
};
const resolvedImage: Table<ResolvedImage> = {
  url: p(STRING),
  format: p(STRING),
  firmware: p(STRING),
  sha256: p(STRING),
  bake: p(t("ResolvedBake")),
};
const resolvedBake: Table<ResolvedBake> = { packages: p(strings), userDataMac: p(STRING) };
const owner: Table<OwnerInput> = {
  project: p(STRING),
  stack: p(STRING),
  urn: p(STRING),
  resource: p(STRING),
};

/**
 * Whether the schema's type `U` describes `T`: `T` fits it, and neither `T`
 * nor any object in it (each member of a union, each list's items) has a
 * field the schema's type lacks, so nothing goes undescribed or unmarked.
 */
type Describes<T, U> = T extends readonly (infer A)[]
  ? U extends readonly (infer B)[]
    ? Describes<A, B>
    : false
  : T extends object
    ? [T] extends [U]
      ? [Exclude<keyof T, keyof U>] extends [never]
        ? false extends FieldsDescribed<T, U>
          ? false
          : true
        : false
      : false
    : [T] extends [U]
      ? true
      : false;
type FieldsDescribed<T, U> = {
  [K in keyof T & keyof U]-?: Describes<NonNullable<T[K]>, NonNullable<U[K]>>;
}[keyof T & keyof U];
type Holds<T extends true> = T;
/** The state's types, held to the object types the schema gives their outputs (`tsc` fails on a drift). */
export type OutputTypesDescribed = [
  Holds<Describes<NonNullable<KvmProxyOutputs["proxy"]>, PublicProxy>>,
  Holds<Describes<NonNullable<KvmProxyOutputs["nics"]>[number], ResolvedNic>>,
  Holds<Describes<NonNullable<CheckedInputs["rotation"]>, ResolvedRotation>>,
  Holds<Describes<CheckedInputs["resolvedImage"], ResolvedImage>>,
];

/** The object types of the package, by name, each with the interface its TSDoc comes from. */
export const TYPES: Readonly<Record<string, ObjectTable>> = {
  InlineImage: { source: "InlineImage", properties: inlineImage },
  HealthCheck: { source: "HealthCheck", properties: healthCheck },
  EgressCheck: { source: "EgressCheck", properties: egressCheck },
  Timeouts: { source: "Timeouts", properties: timeouts },
  ProxyAuth: { source: "ProxyAuth", properties: proxyAuth },
  Socks: { source: "SocksInput", properties: socks },
  ProxyTls: { source: "ProxyTlsConfig", properties: proxyTls },
  TlsKeyPair: { source: "TlsKeyPair", properties: tlsKeyPair },
  Proxy: { source: "ProxyConfig", properties: proxy },
  HostInput: { source: "HostInput", properties: hostInput },
  HostConfig: {
    source: "HostInput",
    description:
      "A host of the provider's configuration (`kvmproxy:hosts`, or an explicit provider's `hosts`), under its key: the fields of a host given in full but `key`.",
    properties: hostConfig,
  },
  HostPool: { source: "HostPoolInput", properties: hostPool },
  Rotation: { source: "RotationInput", properties: rotation },
  Nic: { source: "NicInput", properties: nic },
  NicDirect: { source: "NicDirectInput", properties: nicDirect },
  NicBandwidth: { source: "NicBandwidthInput", properties: nicBandwidth },
  NicAddressPool: { source: "NicAddressPoolInput", properties: nicAddressPool },
  HostAddressPool: { source: "HostAddressPoolInput", properties: hostAddressPool },
  ProxyHealth: { source: "ProxyHealth", properties: health },
  NicAddresses: { source: "NicAddresses", properties: nicAddresses },
  MemberPasswords: { source: "MemberPasswords", properties: memberPasswords },
  KeptAfterFailure: { source: "KeptAfterFailure", properties: keptAfterFailure },
  JumpHop: { source: "JumpHopInput", properties: jumpHop },
  ImageConfig: { source: "ImageConfigInput", properties: imageConfig },
  Bake: { source: "BakeInput", properties: bake },
  PublicProxy: { source: "PublicProxy", properties: publicProxy },
  ProxyUser: { source: "ProxyUser", properties: proxyUser },
  ProxySocks: { source: "ProxySocks", properties: proxySocks },
  PublicProxyTls: { source: "PublicProxyTls", properties: publicProxyTls },
  TlsCertificate: { source: "TlsCertificate", properties: tlsCertificate },
  ResolvedNic: { source: "ResolvedNic", properties: resolvedNic },
  ResolvedRotation: { source: "ResolvedRotation", properties: resolvedRotation },
  ResolvedImage: { source: "ResolvedImage", properties: resolvedImage },
  ResolvedBake: { source: "ResolvedBake", properties: resolvedBake },
  Owner: { source: "OwnerInput", properties: owner },
};

/** The inputs of the `ProxyFleet` component. */
export const PROXY_FLEET_INPUTS: Table<ProxyFleetArgs> = {
  size: p(INTEGER),
  hosts: p({ type: "array", items: hostRef }),
  proxy: p(t("FleetProxy")),
  rotation: p(t("FleetRotation")),
  memberPasswords: p(t("MemberPasswords")),
};

type FleetProxy = ProxyFleetArgs["proxy"];
const {
  host: _h,
  name: _n,
  rotation: _r,
  macAddress: _m,
  proxy: _p,
  ...memberArgs
} = KVM_PROXY_INPUT_PROPERTIES;
const fleetProxy: Table<FleetProxy> = { ...memberArgs, proxy: p(t("FleetProxyConfig")) };
const fleetProxyConfig: Table<ProxyInput<FleetProxyAuth>> = { ...proxy, auth: p(t("FleetProxyAuth")) };
const fleetProxyAuth: Table<FleetProxyAuth> = { ...proxyAuth };
const fleetRotation: Table<NonNullable<ProxyFleetArgs["rotation"]>> = {
  maxAge: rotation.maxAge,
  batch: rotation.batch,
};

/** The fleet's own types: what every member gets, and its rotation. */
export const FLEET_TYPES: Readonly<Record<string, ObjectTable>> = {
  FleetProxy: {
    source: "KvmProxyArgs",
    description:
      "What every member of a ProxyFleet gets: the arguments of a KvmProxy but its host, name, rotation and MAC address.",
    properties: fleetProxy,
  },
  FleetRotation: { source: "RotationInput", properties: fleetRotation },
  FleetProxyConfig: {
    source: "ProxyConfig",
    description:
      "The proxy block of every member of a ProxyFleet: a KvmProxy's, whose auth may leave the password to `memberPasswords`.",
    properties: fleetProxyConfig,
  },
  FleetProxyAuth: { source: "FleetProxyAuth", properties: fleetProxyAuth },
};

/** The outputs of the `ProxyFleet` component (its class's public outputs). */
export const PROXY_FLEET_OUTPUTS = {
  proxies: p({ type: "array", items: { $ref: `#/resources/${KVM_PROXY_TOKEN}` } }),
  ids: p(strings),
  urls: p(strings),
  urlsWithCredentials: p(strings, { secret: true }),
  socksUrls: p(strings),
  socksUrlsWithCredentials: p(strings, { secret: true }),
  hosts: p(strings),
  egressAddresses: p(strings),
} as const satisfies Readonly<Record<string, Prop>>;

/** The provider's configuration: the stack config keys of namespace `kvm` (`kvmproxy` for the plugin). */
export const CONFIG: Readonly<Record<string, Prop>> = {
  hosts: p(
    { type: "object", additionalProperties: t("HostConfig") },
    {
      description:
        "The hosts by key: each `{uri, knownHosts, privateKey, pool, network, capacity, ...}` (a HostConfig).",
    },
  ),
  images: p(
    { type: "object", additionalProperties: t("ImageConfig") },
    {
      description:
        "The images by key: each `{url, format, firmware, sha256, bake}` (`bake`: `true` or `{packages, userData}`).",
    },
  ),
  sshPrivateKey: p(STRING, {
    secret: true,
    description: "The SSH private key for every ssh:// host that names no key or agent of its own.",
  }),
  retire: p(
    { type: "object", additionalProperties: STRING_MAP },
    {
      description:
        "Proxies to replace at the next `up`, by resource name (a ProxyFleet member's too): each `{reason, before}`, replacing the proxy whose VM was made before `before` (an ISO 8601 time). `pulumi-kvm-proxy retire` writes it.",
    },
  ),
  blockedAddresses: p(
    { type: "object", additionalProperties: STRING_MAP },
    {
      description:
        "Addresses out of service, by address: each `{reason, since, until}` (ISO 8601 times). A proxy made before `since` and holding one is replaced at the next `up`, and no address pool hands it out until `until`. `pulumi-kvm-proxy block` writes it.",
    },
  ),
  stateKey: p(STRING, {
    secret: true,
    description:
      "At least 32 characters (e.g. `openssl rand -base64 32`), kept: what a bake's user-data is named by a keyed digest under in the state and the VMs' metadata (required by an image whose bake has userData).",
  }),
};
