/**
 * The program's side of the proxy password: what the KvmProxy class sends
 * the provider instead of it (the hash, or what is wrong with it), and the
 * URL with credentials it builds from the password itself. Pure; the
 * password never leaves the program (docs/contributing/decisions.md, "The password stays
 * in the program").
 */
import { createHmac } from "node:crypto";
import { given, isObject } from "../kvm/fields";
import { passwordProblem, squidPasswordHash } from "../kvm/proxy/password-hash";
import { UNKNOWN } from "../resource/args";

/** An object (not an array): the program's values as the class resolves them. */
export const isPlain = isObject;

/**
 * The proxy block the provider gets for `block` (resolved) of the proxy
 * `urn`: `auth.password` replaced by `passwordHash` (salted with the
 * username and the URN), or by `passwordProblem`, which check reports at
 * preview. Anything else is passed as it is (check judges it). Both doors
 * call it (the KvmProxy class in the program, the plugin at check), so the
 * password's rules live here once; with `socks` (once known) SOCKS5's
 * limit applies too.
 */
export function hashedProxyBlock(block: unknown, urn: string): unknown {
  if (!isPlain(block)) return block;
  const auth = block.auth;
  if (!isPlain(auth) || !("password" in auth)) return block;
  const { password, ...rest } = auth;
  const problem = passwordProblem(password, { socks: given(block.socks) && block.socks !== UNKNOWN });
  const username = typeof auth.username === "string" ? auth.username : "";
  return {
    ...block,
    auth: {
      ...rest,
      ...(problem !== undefined
        ? { passwordProblem: problem }
        : { passwordHash: squidPasswordHash(password as string, username, urn) }),
    },
  };
}

/** `proxyUrl` (http://, https:// or socks5://) with `auth`'s credentials (URL-encoded), or undefined without either. */
export function urlWithCredentials(proxyUrl: string | undefined, auth: unknown): string | undefined {
  if (proxyUrl === undefined || !isPlain(auth)) return undefined;
  if (typeof auth.username !== "string" || typeof auth.password !== "string") return undefined;
  const credentials = `${encodeURIComponent(auth.username)}:${encodeURIComponent(auth.password)}`;
  return proxyUrl.replace(/^(https?|socks5):\/\//, `$1://${credentials}@`);
}

/** Shortest secret a fleet's member passwords are derived from. */
export const MIN_MEMBER_SECRET_LENGTH = 16;

/** The derivation's context: another one gives other passwords from the same secret. */
const MEMBER_PASSWORD_CONTEXT = "pulumi-kvm-proxy member password v1";

/**
 * The password of a fleet's member `member` (its resource name), derived
 * from the fleet's `secret`: HMAC-SHA-256(secret, context NUL member), 32
 * base64url characters (192 bits; letters, digits, `-`, `_`: nothing a URL
 * or squid reads otherwise). Deterministic, so the seed stays byte-identical
 * for the same inputs; one member's password tells nothing of another's or
 * of the secret.
 */
export function memberPassword(secret: string, member: string): string {
  return createHmac("sha256", secret)
    .update(`${MEMBER_PASSWORD_CONTEXT}\0${member}`)
    .digest("base64url")
    .slice(0, 32);
}

/**
 * A member's proxy block for a fleet with `memberPasswords`: the fleet's
 * block (`auth.username` and no password of its own) with the member's
 * derived password; or what is wrong with the fleet's inputs.
 */
export function memberProxyBlock(
  block: unknown,
  secret: unknown,
  member: string,
): { block: Record<string, unknown> } | { problem: string } {
  if (typeof secret !== "string" || secret.length < MIN_MEMBER_SECRET_LENGTH) {
    return {
      problem: `memberPasswords.secret must be a string of at least ${MIN_MEMBER_SECRET_LENGTH} characters`,
    };
  }
  const auth = isPlain(block) ? block.auth : undefined;
  if (!isPlain(block) || !isPlain(auth) || typeof auth.username !== "string") {
    return { problem: "memberPasswords needs proxy.auth.username: every member's username" };
  }
  if (auth.password !== undefined) {
    return { problem: "memberPasswords derives each member's password: leave proxy.auth.password out" };
  }
  return { block: { ...block, auth: { ...auth, password: memberPassword(secret, member) } } };
}
