import { execFileSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import {
  fingerprintSha256,
  type HostKeyCheck,
  hostFieldMatches,
  hostKeyError,
  KnownHosts,
  keyBlobType,
  knownHostsName,
} from "../../../provider/transport/known-hosts";

const KEY_TYPES = [
  { name: "ed25519", args: ["-t", "ed25519"], sshType: "ssh-ed25519" },
  { name: "ecdsa-256", args: ["-t", "ecdsa", "-b", "256"], sshType: "ecdsa-sha2-nistp256" },
  { name: "ecdsa-384", args: ["-t", "ecdsa", "-b", "384"], sshType: "ecdsa-sha2-nistp384" },
  { name: "ecdsa-521", args: ["-t", "ecdsa", "-b", "521"], sshType: "ecdsa-sha2-nistp521" },
  { name: "rsa", args: ["-t", "rsa", "-b", "2048"], sshType: "ssh-rsa" },
] as const;

interface Key {
  type: string;
  /** "type base64" as in a .pub file or a known_hosts line. */
  text: string;
  blob: Buffer;
  pubFile: string;
}

let dir: string;
const keys: Record<string, Key> = {};

function genKey(name: string, args: readonly string[]): Key {
  const file = path.join(dir, name);
  execFileSync("ssh-keygen", ["-q", ...args, "-N", "", "-C", "test", "-f", file]);
  const [type = "", b64 = ""] = readFileSync(`${file}.pub`, "utf8").trim().split(/\s+/);
  return { type, text: `${type} ${b64}`, blob: Buffer.from(b64, "base64"), pubFile: `${file}.pub` };
}

/** A hashed host field as OpenSSH writes it: |1|base64(salt)|base64(HMAC-SHA1(salt, name)). */
function hashed(name: string, salt = randomBytes(20)): string {
  const mac = createHmac("sha1", salt).update(name).digest("base64");
  return `|1|${salt.toString("base64")}|${mac}`;
}

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-known-hosts-"));
  for (const t of KEY_TYPES) keys[t.name] = genKey(t.name, t.args);
  keys.other = genKey("other", ["-t", "ed25519"]);
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function key(name: string): Key {
  const k = keys[name];
  if (!k) throw new Error(`no key ${name}`);
  return k;
}

describe("fingerprints", () => {
  it.each(KEY_TYPES.map((t) => [t.name, t.sshType]))(
    "%s: type %s and the SHA256 fingerprint ssh-keygen -lf prints",
    (name, sshType) => {
      const k = key(name);
      expect(keyBlobType(k.blob)).toBe(sshType);
      const out = execFileSync("ssh-keygen", ["-l", "-E", "sha256", "-f", k.pubFile], { encoding: "utf8" });
      expect(out.split(/\s+/)[1]).toBe(fingerprintSha256(k.blob));
      expect(fingerprintSha256(k.blob)).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    },
  );

  it.each([
    ["empty", Buffer.alloc(0)],
    ["length past the end", Buffer.from([0, 0, 0, 99, 0x61])],
    ["zero length", Buffer.from([0, 0, 0, 0])],
  ])("keyBlobType of a malformed blob (%s) is undefined", (_, blob) => {
    expect(keyBlobType(blob)).toBeUndefined();
  });
});

describe("known_hosts names", () => {
  it.each([
    ["example.com", 22, "example.com"],
    ["Example.COM", 22, "example.com"],
    ["example.com", 2222, "[example.com]:2222"],
    ["169.254.213.2", 2222, "[169.254.213.2]:2222"],
    ["::1", 22, "::1"],
    ["::1", 830, "[::1]:830"],
  ])("%s port %i is stored as %s", (host, port, name) => {
    expect(knownHostsName(host, port)).toBe(name);
  });
});

describe("host field matching", () => {
  const salt = Buffer.from("0123456789abcdefghij");
  it.each([
    ["exact", "example.com", "example.com", true],
    ["case-insensitive", "Example.com", "example.com", true],
    ["other host", "example.org", "example.com", false],
    ["comma list, second", "a.example.com,example.com,10.0.0.1", "example.com", true],
    ["comma list, none", "a.example.com,10.0.0.1", "example.com", false],
    ["bracketed port", "[example.com]:2222", "[example.com]:2222", true],
    ["bracketed, other port", "[example.com]:2223", "[example.com]:2222", false],
    ["plain entry does not match a non-22 port", "example.com", "[example.com]:2222", false],
    ["bracketed :22 does not match port 22", "[example.com]:22", "example.com", false],
    ["wildcard *", "*.example.com", "db.example.com", true],
    ["wildcard * does not match the bare domain", "*.example.com", "example.com", false],
    ["wildcard ?", "db?.example.com", "db1.example.com", true],
    ["wildcard in bracketed port", "[*.example.com]:2222", "[db.example.com]:2222", true],
    ["dot is literal", "db.example.com", "dbxexample.com", false],
    ["negation wins", "*.example.com,!db.example.com", "db.example.com", false],
    ["negation alone never matches", "!db.example.com", "web.example.com", false],
    ["hashed, same name", hashed("example.com", salt), "example.com", true],
    ["hashed, other name", hashed("example.com", salt), "example.org", false],
    ["hashed bracketed port", hashed("[10.0.0.1]:2222"), "[10.0.0.1]:2222", true],
    ["hashed plain name does not match another port", hashed("10.0.0.1"), "[10.0.0.1]:2222", false],
    ["malformed hash", "|1|notbase64|x", "example.com", false],
    ["unknown hash version", "|2|c2FsdA==|aGFzaA==", "example.com", false],
  ])("%s", (_, field, name, expected) => {
    expect(hostFieldMatches(field, name)).toBe(expected);
  });

  it("reads hashed lines written by ssh-keygen -H", () => {
    const file = path.join(dir, "to-hash");
    const ed = key("ed25519").text;
    writeFileSync(file, `example.com ${ed}\n[10.1.2.3]:2222 ${ed}\n`);
    execFileSync("ssh-keygen", ["-q", "-H", "-f", file], { stdio: "ignore" });
    const content = readFileSync(file, "utf8");
    expect(content).not.toContain("example.com");
    const kh = KnownHosts.parse(content);
    expect(kh.entries.every((e) => e.hosts.startsWith("|1|"))).toBe(true);
    expect(kh.check("example.com", 22, key("ed25519").blob).status).toBe("ok");
    expect(kh.check("10.1.2.3", 2222, key("ed25519").blob).status).toBe("ok");
    expect(kh.check("10.1.2.3", 22, key("ed25519").blob).status).toBe("unknown");
  });
});

describe("known_hosts parsing and checking", () => {
  const host = "kvm1.example.com";

  // Each case: file content built from key texts, the host:port and offered key, the expected status.
  const cases: Array<{
    name: string;
    content: () => string;
    port?: number;
    offered: string;
    expected: HostKeyCheck["status"];
  }> = [
    {
      name: "plain entry",
      content: () => `${host} ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "plain entry with a comment field",
      content: () => `${host} ${key("rsa").text} root@kvm1`,
      offered: "rsa",
      expected: "ok",
    },
    ...KEY_TYPES.map((t) => ({
      name: `key type ${t.sshType}`,
      content: () => `${host} ${key(t.name).text}`,
      offered: t.name,
      expected: "ok" as const,
    })),
    {
      name: "hashed entry",
      content: () => `${hashed(host)} ${key("ecdsa-256").text}`,
      offered: "ecdsa-256",
      expected: "ok",
    },
    {
      name: "bracketed port",
      content: () => `[${host}]:2222 ${key("ed25519").text}`,
      port: 2222,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "plain entry is for port 22 only",
      content: () => `${host} ${key("ed25519").text}`,
      port: 2222,
      offered: "ed25519",
      expected: "unknown",
    },
    {
      name: "bracketed entry is not for port 22",
      content: () => `[${host}]:2222 ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "unknown",
    },
    {
      name: "comma list",
      content: () => `kvm0.example.com,${host},192.0.2.7 ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "wildcard",
      content: () => `*.example.com ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "comments and blank lines are ignored",
      content: () => `# ${host} ${key("other").text}\n\n   \n\t# x\n${host} ${key("ed25519").text}\n`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "CRLF line ends",
      content: () => `# c\r\n${host} ${key("ed25519").text}\r\n`,
      offered: "ed25519",
      expected: "ok",
    },
    { name: "empty file", content: () => "", offered: "ed25519", expected: "unknown" },
    {
      name: "other host only",
      content: () => `kvm2.example.com ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "unknown",
    },
    {
      name: "same type, different key",
      content: () => `${host} ${key("other").text}`,
      offered: "ed25519",
      expected: "mismatch",
    },
    {
      name: "host known with another key type only",
      content: () => `${host} ${key("rsa").text}`,
      offered: "ed25519",
      expected: "other-type",
    },
    {
      name: "one of several keys for the host",
      content: () =>
        `${host} ${key("rsa").text}\n${host} ${key("other").text}\n${host} ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "@revoked key",
      content: () => `@revoked ${host} ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "revoked",
    },
    {
      name: "@revoked wins over a good line",
      content: () => `${host} ${key("ed25519").text}\n@revoked * ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "revoked",
    },
    {
      name: "@revoked for another host does not apply",
      content: () => `${host} ${key("ed25519").text}\n@revoked kvm2.example.com ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "@revoked other key does not block",
      content: () => `${host} ${key("ed25519").text}\n@revoked * ${key("other").text}`,
      offered: "ed25519",
      expected: "ok",
    },
    {
      name: "@cert-authority lines are ignored",
      content: () => `@cert-authority *.example.com ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "unknown",
    },
    {
      name: "key type field disagreeing with the key data is skipped",
      content: () => `${host} ssh-rsa ${key("ed25519").text.split(" ")[1]}`,
      offered: "ed25519",
      expected: "unknown",
    },
    {
      name: "garbage key data is skipped",
      content: () => `${host} ssh-ed25519 AAAA!!!notakey\n${host} ${key("ed25519").text}`,
      offered: "ed25519",
      expected: "ok",
    },
  ];

  it.each(cases)("$name → $expected", ({ content, port, offered, expected }) => {
    const kh = KnownHosts.parse(content());
    expect(kh.check(host, port ?? 22, key(offered).blob).status).toBe(expected);
  });

  it("reports skipped lines with their line numbers", () => {
    const kh = KnownHosts.parse(
      [
        `@cert-authority * ${key("ed25519").text}`,
        `${host} ssh-ed25519`,
        `${host} 1024 35 12345`,
        `@bogus ${host} ${key("ed25519").text}`,
        `${host} ${key("ed25519").text}`,
      ].join("\n"),
    );
    expect(kh.skipped.map((s) => s.line)).toEqual([1, 2, 3, 4]);
    expect(kh.entries).toHaveLength(1);
    expect(kh.entries[0]?.line).toBe(5);
  });

  it("lists the key types known for a host, revoked ones left out", () => {
    const kh = KnownHosts.parse(
      [
        `${host} ${key("rsa").text}`,
        `@revoked ${host} ${key("ed25519").text}`,
        `[${host}]:2222 ${key("ecdsa-384").text}`,
        `${host} ${key("ecdsa-256").text}`,
      ].join("\n"),
    );
    expect(kh.knownKeyTypes(host, 22)).toEqual(["ssh-rsa", "ecdsa-sha2-nistp256"]);
    expect(kh.knownKeyTypes(host, 2222)).toEqual(["ecdsa-sha2-nistp384"]);
    expect(kh.knownKeyTypes("nowhere", 22)).toEqual([]);
  });
});

describe("host key errors", () => {
  const source = "/etc/kvmp/known_hosts";

  it("an accepted key gives no error", () => {
    const kh = KnownHosts.parse(`[h.example]:2222 ${key("ed25519").text}`, source);
    const offered = key("ed25519").blob;
    expect(
      hostKeyError(kh.check("h.example", 2222, offered), "h.example", 2222, offered, source),
    ).toBeUndefined();
  });

  it.each([
    {
      name: "unknown host, port 2222",
      content: () => "",
      port: 2222,
      expect: [
        /h\.example:2222/,
        /not in \/etc\/kvmp\/known_hosts/,
        /ssh-keyscan -p 2222 -t ssh-ed25519 h\.example >> \/etc\/kvmp\/known_hosts/,
      ],
    },
    {
      name: "unknown host, port 22",
      content: () => "",
      port: 22,
      expect: [/h\.example:22\b/, /ssh-keyscan -t ssh-ed25519 h\.example >>/],
    },
    {
      name: "mismatch",
      content: () => `[h.example]:2222 ${key("other").text}`,
      port: 2222,
      expect: [
        /h\.example:2222/,
        /differs/,
        /man-in-the-middle/,
        /line 1/,
        /ssh-keygen -R '\[h\.example\]:2222'/,
      ],
    },
    {
      name: "revoked",
      content: () => `@revoked * ${key("ed25519").text}`,
      port: 2222,
      expect: [/h\.example:2222/, /@revoked/, /line 1/],
    },
    {
      name: "other type",
      content: () => `[h.example]:2222 ${key("rsa").text}`,
      port: 2222,
      expect: [/h\.example:2222/, /only holds ssh-rsa keys/],
    },
  ])("$name: permanent, names host, type, fingerprint and the fix", ({ content, port, expect: patterns }) => {
    const offered = key("ed25519").blob;
    const kh = KnownHosts.parse(content(), source);
    const err = hostKeyError(kh.check("h.example", port, offered), "h.example", port, offered, source);
    expect(err).toBeInstanceOf(ProviderError);
    expect(err?.kind).toBe("permanent");
    expect(err?.message).toContain("ssh-ed25519");
    expect(err?.message).toContain(fingerprintSha256(offered));
    for (const p of patterns) expect(err?.message).toMatch(p);
  });
});
