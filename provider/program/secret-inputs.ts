/**
 * Which inputs are secret whatever the program passed: the seed texts and
 * digests (SECRET_OUTPUTS), a proxy block with auth or TLS, and a host that may
 * carry key material (kvm/config/host-config.ts `mayCarryKeyMaterial`). The
 * KvmProxy class marks them in the program; the provider plugin marks them
 * in the checked inputs and the outputs it returns. Pure.
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
