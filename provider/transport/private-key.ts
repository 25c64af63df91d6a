/**
 * Private key text in the forms users paste, made into one ssh2 reads. ssh2
 * parses OpenSSH's own format and PKCS#1 RSA / SEC1 EC PEM, not PKCS#8
 * (`BEGIN PRIVATE KEY`, what `openssl genpkey` and many tools write):
 * node:crypto reads PKCS#8 and writes RSA as PKCS#1 and EC as SEC1; an
 * Ed25519 key is written in OpenSSH's format (unencrypted, in memory only).
 * A public key pasted where the private one belongs is named as such. Pure.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";

/** What {@link sshReadableKey} made of a text. */
export type KeyText = { key: string; converted?: "pkcs8" } | { problem: string };

const PUBLIC_PEM = /-----BEGIN (?:RSA |EC |OPENSSH |SSH2 )?PUBLIC KEY-----/;
const PUBLIC_LINE = /^\s*(?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-[\w@.-]+)\s+AAAA/;
const PKCS8 = /-----BEGIN (ENCRYPTED )?PRIVATE KEY-----/;

/** Whether `text` is a public key rather than a private one. */
export function isPublicKey(text: string): boolean {
  return PUBLIC_PEM.test(text) || PUBLIC_LINE.test(text);
}

/**
 * `text` as a key ssh2 can parse: as given unless it is PKCS#8, converted
 * then (decrypted with `passphrase` when it is encrypted). Never quotes
 * the key in a problem.
 */
export function sshReadableKey(text: string, passphrase?: string): KeyText {
  if (isPublicKey(text)) {
    return { problem: "is a public key; give the private key (the file without .pub)" };
  }
  const pkcs8 = PKCS8.exec(text);
  if (pkcs8 === null) return { key: text };
  if (pkcs8[1] !== undefined && passphrase === undefined) {
    return { problem: "is an encrypted PKCS#8 key but no passphrase was given" };
  }
  let k: KeyObject;
  try {
    k = createPrivateKey(passphrase === undefined ? { key: text } : { key: text, passphrase });
  } catch {
    return {
      problem:
        pkcs8[1] !== undefined
          ? "is an encrypted PKCS#8 key that this passphrase does not open"
          : "is a PKCS#8 key that does not parse",
    };
  }
  switch (k.asymmetricKeyType) {
    case "rsa":
      return { key: k.export({ type: "pkcs1", format: "pem" }).toString(), converted: "pkcs8" };
    case "ec":
      return { key: k.export({ type: "sec1", format: "pem" }).toString(), converted: "pkcs8" };
    case "ed25519":
      return { key: openSshEd25519(k), converted: "pkcs8" };
    default:
      return {
        problem: `is a PKCS#8 ${k.asymmetricKeyType ?? "unknown"} key: SSH takes ed25519, ecdsa or rsa`,
      };
  }
}

function sshString(b: Buffer | string): Buffer {
  const body = typeof b === "string" ? Buffer.from(b) : b;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

/** An Ed25519 key in OpenSSH's private key format, unencrypted ("openssh-key-v1"). */
function openSshEd25519(k: KeyObject): string {
  const jwk = k.export({ format: "jwk" });
  const seed = Buffer.from(jwk.d as string, "base64url");
  const pub = Buffer.from((createPublicKey(k).export({ format: "jwk" }).x ?? jwk.x) as string, "base64url");
  const publicBlob = Buffer.concat([sshString("ssh-ed25519"), sshString(pub)]);
  const check = Buffer.alloc(4, 0x4b);
  let priv = Buffer.concat([
    check,
    check,
    sshString("ssh-ed25519"),
    sshString(pub),
    sshString(Buffer.concat([seed, pub])),
    sshString(""),
  ]);
  const pad = (8 - (priv.length % 8)) % 8;
  priv = Buffer.concat([priv, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);
  const body = Buffer.concat([
    Buffer.from("openssh-key-v1\0"),
    sshString("none"),
    sshString("none"),
    sshString(""),
    Buffer.from([0, 0, 0, 1]),
    sshString(publicBlob),
    sshString(priv),
  ]);
  const lines = body.toString("base64").match(/.{1,70}/g) ?? [];
  return `-----BEGIN OPENSSH PRIVATE KEY-----\n${lines.join("\n")}\n-----END OPENSSH PRIVATE KEY-----\n`;
}

/**
 * Why key text given as content cannot work, as far as preview can tell
 * without its passphrase: a public key, or a PKCS#8 key of a type SSH does
 * not take. Undefined otherwise (the key is parsed at connect).
 */
export function privateKeyTextProblem(text: string): string | undefined {
  if (isPublicKey(text)) return "is a public key; give the private key (the file without .pub)";
  const pkcs8 = PKCS8.exec(text);
  if (pkcs8 === null || pkcs8[1] !== undefined) return undefined;
  const r = sshReadableKey(text);
  return "problem" in r ? r.problem : undefined;
}
