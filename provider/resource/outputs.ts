/**
 * The KvmProxy resource's outputs: what the state holds (the checked inputs
 * plus what the VM reports) and what the class adds in the program. Types
 * only.
 */
import type { ProxyState } from "../kvm/domain/states";
import type { NicSpec } from "../kvm/network/nic";
import type { TlsPublic } from "../kvm/tls/proxy-tls";
import type { CheckedInputs, HostEntry } from "./args";

/** The proxy's health as the last create, update or refresh probed it. */
export interface ProxyHealth {
  /** The proxy answered as the health check expects. */
  ok: boolean;
  /** ISO 8601 time of the probe. */
  checkedAt: string;
  /** Why it failed (or what answered instead of squid). */
  reason?: string;
  /** ISO 8601 time of the first probe of the failures that go on now (absent while healthy). */
  failingSince?: string;
}

/**
 * The resource's state: the VM's (kvm/domain/states.ts), or `degraded` when the VM
 * runs but its proxy failed the last probe.
 */
export type KvmProxyState = ProxyState | "degraded";

/**
 * What the state's outputs hold: the checked inputs plus what the VM reports.
 * userData and vendorData (and their base64 forms) are left out, replaced by
 * the SHA-256 of their bytes: they stay
 * only in the (secret) inputs, so no provider reply, debug line of the SDK or
 * refresh ever carries them back (diff compares the digests).
 */
export interface KvmProxyOutputs
  extends Omit<
    CheckedInputs,
    | "macAddress"
    | "userData"
    | "vendorData"
    | "userDataBase64"
    | "vendorDataBase64"
    | "proxy"
    | "host"
    | "nics"
  > {
  // The NICs as the state records them: checked when they were written, not since (its TSDoc is the input's).
  nics?: NicSpec[];
  /** The host the proxy lives on (a pooled proxy's, chosen at create). */
  host: string;
  /** The pool a pooled proxy was placed from. */
  hostPool?: string[];
  /** A host given in full, as check kept it: how read, update and delete reach it (secret: key material). */
  hostConnection?: HostEntry;
  /** When the VM was made (ISO 8601, from its metadata): what rotation measures age from. */
  createdAt?: string;
  /** The baked volume on the host the VM's disk is backed by (an image with `bake`). */
  bakedImage?: string;
  /** The proxy block without the password (username only) and without TLS keys. */
  proxy?: Omit<NonNullable<CheckedInputs["proxy"]>, "auth" | "tls"> & {
    auth?: { username: string };
    tls?: TlsPublic;
  };
  /** The CA the proxy's certificate is issued by (PEM), with `proxy.tls` and a CA: what clients trust. */
  proxyCaCertificate?: string;
  /**
   * The hash of the password the guest's squid checks (a secret output): what
   * diff tells a changed password by. The seed on the host holds the same.
   */
  proxyPasswordHash?: string;
  /** The proxy's health at the last create, update or refresh. */
  health?: ProxyHealth;
  /** SHA-256 (hex) of the user-data bytes in the seed (whichever input gave them). */
  userDataSha256: string;
  /** SHA-256 (hex) of the user's vendor-data bytes, when given. */
  vendorDataSha256?: string;
  /**
   * An imported VM's spec hash, from its metadata (`pulumi import`, `KvmProxy.get`): new inputs
   * that build the same spec replace nothing. A digest of its user-data and password hash too.
   */
  adoptedSpecHash?: string;
  /** The libvirt domain name (= name). */
  domainName: string;
  /** The libvirt domain's UUID. */
  uuid: string;
  /** The primary NIC's first routable IPv4 (guest agent, DHCP lease, or its static address), once known. */
  ipAddress?: string;
  /** The primary NIC's first global IPv6, once known. */
  ipv6Address?: string;
  /** Every address of every NIC (v4 and v6, CIDR as the guest reports them), in the order of `nics`. */
  ipAddresses?: NicAddresses[];
  /** The NIC's MAC address, lower case (the fixed one or libvirt's). */
  macAddress?: string;
  /** `http://<ip>:<proxyPort>` (`https://` with `proxy.tls`), once the IP is known (never with credentials). */
  proxyUrl?: string;
  /** `socks5://<ip>:<socks port>` when the proxy has SOCKS, once the IP is known (never with credentials). */
  socksUrl?: string;
  /** The address `egressCheck.url` saw the proxy's requests come from, at the last create, update or refresh. */
  egressAddress?: string;
  /** provisioning, running, degraded (the VM runs but its proxy failed the last probe), stopped or failed. */
  state: KvmProxyState;
  /** Set when a failed create kept the VM (`keepOnFailure`): the next `up` replaces it, deleting it first. */
  keptAfterFailure?: KeptAfterFailure;
}

/** A VM whose create failed, kept on its host for inspection (`keepOnFailure`). */
export interface KeptAfterFailure {
  /** ISO 8601 time of the failure. */
  failedAt: string;
  /** The failure's first line (the guest's own lines are in the error `up` printed, not here). */
  reason: string;
}

/** The addresses of one NIC. */
export interface NicAddresses {
  /** The NIC's MAC address. */
  mac: string;
  /** Its addresses, CIDR, as the guest reports them. */
  addresses: string[];
}

/** What the KvmProxy class adds to the provider's outputs, in the program (secrets: never in a provider reply). */
export interface KvmProxyCredentialUrls {
  /** `proxyUrl` with the username and password (secret), when the proxy has auth. */
  proxyUrlWithCredentials?: string;
  /** `socksUrl` with the username and password (secret), when the proxy has SOCKS and auth. */
  socksUrlWithCredentials?: string;
}

/*
 * The object types the schema gives the outputs a program reads (the SDKs'
 * types of `proxy`, `nics`, `rotation`, `resolvedImage`, `owner`). The
 * state's own types above are held assignable to them (schema/properties.ts),
 * so the two cannot drift apart.
 */

/** The proxy block as the outputs show it: the username without the password, certificates without keys. */
export interface PublicProxy {
  /** The port squid listens on. */
  port: number;
  /** Who clients authenticate as (the password is only in the program's secret outputs). */
  auth?: ProxyUser;
  /** Client ranges (IPv4 or IPv6) admitted. */
  allowedClients: string[];
  /** Private ranges and subnets opened as destinations beside the public Internet. */
  allowedDestinations: string[];
  /** The VM's address the proxy's requests leave from. */
  outgoingAddress?: string;
  /** Public clients are admitted without auth. */
  publicClientsWithoutAuth?: boolean;
  /** SOCKS5 beside HTTP, on its port. */
  socks?: ProxySocks;
  /** The proxy's TLS: the CA its certificate is issued by, or the certificate it serves (public parts only). */
  tls?: PublicProxyTls;
}

/** The username of the proxy's basic authentication. */
export interface ProxyUser {
  /** The username. */
  username: string;
}

/** The proxy's SOCKS5 listener. */
export interface ProxySocks {
  /** The SOCKS port. */
  port: number;
}

/** The public part of the proxy's TLS. */
export interface PublicProxyTls {
  /** The CA the proxy's certificate is issued by at create (its certificate). */
  ca?: TlsCertificate;
  /** The certificate the proxy serves (PEM), when the program gave it. */
  certificate?: string;
}

/** A certificate. */
export interface TlsCertificate {
  /** The certificate (PEM). */
  certificate: string;
}

/** A NIC of the VM as check resolved it: its attachment, MAC, addresses and limits. */
export interface ResolvedNic {
  /** The libvirt network it is attached to. */
  network?: string;
  /** The host bridge it is attached to. */
  bridge?: string;
  /** The macvtap device it is, on a host interface. */
  direct?: { dev: string; mode: string };
  /** The MAC the program gave, lower case. */
  macAddress?: string;
  /** The MAC the NIC has, lower case: the given one, or one derived from the owner, the name and the position. */
  mac?: string;
  /** Static addresses, CIDR (a pool NIC's: the one taken at create); empty: DHCP or router advertisements. */
  addresses: string[];
  /** The ranges its address was taken from at create. */
  addressPool?: { ranges: string[] };
  /** The host's address pool it took its ranges, gateways, nameservers and attachment from, by name. */
  hostPool?: string;
  /** The IPv4 gateway. */
  gateway4?: string;
  /** The IPv6 gateway. */
  gateway6?: string;
  /** Its nameservers. */
  nameservers: string[];
  /** Its rate limits. */
  bandwidth?: { inboundKbps?: number; outboundKbps?: number };
  /** The libvirt nwfilter on it. */
  filter?: string;
  /** The NIC `proxyUrl` uses. */
  primary: boolean;
}

/** `rotation` as check resolved it: the age in seconds. */
export interface ResolvedRotation {
  /** The age (seconds) past which the proxy is replaced. */
  maxAge: number;
  /** At most this many members of the group are replaced per `up`. */
  batch: number;
  /** The group whose members rotate in turn. */
  group?: string;
  /** The group's size. */
  size?: number;
}

/** The image the proxy is built from, as check resolved it (from the config or inline). */
export interface ResolvedImage {
  /** Its URL (a local path as a `file://` URL). */
  url: string;
  /** `qcow2` or `raw`. */
  format: string;
  /** `uefi` or `bios`. */
  firmware: string;
  /** Its SHA-256 (lower-case hex), when pinned. */
  sha256?: string;
  /** The bake recipe, for a baked image. */
  bake?: ResolvedBake;
}

/** A bake recipe as the state records it: the packages, and the user-data by a keyed digest only. */
export interface ResolvedBake {
  /** The extra packages, sorted. */
  packages: string[];
  /** HMAC-SHA-256 (hex) of the builder's user-data under a key derived from `kvm:stateKey`. */
  userDataMac?: string;
}
