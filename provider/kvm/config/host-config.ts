/**
 * The provider's configuration model: the libvirt hosts it may use and the
 * images VMs boot from. Validation collects every failure, each naming the
 * property at fault (`hosts.edge.uri`, `images.debian.sha256`), and throws
 * them together as one ValidationError.
 */

import { LIBVIRT_DEFAULTS } from "../../transport/defaults";
import { knownHostsContentProblems } from "../../transport/known-hosts";
import { MIN_DEADLINE_SECONDS, parseDuration } from "../duration";
import {
  decodeOrUndefined,
  given,
  isObject,
  libvirtName,
  type Obj,
  optEnum,
  optString,
  rejectUnknown,
} from "../fields";
import { HOST_POOL_FIELDS, type HostAddressPool, readHostAddressPools } from "../network/host-pools";
import { DEFAULT_NETWORK, type NicAttachment, readNicFields } from "../network/nic";
import { CAPACITY_FIELDS, type HostCapacity, parseCapacity } from "../placement/capacity";
import { Failures, internalFailure, quote, ValidationError, type ValidationFailure } from "../validation";
import { type ImageConfig, parseImage } from "./image";
import {
  checkSshPairs,
  HOP_FIELDS,
  hostProblem,
  parseReach,
  REACH_FIELDS,
  readSshMaterial,
  SECRET_SSH_FIELDS,
  SSH_MATERIAL_FIELDS,
  type SshMaterial,
  type SshReach,
} from "./ssh-reach";

/** Libvirt domain type: `kvm` needs hardware virtualisation; `qemu` is TCG emulation for hosts without it. */
export type DomainType = "kvm" | "qemu";

export const DOMAIN_TYPES: readonly DomainType[] = ["kvm", "qemu"];

export const DEFAULT_SSH_USER = LIBVIRT_DEFAULTS.sshUser;
export const DEFAULT_SSH_PORT = LIBVIRT_DEFAULTS.sshPort;
export const DEFAULT_DRIVER_URI = LIBVIRT_DEFAULTS.driverUri;
export const DEFAULT_DOMAIN_TYPE: DomainType = "kvm";
export const DEFAULT_POOL = "default";
/** libvirtd's socket on the remote end of an ssh:// host unless the URI gives `?socket=`. */
export const DEFAULT_REMOTE_SOCKET = LIBVIRT_DEFAULTS.socketPath;
/** Longest unix socket path, in bytes: Linux's sockaddr_un holds 108 with the closing NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;
/** Where host keys are looked up when neither knownHosts nor knownHostsPath is set (the transport expands `~`). */
export const DEFAULT_KNOWN_HOSTS_PATH = "~/.ssh/known_hosts";

/** How to reach a host's libvirtd. */
export type HostEndpoint =
  | { kind: "ssh"; user: string; host: string; port: number; socketPath: string }
  | { kind: "unix"; socketPath: string };

/** SSH material for an ssh:// host, as configured (contents or paths; the transport loads paths lazily). */
export type SshAuthConfig = SshMaterial;

/** One validated host, defaults applied. */
export interface HostConfig {
  /** The key under `hosts`, also the host part of provider IDs. */
  key: string;
  /** The URI as configured. */
  uri: string;
  endpoint: HostEndpoint;
  /** The libvirt driver URI sent in CONNECT_OPEN. */
  driverUri: string;
  domainType: DomainType;
  /** Storage pool holding cached images, overlays and seeds. */
  pool: string;
  nic: NicAttachment;
  /** Present exactly for ssh endpoints. */
  ssh?: SshAuthConfig;
  /** Present exactly for ssh endpoints: the SSH client, jump hosts and ssh_config (ssh-reach.ts). */
  reach?: SshReach;
  /** Deadline for each libvirt call's reply, ms (config `callTimeout`; default the connection's 60 s). */
  callTimeoutMs?: number;
  /** What the host can take (config `capacity`): placement's limits and the creates in flight at once. */
  capacity: HostCapacity;
  /**
   * The host's address pools by name (config `addressPools`): its own ranges,
   * gateways, nameservers and attachment, which a NIC names with
   * `addressPool: "<name>"` (network/host-pools.ts).
   */
  addressPools: Record<string, HostAddressPool>;
}

/** Bounds of a host's `callTimeout`, seconds. */
export const CALL_TIMEOUT_RANGE = { min: MIN_DEADLINE_SECONDS, max: 3600 } as const;

/** The whole validated configuration. */
export interface ProviderConfig {
  hosts: Record<string, HostConfig>;
  images: Record<string, ImageConfig>;
}

const KEY = /^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$/;

/**
 * Why `key` is not acceptable as a host or image key, or undefined when it
 * is: 1–63 lower-case letters, digits, `-` and `_`, starting and ending with a
 * letter or digit. Host keys appear as the host part of provider IDs
 * (`kvm://<host>/<name>`) and keys appear in property paths, so both are kept
 * URL-safe and free of dots; lower case only, so two keys never differ by case.
 */
export function configKeyProblem(key: unknown): string | undefined {
  if (typeof key !== "string" || key === "") return "must be a non-empty string";
  if (!KEY.test(key)) {
    return "must be 1-63 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit";
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Hosts
// ---------------------------------------------------------------------------

const HOST_FIELDS = [
  "uri",
  "driverUri",
  "domainType",
  "pool",
  "network",
  "bridge",
  ...SSH_MATERIAL_FIELDS,
  "callTimeout",
  "capacity",
  "addressPools",
  ...REACH_FIELDS,
] as const;

/**
 * Whether a host as a program or a config gives it may carry key material,
 * so that everything holding it is kept secret: a host entry (or a pool of
 * them, or a hop of its `jump`, one or a list) with a secret field
 * ({@link SECRET_SSH_FIELDS}), a URI with a password, or any field the
 * parser does not know: a misspelt `privatekey` holds a key all the same.
 * A host's key of `kvm:hosts` (a string) carries none. The one description
 * the KvmProxy class, the provider plugin and the dynamic provider's
 * outputs mark secrets by.
 */
export function mayCarryKeyMaterial(v: unknown): boolean {
  if (Array.isArray(v)) return v.some(mayCarryKeyMaterial);
  if (typeof v === "string") return uriHasPassword(v);
  return isObject(v) && entryCarries(v, HOST_ENTRY_PUBLIC_FIELDS);
}

/** Fields of a host entry that never hold a secret (`key` names it; `pool` is a storage pool, or a pool's hosts). */
const HOST_ENTRY_PUBLIC_FIELDS: readonly string[] = [
  "key",
  ...HOST_FIELDS.filter((k) => !SECRET_SSH_FIELDS.includes(k)),
];
const HOP_PUBLIC_FIELDS: readonly string[] = HOP_FIELDS.filter((k) => !SECRET_SSH_FIELDS.includes(k));

function entryCarries(o: Obj, publicFields: readonly string[]): boolean {
  return Object.entries(o).some(([k, x]) => {
    if (x === undefined || x === null) return false;
    if (!publicFields.includes(k)) return true;
    if (k === "jump") return hopsCarry(x);
    if (k === "pool" || k === "uri") return mayCarryKeyMaterial(x);
    // A misspelt field one level down is as likely a key as one at the top.
    if (k === "capacity") return nestedCarries(x, CAPACITY_FIELDS);
    if (k === "addressPools")
      return !isObject(x) || Object.values(x).some((p) => nestedCarries(p, HOST_POOL_FIELDS));
    return false;
  });
}

/** An object with public `fields` read by the same rule as its host; anything else given may hold anything. */
function nestedCarries(v: unknown, fields: readonly string[]): boolean {
  return isObject(v) ? entryCarries(v, fields) : given(v);
}

function hopsCarry(v: unknown): boolean {
  if (Array.isArray(v)) return v.some(hopsCarry);
  if (typeof v === "string") return uriHasPassword(v);
  return isObject(v) && entryCarries(v, HOP_PUBLIC_FIELDS);
}

/** `scheme://user:password@...`: a password in a URI's user part. */
function uriHasPassword(v: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\/[^/?#@]*:[^/?#@]*@/i.test(v);
}

/**
 * The libvirt drivers a host's libvirtd can be asked to open for this
 * provider (sent in CONNECT_OPEN, or to virt-ssh-helper): QEMU/KVM, system
 * or session instance, and libvirt's test driver. A transport (`qemu+ssh`)
 * or a host belongs in `uri`, which says how to reach the daemon.
 */
export const SUPPORTED_DRIVER_URIS: readonly string[] = [
  "qemu:///system",
  "qemu:///session",
  "test:///default",
];

/** Why `v` is not a driver URI the provider supports, or undefined. Quotes nothing of `v`. */
export function driverUriProblem(v: string): string | undefined {
  if (SUPPORTED_DRIVER_URIS.includes(v)) return undefined;
  const supported = `must be one of ${SUPPORTED_DRIVER_URIS.join(", ")}`;
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(v);
  if (m?.[1]?.includes("+")) {
    return `${supported}: a transport such as ${m[1]} goes in uri (ssh:// or unix://), the driver here`;
  }
  if (m !== null && m[2] !== "")
    return `${supported}: the host goes in uri, and a driver URI names none (three slashes)`;
  return supported;
}

/**
 * Parses a host URI: `ssh://[user@]host[:port][?socket=/path]` (user default
 * root, port default 22, socket default {@link DEFAULT_REMOTE_SOCKET}) or
 * `unix:///path/to/libvirt-sock`. Records failures under `f` at `uri`.
 */
export function parseHostUri(uri: string, f: Failures): HostEndpoint | undefined {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    f.fail("uri", "must be ssh://user@host:port or unix:///path/to/socket");
    return undefined;
  }
  const problems: string[] = [];
  if (url.hash !== "") problems.push("must not have a #fragment");
  if (url.password !== "")
    problems.push("must not carry a password (use privateKey, privateKeyPath or agentSocket)");

  if (url.protocol === "ssh:") {
    const params = [...url.searchParams.keys()];
    for (const p of params) if (p !== "socket") problems.push(`unsupported query parameter ${quote(p)}`);
    const socketPath = url.searchParams.get("socket") ?? DEFAULT_REMOTE_SOCKET;
    if (!socketPath.startsWith("/")) problems.push("socket= must be an absolute path");
    // sshd connects to it as a C string in a sockaddr_un, through either SSH client.
    else if (socketPath.includes("\0")) problems.push("socket= must not contain NUL characters");
    else if (Buffer.byteLength(socketPath, "utf8") > MAX_SOCKET_PATH_BYTES)
      problems.push(
        `socket= must be at most ${MAX_SOCKET_PATH_BYTES} bytes, the longest path a unix socket connects to`,
      );
    if (url.pathname !== "" && url.pathname !== "/") {
      problems.push(
        `must not have a path (${quote(url.pathname)}); the libvirt driver URI goes in driverUri`,
      );
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (host === "") problems.push("must name a host");
    else {
      const bad = hostProblem(host);
      if (bad !== undefined) problems.push(bad);
    }
    let user: string = DEFAULT_SSH_USER;
    if (url.username !== "") {
      const decoded = decodeOrUndefined(url.username);
      if (decoded === undefined || !/^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$/.test(decoded))
        problems.push(`invalid user ${quote(decoded ?? url.username)}`);
      else user = decoded;
    }
    const port = url.port === "" ? DEFAULT_SSH_PORT : Number(url.port);
    if (!Number.isInteger(port) || port < 1 || port > 65535) problems.push("port must be 1-65535");
    if (problems.length > 0) {
      f.fail("uri", problems.join("; "));
      return undefined;
    }
    return { kind: "ssh", user, host, port, socketPath };
  }

  if (url.protocol === "unix:") {
    if (url.host !== "") problems.push("must have an empty host: unix:///path/to/socket");
    if (url.search !== "") problems.push("must not have a query");
    const socketPath = decodeOrUndefined(url.pathname) ?? "";
    if (socketPath.includes("\0")) problems.push("must not contain NUL characters");
    else if (!socketPath.startsWith("/") || socketPath === "/")
      problems.push("must give the socket's absolute path");
    if (problems.length > 0) {
      f.fail("uri", problems.join("; "));
      return undefined;
    }
    return { kind: "unix", socketPath };
  }

  const hint = url.protocol.startsWith("qemu")
    ? " (a libvirt URI: give the transport here, e.g. ssh://root@host:22, and the driver in driverUri)"
    : "";
  f.fail(
    "uri",
    `scheme ${quote(url.protocol.replace(/:$/, ""))} is not supported; use ssh:// or unix://${hint}`,
  );
  return undefined;
}

/**
 * Validates one host entry, applying defaults. Failures are recorded under
 * `f` (already positioned at `hosts.<key>`); returns undefined when any were found.
 */
const MAX_KNOWN_HOSTS_PROBLEMS = 5;

/**
 * Parses inline known_hosts content with the transport's own parser, so a
 * line it would skip at connect (no key, a corrupt key, an unknown marker)
 * fails the host at preview. Failures name `knownHosts` and line numbers,
 * never the lines. Only for ssh:// hosts whose content passed the shape
 * check of kvm/config/host-config.ts (it holds whitespace, so it is not a path).
 */
export function checkKnownHostsContent(value: unknown, f: Failures): void {
  if (!isObject(value) || typeof value.uri !== "string" || !/^\s*ssh:/i.test(value.uri)) return;
  const content = value.knownHosts;
  if (typeof content !== "string" || !/\s/.test(content.trim()) || content.includes("\0")) return;
  const problems = knownHostsContentProblems(content);
  for (const p of problems.slice(0, MAX_KNOWN_HOSTS_PROBLEMS)) {
    f.fail("knownHosts", p.line === 0 ? p.reason : `line ${p.line}: ${p.reason}`);
  }
  if (problems.length > MAX_KNOWN_HOSTS_PROBLEMS) {
    f.fail("knownHosts", `and ${problems.length - MAX_KNOWN_HOSTS_PROBLEMS} more lines the parser skips`);
  }
}

export function parseHost(key: string, input: unknown, f: Failures): HostConfig | undefined {
  const before = f.list.length;
  if (!isObject(input)) {
    f.fail(undefined, "must be an object");
    return undefined;
  }
  rejectUnknown(input, HOST_FIELDS, f);
  const uri = optString(input, "uri", f);
  if (!given(input.uri)) f.fail("uri", "is required");
  const endpoint = uri === undefined ? undefined : parseHostUri(uri, f);

  const driverUri = optString(input, "driverUri", f) ?? DEFAULT_DRIVER_URI;
  const driverProblem = driverUriProblem(driverUri);
  if (driverProblem !== undefined) f.fail("driverUri", driverProblem);
  const domainType = optEnum(input, "domainType", DOMAIN_TYPES, f) ?? DEFAULT_DOMAIN_TYPE;
  const pool = libvirtName(input, "pool", f) ?? DEFAULT_POOL;

  const read = readNicFields(input, f);
  const nic: NicAttachment =
    read === undefined || read === "invalid" ? { kind: "network", network: DEFAULT_NETWORK } : read;

  const ssh: SshAuthConfig = readSshMaterial(input, f);
  if (endpoint?.kind === "unix") {
    for (const field of SSH_MATERIAL_FIELDS) {
      if (given(input[field])) f.fail(field, "applies only to ssh:// hosts");
    }
  }
  // OpenSSH may bring its own identities (~/.ssh/config, its agent): credentials are optional there.
  if (endpoint?.kind === "ssh") checkSshAuth(input, ssh, f, input.transport !== "openssh");
  const sshWithDefaults: SshAuthConfig =
    ssh.knownHosts === undefined && ssh.knownHostsPath === undefined
      ? { ...ssh, knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH }
      : ssh;
  const reach =
    endpoint === undefined
      ? undefined
      : parseReach(
          input,
          endpoint.kind === "ssh"
            ? { user: endpoint.user, ssh: sshWithDefaults, socketPath: endpoint.socketPath }
            : undefined,
          f,
        );

  let callTimeoutMs: number | undefined;
  if (given(input.callTimeout)) {
    const secs = parseDuration(input.callTimeout);
    const { min, max } = CALL_TIMEOUT_RANGE;
    if (secs === undefined || secs < min || secs > max) {
      f.fail("callTimeout", `must be a duration from ${min}s to ${max / 60}m, such as "30s" or 90`);
    } else {
      callTimeoutMs = Math.round(secs * 1000);
    }
  }

  const capacity = parseCapacity(input.capacity, f);
  const addressPools = readHostAddressPools(input.addressPools, f);
  checkKnownHostsContent(input, f);

  if (f.list.length > before || endpoint === undefined) return undefined;
  const host: HostConfig = {
    key,
    uri: uri as string,
    endpoint,
    driverUri,
    domainType,
    pool,
    nic,
    capacity,
    addressPools,
  };
  if (callTimeoutMs !== undefined) host.callTimeoutMs = callTimeoutMs;
  if (endpoint.kind === "ssh") {
    host.ssh = sshWithDefaults;
    if (reach !== undefined) host.reach = reach;
  }
  return host;
}

function checkSshAuth(input: Obj, ssh: SshAuthConfig, f: Failures, authRequired: boolean): void {
  checkSshPairs(input, ssh, f);
  if (authRequired && !given(input.privateKey) && !given(input.privateKeyPath) && !given(input.agentSocket)) {
    f.fail(
      "privateKey",
      'ssh:// hosts need privateKey, privateKeyPath or agentSocket (or transport "openssh")',
    );
  }
  if (given(input.passphrase) && !given(input.privateKey) && !given(input.privateKeyPath)) {
    f.fail("passphrase", "applies only with privateKey or privateKeyPath");
  }
}

// ---------------------------------------------------------------------------
// Whole configuration
// ---------------------------------------------------------------------------

/** Result of {@link validateConfig}: the config, or every failure found. */
export type ConfigValidation =
  | { ok: true; config: ProviderConfig }
  | { ok: false; failures: ValidationFailure[] };

/** What {@link parseKeyedEntries} found: the entries that parsed, and the failures of the rest. */
export interface KeyedEntries<T> {
  values: Record<string, T>;
  /** Failures per key (an entry that failed fails only what uses it). */
  failures: Record<string, ValidationFailure[]>;
  /** Failures of the map itself (not an object). */
  general: ValidationFailure[];
}

/**
 * Parses a map of named entries (`hosts`, `images`) one entry at a time:
 * each key must pass {@link configKeyProblem}, each value is parsed by
 * `each` with failures under `<name>.<key>`. One broken entry never hides
 * the others.
 */
export function parseKeyedEntries<T>(
  input: unknown,
  name: string,
  each: (key: string, value: unknown, f: Failures) => T | undefined,
): KeyedEntries<T> {
  const out: KeyedEntries<T> = { values: {}, failures: {}, general: [] };
  if (input === undefined || input === null) return out;
  if (!isObject(input)) {
    out.general.push({ property: name, reason: "must be an object keyed by name" });
    return out;
  }
  const values: [string, T][] = [];
  const failures: [string, ValidationFailure[]][] = [];
  for (const [key, value] of Object.entries(input)) {
    // Failures for a bad key still use the key as written, so the user can find it.
    const f = new Failures(name).at(key);
    const keyProblem = configKeyProblem(key);
    if (keyProblem !== undefined) f.fail(undefined, `key ${quote(key)} ${keyProblem}`);
    else {
      let parsed: T | undefined;
      try {
        parsed = each(key, value, f);
      } catch (err) {
        // A bug here must fail this entry, not configure: the other entries still serve.
        f.fail(undefined, internalFailure(err));
      }
      if (parsed !== undefined && f.empty) values.push([key, parsed]);
      else if (f.empty) f.fail(undefined, "could not be read");
    }
    if (!f.empty) failures.push([key, f.list]);
  }
  // fromEntries defines own properties: a key such as "__proto__" stays a key, never a prototype.
  out.values = Object.fromEntries(values);
  out.failures = Object.fromEntries(failures);
  return out;
}

function allFailures(e: KeyedEntries<unknown>): ValidationFailure[] {
  return [...e.general, ...Object.values(e.failures).flat()];
}

/**
 * Validates a whole configuration `{ hosts, images }`, applying defaults, and
 * returns either the model or every failure found (never only the first).
 */
export function validateConfig(input: unknown): ConfigValidation {
  const f = new Failures();
  if (input === undefined || input === null) input = {};
  if (!isObject(input))
    return { ok: false, failures: [{ property: "", reason: "configuration must be an object" }] };
  rejectUnknown(input, ["hosts", "images"], f);
  const hosts = parseKeyedEntries(input.hosts, "hosts", parseHost);
  const images = parseKeyedEntries(input.images, "images", parseImage);
  const failures = [...f.list, ...allFailures(hosts), ...allFailures(images)];
  if (failures.length > 0) return { ok: false, failures };
  return { ok: true, config: { hosts: hosts.values, images: images.values } };
}

/** As {@link validateConfig}, throwing a ValidationError carrying every failure. */
export function parseConfig(input: unknown): ProviderConfig {
  const result = validateConfig(input);
  if (!result.ok) throw new ValidationError(result.failures, "invalid provider configuration");
  return result.config;
}
