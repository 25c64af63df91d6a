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
import { configKeyProblem, type HostConfig, type ImageConfig, parseHost, parseImage } from "../kvm/config";
import { Failures, type ValidationFailure } from "../kvm/validation";

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

/**
 * Parses the `kvm:*` values read through `get` (a function of the full key,
 * e.g. `get("kvm:hosts")`).
 */
export function readStackConfig(get: (key: string) => unknown): StackConfig {
  const out = emptyStackConfig();
  const rawHosts = decodeConfigValue(get(CONFIG_KEYS.hosts));
  const rawImages = decodeConfigValue(get(CONFIG_KEYS.images));
  const sshKey = get(CONFIG_KEYS.sshPrivateKey);

  if (sshKey !== undefined && (typeof sshKey !== "string" || !sshKey.includes("-----BEGIN"))) {
    out.general.push({
      property: CONFIG_KEYS.sshPrivateKey,
      reason: "must hold a private key (-----BEGIN ...), set with `pulumi config set --secret`",
    });
  }

  if (rawHosts !== undefined && rawHosts !== null) {
    if (!isObject(rawHosts)) {
      out.general.push({ property: CONFIG_KEYS.hosts, reason: "must be an object keyed by host name" });
    } else {
      for (const [key, value] of Object.entries(rawHosts)) {
        const f = new Failures(`${CONFIG_KEYS.hosts}.${key}`);
        const problem = configKeyProblem(key);
        if (problem !== undefined) {
          f.fail(undefined, `key ${JSON.stringify(key)} ${problem}`);
          out.hostFailures[key] = f.list;
          continue;
        }
        let input = value;
        // The shared key applies to ssh:// hosts that bring no auth of their own.
        if (
          typeof sshKey === "string" &&
          isObject(value) &&
          typeof value.uri === "string" &&
          value.uri.startsWith("ssh:") &&
          SSH_AUTH_FIELDS.every((k) => value[k] === undefined)
        ) {
          input = { ...value, privateKey: sshKey };
        }
        const host = parseHost(key, input, f);
        if (host !== undefined) out.hosts[key] = host;
        else out.hostFailures[key] = f.list;
      }
    }
  }

  if (rawImages !== undefined && rawImages !== null) {
    if (!isObject(rawImages)) {
      out.general.push({ property: CONFIG_KEYS.images, reason: "must be an object keyed by image name" });
    } else {
      for (const [key, value] of Object.entries(rawImages)) {
        const f = new Failures(`${CONFIG_KEYS.images}.${key}`);
        const problem = configKeyProblem(key);
        if (problem !== undefined) {
          f.fail(undefined, `key ${JSON.stringify(key)} ${problem}`);
          out.imageFailures[key] = f.list;
          continue;
        }
        const image = parseImage(key, value, f);
        if (image !== undefined) out.images[key] = image;
        else out.imageFailures[key] = f.list;
      }
    }
  }
  return out;
}
