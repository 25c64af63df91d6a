/**
 * The program's side of the proxy password: what the KvmProxy class sends
 * the provider instead of it (the hash, or what is wrong with it), and the
 * URL with credentials it builds from the password itself. Pure; the
 * password never leaves the program (docs/decisions.md, "The password stays
 * in the program").
 */
import { isObject } from "../kvm/fields";
import { passwordProblem, squidPasswordHash } from "../kvm/squid/password-hash";

/** An object (not an array): the program's values as the class resolves them. */
export const isPlain = isObject;

/**
 * The proxy block the provider gets for `block` (resolved) of the proxy
 * `urn`: `auth.password` replaced by `passwordHash` (salted with the
 * username and the URN), or by `passwordProblem`, which check reports at
 * preview. Anything else is passed as it is (check judges it).
 */
export function hashedProxyBlock(block: unknown, urn: string): unknown {
  if (!isPlain(block)) return block;
  const auth = block.auth;
  if (!isPlain(auth) || !("password" in auth)) return block;
  const { password, ...rest } = auth;
  const problem = passwordProblem(password);
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

/** `proxyUrl` with `auth`'s credentials (URL-encoded), or undefined without either. */
export function urlWithCredentials(proxyUrl: string | undefined, auth: unknown): string | undefined {
  if (proxyUrl === undefined || !isPlain(auth)) return undefined;
  if (typeof auth.username !== "string" || typeof auth.password !== "string") return undefined;
  const credentials = `${encodeURIComponent(auth.username)}:${encodeURIComponent(auth.password)}`;
  return proxyUrl.replace(/^http:\/\//, `http://${credentials}@`);
}
