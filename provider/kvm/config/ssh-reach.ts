/**
 * How an ssh:// host is reached, beyond its URI: which SSH client carries
 * the stream (`transport`), the jump hosts on the way (`jump`), and for the
 * OpenSSH client, the ssh_config file it reads (`sshConfig`). Pure: parses
 * and validates the three fields of a host entry, applying defaults; the
 * transports do the connecting.
 *
 * `jump` is one hop or a list of them, the first dialled directly (the order
 * of OpenSSH's ProxyJump). A hop is `ssh://[user@]host[:port]` or an object
 * `{uri, knownHosts | knownHostsPath, privateKey | privateKeyPath |
 * agentSocket, passphrase}`; what a hop leaves out it takes from the host:
 * its user, its known_hosts, its credentials (key, passphrase and agent
 * together). Failures name `jump` (one hop) or `jump[i]` (a list) and never
 * quote a key, passphrase or a URL's password.
 */

import { hostPort } from "../../transport/host-port";
import { openSshPathProblem } from "../../transport/openssh-config";
import { isPublicKey, privateKeyTextProblem } from "../../transport/private-key";
import { decodeOrUndefined, given, isObject, type Obj, optEnum, optString, rejectUnknown } from "../fields";
import { ipProblem } from "../network/ip";
import { type Failures, quote } from "../validation";

const HOST_LABEL = "[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?";
const HOST_NAME = new RegExp(`^(?=.{1,253}$)${HOST_LABEL}(?:\\.${HOST_LABEL})*\\.?$`);

/**
 * Why `host` (of an ssh:// URI) is not a host name or an address, or
 * undefined. OpenSSH reads more into some characters than a name: a `,` in
 * a ProxyJump (`-J`) starts a second hop, `%` is a token, spaces split.
 */
export function hostProblem(host: string): string | undefined {
  if (host.includes(":") || /^[0-9.]+$/.test(host)) {
    const bad = ipProblem(host);
    return bad === undefined ? undefined : `host ${bad.replace(/^must be /, "must be ")}`;
  }
  if (!HOST_NAME.test(host)) {
    return `host ${quote(host)} is not a host name or address (letters, digits, '-', '_' and dots; a ',' would be read as a second jump host)`;
  }
  return undefined;
}

/** The SSH client a host's stream goes through. */
export type SshClientKind = "ssh2" | "openssh";

export const SSH_CLIENT_KINDS: readonly SshClientKind[] = ["ssh2", "openssh"];

export const DEFAULT_SSH_CLIENT: SshClientKind = "ssh2";

/** Chains longer than this are refused (OpenSSH sets no limit; this catches a runaway list). */
export const MAX_JUMP_HOPS = 8;

/** SSH material as configured (contents or paths), of a host or a hop. */
export interface SshMaterial {
  /** known_hosts content; exclusive with knownHostsPath. */
  knownHosts?: string;
  /** known_hosts file (a host's defaults to ~/.ssh/known_hosts when knownHosts is not given either). */
  knownHostsPath?: string;
  /** Private key content (PEM/OpenSSH). */
  privateKey?: string;
  privateKeyPath?: string;
  /** An ssh-agent socket. */
  agentSocket?: string;
  /** Passphrase of the private key. */
  passphrase?: string;
}

/** One jump host, defaults applied. */
export interface JumpHopConfig {
  /** The hop as written (without any secret: a URI with a password is refused). */
  uri: string;
  user: string;
  host: string;
  port: number;
  /** Its own material, or the host's where it gave none. */
  ssh: SshMaterial;
}

/** The reach of one host: its client, hops and ssh_config. */
export interface SshReach {
  transport: SshClientKind;
  jump: JumpHopConfig[];
  /** openssh only: the ssh_config file it reads instead of ~/.ssh/config and /etc/ssh/ssh_config. */
  sshConfig?: string;
}

/** The SSH material fields of a host entry or a hop. */
export const SSH_MATERIAL_FIELDS = [
  "knownHosts",
  "knownHostsPath",
  "privateKey",
  "privateKeyPath",
  "agentSocket",
  "passphrase",
] as const;
export const HOP_FIELDS = ["uri", ...SSH_MATERIAL_FIELDS] as const;
/** The SSH material that is a secret: the key itself and its passphrase (the rest are paths and public keys). */
export const SECRET_SSH_FIELDS: readonly string[] = ["privateKey", "passphrase"];
const AUTH_FIELDS: (keyof SshMaterial)[] = ["privateKey", "privateKeyPath", "agentSocket", "passphrase"];
const KNOWN_HOSTS_FIELDS: (keyof SshMaterial)[] = ["knownHosts", "knownHostsPath"];
const PATH_FIELDS = ["privateKeyPath", "knownHostsPath", "agentSocket"] as const;

/** Field names a host entry may use for its reach (host-config.ts adds them to the host's). */
export const REACH_FIELDS = ["transport", "jump", "sshConfig"] as const;

/** Why a path field holds something that is not a path (key material, known_hosts lines), or undefined. Quotes nothing of `v`. */
export function pathFieldProblem(field: string, v: string): string | undefined {
  if (/-----BEGIN|PRIVATE KEY-----/.test(v)) {
    return field === "privateKeyPath"
      ? "holds key material, not a path: give the key as privateKey (a secret) or kvm:sshPrivateKey, or the key file's path here"
      : "holds key material, not a path";
  }
  if (/[\r\n]/.test(v)) return "must be a path: one line, without line breaks";
  if (field === "knownHostsPath" && /^\S+\s+(ssh-|ecdsa-|sk-)/.test(v.trim())) {
    return "holds known_hosts lines, not a path: give them as knownHosts";
  }
  return undefined;
}

/** Reads the SSH material fields of a host entry or a hop, each path field checked; failures under `f`. */
export function readSshMaterial(obj: Obj, f: Failures): SshMaterial {
  const m: SshMaterial = {};
  for (const field of SSH_MATERIAL_FIELDS) {
    const v = optString(obj, field, f);
    if (v !== undefined) m[field] = v;
  }
  for (const field of PATH_FIELDS) {
    const v = m[field];
    const problem = v === undefined ? undefined : pathFieldProblem(field, v);
    if (problem !== undefined) f.fail(field, problem);
  }
  return m;
}

/** Parses `ssh://[user@]host[:port]` of a hop; records failures at `field` of `f` (the hop itself when undefined). */
export function parseHopUri(
  uri: string,
  defaultUser: string,
  f: Failures,
  field: string | undefined,
): Omit<JumpHopConfig, "ssh"> | undefined {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    f.fail(field, "must be ssh://[user@]host[:port]");
    return undefined;
  }
  const problems: string[] = [];
  if (url.protocol !== "ssh:") {
    f.fail(field, `scheme ${quote(url.protocol.replace(/:$/, ""))} is not supported; a jump host is ssh://`);
    return undefined;
  }
  if (url.password !== "")
    problems.push("must not carry a password (use privateKey, privateKeyPath or agentSocket)");
  if (url.search !== "" || url.hash !== "") problems.push("must not have a query or #fragment");
  if (url.pathname !== "" && url.pathname !== "/") problems.push("must not have a path");
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  if (host === "") problems.push("must name a host");
  else {
    const bad = hostProblem(host);
    if (bad !== undefined) problems.push(bad);
  }
  let user = defaultUser;
  if (url.username !== "") {
    const u = decodeOrUndefined(url.username);
    if (u === undefined || !/^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$/.test(u)) problems.push("invalid user");
    else user = u;
  }
  const port = url.port === "" ? 22 : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) problems.push("port must be 1-65535");
  if (problems.length > 0) {
    f.fail(field, problems.join("; "));
    return undefined;
  }
  return { uri: `ssh://${user}@${hostPort(host, port)}`, user, host, port };
}

/**
 * Why private key text (inline, or `kvm:sshPrivateKey`) cannot be one, as
 * far as preview can tell without its passphrase, or undefined.
 */
export function privateKeyContentProblem(text: string): string | undefined {
  if (isPublicKey(text)) return "is a public key; give the private key (the file without .pub)";
  if (!text.includes("-----BEGIN")) return "must hold the key itself (-----BEGIN ...)";
  return privateKeyTextProblem(text);
}

/**
 * The rules a host's and a hop's SSH material share: known_hosts and the key
 * each given as content or as a path, not both, and content that looks like
 * what it names (`m` holds the values read from `input`).
 */
export function checkSshPairs(
  input: Obj,
  m: { knownHosts?: string; privateKey?: string },
  f: Failures,
): void {
  if (given(input.knownHosts) && given(input.knownHostsPath)) {
    f.fail("knownHostsPath", "give either knownHosts (content) or knownHostsPath, not both");
  }
  if (m.knownHosts !== undefined && !/\s/.test(m.knownHosts.trim())) {
    f.fail("knownHosts", "must hold known_hosts lines (host, key type, key); for a file use knownHostsPath");
  }
  if (given(input.privateKey) && given(input.privateKeyPath)) {
    f.fail("privateKeyPath", "give either privateKey (content) or privateKeyPath, not both");
  }
  const problem = m.privateKey === undefined ? undefined : privateKeyContentProblem(m.privateKey);
  if (problem !== undefined) f.fail("privateKey", `${problem}; for a file use privateKeyPath`);
}

/** Checks one hop's own material (the same rules as a host's); records failures under `f`. */
function readMaterial(obj: Obj, f: Failures): SshMaterial {
  const m = readSshMaterial(obj, f);
  checkSshPairs(obj, m, f);
  if (given(obj.passphrase) && !given(obj.privateKey) && !given(obj.privateKeyPath)) {
    f.fail("passphrase", "applies only with this hop's own privateKey or privateKeyPath");
  }
  return m;
}

/** The hop's material completed from the host's: credentials as one group, known_hosts as another. */
function withDefaults(own: SshMaterial, host: SshMaterial): SshMaterial {
  const out: SshMaterial = {};
  const ownAuth =
    own.privateKey !== undefined || own.privateKeyPath !== undefined || own.agentSocket !== undefined;
  for (const k of AUTH_FIELDS) {
    const v = ownAuth ? own[k] : host[k];
    if (v !== undefined) out[k] = v;
  }
  const ownKnown = own.knownHosts !== undefined || own.knownHostsPath !== undefined;
  for (const k of KNOWN_HOSTS_FIELDS) {
    const v = ownKnown ? own[k] : host[k];
    if (v !== undefined) out[k] = v;
  }
  return out;
}

function parseHop(
  raw: unknown,
  hostUser: string,
  host: SshMaterial,
  transport: SshClientKind,
  f: Failures,
): JumpHopConfig | undefined {
  const before = f.list.length;
  let uri: string | undefined;
  let own: SshMaterial = {};
  let field: string | undefined = "uri";
  if (typeof raw === "string") {
    uri = raw;
    field = undefined;
    if (raw.includes(",")) {
      f.fail(field, "one hop per entry: give a chain as a list, the first hop first");
      return undefined;
    }
  } else if (isObject(raw)) {
    rejectUnknown(raw, HOP_FIELDS, f);
    uri = optString(raw, "uri", f);
    if (!given(raw.uri)) f.fail("uri", "is required");
    own = readMaterial(raw, f);
    if (transport === "openssh") checkOpenSshPaths(own, ["knownHostsPath"], f);
  } else {
    f.fail(undefined, "must be ssh://[user@]host[:port] or an object {uri, knownHosts, privateKey, ...}");
    return undefined;
  }
  const where = uri === undefined ? undefined : parseHopUri(uri, hostUser, f, field);
  if (where === undefined || f.list.length > before) return undefined;
  return { ...where, ssh: withDefaults(own, host) };
}

/**
 * Refuses the paths of `m` (read, each passed {@link pathFieldProblem}) that
 * the OpenSSH transport hands ssh and ssh would read as another path
 * (openssh-config.ts `openSshPathProblem`). The key files are read by the
 * provider, never by ssh; a hop's agent is not handed to ssh (IdentityAgent
 * is the host's), so only its known_hosts are.
 */
function checkOpenSshPaths(
  m: Pick<SshMaterial, "knownHostsPath" | "agentSocket">,
  fields: readonly ("knownHostsPath" | "agentSocket")[],
  f: Failures,
): void {
  for (const field of fields) {
    const v = m[field];
    if (v === undefined || pathFieldProblem(field, v) !== undefined) continue;
    const problem = openSshPathProblem(field, v);
    if (problem !== undefined) f.fail(field, problem);
  }
}

/**
 * Reads `transport`, `jump` and `sshConfig` of a host entry. `ssh` is the
 * host's own SSH material (known_hosts default applied) and `user` its SSH
 * user, for the hops' defaults; undefined for a unix:// host, where the three
 * fields are refused. With transport "openssh", the paths ssh reads (the
 * host's known_hosts and agent, each hop's own known_hosts, `sshConfig`, and
 * `socketPath`, libvirtd's socket from the URI's `?socket=`, failing at
 * `uri`) are checked against what the transport can hand ssh. Returns
 * undefined when a failure was recorded.
 */
export function parseReach(
  input: Obj,
  host: { user: string; ssh: SshMaterial; socketPath: string } | undefined,
  f: Failures,
): SshReach | undefined {
  const before = f.list.length;
  if (host === undefined) {
    for (const field of REACH_FIELDS) if (given(input[field])) f.fail(field, "applies only to ssh:// hosts");
    return f.list.length > before ? undefined : { transport: DEFAULT_SSH_CLIENT, jump: [] };
  }
  const transport = optEnum(input, "transport", SSH_CLIENT_KINDS, f) ?? DEFAULT_SSH_CLIENT;
  const sshConfig = optString(input, "sshConfig", f);
  if (sshConfig !== undefined) {
    const problem =
      pathFieldProblem("sshConfig", sshConfig) ??
      (transport !== "openssh"
        ? 'applies only with transport "openssh"'
        : openSshPathProblem("sshConfig", sshConfig));
    if (problem !== undefined) f.fail("sshConfig", problem);
  }
  if (transport === "openssh") {
    checkOpenSshPaths(host.ssh, ["knownHostsPath", "agentSocket"], f);
    const problem = openSshPathProblem("socket", host.socketPath);
    if (problem !== undefined) f.fail("uri", `socket= ${problem}`);
  }
  const jump: JumpHopConfig[] = [];
  const raw = input.jump;
  if (Array.isArray(raw)) {
    if (raw.length === 0) f.fail("jump", "must name at least one hop (or leave jump out)");
    if (raw.length > MAX_JUMP_HOPS) f.fail("jump", `must have at most ${MAX_JUMP_HOPS} hops`);
    else
      raw.forEach((hop, i) => {
        const parsed = parseHop(hop, host.user, host.ssh, transport, f.at(`jump[${i}]`));
        if (parsed) jump.push(parsed);
      });
  } else if (given(raw)) {
    const parsed = parseHop(raw, host.user, host.ssh, transport, f.at("jump"));
    if (parsed) jump.push(parsed);
  }
  if (f.list.length > before) return undefined;
  return sshConfig === undefined ? { transport, jump } : { transport, jump, sshConfig };
}
