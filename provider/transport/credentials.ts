/**
 * Lazy loading of SSH credentials: the private key (or an ssh-agent socket) and
 * the known_hosts content.
 *
 * Nothing is read in the constructor. Material is loaded at the first connection
 * and cached only once a connection with it succeeded, so a key or known_hosts
 * file that appears after startup (a Secret mounted late) heals the next open()
 * without a restart: a missing file is transient. A key that does not parse, or a
 * wrong passphrase, is permanent. The cache is dropped on authentication or host
 * key failures so rotated files are picked up without a restart either.
 *
 * Key material and passphrases live in ES private fields (invisible to
 * util.inspect and JSON) and never appear in error messages.
 */
import { promises as fs } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type ParsedKey, utils } from "ssh2";
import { ProviderError } from "../errors";
import { KnownHosts } from "./known-hosts";
import { sshReadableKey } from "./private-key";

export interface CredentialOptions {
  /** Private key text (OpenSSH or PEM; ed25519, ecdsa or rsa). */
  privateKey?: string;
  privateKeyPath?: string;
  passphrase?: string;
  /** Path of an ssh-agent socket (e.g. the value of SSH_AUTH_SOCK). */
  agentSocket?: string;
  /** known_hosts content. */
  knownHosts?: string;
  /** known_hosts file; defaults to ~/.ssh/known_hosts when neither this nor knownHosts is given. */
  knownHostsPath?: string;
}

export interface LoadedCredentials {
  readonly key?: ParsedKey;
  /** Names the key for messages: its path, or "the inline private key". Never the key itself. */
  readonly keySource?: string;
  readonly agentSocket?: string;
  readonly knownHosts: KnownHosts;
}

/** Error codes for files that may still appear or become readable (a late Secret mount). */
const TRANSIENT_FS_CODES = new Set(["ENOENT", "ENOTDIR", "EACCES", "EPERM", "EAGAIN", "EBUSY", "EIO"]);

function fsCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String(err.code) : undefined;
}

async function readSecretFile(file: string, what: string): Promise<string> {
  try {
    return await fs.readFile(file, "utf8");
  } catch (err) {
    const code = fsCode(err);
    const kind = code && TRANSIENT_FS_CODES.has(code) ? "transient" : "permanent";
    const reason = code === "ENOENT" ? "does not exist (yet)" : `cannot be read (${code ?? "error"})`;
    throw new ProviderError(kind, `${what} ${file} ${reason}`);
  }
}

/**
 * Parser messages are fixed strings, but some embed words taken from the file
 * (a cipher or key type name); keep only short, word-like text.
 */
function safeParserReason(message: string): string {
  const cleaned = message.replace(/[A-Za-z0-9+/=]{24,}/g, "…").slice(0, 120);
  return /^[\w\s().,:;'?/@…-]*$/.test(cleaned) ? cleaned : "unrecognised key data";
}

/** Parses a private key; every failure is permanent and names only `source`. */
export function parsePrivateKey(text: string, source: string, passphrase: string | undefined): ParsedKey {
  // PKCS#8 is converted (and decrypted) first: ssh2 does not read it.
  const readable = sshReadableKey(text, passphrase);
  if ("problem" in readable) throw new ProviderError("permanent", `${source} ${readable.problem}`);
  const parsed = utils.parseKey(readable.key, readable.converted === undefined ? passphrase : undefined);
  if (parsed instanceof Error) {
    const msg = parsed.message;
    if (/no passphrase given/i.test(msg)) {
      throw new ProviderError("permanent", `${source} is encrypted but no passphrase was given`);
    }
    if (passphrase !== undefined && /bad passphrase|integrity check failed|decrypt|bad decrypt/i.test(msg)) {
      throw new ProviderError("permanent", `wrong passphrase for ${source}`);
    }
    throw new ProviderError(
      "permanent",
      `${source} is not a usable SSH private key (expected ed25519, ecdsa or rsa in OpenSSH or PEM format): ${safeParserReason(msg)}`,
    );
  }
  // OpenSSH's format could hold several keys; files written by ssh-keygen hold one.
  const key = Array.isArray(parsed) ? (parsed[0] as ParsedKey | undefined) : parsed;
  if (!key?.isPrivateKey()) {
    throw new ProviderError("permanent", `${source} holds a public key, not a private key`);
  }
  return key;
}

/** The private key the options name (inline or a file), parsed; none when they name only an agent. */
export async function loadPrivateKey(
  o: Pick<CredentialOptions, "privateKey" | "privateKeyPath" | "passphrase">,
): Promise<{ key?: ParsedKey; keySource?: string }> {
  if (o.privateKeyPath !== undefined) {
    const keySource = `private key file ${o.privateKeyPath}`;
    const text = await readSecretFile(o.privateKeyPath, "private key file");
    return { key: parsePrivateKey(text, keySource, o.passphrase), keySource };
  }
  if (o.privateKey !== undefined) {
    const keySource = "the inline private key";
    return { key: parsePrivateKey(o.privateKey, keySource, o.passphrase), keySource };
  }
  return {};
}

export class CredentialLoader {
  readonly #options: CredentialOptions;
  #cached: LoadedCredentials | undefined;

  /** A contradiction in the options, raised (permanent) at load: constructing never throws. */
  readonly #configError: string | undefined;

  constructor(options: CredentialOptions) {
    // Copy so later mutation of the caller's object cannot change what we load.
    this.#options = { ...options };
    const o = this.#options;
    if (o.privateKey === undefined && o.privateKeyPath === undefined && o.agentSocket === undefined) {
      this.#configError = "SSH needs privateKey, privateKeyPath or agentSocket";
    } else if (o.privateKey !== undefined && o.privateKeyPath !== undefined) {
      this.#configError = "give either privateKey or privateKeyPath, not both";
    } else if (o.knownHosts !== undefined && o.knownHostsPath !== undefined) {
      this.#configError = "give either knownHosts or knownHostsPath, not both";
    }
  }

  /** Describes where credentials come from, for messages (paths only, never content). */
  describe(): string {
    const o = this.#options;
    const parts: string[] = [];
    if (o.privateKeyPath !== undefined) parts.push(`key ${o.privateKeyPath}`);
    if (o.privateKey !== undefined) parts.push("the inline private key");
    if (o.agentSocket !== undefined) parts.push(`the agent at ${o.agentSocket}`);
    return parts.join(" and ");
  }

  /** The cached material if a connection has succeeded with it, else freshly read and parsed. */
  async load(): Promise<LoadedCredentials> {
    if (this.#cached) return this.#cached;
    if (this.#configError) throw new ProviderError("permanent", this.#configError);
    const o = this.#options;
    const knownHosts = await this.#loadKnownHosts();
    const { key, keySource } = await loadPrivateKey(o);
    if (o.agentSocket !== undefined) await checkAgentSocket(o.agentSocket);
    return { key, keySource, agentSocket: o.agentSocket, knownHosts };
  }

  /** Keeps `creds` for later connections; call once a connection with them succeeded. */
  remember(creds: LoadedCredentials): void {
    this.#cached = creds;
  }

  /** Forgets cached material so the next load re-reads the files (after auth or host key failures). */
  forget(): void {
    this.#cached = undefined;
  }

  async #loadKnownHosts(): Promise<KnownHosts> {
    const o = this.#options;
    if (o.knownHosts !== undefined) return KnownHosts.parse(o.knownHosts, "the inline known_hosts");
    const file = o.knownHostsPath ?? path.join(os.homedir(), ".ssh", "known_hosts");
    return KnownHosts.parse(await readSecretFile(file, "known_hosts file"), file);
  }
}

async function checkAgentSocket(socket: string): Promise<void> {
  let stat: Awaited<ReturnType<typeof fs.stat>>;
  try {
    stat = await fs.stat(socket);
  } catch (err) {
    const code = fsCode(err);
    // The agent may not have started yet; like a missing key file, that can heal.
    throw new ProviderError(
      "transient",
      `ssh-agent socket ${socket} ${code === "ENOENT" ? "does not exist (yet)" : `cannot be reached (${code ?? "error"})`}`,
    );
  }
  if (!stat.isSocket()) throw new ProviderError("permanent", `ssh-agent socket ${socket} is not a socket`);
}
