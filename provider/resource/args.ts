/**
 * The KvmProxy resource's inputs: what users write and what `check` turns it
 * into (defaults applied, image resolved, name chosen); the outputs are in
 * outputs.ts; what each property is (replace or update, secret, schema
 * type) is its row in kvm-proxy-properties.ts. Types only, plus the
 * defaults and limits `check` enforces.
 */
import type * as pulumi from "@pulumi/pulumi";
import type { Firmware, ImageFormat, ImageIdentity } from "../kvm/config/image";
import type { CheckedNic } from "../kvm/network/nic-rules";
import type { ProxyTls } from "../kvm/tls/proxy-tls";

/** The value Pulumi sends for an input not known yet (during preview). */
export const UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

/** True when `v` is (or, for objects and arrays, contains) an unknown value. Iterative: no depth overflows it. */
export function isUnknown(v: unknown): boolean {
  const todo: unknown[] = [v];
  while (todo.length > 0) {
    const x = todo.pop();
    if (x === UNKNOWN) return true;
    if (typeof x === "object" && x !== null) todo.push(...Object.values(x));
  }
  return false;
}

/** An image given inline rather than by a key of `kvm:images`. */
export interface InlineImage {
  /** https://, http://, file:///path or an absolute local path, read from where Pulumi runs. */
  url: string;
  /** Default qcow2. */
  format?: ImageFormat;
  /** Default uefi. */
  firmware?: Firmware;
  /** Lower- or upper-case hex SHA-256 of the image file; verified during the upload. */
  sha256?: string;
}

/**
 * An image of the provider's configuration (`kvm:images`, or an explicit
 * provider's `images`), under its key: an inline image's fields, and
 * whether proxies boot from a copy baked on each host.
 */
export interface ImageConfigInput extends InlineImage {
  /** Bake the image on each host with the proxy's packages installed: `true`, or a recipe. Changing it replaces the proxies using it. */
  bake?: boolean | BakeInput;
}

/** What a baked image is made with, beside squid, the guest agent and Dante. */
export interface BakeInput {
  /** Distribution package names installed beside them (with their Recommends, as apt-get installs them; the proxy's own are installed without): names only, no versions, options or patterns. */
  packages?: string[];
  /** The builder's user-data (a mirror, say), kept secret: the state and the VMs name it by a keyed digest (needs `kvm:stateKey`). */
  userData?: string;
}

/**
 * What create waits for once the VM has an IP and cloud-init is done. Without
 * `url`: `GET /` to the proxy port, answered by this proxy's own squid (not a
 * mere TCP connect). With `url`: a request for it through the proxy must
 * return `expectStatus`; with auth, after `GET /`, `url` is requested inside
 * the guest through its agent (the provider has no password). Probes go from
 * where Pulumi runs, or through the VM's host (`via`); refresh probes once,
 * without the in-guest request.
 */
export interface HealthCheck {
  /** The URL requested through the proxy (http:// or https://, the latter via CONNECT). */
  url?: string;
  /** The HTTP status that counts as healthy (default 200). Only with url. */
  expectStatus?: number;
  /**
   * Where the probe goes from: "local" (the machine running Pulumi) or
   * "host" (through the VM's host, over the SSH connection the provider
   * holds, for a guest only its host routes to). Default "host" when the
   * primary NIC is on a libvirt network of an ssh:// host without static
   * addresses, "local" otherwise.
   */
  via?: "local" | "host";
  /**
   * Replace the proxy at the first `up` after it has failed every probe for
   * this long (e.g. "15m", or seconds; at least 30s): a refresh (or an
   * update) records since when it fails (`health.failingSince`). The
   * replacement is created, and passes its health check, before the failing
   * VM is deleted, unless it would collide with it (a fixed name, MAC or
   * static address). Without it, a failing proxy stays as it is.
   */
  replaceAfter?: string | number;
}

/**
 * The egress check: after the health check (at create and update) and at
 * every refresh, `url` is fetched through the proxy, and the address its
 * reply names is the `egressAddress` output. Nothing leaves the proxy for
 * it unless the user gives the URL.
 */
export interface EgressCheck {
  /**
   * An IP echo the user trusts (http:// or https://, without credentials):
   * it answers with the client's address, as plain text or JSON (`ip`,
   * `origin`, `address` or `query`).
   */
  url: string;
}

/**
 * Deadlines the provider enforces itself (the dynamic provider host ignores
 * Pulumi's `customTimeouts`): a number of seconds, or a duration such as
 * `"90s"`, `"10m"`, `"1h30m"`.
 */
export interface Timeouts {
  /** The whole create: domain, IP, health check (default 10m). */
  create?: string | number;
  /** Delete, including retries of transient failures (default 5m). */
  delete?: string | number;
}

/** Basic authentication of the proxy. */
export interface ProxyAuth {
  /** 1-64 letters, digits, '.', '_' or '-'. */
  username: string;
  /**
   * A secret of at least 12 characters (set it with `pulumi config set
   * --secret`). The KvmProxy class hashes it in the program: only the hash
   * reaches the provider, the state and the VM.
   */
  password: string;
}

/** Basic authentication after check: the password as the hash the class made of it. */
export interface CheckedProxyAuth {
  username: string;
  /** SHA-512-crypt of the password (kvm/proxy/password-hash.ts). */
  passwordHash: string;
}

/**
 * The proxy in the VM: squid, set up by the provider's vendor-data script
 * whatever the user-data is. Clients outside `allowedClients` get 403;
 * with `auth`, clients inside without valid credentials get 407. Requests
 * go outward only: the VM itself, link-local and metadata addresses are
 * never reached, private ranges and the VM's own subnets only when
 * `allowedDestinations` opens them.
 */
export interface ProxyConfig {
  /** The port squid listens on (default 3128; not 22, 53 or 5355, which the guest's own services hold). */
  port?: number;
  /** Basic authentication: clients inside `allowedClients` without valid credentials get 407. Changing it replaces the VM. */
  auth?: ProxyAuth;
  /**
   * Client ranges (IPv4 or IPv6) admitted. Default: the private ranges (10/8,
   * 172.16/12, 192.168/16, 100.64/10, fc00::/7, fe80::/10). Without `auth`,
   * only such non-public ranges are accepted (see `publicClientsWithoutAuth`).
   */
  allowedClients?: string[];
  /**
   * Inward ranges the proxy may reach (private, CGNAT, ULA, the VM's own
   * subnets and gateways), denied otherwise. Never the VM itself, link-local
   * or metadata addresses.
   */
  allowedDestinations?: string[];
  /** The source address of the proxy's outgoing connections: an address of the VM. */
  outgoingAddress?: string;
  /**
   * Admit public client ranges without `auth` (each at most a /16 or /32 of
   * IPv6; a /8 of IPv4 in all): for crawlers known by their addresses. Warned
   * about at every preview.
   */
  publicClientsWithoutAuth?: boolean;
  /**
   * A SOCKS5 listener beside the HTTP one (Dante), with the same clients,
   * credentials (username/password, RFC 1929) and destination rules:
   * `{}` for port 1080. Outputs `socksUrl` and, with auth, the secret
   * `socksUrlWithCredentials`. SOCKS carries no TLS: its password crosses
   * the network in clear.
   */
  socks?: { port?: number };
  /**
   * TLS on the proxy port (squid's `https_port`): `proxyUrl` is
   * `https://...`, and the Basic credentials of every request travel
   * encrypted. `{}`: a CA made for this proxy (kept in the state, its key a
   * secret; the `proxyCaCertificate` output, which clients trust) issues its
   * certificate at create for the VM's static addresses; or your own CA, or
   * the proxy's certificate itself. Changing it replaces the VM.
   */
  tls?: ProxyTlsConfig;
}

/** TLS on the proxy port: a CA that issues the proxy's certificate at create, or the certificate itself. */
export interface ProxyTlsConfig {
  /**
   * A CA of yours (an ECDSA P-256 key) that issues the proxy's certificate
   * for the VM's static addresses at create; default: one made for this
   * proxy. The primary NIC needs static addresses or an address pool.
   */
  ca?: TlsKeyPair;
  /** Instead of a CA: the proxy's certificate (PEM, a chain with the proxy's first), served as given. */
  certificate?: string;
  /** Its private key (PEM), a secret; with `certificate`. */
  privateKey?: string;
}

/** A certificate and its private key, PEM; the key a secret. */
export interface TlsKeyPair {
  /** The certificate (PEM). */
  certificate: string;
  /** Its private key (PEM), a secret. */
  privateKey: string;
}

/** A SOCKS5 listener beside squid (Dante), with the proxy's clients, credentials and destination rules. */
export interface SocksInput {
  /** The SOCKS port (default 1080; not the HTTP port). */
  port?: pulumi.Input<number>;
}

/** The host pool a proxy is placed on at create. */
export interface HostPoolInput {
  /** Keys of `kvm:hosts`, hosts given in full, or both. */
  pool: pulumi.Input<pulumi.Input<string | HostInput>[]>;
}

/** Replacement by age. */
export interface RotationInput {
  /** The age past which the proxy is replaced: seconds, or a duration such as "7d", "12h". */
  maxAge: string | number;
  /** At most this many members of a group replaced per `up` (set by ProxyFleet; default 1). */
  batch?: number;
  /** The group (fleet) the proxy rotates with (set by ProxyFleet). */
  group?: string;
  /** The group's size (set by ProxyFleet). */
  size?: number;
}

/**
 * A host given in full: the fields of a `kvm:hosts` entry, each an Input (so
 * another resource of the program, the one that makes the hypervisor, can
 * give them), and `key`, the host's name in provider IDs, placement and the
 * image cache. Key material is kept secret in the state.
 */
export interface HostInput extends SshMaterialInput {
  /** The host's name (its key in `kvm:hosts` if it has one there: moving between the two forms replaces nothing). */
  key: pulumi.Input<string>;
  /** `ssh://[user@]host[:port][?socket=/path]` or `unix:///path/to/libvirt-sock`. */
  uri: pulumi.Input<string>;
  /** libvirt's driver URI on the host: `qemu:///system` (the default), `qemu:///session` or `test:///default`. */
  driverUri?: pulumi.Input<string>;
  /** `kvm` (the default) or `qemu` (TCG, for hosts without hardware virtualisation). */
  domainType?: pulumi.Input<"kvm" | "qemu">;
  /** The storage pool of images and disks (default `default`). */
  pool?: pulumi.Input<string>;
  /** The libvirt network of a proxy's NIC (default `default`). */
  network?: pulumi.Input<string>;
  /** A host bridge instead of the network. */
  bridge?: pulumi.Input<string>;
  /** The deadline of each libvirt reply: seconds or a duration (default 60s, 1s to 60m). */
  callTimeout?: pulumi.Input<string | number>;
  /** What placement may put on the host and how many creates run on it at once: `{proxies, memoryMiB, vcpus, concurrentCreates}`. */
  capacity?: pulumi.Input<Record<string, pulumi.Input<number | string>>>;
  /** The host's own address pools by name (`{ public: { ranges, gateway4, bridge } }`): a NIC with `addressPool: "public"` takes that pool of the host it is placed on, so hosts on different subnets serve one fleet. */
  addressPools?: pulumi.Input<Record<string, pulumi.Input<HostAddressPoolInput>>>;
  /** The SSH client: `ssh2` (the provider's own, the default) or `openssh` (the system's ssh, reading ssh_config). */
  transport?: pulumi.Input<"ssh2" | "openssh">;
  /** Bastions on the way to the host: one hop or a chain (the first dialled directly), each verified. */
  jump?: pulumi.Input<string | JumpHopInput | pulumi.Input<string | JumpHopInput>[]>;
  /** An ssh_config file for the `openssh` transport. */
  sshConfig?: pulumi.Input<string>;
}

/**
 * A jump host on the way to a host, as `ssh://[user@]host[:port]` or with its
 * own SSH material: what it leaves out it takes from the host (its user, its
 * known_hosts, its credentials). Verified against its known_hosts like the host.
 */
export interface JumpHopInput extends SshMaterialInput {
  /** `ssh://[user@]host[:port]`, without a password. */
  uri: pulumi.Input<string>;
}

/** How an SSH server is verified and logged in to: a host's, or a jump host's own. */
export interface SshMaterialInput {
  /** known_hosts lines (a host's default: the file `~/.ssh/known_hosts`; a jump host's: its host's); never trusted on first use. */
  knownHosts?: pulumi.Input<string>;
  /** A known_hosts file instead of the lines. */
  knownHostsPath?: pulumi.Input<string>;
  /** An SSH private key (OpenSSH or PEM), kept secret (a jump host's default: its host's). */
  privateKey?: pulumi.Input<string>;
  /** A private key file instead of the key. */
  privateKeyPath?: pulumi.Input<string>;
  /** An SSH agent's socket instead of a key. */
  agentSocket?: pulumi.Input<string>;
  /** The private key's passphrase, kept secret. */
  passphrase?: pulumi.Input<string>;
}

/** The arguments of `new KvmProxy(name, args)`. */
export interface KvmProxyArgs {
  /**
   * A key of the stack config `kvm:hosts`; a host given in full
   * ({@link HostInput}); or `{pool: [keys]}`: placed at create on the host
   * of the pool with the most room (its capacity less what our VMs of every
   * stack hold there). The host chosen is the `host` output and part of the
   * ID; a later change of the pool moves the proxy only when its host leaves
   * the pool. Changing the host's key replaces the proxy; changing how a
   * host is reached (its uri, keys) does not.
   */
  host: pulumi.Input<string | HostInput | HostPoolInput>;
  /** A key of `kvm:images`, an image URL, or an inline image. Replaces on change (also when the config behind a key changes). */
  image: pulumi.Input<string | pulumi.Input<InlineImage>>;
  /** cloud-init user-data, any format, placed in the seed byte for byte (secret). Default: an empty cloud-config; the provider's vendor-data sets the proxy up whatever the user-data is. */
  userData?: pulumi.Input<string>;
  /**
   * cloud-init user-data as base64, for data that is not text (gzip-compressed
   * cloud-config, which cloud-init decompresses); decoded and placed in the
   * seed byte for byte. Exclusive with userData; secret like it.
   */
  userDataBase64?: pulumi.Input<string>;
  /** Extra vendor-data beside the provider's own scripts (secret). */
  vendorData?: pulumi.Input<string>;
  /** Extra vendor-data as base64 (e.g. gzip). Exclusive with vendorData; secret like it. */
  vendorDataBase64?: pulumi.Input<string>;
  /** Add the qemu-guest-agent bootstrap to vendor-data (default true). */
  installGuestAgent?: pulumi.Input<boolean>;
  /** Default 512. */
  memoryMiB?: pulumi.Input<number>;
  /** Default 1. */
  vcpus?: pulumi.Input<number>;
  /** Root disk size (the overlay is at least the image's virtual size). Default 10. */
  diskGiB?: pulumi.Input<number>;
  /** A libvirt network on the host, instead of the host's configured one. */
  network?: pulumi.Input<string>;
  /** An existing host bridge, instead of the host's configured network. */
  bridge?: pulumi.Input<string>;
  /** A fixed MAC address; libvirt generates one when omitted. */
  macAddress?: pulumi.Input<string>;
  /**
   * Several NICs, or one with static addresses, a macvtap attachment, rate
   * limits or an nwfilter (see docs/guides/networking.md). Not together with
   * `network`, `bridge` or `macAddress` (the one-NIC shorthand). Changing a
   * NIC replaces the VM, except its `bandwidth`, which is updated in place.
   */
  nics?: pulumi.Input<pulumi.Input<NicInput>[]>;
  /**
   * A NoCloud network-config of your own (version 1 or 2), placed in the seed
   * byte for byte; not together with typed addresses, gateways or
   * nameservers in `nics`. Replaces the VM when changed.
   */
  networkConfig?: pulumi.Input<string>;
  /** The domain name (also the guest hostname). Default: the resource name plus a random suffix. */
  name?: pulumi.Input<string>;
  /** The proxy: port, authentication, allowed clients and destinations, outgoing address. */
  proxy?: pulumi.Input<ProxyInput>;
  /** Shorthand for `proxy.port` (not both; default 3128). */
  proxyPort?: pulumi.Input<number>;
  /** What must succeed before create returns; false to skip. Default `{}`: `GET /` to the proxy port, which this proxy's squid answers itself. */
  healthCheck?: pulumi.Input<HealthCheck | false>;
  /**
   * Which address targets see the proxy's requests come from: an IP echo
   * fetched through the proxy after the health check and at refresh (the
   * `egressAddress` output; a warning when it is not `proxy.outgoingAddress`
   * or the VM's static address). Updated in place.
   */
  egressCheck?: pulumi.Input<{ url: pulumi.Input<string> }>;
  /**
   * Wait for the guest's address before create returns: true or "ipv4"
   * (the default), "ipv6", or "any". false returns once the domain runs; the
   * address appears at the next refresh. Static addresses need no wait when
   * the guest agent does not answer: they are the answer.
   */
  waitForIp?: pulumi.Input<boolean | "ipv4" | "ipv6" | "any">;
  /** Deadlines the provider enforces itself (Pulumi's `customTimeouts` never reach a dynamic provider). */
  timeouts?: pulumi.Input<Timeouts>;
  /**
   * Keep the VM when its create fails once it runs (first boot, address, health
   * check, deadline), for inspection (`pulumi-kvm-proxy console <host> <domain>`),
   * recorded with `keptAfterFailure`: the next `up` replaces it (deleting it
   * first), `destroy` deletes it. Changing it rebuilds nothing.
   */
  keepOnFailure?: pulumi.Input<boolean>;
  /** Free-form labels, stored in the VM's libvirt metadata too. Changing them updates in place. */
  tags?: pulumi.Input<Record<string, pulumi.Input<string>>>;
  /**
   * Replace the proxy once it is older than `maxAge` (e.g. "7d"; its creation
   * time is in its metadata), created before its predecessor is deleted.
   * ProxyFleet sets `batch` (most of its members replaced per `up`, oldest
   * first) and the fields that group its members.
   */
  rotation?: pulumi.Input<RotationInput>;
}

/** The `proxy` block as a program writes it (see {@link ProxyConfig}); `Auth` is what `auth` takes. */
export interface ProxyInput<Auth = { username: pulumi.Input<string>; password: pulumi.Input<string> }> {
  port?: pulumi.Input<number>;
  auth?: pulumi.Input<Auth>;
  allowedClients?: pulumi.Input<pulumi.Input<string>[]>;
  allowedDestinations?: pulumi.Input<pulumi.Input<string>[]>;
  outgoingAddress?: pulumi.Input<string>;
  publicClientsWithoutAuth?: pulumi.Input<boolean>;
  socks?: pulumi.Input<SocksInput>;
  tls?: pulumi.Input<ProxyTlsInput>;
}

/** TLS on the proxy port as a program writes it (see {@link ProxyTlsConfig}). */
export interface ProxyTlsInput {
  ca?: pulumi.Input<{ certificate: pulumi.Input<string>; privateKey: pulumi.Input<string> }>;
  certificate?: pulumi.Input<string>;
  privateKey?: pulumi.Input<string>;
}

/** One NIC of `nics`: attached to exactly one of network, bridge or direct (or the attachment of the host's pool it names). */
export interface NicInput {
  /** A libvirt network on the host. */
  network?: pulumi.Input<string>;
  /** An existing host bridge. */
  bridge?: pulumi.Input<string>;
  /** A macvtap device on host interface `dev` (mode default "bridge"). */
  direct?: pulumi.Input<NicDirectInput>;
  /** Default: a stable MAC derived from the resource and the NIC's position. */
  macAddress?: pulumi.Input<string>;
  /** Static addresses, CIDR, IPv4 and IPv6 (`203.0.113.7/24`, `2001:db8::7/64`); none: DHCP. */
  addresses?: pulumi.Input<pulumi.Input<string>[]>;
  /**
   * Take the static address at create from these ranges instead
   * (`"203.0.113.10-203.0.113.40/24"`, `"2001:db8::10-2001:db8::40/64"`; one
   * of each family), free over every stack's VMs on the segment; kept for
   * the VM's life, a replacement takes another. Not with `addresses`. Or the name of an address pool of the
   * hosts (`addressPools`): the ranges, gateways, nameservers and attachment of the pool on the host the VM is
   * placed on (every host it may go to needs it; a field the pool gives is not given here).
   */
  addressPool?: pulumi.Input<NicAddressPoolInput | string>;
  /** The IPv4 gateway of the static addresses. */
  gateway4?: pulumi.Input<string>;
  /** The IPv6 gateway of the static addresses. */
  gateway6?: pulumi.Input<string>;
  /** DNS servers for the static addresses. */
  nameservers?: pulumi.Input<pulumi.Input<string>[]>;
  /** Rate limits in kilobits per second; updated in place. */
  bandwidth?: pulumi.Input<NicBandwidthInput>;
  /** A libvirt nwfilter such as "clean-traffic", given the NIC's static IPv4 addresses as its IP parameters. */
  filter?: pulumi.Input<string>;
  /** The NIC proxyUrl uses (default: the first). */
  primary?: pulumi.Input<boolean>;
}

/** A macvtap attachment. */
export interface NicDirectInput {
  /** The host interface the macvtap device sits on. */
  dev: pulumi.Input<string>;
  /** The macvtap mode (default "bridge"). */
  mode?: pulumi.Input<"bridge" | "vepa" | "private" | "passthrough">;
}

/** Rate limits of a NIC, in kilobits per second. */
export interface NicBandwidthInput {
  /** Traffic to the guest. */
  inboundKbps?: pulumi.Input<number>;
  /** Traffic from the guest. */
  outboundKbps?: pulumi.Input<number>;
}

/** One address pool of a host: ranges and what a NIC on them needs, as a NIC's fields (no attachment: the NIC's own, else the host's `network`/`bridge`). */
export interface HostAddressPoolInput {
  /** Ranges such as `"203.0.113.2-203.0.113.14/28"` (one of each family), in the subnet of the pool's gateways. */
  ranges: pulumi.Input<pulumi.Input<string>[]>;
  /** The IPv4 router of the ranges' subnet. */
  gateway4?: pulumi.Input<string>;
  /** The IPv6 router (in the ranges' subnet, or link-local). */
  gateway6?: pulumi.Input<string>;
  /** DNS servers for a VM on the pool. */
  nameservers?: pulumi.Input<pulumi.Input<string>[]>;
  /** A libvirt network on the host. */
  network?: pulumi.Input<string>;
  /** An existing host bridge. */
  bridge?: pulumi.Input<string>;
  /** A macvtap device on host interface `dev` (mode default "bridge"). */
  direct?: pulumi.Input<NicDirectInput>;
}

/** The ranges a NIC's static address is taken from at create. */
export interface NicAddressPoolInput {
  /** Ranges such as `"203.0.113.10-203.0.113.40/24"` or `"2001:db8::10-2001:db8::40/64"` (one of each family). */
  ranges: pulumi.Input<pulumi.Input<string>[]>;
}

/** The proxy block after check. */
export interface CheckedProxy {
  port: number;
  auth?: CheckedProxyAuth;
  allowedClients: string[];
  allowedDestinations: string[];
  outgoingAddress?: string;
  publicClientsWithoutAuth?: true;
  socks?: { port: number };
  /** The CA that issues the proxy's certificate at create, or the certificate served (kvm/tls/proxy-tls.ts). */
  tls?: ProxyTls;
}

/** Which address create waits for (true: "ipv4"). */
export type WaitForIp = boolean | "ipv4" | "ipv6" | "any";

/** Who owns the VM, recorded in its metadata. Filled in by KvmProxy, never by users. */
export interface OwnerInput {
  /** The Pulumi project. */
  project: string;
  /** The Pulumi stack. */
  stack: string;
  /** The resource's URN. */
  urn: string;
  /** The Pulumi resource name, the base of the autoname. */
  resource: string;
}

/** The URN of the owner record that inputs or outputs hold, if any. */
export function ownerUrnOf(props: Record<string, unknown>): string | undefined {
  const urn = (props.owner as { urn?: unknown } | undefined)?.urn;
  return typeof urn === "string" ? urn : undefined;
}

/** A host given in full after check: the entry as given (its `key` and the fields of a `kvm:hosts` entry). */
export type HostEntry = { key: string; uri: string } & Record<string, unknown>;

/**
 * Where a checked `host` puts the proxy: one host (by key; `entry` when given
 * in full), or a pool to place on (its keys, and the hosts of it given in full).
 */
export function placementOf(
  host: CheckedInputs["host"],
): { key: string; entry?: HostEntry; pool?: undefined } | { pool: string[]; entries: HostEntry[] } {
  if (typeof host === "string") return { key: host };
  if ("pool" in host && Array.isArray(host.pool) && !("key" in host)) {
    const items = host.pool as (string | HostEntry)[];
    return {
      pool: items.map((h) => (typeof h === "string" ? h : h.key)),
      entries: items.filter((h): h is HostEntry => typeof h !== "string"),
    };
  }
  return { key: (host as HostEntry).key, entry: host as HostEntry };
}

/** The host given in full that a checked `host` gives for host `key`: itself, or its pool's entry of that key. */
export function hostEntryOf(host: CheckedInputs["host"], key: string): HostEntry | undefined {
  const placed = placementOf(host);
  if (placed.pool !== undefined) return placed.entries.find((e) => e.key === key);
  return placed.entry?.key === key ? placed.entry : undefined;
}

/** Inputs after check: defaults applied. This is what the state's inputs hold. */
export interface CheckedInputs {
  /** A host key, a host in full (as given), or the pool to place on (create resolves it; the outputs hold the host chosen). */
  host: string | HostEntry | { pool: (string | HostEntry)[] };
  image: string | InlineImage;
  /** The image as check resolved it (from the config or inline): what the VM is built from. */
  resolvedImage: ImageIdentity;
  /** The user-data text; absent when given as userDataBase64 (then exactly that is present). */
  userData?: string;
  userDataBase64?: string;
  vendorData?: string;
  vendorDataBase64?: string;
  installGuestAgent: boolean;
  memoryMiB: number;
  vcpus: number;
  diskGiB: number;
  network?: string;
  bridge?: string;
  /** As given, lower case. */
  macAddress?: string;
  /** The NICs of `nics` as check resolved them, held to their rules (kvm/network/nic-rules.ts); absent for the one-NIC shorthand. */
  nics?: CheckedNic[];
  networkConfig?: string;
  name: string;
  /** True when check generated the name. */
  autoname?: boolean;
  /** The proxy block as given (defaults applied), when given. */
  proxy?: CheckedProxy;
  /** The port squid listens on: proxy.port, or the shorthand, or 3128. */
  proxyPort: number;
  /** `{}`: `GET /` to the proxy port, answered by squid itself; with url: a request through the proxy. */
  healthCheck: { url?: string; expectStatus?: number; via?: "local" | "host"; replaceAfter?: number } | false;
  egressCheck?: EgressCheck;
  waitForIp: WaitForIp;
  /** In seconds. */
  timeouts: { create: number; delete: number };
  /** Present only when set: false and absent are one value, so neither is a change. */
  keepOnFailure?: true;
  tags: Record<string, string>;
  rotation?: { maxAge: number; batch: number; group?: string; size?: number };
  /** Who owns the VM (project, stack, URN), as its metadata records it. */
  owner?: OwnerInput;
}

export const DEFAULTS = {
  socksPort: 1080,
  installGuestAgent: true,
  memoryMiB: 512,
  vcpus: 1,
  diskGiB: 10,
  proxyPort: 3128,
  waitForIp: true,
  expectStatus: 200,
  createSeconds: 600,
  deleteSeconds: 300,
  keepOnFailure: false,
} as const;

/** Largest root disk accepted, GiB (64 TiB). */
export const MAX_DISK_GIB = 65536;
/** Longest deadline accepted, seconds (24 h). */
export const MAX_TIMEOUT_SECONDS = 86_400;

/** The resource type token: `pulumi-nodejs:dynamic:KvmProxy`. */
export const KVM_PROXY_TYPE = "pulumi-nodejs:dynamic:KvmProxy";
