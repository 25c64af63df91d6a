/**
 * What the OpenSSH transport hands the system `ssh`: an ssh_config file of
 * its own and the command line, and how it reads ssh's complaints. No I/O.
 *
 * The file is given with `-F`, so ssh reads no other file unless it is
 * included, and OpenSSH passes `-F` on to the ssh it runs for each ProxyJump
 * hop: the settings below therefore hold for every hop, not only the target.
 * They come first, and for ssh the first value of an option wins, so the
 * user's file (included after them: the host's `sshConfig`, else
 * ~/.ssh/config and /etc/ssh/ssh_config, as ssh reads them by default)
 * cannot weaken them:
 * - host keys: StrictHostKeyChecking yes against exactly the known_hosts we
 *   were given (UserKnownHostsFile, the global file off), never updated;
 * - BatchMode: ssh never prompts (no TTY behind us);
 * - ControlMaster no: ssh never becomes a master others could share; an
 *   existing master of the user's (ControlPath) is still used;
 * - IdentityAgent: our in-process agent (ssh-agent.ts) when the stack config
 *   gives keys, the configured agent socket when it names one;
 * - keepalives and the connect timeout as the ssh2 transport's.
 * Everything else (users, ports, identities, certificates, ProxyJump,
 * ciphers) comes from the user's file.
 */
import { ProviderError } from "../errors";

export interface OpenSshConfigInput {
  /** known_hosts files, all consulted for every hop. */
  knownHostsFiles: readonly string[];
  /** The agent ssh asks for keys, if any. */
  identityAgent?: string;
  /** The user's ssh_config; undefined: ~/.ssh/config then /etc/ssh/ssh_config. */
  userConfig?: string;
  connectTimeoutSeconds: number;
  keepalive: { intervalSeconds: number; countMax: number } | false;
}

/**
 * The paths of ours OpenSSH reads: three in the ssh_config (UserKnownHostsFile,
 * IdentityAgent, Include) and libvirtd's socket, the far end of `-L`.
 */
export type OpenSshPathKind = "knownHostsPath" | "agentSocket" | "sshConfig" | "socket";

/**
 * Why the transport cannot hand `path` to ssh so that ssh reads that very
 * path, or undefined: exactly the paths OpenSSH 9.2 reads otherwise (see the
 * test, which asks `ssh -G`). `path` as configured (a leading `~/` is the
 * transport's to expand) or as the transport passes it. Quotes nothing of
 * `path`.
 *
 * The ssh_config is read line by line, each value double-quoted by
 * {@link sshConfigValue}; in it OpenSSH still reads `"` as the end of the
 * value, `\` before `\`, `'` or the closing quote as an escape, and a
 * leading `~name` as that user's home. UserKnownHostsFile and IdentityAgent
 * expand `${NAME}` (the `%` tokens are doubled away) and know words of
 * their own: `none` (any case) for the first; `none`, `SSH_AUTH_SOCK` and
 * `$NAME` for the second. Include takes `%` and `${` as written, but reads
 * every `\` and `*`, `?`, `[` as a file name pattern, and a relative path
 * from ~/.ssh. In `-L local:remote` ssh splits at `:`, drops each `\` and
 * expands `%` tokens and `${NAME}`. Whitespace, `#`, `'`, a leading `-` and
 * other characters are read as written everywhere.
 */
export function openSshPathProblem(kind: OpenSshPathKind, path: string): string | undefined {
  if (kind === "socket") {
    const todo = 'choose a socket path without it, or use transport "ssh2"';
    if (path.includes(":")) return `contains ':', where ssh -L splits its forward: ${todo}`;
    if (path.includes("\\")) return `contains '\\', which ssh -L reads as an escape: ${todo}`;
    if (path.includes("%")) return `contains '%', which ssh -L reads as a token (%h: the host): ${todo}`;
    if (path.includes("${"))
      return `contains "\${", which ssh -L replaces with an environment variable: ${todo}`;
    return undefined;
  }
  const include = kind === "sshConfig";
  const todo = include
    ? "rename the file or a folder on its path"
    : 'rename the file or a folder on its path, or use transport "ssh2"';
  if (/[\r\n\0]/.test(path)) return "must be one line without NUL: ssh_config is read line by line";
  if (path.includes('"')) return `contains '"', which ends a value in ssh_config: ${todo}`;
  if (include ? path.includes("\\") : /\\(?:[\\'"]|$)/.test(path)) {
    return include
      ? `contains '\\', which OpenSSH's Include reads as an escape: ${todo}`
      : `contains '\\' before '\\', ' or the end, which ssh_config reads as an escape: ${todo}`;
  }
  if (!include && path.includes("${"))
    return `contains "\${", which OpenSSH replaces with an environment variable: ${todo}`;
  if (/^~[^/]/.test(path))
    return 'starts with "~name", which OpenSSH reads as that user\'s home folder: give the full path (or ~/ for your own home)';
  if (kind === "knownHostsPath" && /^none$/i.test(path))
    return 'is "none", which makes OpenSSH read no known_hosts file: give the file\'s path (./none for a file of that name)';
  if (kind === "agentSocket") {
    if (path === "none")
      return 'is "none", which makes OpenSSH use no agent: give the socket\'s path (./none for a socket of that name)';
    if (path === "SSH_AUTH_SOCK")
      return 'is "SSH_AUTH_SOCK", which OpenSSH reads as the agent its environment names: give the socket\'s path (./SSH_AUTH_SOCK for a socket of that name)';
    if (path.startsWith("$"))
      return 'starts with "$", which OpenSSH reads as an environment variable naming the agent: give the socket\'s path';
  }
  if (include) {
    if (!path.startsWith("/") && !path.startsWith("~/"))
      return "is relative, which OpenSSH's Include reads from ~/.ssh: give the full path (or ~/...)";
    if (/[*?[]/.test(path))
      return `contains '*', '?' or '[', which OpenSSH's Include reads as a pattern of file names: ${todo}`;
  }
  return undefined;
}

/**
 * `path` as the ssh_config's value for `kind`, unjudged: double-quoted, and
 * `%` doubled where OpenSSH expands `%` tokens (not in an Include).
 */
export function sshConfigValue(kind: Exclude<OpenSshPathKind, "socket">, path: string): string {
  return `"${kind === "sshConfig" ? path : path.replace(/%/g, "%%")}"`;
}

/** {@link sshConfigValue} of a path {@link openSshPathProblem} passes; a permanent error otherwise. */
function value(kind: Exclude<OpenSshPathKind, "socket">, path: string): string {
  const problem = openSshPathProblem(kind, path);
  if (problem !== undefined) throw new ProviderError("permanent", `an ssh_config ${kind} ${problem}`);
  return sshConfigValue(kind, path);
}

/** The ssh_config text (see the module comment). */
export function openSshConfig(input: OpenSshConfigInput): string {
  const lines = [
    "# Written by pulumi-kvm-proxy for one connection, and removed with it.",
    "StrictHostKeyChecking yes",
    `UserKnownHostsFile ${input.knownHostsFiles.map((f) => value("knownHostsPath", f)).join(" ")}`,
    "GlobalKnownHostsFile /dev/null",
    "UpdateHostKeys no",
    "CheckHostIP no",
    "BatchMode yes",
    "ControlMaster no",
    "ExitOnForwardFailure yes",
    "StreamLocalBindUnlink yes",
    `ConnectTimeout ${input.connectTimeoutSeconds}`,
  ];
  if (input.keepalive) {
    lines.push(`ServerAliveInterval ${input.keepalive.intervalSeconds}`);
    lines.push(`ServerAliveCountMax ${input.keepalive.countMax}`);
  }
  if (input.identityAgent !== undefined)
    lines.push(`IdentityAgent ${value("agentSocket", input.identityAgent)}`);
  if (input.userConfig !== undefined) lines.push(`Include ${value("sshConfig", input.userConfig)}`);
  else lines.push("Include ~/.ssh/config", "Include /etc/ssh/ssh_config");
  return `${lines.join("\n")}\n`;
}

export interface OpenSshTarget {
  host: string;
  /** Undefined: ssh_config decides (Port, else 22). */
  port?: number;
  /** Undefined: ssh_config decides (User, else the local user). */
  user?: string;
  /** Jump hosts as `ssh://user@host:port`, the first dialled directly. */
  jump: readonly string[];
}

/** `-F cfg [-p port] [-l user] [-J hops] [extra...] -- host`. */
export function openSshArgs(configFile: string, t: OpenSshTarget, extra: readonly string[]): string[] {
  const args = ["-F", configFile];
  if (t.port !== undefined) args.push("-p", String(t.port));
  if (t.user !== undefined) args.push("-l", t.user);
  if (t.jump.length > 0) args.push("-J", t.jump.join(","));
  return [...args, ...extra, "--", t.host];
}

/** `local:remote` for `-L` (a forward, or its cancel), each path judged by {@link openSshPathProblem}. */
export function forwardSpec(localSocket: string, remoteSocket: string): string {
  for (const p of [localSocket, remoteSocket]) {
    const problem = openSshPathProblem("socket", p);
    if (problem !== undefined) throw new ProviderError("permanent", `socket path ${p} ${problem}`);
  }
  return `${localSocket}:${remoteSocket}`;
}

/** `-N -L local:remote`: forward a local socket to libvirtd's socket, no remote command. */
export function forwardArgs(localSocket: string, remoteSocket: string): string[] {
  return ["-N", "-L", forwardSpec(localSocket, remoteSocket)];
}

/** Lines that say which host and key: kept even when ssh said more (its host key warning is a screenful). */
const KEY_LINES = /SHA256:|host key|known for|Offending|fingerprint/i;

/** ssh's messages worth quoting (not its banners' decoration), newest last: the key lines and the last few. */
export function sshComplaints(stderr: string): string[] {
  const lines = stderr
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter(
      (l) => l !== "" && !/^(@+|debug\d?|Warning: Permanently added|Transferred|Bytes per second)/.test(l),
    )
    .filter(
      (l) =>
        !/^@+$|^IT IS POSSIBLE|^Someone could be|^It is also possible|^Please contact|^Add correct host key/.test(
          l,
        ),
    );
  const keep = new Set([...lines.filter((l) => KEY_LINES.test(l)).slice(-4), ...lines.slice(-4)]);
  return lines.filter((l) => keep.has(l)).map((l) => (l.length > 300 ? `${l.slice(0, 300)}…` : l));
}

/**
 * The error for an ssh that exited (or never got ready): permanent for a
 * refused host key, refused credentials or a name that does not resolve;
 * transient otherwise (refused, unreachable, timed out, dropped).
 */
export function openSshError(description: string, exit: string, stderr: string): ProviderError {
  const said = sshComplaints(stderr);
  const text = said.join("\n");
  const quoted = said.length > 0 ? `: ${said.join(" | ")}` : "";
  if (
    /Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|host key is known for|has changed and you have requested strict checking|No .* host key is known/i.test(
      text,
    )
  ) {
    return new ProviderError(
      "permanent",
      `OpenSSH refused the host key on the way to ${description} (strict checking against the configured known_hosts; add the verified key there)${quoted}`,
    );
  }
  if (/Permission denied|Too many authentication failures/i.test(text)) {
    return new ProviderError("permanent", `OpenSSH could not log in on the way to ${description}${quoted}`);
  }
  if (
    /Could not resolve hostname|Bad configuration option|bad configuration|Unsupported option|command-line line|terminating, \d+ bad configuration/i.test(
      text,
    )
  ) {
    return new ProviderError("permanent", `OpenSSH could not start for ${description} (${exit})${quoted}`);
  }
  return new ProviderError("transient", `OpenSSH connection to ${description} failed (${exit})${quoted}`);
}
