/**
 * Which inputs are secret whatever the program passed: the seed texts and
 * digests (SECRET_OUTPUTS), a proxy block with auth, and a host given in
 * full with key material. The KvmProxy class marks them in the program; the
 * provider plugin marks them in the checked inputs and the outputs it
 * returns. Pure.
 */
import { SECRET_OUTPUTS } from "./args";
import { isPlain } from "./proxy-auth";

/** A host given in full (or a pool of them) carrying a private key or passphrase, its own or a jump host's. */
export function carriesKeyMaterial(v: unknown): boolean {
  if (isPlain(v) && Array.isArray(v.pool)) return v.pool.some(carriesKeyMaterial);
  if (!isPlain(v) || !("uri" in v || "key" in v)) return false;
  const keyed = (o: unknown) =>
    isPlain(o) && (typeof o.privateKey === "string" || typeof o.passphrase === "string");
  return keyed(v) || (Array.isArray(v.jump) && v.jump.some(keyed));
}

/** The top-level keys of `props` (inputs or outputs) to keep secret. */
export function secretKeysOf(props: Record<string, unknown>): string[] {
  const keys: string[] = [...SECRET_OUTPUTS];
  if (isPlain(props.proxy) && props.proxy.auth !== undefined) keys.push("proxy");
  if (carriesKeyMaterial(props.host)) keys.push("host");
  return keys;
}
