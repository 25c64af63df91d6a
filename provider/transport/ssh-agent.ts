/**
 * An ssh-agent served by this process, for the OpenSSH transport: the keys
 * from the stack config (Pulumi secrets, or key files with a passphrase)
 * reach `ssh` without ever being written to disk, decrypted or not. ssh asks
 * the agent (IdentityAgent) to list its keys and to sign its authentication
 * challenge; the private keys stay in this process's memory.
 *
 * The socket lives in a 0700 folder of ours (the transport's), so only this
 * user (and root) can reach it, as with OpenSSH's own agent; it answers
 * REQUEST_IDENTITIES and SIGN_REQUEST (draft-miller-ssh-agent) and refuses
 * everything else (adding, removing, locking keys, extensions such as
 * OpenSSH's session-bind). It is closed with the transport. (ssh2's
 * AgentProtocol was not used: it answers an unknown request twice, which
 * made ssh read the second FAILURE as the answer to its key list.)
 */
import { createPrivateKey, sign as cryptoSign, type KeyObject } from "node:crypto";
import { promises as fs } from "node:fs";
import net from "node:net";
import type { ParsedKey } from "ssh2";

interface AgentKey {
  readonly parsed: ParsedKey;
  readonly blob: Buffer;
  readonly privateKey: KeyObject;
}

const SSH_AGENT_FAILURE = 5;
const SSH_AGENTC_REQUEST_IDENTITIES = 11;
const SSH_AGENT_IDENTITIES_ANSWER = 12;
const SSH_AGENTC_SIGN_REQUEST = 13;
const SSH_AGENT_SIGN_RESPONSE = 14;
const SSH_AGENT_RSA_SHA2_256 = 2;
const SSH_AGENT_RSA_SHA2_512 = 4;
/** Requests larger than this are refused (a sign request carries a session hash and a key: small). */
const MAX_MESSAGE = 256 * 1024;

function sshString(b: Buffer | string): Buffer {
  const v = typeof b === "string" ? Buffer.from(b) : b;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(v.length);
  return Buffer.concat([len, v]);
}

function message(type: number, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat([Buffer.from([type]), ...parts]);
  return sshString(body);
}

/** Reads `string` fields of an agent message body; undefined when it is short. */
function readStrings(body: Buffer, count: number): { values: Buffer[]; rest: Buffer } | undefined {
  const values: Buffer[] = [];
  let p = 0;
  for (let i = 0; i < count; i++) {
    if (p + 4 > body.length) return undefined;
    const n = body.readUInt32BE(p);
    if (p + 4 + n > body.length) return undefined;
    values.push(body.subarray(p + 4, p + 4 + n));
    p += 4 + n;
  }
  return { values, rest: body.subarray(p) };
}

/** SSH mpint of an unsigned big-endian integer: leading zeros dropped, a zero byte added when the top bit is set. */
function mpint(bytes: Buffer): Buffer {
  let i = 0;
  while (i < bytes.length - 1 && bytes[i] === 0) i++;
  let v = bytes.subarray(i);
  if (((v[0] ?? 0) & 0x80) !== 0) v = Buffer.concat([Buffer.from([0]), v]);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(v.length);
  return Buffer.concat([len, v]);
}

const ECDSA_HASH: Record<string, string> = {
  "ecdsa-sha2-nistp256": "sha256",
  "ecdsa-sha2-nistp384": "sha384",
  "ecdsa-sha2-nistp521": "sha512",
};

/** The signature blob (without its format name) of `data` by `key`, as SSH encodes it for the key's type. */
export function sshSignature(key: AgentKey, data: Buffer, rsaHash: string | undefined): Buffer {
  const type = key.parsed.type;
  if (type === "ssh-ed25519") return cryptoSign(null, data, key.privateKey);
  if (type === "ssh-rsa") return cryptoSign(rsaHash ?? "sha1", data, key.privateKey);
  const hash = ECDSA_HASH[type];
  if (hash === undefined) throw new Error(`unsupported key type ${type}`);
  const raw = cryptoSign(hash, data, { key: key.privateKey, dsaEncoding: "ieee-p1363" });
  const half = raw.length / 2;
  return Buffer.concat([mpint(raw.subarray(0, half)), mpint(raw.subarray(half))]);
}

export class KeyAgent {
  readonly #keys: AgentKey[];
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  /** Signatures made (tests). */
  signatures = 0;

  private constructor(
    readonly path: string,
    keys: readonly ParsedKey[],
  ) {
    this.#keys = keys.map((parsed) => ({
      parsed,
      blob: parsed.getPublicSSH() as Buffer,
      privateKey: createPrivateKey(parsed.getPrivatePEM()),
    }));
    this.#server = net.createServer((socket) => this.#serve(socket));
  }

  /** Listens on `socketPath` (in a folder only this user can enter) serving `keys`. */
  static async start(socketPath: string, keys: readonly ParsedKey[]): Promise<KeyAgent> {
    const agent = new KeyAgent(socketPath, keys);
    await new Promise<void>((resolve, reject) => {
      agent.#server.once("error", reject);
      agent.#server.listen(socketPath, () => {
        agent.#server.off("error", reject);
        resolve();
      });
    });
    await fs.chmod(socketPath, 0o600);
    // Never keeps the process alive on its own.
    agent.#server.unref();
    return agent;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await fs.rm(this.path, { force: true });
  }

  #serve(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.unref();
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 4) {
        const len = buffered.readUInt32BE(0);
        if (len < 1 || len > MAX_MESSAGE) {
          socket.destroy();
          return;
        }
        if (buffered.length < 4 + len) break;
        const msg = buffered.subarray(4, 4 + len);
        buffered = buffered.subarray(4 + len);
        socket.write(this.#answer(msg[0] ?? 0, msg.subarray(1)));
      }
    });
    socket.on("error", () => socket.destroy());
    socket.once("close", () => this.#sockets.delete(socket));
  }

  #answer(type: number, body: Buffer): Buffer {
    if (type === SSH_AGENTC_REQUEST_IDENTITIES) {
      const count = Buffer.alloc(4);
      count.writeUInt32BE(this.#keys.length);
      const entries = this.#keys.flatMap((k) => [sshString(k.blob), sshString(k.parsed.comment ?? "")]);
      return message(SSH_AGENT_IDENTITIES_ANSWER, count, ...entries);
    }
    if (type === SSH_AGENTC_SIGN_REQUEST) {
      const read = readStrings(body, 2);
      if (read === undefined || read.rest.length < 4) return message(SSH_AGENT_FAILURE);
      const [blob, data] = read.values as [Buffer, Buffer];
      const flags = read.rest.readUInt32BE(0);
      const key = this.#keys.find((k) => k.blob.equals(blob));
      if (key === undefined) return message(SSH_AGENT_FAILURE);
      let format: string = key.parsed.type;
      let rsaHash: string | undefined;
      if (format === "ssh-rsa" && (flags & SSH_AGENT_RSA_SHA2_512) !== 0) {
        format = "rsa-sha2-512";
        rsaHash = "sha512";
      } else if (format === "ssh-rsa" && (flags & SSH_AGENT_RSA_SHA2_256) !== 0) {
        format = "rsa-sha2-256";
        rsaHash = "sha256";
      }
      try {
        const signature = sshSignature(key, data, rsaHash);
        this.signatures++;
        return message(
          SSH_AGENT_SIGN_RESPONSE,
          sshString(Buffer.concat([sshString(format), sshString(signature)])),
        );
      } catch {
        return message(SSH_AGENT_FAILURE);
      }
    }
    return message(SSH_AGENT_FAILURE);
  }
}
