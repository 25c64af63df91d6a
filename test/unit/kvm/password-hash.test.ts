/**
 * The proxy password's hash (provider/kvm/squid/password-hash.ts): SHA-512-crypt
 * checked against two real readers (OpenSSL's `passwd -6` and this
 * machine's libcrypt through Python's crypt, the crypt(3) squid's
 * basic_ncsa_auth calls), a salt that owes nothing to the password, and the
 * password rules.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  isPasswordHash,
  MIN_PASSWORD_LENGTH,
  passwordProblem,
  passwordSalt,
  ROUNDS,
  sha512Crypt,
  squidPasswordHash,
} from "../../../provider/kvm/squid/password-hash";

/** crypt(3) of this machine's libc (libxcrypt on Debian 12), as squid's helper calls it. */
function libcCrypt(password: string, setting: string): string {
  return execFileSync(
    "python3",
    ["-W", "ignore", "-c", "import crypt,sys; print(crypt.crypt(sys.stdin.read(), sys.argv[1]))", setting],
    { input: password, encoding: "utf8" },
  ).trim();
}

const CASES: [string, string, number][] = [
  ["hello world pw", "saltsalt", 5000],
  ["", "abc", 1000],
  ["päss@#%/:wörd", "./XY", ROUNDS],
  ["x".repeat(100), "0123456789abcdef", 1000],
  ["with:colon and $dollar", "Q", 2000],
];

describe("sha512Crypt", () => {
  it.each(CASES)("matches the libc's crypt(3) for %j, salt %j, %i rounds", (password, salt, rounds) => {
    expect(sha512Crypt(password, salt, rounds)).toBe(libcCrypt(password, `$6$rounds=${rounds}$${salt}$`));
  });

  it.each(CASES.filter(([, , r]) => r === 5000))("matches openssl passwd -6 for %j", (password, salt) => {
    const reference = execFileSync("openssl", ["passwd", "-6", "-salt", salt, "-stdin"], {
      input: password,
      encoding: "utf8",
    }).trim();
    // OpenSSL leaves out "rounds=5000" (the default); the hash is the same.
    expect(sha512Crypt(password, salt, 5000)).toBe(reference.replace("$6$", "$6$rounds=5000$"));
  });

  it.each([["has$dollar"], [""], ["x".repeat(17)]])("refuses the salt %j", (salt) => {
    expect(() => sha512Crypt("x", salt)).toThrow(/salt/);
  });
});

describe("squidPasswordHash", () => {
  it("is the same for the same inputs (a deterministic seed), and differs by user, by proxy and by password", () => {
    const a = squidPasswordHash("correct horse battery", "crawler", "urn:a");
    expect(squidPasswordHash("correct horse battery", "crawler", "urn:a")).toBe(a);
    expect(squidPasswordHash("correct horse battery", "crawler", "urn:b")).not.toBe(a);
    expect(squidPasswordHash("correct horse battery", "other", "urn:a")).not.toBe(a);
    expect(squidPasswordHash("correct horse staple", "crawler", "urn:a")).not.toBe(a);
    expect(isPasswordHash(a)).toBe(true);
    expect(a.startsWith(`$6$rounds=${ROUNDS}$`)).toBe(true);
  });

  it("takes its salt from the user and the proxy only: two passwords of one proxy share it", () => {
    const salt = (h: string) => h.split("$")[3];
    const one = squidPasswordHash("first password!!", "u", "urn:x");
    const two = squidPasswordHash("second password!", "u", "urn:x");
    expect(salt(one)).toBe(salt(two));
    expect(salt(one)).toBe(passwordSalt("u\0urn:x"));
  });
});

describe("passwordProblem", () => {
  it.each<[unknown, RegExp]>([
    ["", /non-empty/],
    [42, /non-empty string/],
    ["a", new RegExp(`at least ${MIN_PASSWORD_LENGTH}`)],
    ["elevenchars", /at least 12/],
    ["line\nbreak-password", /line breaks/],
    ["nul\0-in-the-password", /NUL/],
    ["x".repeat(257), /at most 256/],
  ])("refuses %j", (password, reason) => {
    expect(passwordProblem(password)).toMatch(reason);
  });

  it.each(["twelve-chars", "ünïcödé-pässwörd", "x".repeat(256)])("accepts %j", (password) => {
    expect(passwordProblem(password)).toBeUndefined();
  });

  it("never quotes the password", () => {
    expect(passwordProblem("short-pw")).not.toContain("short-pw");
  });
});
