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

/** A value for ssh_config: double-quoted, `%` doubled (ssh expands %-tokens in paths). */
function value(v: string): string {
  if (/["\r\n\0]/.test(v))
    throw new ProviderError("permanent", "an ssh_config path must not contain quotes or line breaks");
  return `"${v.replace(/%/g, "%%")}"`;
}

/** The ssh_config text (see the module comment). */
export function openSshConfig(input: OpenSshConfigInput): string {
  const lines = [
    "# Written by pulumi-kvm-proxy for one connection, and removed with it.",
    "StrictHostKeyChecking yes",
    `UserKnownHostsFile ${input.knownHostsFiles.map(value).join(" ")}`,
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
  if (input.identityAgent !== undefined) lines.push(`IdentityAgent ${value(input.identityAgent)}`);
  if (input.userConfig !== undefined) lines.push(`Include ${value(input.userConfig)}`);
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

/** `-N -L local:remote`: forward a local socket to libvirtd's socket, no remote command. */
export function forwardArgs(localSocket: string, remoteSocket: string): string[] {
  for (const p of [localSocket, remoteSocket]) {
    if (p.includes(":"))
      throw new ProviderError("permanent", `socket path ${p} contains ':', which ssh -L cannot forward`);
  }
  return ["-N", "-L", `${localSocket}:${remoteSocket}`];
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
