/**
 * Which inputs are secret whatever the program passed: the seed texts and
 * digests (SECRET_OUTPUTS), a proxy block with auth or TLS, and a host that may
 * carry key material (kvm/config/host-config.ts `mayCarryKeyMaterial`). The
 * KvmProxy class marks them in the program; the provider plugin marks them
 * in the checked inputs and the outputs it returns, and in an explicit
 * provider's configuration (`secretConfigKeysOf`). Pure.
 */
import { mayCarryKeyMaterial } from "../kvm/config/host-config";
import { SECRET_OUTPUTS } from "../resource/kvm-proxy-properties";
import { isPlain } from "./proxy-auth";

/** The top-level keys of `props` (inputs or outputs) to keep secret. */
export function secretKeysOf(props: Record<string, unknown>): string[] {
  const keys: string[] = [...SECRET_OUTPUTS];
  // TLS brings a CA's key (made at check, or given).
  if (isPlain(props.proxy) && (props.proxy.auth !== undefined || props.proxy.tls !== undefined))
    keys.push("proxy");
  if (mayCarryKeyMaterial(props.host)) keys.push("host");
  return keys;
}

/**
 * The top-level keys of a provider's configuration to keep secret whatever
 * the program passed: the key and the state key, `hosts` when an entry may
 * carry key material, `images` when a bake names its builder's user-data
 * (it may hold a mirror's credentials). The SDKs do not mark a secret field
 * of a nested type (a host's `privateKey`, a jump host's, a bake's
 * `userData`), so the whole value is kept secret instead.
 */
export function secretConfigKeysOf(config: Record<string, unknown>): string[] {
  const keys = ["sshPrivateKey", "stateKey"];
  const hosts = config.hosts;
  if (isPlain(hosts) && Object.values(hosts).some(mayCarryKeyMaterial)) keys.push("hosts");
  const images = config.images;
  if (
    isPlain(images) &&
    Object.values(images).some((i) => isPlain(i) && isPlain(i.bake) && i.bake.userData !== undefined)
  )
    keys.push("images");
  return keys.filter((k) => config[k] !== undefined);
}
