/**
 * `kvm:stateKey`, the stack config secret under which the provider keys
 * what it must keep in plain places but derives from a secret: a host given
 * in full with key material, sealed in the dynamic provider's outputs
 * (host-connection.ts), and a bake's user-data, named by a keyed digest in
 * the state, the baked volume's name and the VM's metadata. Without the key
 * neither tells anything of the secret, nor lets a guess at it be tested.
 * Each use has a key of its own, derived by HKDF-SHA-256. Pure apart from
 * node:crypto.
 */
import { createHmac, hkdfSync } from "node:crypto";

/** Shortest `kvm:stateKey` accepted: 32 characters (e.g. `openssl rand -base64 32`'s 44). */
export const MIN_STATE_KEY_LENGTH = 32;

/** The command a message gives to set one. */
export const SET_STATE_KEY = '`pulumi config set --secret kvm:stateKey "$(openssl rand -base64 32)"`';

/** Why `v` cannot be a `kvm:stateKey`, or undefined; quotes nothing of it. */
export function stateKeyProblem(v: unknown): string | undefined {
  if (typeof v !== "string") return "must be a string, set with `pulumi config set --secret`";
  if (v.length < MIN_STATE_KEY_LENGTH)
    return `must be at least ${MIN_STATE_KEY_LENGTH} characters (e.g. \`openssl rand -base64 32\`)`;
  return undefined;
}

/** `bytes` bytes of key for `purpose`, derived from `stateKey`. */
export function derivedKey(stateKey: string, purpose: string, bytes: number): Buffer {
  return Buffer.from(
    hkdfSync("sha256", Buffer.from(stateKey, "utf8"), Buffer.alloc(0), `pulumi-kvm-proxy ${purpose}`, bytes),
  );
}

/** The keyed digest (lower-case hex HMAC-SHA-256) a bake recipe names its builder's user-data by. */
export function bakeUserDataMac(stateKey: string, userData: string): string {
  return createHmac("sha256", derivedKey(stateKey, "bake userData v1", 32))
    .update(userData, "utf8")
    .digest("hex");
}
