/**
 * The stack configuration the provider reads, namespace `kvm`:
 *
 * - `kvm:hosts`: object, host key → `{uri, driverUri, domainType, pool,
 *   network | bridge, knownHosts | knownHostsPath, privateKey |
 *   privateKeyPath | agentSocket, passphrase}` (see provider/kvm/config.ts);
 * - `kvm:images`: object, image key → `{url, format, firmware, sha256}`;
 * - `kvm:sshPrivateKey` (set it with `--secret`): the private key for every
 *   ssh:// host that names no privateKey, privateKeyPath or agentSocket.
 *
 * Dynamic providers receive the whole stack config in `configure`, secrets
 * decrypted. Each host and image is parsed on its own, so one broken entry
 * only fails the resources that use it. Connection settings are never
 * resource inputs: changing them never replaces a VM.
 */
import { type HostConfig, parseHost, parseKeyedEntries } from "../kvm/config";
import { given } from "../kvm/fields";
import { type ImageConfig, parseImage } from "../kvm/image";
import { privateKeyContentProblem } from "../kvm/ssh-reach";
import { type Failures, internalFailure, type ValidationFailure } from "../kvm/validation";
import { knownHostsContentProblems } from "../transport/known-hosts";

/** Stack config keys read. */
export const CONFIG_KEYS = {
  hosts: "kvm:hosts",
  images: "kvm:images",
  sshPrivateKey: "kvm:sshPrivateKey",
} as const;

/** The parsed stack config: what parsed, and the failures of what did not, per entry. */
export interface StackConfig {
  hosts: Record<string, HostConfig>;
  images: Record<string, ImageConfig>;
  /** Failures per host key (property paths like `kvm:hosts.edge.uri`). */
  hostFailures: Record<string, ValidationFailure[]>;
  imageFailures: Record<string, ValidationFailure[]>;
  /** Failures not tied to one entry (e.g. `kvm:hosts` is not an object). */
  general: ValidationFailure[];
}

/** An empty configuration (before configure ran, or with no `kvm:*` keys). */
export function emptyStackConfig(): StackConfig {
  return { hosts: {}, images: {}, hostFailures: {}, imageFailures: {}, general: [] };
}

/**
 * A config value as the engine delivers it: objects may arrive as JSON text
 * or as structured values; both are accepted.
 */
export function decodeConfigValue(v: unknown): unknown {
  if (typeof v !== "string") return v;
  const t = v.trim();
  if (t.startsWith("{") || t.startsWith("[")) {
    try {
      return JSON.parse(t);
    } catch {
      return v;
    }
  }
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const SSH_AUTH_FIELDS = ["privateKey", "privateKeyPath", "agentSocket"];

/** Lines reported per host before the rest are counted only. */
const MAX_KNOWN_HOSTS_PROBLEMS = 5;

/**
 * Parses inline known_hosts content with the transport's own parser, so a
 * line it would skip at connect (no key, a corrupt key, an unknown marker)
 * fails the host at preview. Failures name `knownHosts` and line numbers,
 * never the lines. Only for ssh:// hosts whose content passed the shape
 * check of kvm/config.ts (it holds whitespace, so it is not a path).
 */
function checkKnownHostsContent(value: unknown, f: Failures): void {
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

/**
 * Parses the `kvm:*` values read through `get` (a function of the full key,
 * e.g. `get("kvm:hosts")`). Never throws: whatever the values, each problem
 * is a failure naming its config path (a broken entry fails only the
 * resources that use it), and reasons quote no secret.
 */
export function readStackConfig(get: (key: string) => unknown): StackConfig {
  const out = emptyStackConfig();
  const read = (key: string): unknown => {
    try {
      return get(key);
    } catch (err) {
      out.general.push({ property: key, reason: `could not be read: ${internalFailure(err)}` });
      return undefined;
    }
  };
  const rawHosts = decodeConfigValue(read(CONFIG_KEYS.hosts));
  const rawImages = decodeConfigValue(read(CONFIG_KEYS.images));
  const sshKey = read(CONFIG_KEYS.sshPrivateKey);

  if (given(sshKey)) {
    const problem = typeof sshKey === "string" ? privateKeyContentProblem(sshKey) : "must be a string";
    if (problem !== undefined) {
      out.general.push({
        property: CONFIG_KEYS.sshPrivateKey,
        reason: `${problem}: a private key, set with \`pulumi config set --secret\``,
      });
    }
  }

  // The shared key applies to ssh:// hosts that bring no auth of their own.
  const withSharedKey = (value: unknown): unknown =>
    typeof sshKey === "string" &&
    isObject(value) &&
    typeof value.uri === "string" &&
    value.uri.startsWith("ssh:") &&
    SSH_AUTH_FIELDS.every((k) => !given(value[k]))
      ? { ...value, privateKey: sshKey }
      : value;
  const hosts = parseKeyedEntries(rawHosts, CONFIG_KEYS.hosts, (key, value, f) => {
    const host = parseHost(key, withSharedKey(value), f);
    checkKnownHostsContent(value, f);
    return f.empty ? host : undefined;
  });
  const images = parseKeyedEntries(rawImages, CONFIG_KEYS.images, parseImage);
  out.hosts = hosts.values;
  out.hostFailures = hosts.failures;
  out.images = images.values;
  out.imageFailures = images.failures;
  out.general.push(...hosts.general, ...images.general);
  return out;
}
