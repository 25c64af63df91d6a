/**
 * The proxy password's hash (provider/kvm/proxy/password-hash.ts): SHA-512-crypt
 * checked against two real readers (OpenSSL's `passwd -6` and this
 * machine's libcrypt through Python's crypt, the crypt(3) squid's
 * basic_ncsa_auth calls), a salt that owes nothing to the password, and the
 * password rules, SOCKS5's byte limit checked against curl as a client.
 */
import { execFile, execFileSync } from "node:child_process";
import { createServer, type Server } from "node:net";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  isPasswordHash,
  MAX_SOCKS_PASSWORD_BYTES,
  MIN_PASSWORD_LENGTH,
  passwordProblem,
  passwordSalt,
  ROUNDS,
  sha512Crypt,
  squidPasswordHash,
} from "../../../../provider/kvm/proxy/password-hash";

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

/** Passwords about SOCKS5's limit: 255 bytes of UTF-8 pass, whatever their characters. */
const SOCKS_CASES: [string, string, boolean][] = [
  ["255 ASCII characters", "x".repeat(255), true],
  ["256 ASCII characters", "x".repeat(256), false],
  ["127 two-byte characters (254 bytes)", "ü".repeat(127), true],
  ["128 two-byte characters (256 bytes)", "ü".repeat(128), false],
  ["85 three-byte characters (255 bytes)", "€".repeat(85), true],
  ["64 four-byte characters (256 bytes)", "🔑".repeat(64), false],
  ["a mix of 255 bytes", `${"ü".repeat(100)}${"€".repeat(10)}${"x".repeat(25)}`, true],
];

describe("passwordProblem with SOCKS", () => {
  it.each(SOCKS_CASES)("%s", (_what, password, carried) => {
    const problem = passwordProblem(password, { socks: true });
    if (carried) expect(problem).toBeUndefined();
    else
      expect(problem).toMatch(
        new RegExp(`with proxy\\.socks, must be at most ${MAX_SOCKS_PASSWORD_BYTES} bytes`),
      );
    // Without SOCKS only the HTTP proxy's limit (characters) applies.
    expect(passwordProblem(password)).toBeUndefined();
  });

  it("never quotes the password", () => {
    const password = "ü".repeat(128);
    expect(passwordProblem(password, { socks: true })).not.toContain("üü");
  });

  /**
   * A SOCKS5 server that asks for username/password and records the
   * password length each client sends, then hangs up.
   */
  let server: Server;
  let port = 0;
  const sent: number[] = [];
  beforeAll(async () => {
    server = createServer((c) => {
      let greeted = false;
      c.on("data", (d) => {
        if (!greeted) {
          greeted = true;
          c.write(Buffer.from([5, 2]));
          return;
        }
        // VER ULEN UNAME PLEN PASSWD (RFC 1929)
        const ulen = d[1] as number;
        sent.push(d[2 + ulen] as number);
        c.destroy();
      });
      c.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it.each(SOCKS_CASES)("agrees with curl as a SOCKS5 client: %s", async (_what, password, carried) => {
    const before = sent.length;
    const r = await promisify(execFile)(
      "curl",
      [
        "-sS",
        "-m",
        "10",
        "-x",
        `socks5://127.0.0.1:${port}`,
        "--proxy-user",
        `crawler:${password}`,
        "http://example.invalid/",
      ],
      { encoding: "utf8" },
    ).catch((e: { stderr: string }) => e);
    if (carried) expect(sent.slice(before)).toEqual([Buffer.byteLength(password)]);
    else {
      expect(sent.length).toBe(before);
      expect(r.stderr).toMatch(/Excessive password length/);
    }
    expect(passwordProblem(password, { socks: true }) === undefined).toBe(carried);
  });
});
