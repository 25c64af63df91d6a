/**
 * OpenSSH known_hosts parsing and host key checking (sshd(8), "SSH_KNOWN_HOSTS
 * FILE FORMAT"), used as ssh2's `hostVerifier`.
 *
 * Supported: plain and hashed (`|1|salt|hmac`) host fields, `[host]:port` for
 * ports other than 22, comma-separated patterns with `*`/`?` wildcards and `!`
 * negation, `@revoked` lines. `@cert-authority` lines are skipped: host keys
 * signed by a CA are not supported (ssh2 does not negotiate certificate host key
 * algorithms), so such hosts need their plain key listed.
 *
 * There is deliberately no trust-on-first-use and no way to turn checking off:
 * an unknown host is refused with the fingerprint and the command to add it.
 */
import { createHash, createHmac } from "node:crypto";
import { ProviderError } from "../errors";

export interface KnownHostEntry {
  /** 1-based line number in the source, for error messages. */
  readonly line: number;
  readonly revoked: boolean;
  /** The raw host field (comma-separated patterns, or one hashed name). */
  readonly hosts: string;
  readonly keyType: string;
  readonly key: Buffer;
}

export interface SkippedLine {
  readonly line: number;
  readonly reason: string;
}

export type HostKeyCheck =
  | { status: "ok"; entry: KnownHostEntry }
  | { status: "revoked"; entry: KnownHostEntry }
  /** No line names this host at all. */
  | { status: "unknown" }
  /** The host has a key of the offered type, but a different one. */
  | { status: "mismatch"; entries: KnownHostEntry[] }
  /** The host is known, but only with keys of other types. */
  | { status: "other-type"; knownTypes: string[] };

/** The name known_hosts stores for a host: plain for port 22, `[host]:port` otherwise (as ssh does). */
export function knownHostsName(host: string, port: number): string {
  const h = host.toLowerCase();
  return port === 22 ? h : `[${h}]:${port}`;
}

/** OpenSSH's SHA256 fingerprint of a public key blob: `SHA256:` + unpadded base64. */
export function fingerprintSha256(keyBlob: Buffer): string {
  return `SHA256:${createHash("sha256").update(keyBlob).digest("base64").replace(/=+$/, "")}`;
}

/** The key type named inside an SSH public key blob (its first string), or undefined if malformed. */
export function keyBlobType(blob: Buffer): string | undefined {
  if (blob.length < 4) return undefined;
  const len = blob.readUInt32BE(0);
  if (len === 0 || len > 64 || 4 + len > blob.length) return undefined;
  const type = blob.toString("latin1", 4, 4 + len);
  return /^[\x21-\x7e]+$/.test(type) ? type : undefined;
}

/** Glob match as OpenSSH's match_pattern: `*` any run, `?` one character, case-insensitive. */
function globMatch(name: string, pattern: string): boolean {
  const re = pattern
    .toLowerCase()
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${re}$`, "s").test(name);
}

function hashedMatch(name: string, field: string): boolean {
  // |1|base64(salt)|base64(HMAC-SHA1(salt, name))
  const parts = field.split("|");
  if (parts.length !== 4 || parts[1] !== "1") return false;
  const salt = Buffer.from(parts[2] ?? "", "base64");
  const want = Buffer.from(parts[3] ?? "", "base64");
  if (salt.length === 0 || want.length !== 20) return false;
  return createHmac("sha1", salt).update(name).digest().equals(want);
}

/** Whether a host field names `name` (already in known_hosts form). A matching negated pattern wins. */
export function hostFieldMatches(field: string, name: string): boolean {
  if (field.startsWith("|")) return hashedMatch(name, field);
  let matched = false;
  for (const raw of field.split(",")) {
    if (raw === "") continue;
    const negated = raw.startsWith("!");
    const pattern = negated ? raw.slice(1) : raw;
    const hit = pattern.startsWith("|") ? hashedMatch(name, pattern) : globMatch(name, pattern);
    if (hit && negated) return false;
    if (hit) matched = true;
  }
  return matched;
}

export class KnownHosts {
  private constructor(
    /** Where the content came from, for messages: a path or "inline known_hosts". */
    readonly source: string,
    readonly entries: readonly KnownHostEntry[],
    readonly skipped: readonly SkippedLine[],
  ) {}

  static parse(content: string, source = "inline known_hosts"): KnownHosts {
    const entries: KnownHostEntry[] = [];
    const skipped: SkippedLine[] = [];
    const lines = content.split(/\r?\n/);
    for (const [i, rawLine] of lines.entries()) {
      const line = i + 1;
      const text = rawLine.trim();
      if (text === "" || text.startsWith("#")) continue;
      const fields = text.split(/\s+/);
      let revoked = false;
      if (fields[0]?.startsWith("@")) {
        const marker = fields.shift();
        if (marker === "@cert-authority") {
          skipped.push({ line, reason: "@cert-authority lines are not supported: list the host's own key" });
          continue;
        }
        if (marker !== "@revoked") {
          skipped.push({ line, reason: "unknown marker (known: @revoked, @cert-authority)" });
          continue;
        }
        revoked = true;
      }
      const [hosts, keyType, keyBase64] = fields;
      if (!hosts || !keyType || !keyBase64) {
        skipped.push({ line, reason: "expected: [marker] hosts keytype base64-key [comment]" });
        continue;
      }
      if (/^\d+$/.test(keyType)) {
        skipped.push({ line, reason: "SSH protocol 1 keys are not supported" });
        continue;
      }
      const key = Buffer.from(keyBase64, "base64");
      // Buffer.from ignores junk; a blob whose embedded type disagrees is a corrupt line.
      if (keyBlobType(key) !== keyType) {
        skipped.push({ line, reason: "the key data is not a valid public key of the type the line names" });
        continue;
      }
      entries.push({ line, revoked, hosts, keyType, key });
    }
    return new KnownHosts(source, entries, skipped);
  }

  /** Lines (including @revoked) whose host field names host:port. */
  entriesFor(host: string, port: number): KnownHostEntry[] {
    const name = knownHostsName(host, port);
    return this.entries.filter((e) => hostFieldMatches(e.hosts, name));
  }

  /** Key types known (not revoked) for host:port, in file order, to prefer them in key exchange. */
  knownKeyTypes(host: string, port: number): string[] {
    const types = this.entriesFor(host, port)
      .filter((e) => !e.revoked)
      .map((e) => e.keyType);
    return [...new Set(types)];
  }

  check(host: string, port: number, offered: Buffer): HostKeyCheck {
    const entries = this.entriesFor(host, port);
    // A revoked key is refused even if another line also lists it as good.
    const revoked = entries.find((e) => e.revoked && e.key.equals(offered));
    if (revoked) return { status: "revoked", entry: revoked };
    const live = entries.filter((e) => !e.revoked);
    const good = live.find((e) => e.key.equals(offered));
    if (good) return { status: "ok", entry: good };
    if (live.length === 0) return { status: "unknown" };
    const type = keyBlobType(offered);
    const sameType = live.filter((e) => e.keyType === type);
    if (sameType.length > 0) return { status: "mismatch", entries: sameType };
    return { status: "other-type", knownTypes: [...new Set(live.map((e) => e.keyType))] };
  }
}

/**
 * What is wrong with known_hosts content given inline, for the stack config
 * to refuse at preview what the transport would skip at connect: each line
 * the parser skips (with its 1-based number), or, when no line holds a key,
 * one problem at line 0. Reasons quote nothing of the content (no host, no
 * key material). Parses only: no host is matched, nothing is read.
 */
export function knownHostsContentProblems(content: string): SkippedLine[] {
  const parsed = KnownHosts.parse(content);
  const problems = [...parsed.skipped];
  if (parsed.entries.length === 0 && problems.length === 0) {
    problems.push({ line: 0, reason: "holds no host key line (host, key type, key)" });
  }
  return problems;
}

/**
 * The permanent error for a host key that failed `check`, or undefined when it passed.
 * Messages name the host, the offered key type and fingerprint, and what to do.
 */
export function hostKeyError(
  result: HostKeyCheck,
  host: string,
  port: number,
  offered: Buffer,
  source: string,
): ProviderError | undefined {
  if (result.status === "ok") return undefined;
  const where = `${host}:${port}`;
  const type = keyBlobType(offered) ?? "unknown-type";
  const fp = fingerprintSha256(offered);
  const offeredText = `it offered a ${type} key with fingerprint ${fp}`;
  const name = knownHostsName(host, port);
  const keyscan = `ssh-keyscan ${port === 22 ? "" : `-p ${port} `}-t ${type} ${host} >> ${source.startsWith("/") ? source : "known_hosts"}`;
  const lead = `SSH host key verification failed for ${where}`;
  switch (result.status) {
    case "revoked":
      return new ProviderError(
        "permanent",
        `${lead}: ${offeredText}, which ${source} line ${result.entry.line} marks @revoked. ` +
          "Refusing to connect; the host needs a new host key.",
      );
    case "unknown":
      return new ProviderError(
        "permanent",
        `${lead}: the host is not in ${source} (looked for ${name}); ${offeredText}. ` +
          "Verify that fingerprint out of band (on the host: ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), " +
          `then add the key: ${keyscan}`,
      );
    case "mismatch":
      return new ProviderError(
        "permanent",
        `${lead}: ${offeredText}, but the known ${type} key for ${name} in ${source} ` +
          `(line ${result.entries.map((e) => e.line).join(", ")}) differs. ` +
          "The host key has changed or someone is intercepting the connection (possible man-in-the-middle). " +
          `If the change is expected, verify the new fingerprint out of band, remove the old line ` +
          `(ssh-keygen -R '${name}' -f FILE) and add the new key: ${keyscan}`,
      );
    case "other-type":
      return new ProviderError(
        "permanent",
        `${lead}: ${offeredText}, but ${source} only holds ${result.knownTypes.join(", ")} keys for ${name}. ` +
          `Verify the ${type} fingerprint out of band, then add the key: ${keyscan}`,
      );
  }
}
