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
