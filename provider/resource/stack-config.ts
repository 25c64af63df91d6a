/**
 * The stack configuration the provider reads, namespace `kvm`:
 *
 * - `kvm:hosts`: object, host key → `{uri, driverUri, domainType, pool,
 *   network | bridge, knownHosts | knownHostsPath, privateKey |
 *   privateKeyPath | agentSocket, passphrase}` (see provider/kvm/config/host-config.ts);
 * - `kvm:images`: object, image key → `{url, format, firmware, sha256}`;
 * - `kvm:sshPrivateKey` (set it with `--secret`): the private key for every
 *   ssh:// host that names no privateKey, privateKeyPath or agentSocket;
 * - `kvm:stateKey` (set it with `--secret`): what the dynamic provider seals
 *   a host given in full with key material under in its outputs
 *   (host-connection.ts);
 * - `kvm:retire` and `kvm:blockedAddresses`: proxies and addresses to
 *   retire at the next `up` (retirement.ts).
 *
 * Dynamic providers receive the whole stack config in `configure`, secrets
 * decrypted. Each host and image is parsed on its own, so one broken entry
 * only fails the resources that use it. A host may also be a resource input
 * (`host: {key, uri, ...}`, check-placement.ts), parsed by the same rules
 * ({@link parseHostEntry}); changing how a host is reached never replaces a VM.
 */
import { type HostConfig, parseHost, parseKeyedEntries } from "../kvm/config/host-config";
import { type ImageConfig, parseImage } from "../kvm/config/image";
import { privateKeyContentProblem } from "../kvm/config/ssh-reach";
import { given, isObject } from "../kvm/fields";
import { type Failures, internalFailure, type ValidationFailure } from "../kvm/validation";
import type { ConfigKeyName } from "../schema/type-spec";
import { type BlockedAddress, parseBlockedAddresses, parseRetirements, type Retirement } from "./retirement";
import { bakeUserDataMac, SET_STATE_KEY, stateKeyProblem } from "./state-key";

/** Stack config keys read: each key of the configuration (schema/type-spec.ts) under `kvm:`. */
export const CONFIG_KEYS: { readonly [K in ConfigKeyName]: `kvm:${K}` } = {
  hosts: "kvm:hosts",
  images: "kvm:images",
  sshPrivateKey: "kvm:sshPrivateKey",
  stateKey: "kvm:stateKey",
  retire: "kvm:retire",
  blockedAddresses: "kvm:blockedAddresses",
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
  /** `kvm:sshPrivateKey`, for hosts given as inputs that bring no auth of their own either. */
  sharedSshKey?: string;
  /** `kvm:stateKey`, when set and usable: what a host's key material is sealed under in outputs. */
  stateKey?: string;
  /** Why the `kvm:stateKey` set is not usable (failing only the proxies that need it). */
  stateKeyProblem?: string;
  /** `kvm:retire`: proxies to replace at the next `up`, by resource name. */
  retire: Record<string, Retirement>;
  /** `kvm:blockedAddresses`: addresses out of service, by canonical address. */
  blocked: Record<string, BlockedAddress>;
}

/** An empty configuration (before configure ran, or with no `kvm:*` keys). */
export function emptyStackConfig(): StackConfig {
  return { hosts: {}, images: {}, hostFailures: {}, imageFailures: {}, general: [], retire: {}, blocked: {} };
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

const SSH_AUTH_FIELDS = ["privateKey", "privateKeyPath", "agentSocket"];

/**
 * One host entry (of `kvm:hosts`, or a resource's `host` object): the host
 * config, or undefined with failures recorded under `f`. `sharedKey`
 * (`kvm:sshPrivateKey`) applies to an ssh:// host that brings no auth of its own.
 */
export function parseHostEntry(
  key: string,
  value: unknown,
  f: Failures,
  sharedKey: string | undefined,
): HostConfig | undefined {
  const withKey =
    sharedKey !== undefined &&
    isObject(value) &&
    typeof value.uri === "string" &&
    value.uri.startsWith("ssh:") &&
    SSH_AUTH_FIELDS.every((k) => !given(value[k]))
      ? { ...value, privateKey: sharedKey }
      : value;
  const host = parseHost(key, withKey, f);
  return f.empty ? host : undefined;
}

/**
 * Parses the `kvm:*` values read through `get` (a function of the full key,
 * e.g. `get("kvm:hosts")`). Never throws: whatever the values, each problem
 * is a failure naming its config path (a broken entry fails only the
 * resources that use it), and reasons quote no secret.
 */
export function readStackConfig(get: (key: string) => unknown, now: number = Date.now()): StackConfig {
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
  const stateKey = read(CONFIG_KEYS.stateKey);
  if (given(stateKey)) {
    const problem = stateKeyProblem(stateKey);
    if (problem !== undefined) out.stateKeyProblem = problem;
    else out.stateKey = stateKey as string;
  }

  if (given(sshKey)) {
    const problem = typeof sshKey === "string" ? privateKeyContentProblem(sshKey) : "must be a string";
    if (problem !== undefined) {
      out.general.push({
        property: CONFIG_KEYS.sshPrivateKey,
        reason: `${problem}: a private key, set with \`pulumi config set --secret\``,
      });
    }
  }

  if (typeof sshKey === "string") out.sharedSshKey = sshKey;
  const hosts = parseKeyedEntries(rawHosts, CONFIG_KEYS.hosts, (key, value, f) =>
    parseHostEntry(key, value, f, out.sharedSshKey),
  );
  const images = parseKeyedEntries(rawImages, CONFIG_KEYS.images, parseImage);
  out.hosts = hosts.values;
  out.hostFailures = hosts.failures;
  out.images = images.values;
  out.imageFailures = images.failures;
  keyBakeUserData(out);
  out.general.push(...hosts.general, ...images.general);
  const retire = parseRetirements(decodeConfigValue(read(CONFIG_KEYS.retire)), CONFIG_KEYS.retire, now);
  const blocked = parseBlockedAddresses(
    decodeConfigValue(read(CONFIG_KEYS.blockedAddresses)),
    CONFIG_KEYS.blockedAddresses,
    now,
  );
  out.retire = retire.values;
  out.blocked = blocked.values;
  out.general.push(...retire.failures, ...blocked.failures);
  return out;
}

/**
 * Names each bake's user-data in its recipe by a digest keyed with
 * `kvm:stateKey` (state-key.ts); an image whose bake has user-data fails,
 * at its own key, while no usable key is set.
 */
function keyBakeUserData(config: StackConfig): void {
  for (const [key, image] of Object.entries(config.images)) {
    if (image.bake === undefined || image.bakeUserData === undefined) continue;
    if (config.stateKey !== undefined) {
      image.bake.userDataMac = bakeUserDataMac(config.stateKey, image.bakeUserData);
      continue;
    }
    delete config.images[key];
    config.imageFailures[key] = [
      {
        property: `${CONFIG_KEYS.images}.${key}.bake.userData`,
        reason:
          config.stateKeyProblem !== undefined
            ? `needs kvm:stateKey, which ${config.stateKeyProblem}`
            : "needs the stack config secret kvm:stateKey: the state and the VM's metadata name a bake's " +
              `user-data by a digest keyed with it, so that they tell nothing of the text. Set it once: ${SET_STATE_KEY}`,
      },
    ];
  }
}
