/**
 * The hash of a proxy password that the guest's squid checks: SHA-512-crypt
 * (`$6$`, Drepper's "Unix crypt using SHA-256 and SHA-512"), with a salt
 * derived from what is not secret. Pure.
 *
 * Why this scheme: squid's `basic_ncsa_auth` checks a password with the
 * guest libc's crypt(3). SHA-512-crypt is the strongest scheme every
 * supported guest's crypt takes: glibc's own (RHEL 7 and older), libxcrypt
 * (Debian 12 and 13, Ubuntu, Fedora, RHEL 8+) and musl (Alpine). yescrypt
 * and bcrypt are stronger but unknown to glibc's own crypt (and yescrypt to
 * musl). {@link ROUNDS} is glibc's default (what `mkpasswd -m sha-512` makes):
 * each proxy's hash costs the program about 20 ms at every run, so a fleet
 * of hundreds still previews in seconds.
 *
 * Why this salt: the seed must be byte-identical for the same inputs (a
 * replayed create converges on the same disks), so the salt cannot be
 * random; derived from the username and the resource's URN it differs per
 * proxy and per user, and says nothing about the password: a guesser pays
 * the full hash for every guess, for every proxy.
 *
 * The hash is made where the password is known, in the program (the
 * KvmProxy class): the password itself never reaches the engine or the
 * provider, so no log of theirs can show it.
 */
import { createHash } from "node:crypto";

/** Rounds of SHA-512-crypt. */
export const ROUNDS = 5000;
/** Shortest password accepted. */
export const MIN_PASSWORD_LENGTH = 12;
/** Longest password accepted. */
export const MAX_PASSWORD_LENGTH = 256;
/**
 * Longest password, in UTF-8 bytes, a proxy with SOCKS takes: SOCKS5's
 * username/password authentication (RFC 1929) sends it after one length
 * byte, and clients refuse a longer one.
 */
export const MAX_SOCKS_PASSWORD_BYTES = 255;

const ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

function sha512(...parts: Buffer[]): Buffer {
  const h = createHash("sha512");
  for (const p of parts) h.update(p);
  return h.digest();
}

/** `n` bytes of `block` repeated. */
function repeated(block: Buffer, n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i += block.length) block.copy(out, i, 0, Math.min(block.length, n - i));
  return out;
}

function to64(v: number, n: number): string {
  let s = "";
  let x = v;
  for (let i = 0; i < n; i++) {
    s += ITOA64[x & 63];
    x >>>= 6;
  }
  return s;
}

/**
 * `$6$rounds=<rounds>$<salt>$<hash>`: SHA-512-crypt of `password` with
 * `salt` (1-16 characters of `./0-9A-Za-z`).
 */
export function sha512Crypt(password: string, salt: string, rounds = ROUNDS): string {
  if (!/^[./0-9A-Za-z]{1,16}$/.test(salt)) {
    throw new Error("sha512Crypt: the salt must be 1-16 characters of ./0-9A-Za-z");
  }
  if (!Number.isInteger(rounds) || rounds < 1000 || rounds > 999_999_999) {
    throw new Error("sha512Crypt: rounds must be 1000 to 999999999");
  }
  const p = Buffer.from(password, "utf8");
  const s = Buffer.from(salt, "ascii");
  const b = sha512(p, s, p);
  const a = createHash("sha512").update(p).update(s).update(repeated(b, p.length));
  for (let n = p.length; n > 0; n >>= 1) a.update(n & 1 ? b : p);
  let c = a.digest();
  const pBytes = repeated(sha512(...new Array<Buffer>(p.length).fill(p)), p.length);
  const sBytes = repeated(sha512(...new Array<Buffer>(16 + (c[0] as number)).fill(s)), s.length);
  for (let i = 0; i < rounds; i++) {
    const h = createHash("sha512");
    h.update(i & 1 ? pBytes : c);
    if (i % 3 !== 0) h.update(sBytes);
    if (i % 7 !== 0) h.update(pBytes);
    h.update(i & 1 ? c : pBytes);
    c = h.digest();
  }
  let out = "";
  for (let k = 0; k < 21; k++) {
    const t = [k, k + 21, k + 42];
    const [x, y, z] = [t[k % 3], t[(k + 1) % 3], t[(k + 2) % 3]] as [number, number, number];
    out += to64(((c[x] as number) << 16) | ((c[y] as number) << 8) | (c[z] as number), 4);
  }
  out += to64(c[63] as number, 2);
  return `$6$rounds=${rounds}$${salt}$${out}`;
}

/** The salt for `context` (the username and the resource's URN): 16 characters, nothing of the password. */
export function passwordSalt(context: string): string {
  const d = createHash("sha256").update(`pulumi-kvm-proxy squid salt\0${context}`, "utf8").digest();
  let salt = "";
  for (let i = 0; i < 16; i++) salt += ITOA64[(d[i] as number) & 63];
  return salt;
}

/**
 * Why `password` cannot be a proxy password (never quoting it, nor its
 * length), or undefined; `socks` when the proxy also has a SOCKS5 listener.
 */
export function passwordProblem(password: unknown, { socks = false } = {}): string | undefined {
  if (typeof password !== "string" || password === "") return "must be a non-empty string";
  if (/[\r\n\0]/.test(password)) return "must not contain line breaks or NUL";
  const length = [...password].length;
  if (length < MIN_PASSWORD_LENGTH) return `must be at least ${MIN_PASSWORD_LENGTH} characters`;
  if (length > MAX_PASSWORD_LENGTH) return `must be at most ${MAX_PASSWORD_LENGTH} characters`;
  if (socks && Buffer.byteLength(password, "utf8") > MAX_SOCKS_PASSWORD_BYTES) {
    return `with proxy.socks, must be at most ${MAX_SOCKS_PASSWORD_BYTES} bytes in UTF-8 (SOCKS5 carries the password after one length byte, RFC 1929; no client could log in with a longer one): choose a shorter one`;
  }
  return undefined;
}

/** The hash squid checks for `password` of `username` on the proxy `urn`. */
export function squidPasswordHash(password: string, username: string, urn: string): string {
  return sha512Crypt(password, passwordSalt(`${username}\0${urn}`));
}

/** Whether `v` has the shape of a hash this module makes. */
export function isPasswordHash(v: unknown): v is string {
  return typeof v === "string" && /^\$6\$rounds=\d{4,9}\$[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}$/.test(v);
}
