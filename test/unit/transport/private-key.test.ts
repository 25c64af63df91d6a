/**
 * Private keys in the forms users paste (provider/transport/private-key.ts):
 * PKCS#8 (what `openssl genpkey` writes) converted into a form ssh2 parses,
 * checked by ssh2 itself and by signing with the result; public keys named.
 */
import { execFileSync } from "node:child_process";
import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { utils } from "ssh2";
import { describe, expect, it } from "vitest";
import { privateKeyTextProblem, sshReadableKey } from "../../../provider/transport/private-key";

function pkcs8(type: "rsa" | "ec" | "ed25519", passphrase?: string): { key: string; publicPem: string } {
  const k =
    type === "rsa"
      ? generateKeyPairSync("rsa", { modulusLength: 2048 })
      : type === "ec"
        ? generateKeyPairSync("ec", { namedCurve: "prime256v1" })
        : generateKeyPairSync("ed25519");
  const key = k.privateKey
    .export({
      type: "pkcs8",
      format: "pem",
      ...(passphrase !== undefined ? { cipher: "aes-256-cbc", passphrase } : {}),
    })
    .toString();
  return { key, publicPem: k.publicKey.export({ type: "spki", format: "pem" }).toString() };
}

describe("sshReadableKey", () => {
  it.each(["rsa", "ec", "ed25519"] as const)(
    "converts a PKCS#8 %s key into one ssh2 parses, with the same public key",
    (type) => {
      const { key, publicPem } = pkcs8(type);
      expect(key).toContain("-----BEGIN PRIVATE KEY-----");
      const r = sshReadableKey(key);
      if ("problem" in r) throw new Error(r.problem);
      expect(r.converted).toBe("pkcs8");
      const parsed = utils.parseKey(r.key);
      if (parsed instanceof Error) throw parsed;
      const k = Array.isArray(parsed) ? parsed[0] : parsed;
      expect(k?.isPrivateKey()).toBe(true);
      expect(createPublicKey(k?.getPublicPEM() ?? "").export({ format: "jwk" })).toEqual(
        createPublicKey(publicPem).export({ format: "jwk" }),
      );
      // It signs what its public half verifies.
      const data = Buffer.from("kvmp");
      expect(k?.verify(data, k.sign(data) as Buffer)).toBe(true);
    },
  );

  it("decrypts an encrypted PKCS#8 key with its passphrase, and names a wrong or missing one", () => {
    const { key } = pkcs8("ed25519", "the passphrase");
    expect("key" in sshReadableKey(key, "the passphrase")).toBe(true);
    expect(sshReadableKey(key, "wrong")).toEqual({ problem: expect.stringContaining("does not open") });
    expect(sshReadableKey(key)).toEqual({ problem: expect.stringContaining("no passphrase") });
  });

  it("reads OpenSSH's own Ed25519 key as ssh-keygen writes it, as it is", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "kvmp-key-"));
    try {
      execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", path.join(dir, "k")]);
      const text = readFileSync(path.join(dir, "k"), "utf8");
      expect(sshReadableKey(text)).toEqual({ key: text });
      const pub = readFileSync(path.join(dir, "k.pub"), "utf8");
      expect(sshReadableKey(pub)).toEqual({ problem: expect.stringContaining("is a public key") });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [
      "a PEM public key",
      pkcs8("rsa") &&
        generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" }).toString(),
    ],
    ["an OpenSSH public key line", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0 user@host"],
  ])("names %s as a public key, quoting nothing of it", (_what, text) => {
    expect(privateKeyTextProblem(text)).toBe("is a public key; give the private key (the file without .pub)");
  });

  it("refuses a PKCS#8 key of a type SSH does not take (DSA is not offered; x25519 is no signing key)", () => {
    const x = generateKeyPairSync("x25519").privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    expect(privateKeyTextProblem(x)).toMatch(/PKCS#8 x25519 key: SSH takes ed25519, ecdsa or rsa/);
  });
});
