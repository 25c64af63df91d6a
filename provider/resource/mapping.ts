/**
 * The resource's inputs and outputs mapped onto the KVM core and back:
 * checked inputs → the create spec; a VM's status → output properties; a
 * VM's metadata → inputs (adoption with KvmProxy.get). Pure.
 */
import { createHash } from "node:crypto";
import { ProviderError } from "../errors";
import type { ImageConfig, ImageIdentity } from "../kvm/config/image";
import { hashSpec, type ProxyMetadata } from "../kvm/domain/metadata";
import type { CreateSpec, VmStatus } from "../kvm/host/operations";
import { inPool } from "../kvm/network/address-pool";
import { namesHostPool, type PoolHost, resolveHostPools } from "../kvm/network/host-pools";
import { bare, hostPort, parseCidr, subnetOf } from "../kvm/network/ip";
import { type NicAttachment, type NicSpec, shorthandNic } from "../kvm/network/nic";
import { type CheckedNic, decodeNics, filledFromPool } from "../kvm/network/nic-rules";
import { DEFAULT_ALLOWED_CLIENTS } from "../kvm/proxy/access";
import type { ProxySetup, SquidConfInputs } from "../kvm/proxy/setup";
import { issuedAtCreate, tlsPublic } from "../kvm/tls/proxy-tls";
import { Failures, ValidationError } from "../kvm/validation";
import { addressOutputs } from "./address-outputs";
import { type CheckedInputs, DEFAULTS, hostEntryOf, placementOf } from "./args";
import { decodeBase64 } from "./check-seed";
import { REPLACE_PROPERTIES } from "./kvm-proxy-properties";
import type { KvmProxyOutputs, ProxyHealth } from "./outputs";

type Props = Record<string, unknown>;

/** SHA-256 (hex) of a seed part's bytes (text as UTF-8): what the outputs keep instead of it. */
export function seedDigest(data: string | Buffer): string {
  return typeof data === "string"
    ? createHash("sha256").update(data, "utf8").digest("hex")
    : createHash("sha256").update(data).digest("hex");
}

/** Keys whose value is undefined, dropped (protobuf Structs cannot carry undefined). */
export function defined<T extends Props>(o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k];
  return o;
}

/** Where a proxy's NICs are given: `nics`, or the one-NIC shorthand. */
type NicInputs = { nics?: readonly NicSpec[] } & Pick<CheckedInputs, "network" | "bridge" | "macAddress">;

/**
 * The VM's NICs as the inputs (or the state) hold them, unchecked: those of
 * `nics`, or the one of the shorthand (`network` or `bridge`, `macAddress`;
 * none of them: the host's NIC). For reading only (where a probe goes); what
 * builds goes through {@link vmNicsOf}.
 */
export function vmNicSpecsOf(c: NicInputs): NicSpec[] {
  if (c.nics !== undefined) return [...c.nics];
  return [shorthandNic(shorthandAttachment(c), c.macAddress)];
}

function shorthandAttachment(c: NicInputs): NicAttachment | undefined {
  return c.bridge !== undefined
    ? { kind: "bridge", bridge: c.bridge }
    : c.network !== undefined
      ? { kind: "network", network: c.network }
      : undefined;
}

/**
 * The VM's NICs, checked: the one door from the checked inputs to the KVM
 * core, which knows no shorthand and trusts a checked NIC. Those of `nics`
 * were checked where the inputs were (check, then `decodeChecked`); the
 * shorthand's one NIC is held to the rules here. Check builds the preview's
 * seed from it, create the VM. Throws a ValidationError naming a NIC that
 * breaks a rule.
 */
export function vmNicsOf(c: Pick<CheckedInputs, "nics" | "network" | "bridge" | "macAddress">): CheckedNic[] {
  return (
    c.nics ?? decodeNics([shorthandNic(shorthandAttachment(c), c.macAddress)], "invalid NICs in the inputs")
  );
}

/**
 * The spec hash recorded in the metadata: every input whose change rebuilds
 * the VM (REPLACE_PROPERTIES, the image as resolved), so a new such input
 * joins the hash by being listed there.
 */
export function specHashOf(c: CheckedInputs): string {
  const spec: Props = {};
  for (const key of REPLACE_PROPERTIES) spec[key] = key === "image" ? c.resolvedImage : c[key];
  // Where it lives is not how it is built: a pooled proxy's hash does not follow the pool's members,
  // and a host given in full counts by its key (how it is reached is no part of the VM).
  const placed = placementOf(c.host);
  spec.host = placed.pool !== undefined ? "pool" : placed.key;
  // Rate limits are updated in place, a pool's address is taken at create: not part of how the VM is built.
  if (c.nics !== undefined) spec.nics = nicsAsBuilt(c.nics);
  // The metadata is readable on the host: the password enters only as the salted hash the seed holds.
  if (c.proxy !== undefined) spec.proxy = publicProxy(c);
  return hashSpec(spec);
}

/**
 * The NICs as they decide how the VM is built (the spec hash, a replacement
 * in diff): without their rate limits, which are updated in place, and a
 * pool NIC without its addresses (taken at create) and ranges (a pool that
 * still holds the address changes nothing: diff's `poolLeft`). Takes the
 * state's values as they come.
 */
export function nicsAsBuilt(nics: unknown): unknown {
  if (!Array.isArray(nics)) return nics;
  return nics.map((n) => {
    if (typeof n !== "object" || n === null) return n;
    const { bandwidth: _b, ...rest } = n as Props;
    if (rest.addressPool === undefined) return rest;
    const { addresses: _a, addressPool: _p, ...built } = rest;
    return { ...built, pooled: true };
  });
}

/** The hash of the proxy password squid checks (made by the KvmProxy class), or undefined without auth. */
export function proxyPasswordHashOf(c: Pick<CheckedInputs, "proxy">): string | undefined {
  return c.proxy?.auth?.passwordHash;
}

/** The proxy block as outputs show it: no password (its hash is a secret output), no TLS key. */
export function publicProxy(c: Pick<CheckedInputs, "proxy" | "name">): KvmProxyOutputs["proxy"] {
  if (c.proxy === undefined) return undefined;
  const { auth, tls, ...rest } = c.proxy;
  return {
    ...rest,
    ...(auth !== undefined ? { auth: { username: auth.username } } : {}),
    ...(tls !== undefined ? { tls: tlsPublic(tls) } : {}),
  };
}

/** What the guest's squid is set up with: the proxy block, or the defaults (3128 or proxyPort, private ranges, no auth). */
export function proxySetupOf(
  c: Pick<CheckedInputs, "proxyPort" | "proxy"> & Pick<Parameters<typeof squidConfOf>[0], "nics">,
): ProxySetup {
  const { auth: _auth, tls: _tls, ...conf } = squidConfOf(c);
  const auth = c.proxy?.auth;
  const passwordHash = proxyPasswordHashOf(c);
  return {
    ...conf,
    ...(c.proxy?.socks !== undefined ? { socks: { port: c.proxy.socks.port } } : {}),
    ...(c.proxy?.tls !== undefined ? { tls: c.proxy.tls } : {}),
    ...(auth !== undefined && passwordHash !== undefined
      ? { auth: { username: auth.username, passwordHash } }
      : {}),
  };
}

/** What squid.conf is written from (no password): the proxy block, or the defaults, and the static NICs. */
export function squidConfOf(c: {
  proxyPort: number;
  proxy?: {
    auth?: { username: string };
    allowedClients?: readonly string[];
    allowedDestinations?: readonly string[];
    outgoingAddress?: string;
    tls?: unknown;
  };
  nics?: readonly Pick<NicSpec, "addresses" | "gateway4" | "gateway6" | "addressPool">[];
}): SquidConfInputs {
  const auth = c.proxy?.auth;
  const nics = c.nics ?? [];
  // A pool NIC's address is taken at create: squid.conf (and the name it gives squid) is written
  // without it, before and after; the guest's setup script finds it at first boot (access.ts OWN_ACL_FILE).
  const addresses = nics.flatMap((n) => (n.addressPool === undefined ? n.addresses : []));
  const gateways = nics.flatMap((n) => [n.gateway4, n.gateway6].filter((g) => g !== undefined));
  return {
    port: c.proxyPort,
    allowedClients: c.proxy?.allowedClients ?? DEFAULT_ALLOWED_CLIENTS,
    allowedDestinations: c.proxy?.allowedDestinations ?? [],
    ownAddresses: [...new Set(addresses.map(bare))],
    onLink: [...new Set([...addresses.map((a) => subnetOf(a) ?? bare(a)), ...gateways])],
    ...(auth !== undefined ? { auth: { username: auth.username } } : {}),
    ...(c.proxy?.outgoingAddress !== undefined ? { outgoingAddress: c.proxy.outgoingAddress } : {}),
    ...(c.proxy?.tls !== undefined ? { tls: true } : {}),
  };
}

/**
 * The checked inputs with the addresses their pool NICs have: `nics`' (the
 * NICs as a create made them, `createdNics`, or as the state records them),
 * by position: the addresses a pool gave (filledFromPool), in this run or
 * when the VM was made, taken only when they are CIDRs the NIC's pool holds
 * (the state's are read as recorded). Other NICs, and inputs without pools,
 * are as they are.
 */
export function withPoolAddresses(c: CheckedInputs, nics: readonly NicSpec[] | undefined): CheckedInputs {
  if (c.nics === undefined || nics === undefined || !c.nics.some((n) => n.addressPool !== undefined))
    return c;
  return {
    ...c,
    nics: c.nics.map((n, i) => {
      const had: unknown = nics[i]?.addresses;
      const pool = n.addressPool;
      // The recorded addresses, when they are ones this pool gives (as diff keeps them: poolLeft).
      const taken =
        pool !== undefined &&
        n.addresses.length === 0 &&
        Array.isArray(had) &&
        had.length > 0 &&
        had.every((a) => typeof a === "string" && parseCidr(a) !== undefined && inPool(pool, a));
      return taken ? filledFromPool(n, [...(had as string[])]) : n;
    }),
  };
}

/**
 * The checked inputs with each NIC naming a host's address pool resolved on
 * `host` (network/host-pools.ts): what create builds once placement chose
 * the host, and what diff and update compare by the VM's host. Throws a
 * ValidationError (failures at `nics[i].<field>`) when the host cannot
 * serve them.
 */
export function withHostPools(c: CheckedInputs, host: PoolHost): CheckedInputs {
  if (c.nics === undefined || !c.nics.some(namesHostPool)) return c;
  const f = new Failures();
  const nics = resolveHostPools(c.nics, host, f);
  if (nics === undefined)
    throw new ValidationError(f.list, `the NICs cannot take host ${host.key}'s address pools`);
  return { ...c, nics };
}

/** `http://<ip>:<port>` (`https://` with TLS): never with credentials (the KvmProxy class adds them in the program). */
export function proxyUrl(ip: string, port: number, tls: boolean): string {
  return `${tls ? "https" : "http"}://${hostPort(ip, port)}`;
}

/** `socks5://<ip>:<port>` of a proxy with SOCKS (from the checked inputs or the state's outputs), else undefined. */
export function socksUrlOf(proxy: unknown, ip: string | undefined): string | undefined {
  const port = (proxy as { socks?: { port?: unknown } } | undefined)?.socks?.port;
  return ip === undefined || typeof port !== "number" ? undefined : `socks5://${hostPort(ip, port)}`;
}

/** The bytes a seed part gets from the checked inputs (text or base64), or undefined when neither is given. */
export function seedDataOf(c: CheckedInputs, part: "userData" | "vendorData"): string | Buffer | undefined {
  const b64 = c[`${part}Base64`];
  if (b64 !== undefined) return decodeBase64(b64) ?? Buffer.alloc(0);
  return c[part];
}

/**
 * `spec` with the builder's user-data its image's bake recipe names by digest,
 * read from the stack config's image entry (the text never enters the
 * inputs or the state). Throws when the entry no longer holds that text.
 */
export function withBakeUserData(
  spec: CreateSpec,
  c: CheckedInputs,
  images: Record<string, ImageConfig>,
): CreateSpec {
  const want = spec.image.bake?.userDataMac;
  if (want === undefined) return spec;
  const entry = typeof c.image === "string" && Object.hasOwn(images, c.image) ? images[c.image] : undefined;
  const text = entry?.bakeUserData;
  if (text === undefined || entry?.bake?.userDataMac !== want) {
    throw new ProviderError(
      "permanent",
      `the bake userData of image ${JSON.stringify(c.image)} in kvm:images is not the one checked at preview; run the update again`,
    );
  }
  return { ...spec, bakeUserData: text };
}

/** The host of a proxy, or a pooled one's first (placement chooses at create). */
function firstHostOf(c: CheckedInputs): string {
  const placed = placementOf(c.host);
  return placed.pool !== undefined ? (placed.pool[0] as string) : placed.key;
}

/**
 * The operations layer's create spec for checked inputs; `backend`, the
 * identity of the Pulumi backend (backend.ts), goes into the owner record.
 */
export function createSpec(
  c: CheckedInputs,
  backend?: string,
  /** The host, for a pooled proxy already placed (placement sets it otherwise). */
  host: string = firstHostOf(c),
): CreateSpec {
  const image: ImageIdentity = {
    url: c.resolvedImage.url,
    format: c.resolvedImage.format,
    firmware: c.resolvedImage.firmware,
    ...(c.resolvedImage.sha256 !== undefined ? { sha256: c.resolvedImage.sha256 } : {}),
    ...(c.resolvedImage.bake !== undefined ? { bake: c.resolvedImage.bake } : {}),
  };
  const spec: CreateSpec = {
    host,
    name: c.name,
    image,
    imageRef: typeof c.image === "string" ? c.image : c.resolvedImage.url,
    memoryMiB: c.memoryMiB,
    vcpus: c.vcpus,
    diskGiB: c.diskGiB,
    userData: seedDataOf(c, "userData") ?? "",
    installGuestAgent: c.installGuestAgent,
    owner: {
      project: c.owner?.project ?? "unknown",
      stack: c.owner?.stack ?? "unknown",
      urn: c.owner?.urn ?? `kvm://${host}/${c.name}`,
      ...(backend !== undefined ? { backend } : {}),
    },
    specHash: specHashOf(c),
    proxyPort: c.proxyPort,
    proxy: proxySetupOf(c),
    nics: vmNicsOf(c),
    tags: c.tags,
  };
  // A raw network-config of the user's; otherwise the seed builds one from the NICs (kvm/guest/seed.ts).
  if (c.networkConfig !== undefined) spec.networkConfig = c.networkConfig;
  const vendorData = seedDataOf(c, "vendorData");
  if (vendorData !== undefined) spec.vendorData = vendorData;
  return spec;
}

/** What libvirt says now, as output properties. */
export function liveOutputs(props: Props, status: VmStatus): Props {
  const proxyPort =
    typeof props.proxyPort === "number"
      ? props.proxyPort
      : (status.metadata?.proxyPort ?? DEFAULTS.proxyPort);
  const out: Props = {
    host: status.host,
    name: status.name,
    domainName: status.name,
    state: status.state,
    uuid: status.uuid,
    macAddress: status.mac,
  };
  const addresses = addressOutputs(props.nics as NicSpec[] | undefined, status);
  Object.assign(out, addresses);
  const urlHost = addresses.ipAddress ?? addresses.ipv6Address;
  if (urlHost !== undefined) {
    out.proxyUrl = proxyUrl(
      urlHost,
      proxyPort,
      (props.proxy as { tls?: unknown } | undefined)?.tls !== undefined,
    );
  }
  out.socksUrl = socksUrlOf(props.proxy, urlHost);
  if (status.domain !== undefined) {
    out.memoryMiB = status.domain.memoryMiB;
    out.vcpus = status.domain.vcpus;
  }
  if (status.metadata !== undefined) {
    out.tags = status.metadata.tags;
    out.createdAt = status.metadata.createdAt;
    out.bakedImage = status.metadata.image.baked;
  }
  return defined(out);
}

/**
 * The outputs computed from a secret (SECRET_DERIVED_OUTPUTS but the import's
 * spec hash), from the checked inputs and the host the VM lives on: the
 * seed digests, the password's hash, and a host given in full (how delete
 * and refresh reach it, key material included).
 */
export function secretDerivedOutputsOf(
  c: CheckedInputs,
  host: string,
): Pick<KvmProxyOutputs, "userDataSha256" | "vendorDataSha256" | "proxyPasswordHash" | "hostConnection"> {
  const vendorData = seedDataOf(c, "vendorData");
  const passwordHash = proxyPasswordHashOf(c);
  return defined({
    userDataSha256: seedDigest(seedDataOf(c, "userData") ?? ""),
    vendorDataSha256: vendorData !== undefined ? seedDigest(vendorData) : undefined,
    proxyPasswordHash: passwordHash,
    hostConnection: hostEntryOf(c.host, host),
  });
}

/** Outputs after create/update: the checked inputs plus what the VM reports. */
export function outputsFrom(
  c: CheckedInputs,
  status: Pick<VmStatus, "host" | "name" | "state" | "uuid" | "mac" | "ipv4"> &
    Pick<Partial<VmStatus>, "metadata" | "ipAddresses">,
  health?: ProxyHealth,
) {
  const createdAt = status.metadata?.createdAt;
  const {
    macAddress: _requested,
    userData: _userData,
    vendorData: _vendorData,
    userDataBase64: _userDataBase64,
    vendorDataBase64: _vendorDataBase64,
    proxy: _proxy,
    ...rest
  } = c;
  const placed = placementOf(c.host);
  const out: KvmProxyOutputs = {
    ...rest,
    ...secretDerivedOutputsOf(c, status.host),
    // The host it lives on (a pooled proxy's, chosen at create), and the pool it was placed from.
    host: status.host,
    ...(placed.pool !== undefined ? { hostPool: placed.pool } : {}),
    domainName: c.name,
    uuid: status.uuid ?? "",
    state: status.state,
    ...(createdAt !== undefined ? { createdAt } : {}),
    ...(status.metadata?.image.baked !== undefined ? { bakedImage: status.metadata.image.baked } : {}),
  };
  const proxy = publicProxy(c);
  if (proxy !== undefined) out.proxy = proxy;
  const mac = status.mac ?? c.macAddress;
  if (mac !== undefined) out.macAddress = mac;
  const addresses = addressOutputs(c.nics, status);
  Object.assign(out, addresses);
  const urlHost = addresses.ipAddress ?? addresses.ipv6Address;
  if (urlHost !== undefined) out.proxyUrl = proxyUrl(urlHost, c.proxyPort, c.proxy?.tls !== undefined);
  const tls = c.proxy?.tls;
  if (tls !== undefined && issuedAtCreate(tls)) out.proxyCaCertificate = tls.ca.certificate;
  const socksUrl = socksUrlOf(c.proxy, urlHost);
  if (socksUrl !== undefined) out.socksUrl = socksUrl;
  if (health !== undefined) {
    out.health = health;
    if (!health.ok && status.state === "running") out.state = "degraded";
  }
  return defined(out as unknown as Props);
}

/** Inputs reconstructed from a VM's metadata and domain XML, for KvmProxy.get (adoption by ID). */
export function inputsFromMetadata(host: string, name: string, status: VmStatus): Props {
  const m = status.metadata as ProxyMetadata;
  const resolved: ImageIdentity = {
    url: m.image.url,
    format: m.image.format,
    firmware: status.domain?.firmware ?? "uefi",
  };
  if (m.image.sha256 !== undefined) resolved.sha256 = m.image.sha256;
  if (m.image.bake !== undefined) resolved.bake = m.image.bake;
  const nic = status.domain?.nic;
  return defined({
    host,
    name,
    image: m.image.ref,
    resolvedImage: resolved,
    memoryMiB: status.domain?.memoryMiB,
    vcpus: status.domain?.vcpus,
    diskGiB: m.diskGiB,
    proxyPort: m.proxyPort,
    tags: m.tags,
    network: nic?.kind === "network" ? nic.network : undefined,
    bridge: nic?.kind === "bridge" ? nic.bridge : undefined,
    owner: { project: m.owner.project, stack: m.owner.stack, urn: m.owner.urn, resource: name },
  });
}
