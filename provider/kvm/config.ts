/**
 * The provider's configuration model: the libvirt hosts it may use and the
 * images VMs boot from. Validation collects every failure, each naming the
 * property at fault (`hosts.edge.uri`, `images.debian.sha256`), and throws
 * them together as one ValidationError.
 */

import { fileURLToPath, pathToFileURL } from "node:url";
import { parseDuration } from "./duration";
import { Failures, ValidationError, type ValidationFailure } from "./validation";

/** Libvirt domain type: `kvm` needs hardware virtualisation; `qemu` is TCG emulation for hosts without it. */
export type DomainType = "kvm" | "qemu";
/** Disk image formats the provider handles. */
export type ImageFormat = "qcow2" | "raw";
/** Guest firmware: UEFI (OVMF, auto-selected by libvirt) or legacy BIOS (SeaBIOS). */
export type Firmware = "uefi" | "bios";

export const DOMAIN_TYPES: readonly DomainType[] = ["kvm", "qemu"];
export const IMAGE_FORMATS: readonly ImageFormat[] = ["qcow2", "raw"];
export const FIRMWARES: readonly Firmware[] = ["uefi", "bios"];

export const DEFAULT_SSH_USER = "root";
export const DEFAULT_SSH_PORT = 22;
export const DEFAULT_DRIVER_URI = "qemu:///system";
export const DEFAULT_DOMAIN_TYPE: DomainType = "kvm";
export const DEFAULT_POOL = "default";
export const DEFAULT_NETWORK = "default";
/** libvirtd's socket on the remote end of an ssh:// host unless the URI gives `?socket=`. */
export const DEFAULT_REMOTE_SOCKET = "/var/run/libvirt/libvirt-sock";
/** Where host keys are looked up when neither knownHosts nor knownHostsPath is set (the transport expands `~`). */
export const DEFAULT_KNOWN_HOSTS_PATH = "~/.ssh/known_hosts";
export const DEFAULT_IMAGE_FORMAT: ImageFormat = "qcow2";
export const DEFAULT_FIRMWARE: Firmware = "uefi";

/** How to reach a host's libvirtd. */
export type HostEndpoint =
  | { kind: "ssh"; user: string; host: string; port: number; socketPath: string }
  | { kind: "unix"; socketPath: string };

/** Where VM NICs attach: a libvirt network or an existing host bridge. */
export type NicAttachment = { kind: "network"; network: string } | { kind: "bridge"; bridge: string };

/** SSH material for an ssh:// host, as configured (contents or paths; the transport loads paths lazily). */
export interface SshAuthConfig {
  /** known_hosts content; exclusive with knownHostsPath. */
  knownHosts?: string;
  /** known_hosts file; defaults to {@link DEFAULT_KNOWN_HOSTS_PATH} when knownHosts is not given either. */
  knownHostsPath?: string;
  /** Private key content (PEM/OpenSSH). */
  privateKey?: string;
  privateKeyPath?: string;
  /** An ssh-agent socket. */
  agentSocket?: string;
  /** Passphrase of the private key. */
  passphrase?: string;
}

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
  /** Deadline for each libvirt call's reply, ms (config `callTimeout`; default the connection's 60 s). */
  callTimeoutMs?: number;
}

/** Bounds of a host's `callTimeout`, seconds. */
export const CALL_TIMEOUT_RANGE = { min: 1, max: 3600 } as const;

/** Where an image's bytes come from. */
export type ImageSource = { kind: "http"; url: string } | { kind: "file"; path: string };

/** One validated image, defaults applied. */
export interface ImageConfig {
  /** The key under `images`; undefined for an image given directly by URL. */
  key?: string;
  /** Canonical URL: an http(s) URL normalised by WHATWG URL, or a `file://` URL for local files. */
  url: string;
  source: ImageSource;
  format: ImageFormat;
  firmware: Firmware;
  /** Lower-case hex SHA-256 of the image file, when pinned. */
  sha256?: string;
}

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
// Field readers: each records a failure and returns undefined on bad input.
// ---------------------------------------------------------------------------

type Obj = Record<string, unknown>;

function isObject(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function rejectUnknown(obj: Obj, known: readonly string[], f: Failures): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k)) f.fail(k, `unknown property (known: ${known.join(", ")})`);
  }
}

function optString(obj: Obj, field: string, f: Failures): string | undefined {
  const v = obj[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") {
    f.fail(field, "must be a string");
    return undefined;
  }
  if (v === "") {
    f.fail(field, "must not be empty");
    return undefined;
  }
  if (v.includes("\0")) {
    f.fail(field, "must not contain NUL characters");
    return undefined;
  }
  return v;
}

function optEnum<T extends string>(
  obj: Obj,
  field: string,
  allowed: readonly T[],
  f: Failures,
): T | undefined {
  const v = optString(obj, field, f);
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v)) {
    f.fail(
      field,
      `must be one of ${allowed.map((a) => JSON.stringify(a)).join(", ")} (got ${JSON.stringify(v)})`,
    );
    return undefined;
  }
  return v as T;
}

// libvirt object names (pools, networks): no '/', printable, bounded.
function libvirtName(obj: Obj, field: string, f: Failures): string | undefined {
  const v = optString(obj, field, f);
  if (v === undefined) return undefined;
  if (!/^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$/.test(v)) {
    f.fail(
      field,
      "must be 1-128 letters, digits, '.', '_', '+', ':' or '-', starting with a letter or digit",
    );
    return undefined;
  }
  return v;
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
  "knownHosts",
  "knownHostsPath",
  "privateKey",
  "privateKeyPath",
  "agentSocket",
  "passphrase",
  "callTimeout",
] as const;

const SSH_FIELDS = [
  "knownHosts",
  "knownHostsPath",
  "privateKey",
  "privateKeyPath",
  "agentSocket",
  "passphrase",
] as const;

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
    for (const p of params)
      if (p !== "socket") problems.push(`unsupported query parameter ${JSON.stringify(p)}`);
    const socketPath = url.searchParams.get("socket") ?? DEFAULT_REMOTE_SOCKET;
    if (!socketPath.startsWith("/")) problems.push("socket= must be an absolute path");
    if (url.pathname !== "" && url.pathname !== "/") {
      problems.push(
        `must not have a path (${JSON.stringify(url.pathname)}); the libvirt driver URI goes in driverUri`,
      );
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (host === "") problems.push("must name a host");
    let user = DEFAULT_SSH_USER;
    if (url.username !== "") {
      user = decodeURIComponent(url.username);
      if (!/^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$/.test(user))
        problems.push(`invalid user ${JSON.stringify(user)}`);
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
    const socketPath = decodeURIComponent(url.pathname);
    if (!socketPath.startsWith("/") || socketPath === "/")
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
    `scheme ${JSON.stringify(url.protocol.replace(/:$/, ""))} is not supported; use ssh:// or unix://${hint}`,
  );
  return undefined;
}

/**
 * Validates one host entry, applying defaults. Failures are recorded under
 * `f` (already positioned at `hosts.<key>`); returns undefined when any were found.
 */
export function parseHost(key: string, input: unknown, f: Failures): HostConfig | undefined {
  const before = f.list.length;
  if (!isObject(input)) {
    f.fail(undefined, "must be an object");
    return undefined;
  }
  rejectUnknown(input, HOST_FIELDS, f);
  const uri = optString(input, "uri", f);
  if (uri === undefined && input.uri === undefined) f.fail("uri", "is required");
  const endpoint = uri === undefined ? undefined : parseHostUri(uri, f);

  const driverUri = optString(input, "driverUri", f) ?? DEFAULT_DRIVER_URI;
  if (!/^[a-z][a-z0-9+]*:\/\/[^\s]*$/.test(driverUri)) {
    f.fail("driverUri", `must be a libvirt driver URI such as ${DEFAULT_DRIVER_URI}`);
  }
  const domainType = optEnum(input, "domainType", DOMAIN_TYPES, f) ?? DEFAULT_DOMAIN_TYPE;
  const pool = libvirtName(input, "pool", f) ?? DEFAULT_POOL;

  const network = libvirtName(input, "network", f);
  const bridge = optString(input, "bridge", f);
  if (bridge !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$/.test(bridge)) {
    f.fail("bridge", "must be a Linux interface name: 1-15 letters, digits, '.', '_' or '-'");
  }
  if (input.network !== undefined && input.bridge !== undefined) {
    f.fail("bridge", "give either network or bridge, not both");
  }
  const nic: NicAttachment =
    bridge !== undefined
      ? { kind: "bridge", bridge }
      : { kind: "network", network: network ?? DEFAULT_NETWORK };

  const ssh: SshAuthConfig = {};
  for (const field of SSH_FIELDS) {
    const v = optString(input, field, f);
    if (v !== undefined) ssh[field] = v;
  }
  if (endpoint?.kind === "unix") {
    for (const field of SSH_FIELDS) {
      if (input[field] !== undefined) f.fail(field, "applies only to ssh:// hosts");
    }
  }
  if (endpoint?.kind === "ssh") checkSshAuth(input, ssh, f);

  let callTimeoutMs: number | undefined;
  if (input.callTimeout !== undefined) {
    const secs = parseDuration(input.callTimeout);
    const { min, max } = CALL_TIMEOUT_RANGE;
    if (secs === undefined || secs < min || secs > max) {
      f.fail("callTimeout", `must be a duration from ${min}s to ${max / 60}m, such as "30s" or 90`);
    } else {
      callTimeoutMs = Math.round(secs * 1000);
    }
  }

  if (f.list.length > before || endpoint === undefined) return undefined;
  const host: HostConfig = { key, uri: uri as string, endpoint, driverUri, domainType, pool, nic };
  if (callTimeoutMs !== undefined) host.callTimeoutMs = callTimeoutMs;
  if (endpoint.kind === "ssh") {
    host.ssh =
      ssh.knownHosts === undefined && ssh.knownHostsPath === undefined
        ? { ...ssh, knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH }
        : ssh;
  }
  return host;
}

function checkSshAuth(input: Obj, ssh: SshAuthConfig, f: Failures): void {
  if (input.knownHosts !== undefined && input.knownHostsPath !== undefined) {
    f.fail("knownHostsPath", "give either knownHosts (content) or knownHostsPath, not both");
  }
  if (ssh.knownHosts !== undefined && !/\s/.test(ssh.knownHosts.trim())) {
    f.fail("knownHosts", "must hold known_hosts lines (host, key type, key); for a file use knownHostsPath");
  }
  if (input.privateKey !== undefined && input.privateKeyPath !== undefined) {
    f.fail("privateKeyPath", "give either privateKey (content) or privateKeyPath, not both");
  }
  if (ssh.privateKey !== undefined && !ssh.privateKey.includes("-----BEGIN")) {
    f.fail("privateKey", "must hold the key itself (-----BEGIN ...); for a file use privateKeyPath");
  }
  if (
    input.privateKey === undefined &&
    input.privateKeyPath === undefined &&
    input.agentSocket === undefined
  ) {
    f.fail("privateKey", "ssh:// hosts need privateKey, privateKeyPath or agentSocket");
  }
  if (
    input.passphrase !== undefined &&
    input.privateKey === undefined &&
    input.privateKeyPath === undefined
  ) {
    f.fail("passphrase", "applies only with privateKey or privateKeyPath");
  }
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

const IMAGE_FIELDS = ["url", "format", "firmware", "sha256"] as const;

/**
 * Parses an image location: `https://`, `http://`, `file:///abs/path` or an
 * absolute local path. Returns the canonical URL (local paths become
 * `file://` URLs, so both spellings of one file share a cache entry) and the
 * source. Records failures under `f` at `field`.
 */
export function parseImageUrl(
  raw: string,
  f: Failures,
  field = "url",
): { url: string; source: ImageSource } | undefined {
  if (raw.startsWith("/")) {
    const url = pathToFileURL(raw).href;
    return { url, source: { kind: "file", path: fileURLToPath(url) } };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    f.fail(field, "must be an https://, http:// or file: URL, or an absolute local path");
    return undefined;
  }
  if (url.protocol === "https:" || url.protocol === "http:") {
    if (url.username !== "" || url.password !== "") {
      f.fail(field, "must not carry credentials (the URL is recorded in the VM's metadata)");
      return undefined;
    }
    if (url.hash !== "") {
      f.fail(field, "must not have a #fragment");
      return undefined;
    }
    return { url: url.href, source: { kind: "http", url: url.href } };
  }
  if (url.protocol === "file:") {
    if (url.host !== "" && url.host !== "localhost") {
      f.fail(field, "file: URLs must name a local file (file:///path)");
      return undefined;
    }
    const path = fileURLToPath(url);
    const canonical = pathToFileURL(path).href;
    return { url: canonical, source: { kind: "file", path } };
  }
  f.fail(
    field,
    `scheme ${JSON.stringify(url.protocol.replace(/:$/, ""))} is not supported; use https, http or file`,
  );
  return undefined;
}

/**
 * Validates one image entry, applying defaults (format qcow2, firmware uefi).
 * `f` is positioned at `images.<key>` (or wherever the caller wants failures).
 */
export function parseImage(key: string | undefined, input: unknown, f: Failures): ImageConfig | undefined {
  const before = f.list.length;
  if (!isObject(input)) {
    f.fail(undefined, "must be an object");
    return undefined;
  }
  rejectUnknown(input, IMAGE_FIELDS, f);
  const rawUrl = optString(input, "url", f);
  if (rawUrl === undefined && input.url === undefined) f.fail("url", "is required");
  const location = rawUrl === undefined ? undefined : parseImageUrl(rawUrl, f);
  const format = optEnum(input, "format", IMAGE_FORMATS, f) ?? DEFAULT_IMAGE_FORMAT;
  const firmware = optEnum(input, "firmware", FIRMWARES, f) ?? DEFAULT_FIRMWARE;
  let sha256 = optString(input, "sha256", f);
  if (sha256 !== undefined) {
    if (!/^[0-9a-fA-F]{64}$/.test(sha256)) f.fail("sha256", "must be 64 hexadecimal characters");
    sha256 = sha256.toLowerCase();
  }
  if (f.list.length > before || location === undefined) return undefined;
  const image: ImageConfig = { url: location.url, source: location.source, format, firmware };
  if (key !== undefined) image.key = key;
  if (sha256 !== undefined) image.sha256 = sha256;
  return image;
}

// ---------------------------------------------------------------------------
// Whole configuration
// ---------------------------------------------------------------------------

/** Result of {@link validateConfig}: the config, or every failure found. */
export type ConfigValidation =
  | { ok: true; config: ProviderConfig }
  | { ok: false; failures: ValidationFailure[] };

function parseMap<T>(
  input: unknown,
  name: string,
  f: Failures,
  each: (key: string, value: unknown, f: Failures) => T | undefined,
): Record<string, T> {
  const out: Record<string, T> = {};
  if (input === undefined || input === null) return out;
  if (!isObject(input)) {
    f.fail(name, "must be an object keyed by name");
    return out;
  }
  for (const [key, value] of Object.entries(input)) {
    const keyProblem = configKeyProblem(key);
    // Failures for a bad key still use the key as written, so the user can find it.
    const at = f.at(name).at(key);
    if (keyProblem !== undefined) {
      at.fail(undefined, `key ${JSON.stringify(key)} ${keyProblem}`);
      continue;
    }
    const parsed = each(key, value, at);
    if (parsed !== undefined) out[key] = parsed;
  }
  return out;
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
  const hosts = parseMap(input.hosts, "hosts", f, parseHost);
  const images = parseMap(input.images, "images", f, parseImage);
  if (!f.empty) return { ok: false, failures: f.list };
  return { ok: true, config: { hosts, images } };
}

/** As {@link validateConfig}, throwing a ValidationError carrying every failure. */
export function parseConfig(input: unknown): ProviderConfig {
  const result = validateConfig(input);
  if (!result.ok) throw new ValidationError(result.failures, "invalid provider configuration");
  return result.config;
}

/**
 * Resolves a resource's image reference: a key of `images`, or a direct
 * location (https://, http://, file: URL or absolute path) which gets the
 * same defaults as a configured image (qcow2, UEFI, unpinned). Anything that
 * contains `:` or starts with `/` is taken as a location. Throws a
 * ValidationError at `property` (default `image`) for an unknown key or a bad
 * location.
 */
export function resolveImage(
  ref: unknown,
  images: Readonly<Record<string, ImageConfig>>,
  property = "image",
): ImageConfig {
  const f = new Failures();
  if (typeof ref !== "string" || ref === "") {
    f.fail(property, "must be an image key or an image URL");
    f.throwIfAny();
  }
  const r = ref as string;
  if (r.includes(":") || r.startsWith("/")) {
    const location = parseImageUrl(r, f, property);
    f.throwIfAny();
    const loc = location as { url: string; source: ImageSource };
    return { url: loc.url, source: loc.source, format: DEFAULT_IMAGE_FORMAT, firmware: DEFAULT_FIRMWARE };
  }
  const image = Object.hasOwn(images, r) ? images[r] : undefined;
  if (image === undefined) {
    const known = Object.keys(images);
    f.fail(
      property,
      `unknown image key ${JSON.stringify(r)} (configured: ${known.length ? known.join(", ") : "none"}); ` +
        "or give an https://, http://, file: URL or absolute path",
    );
    f.throwIfAny();
  }
  return image as ImageConfig;
}
