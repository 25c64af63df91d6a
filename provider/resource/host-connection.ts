/**
 * The dynamic provider's record of a host given in full (`hostConnection`),
 * sealed when it may carry key material. Refresh and destroy run without
 * the program, and a dynamic provider's read and delete see only the
 * state's outputs, so those must hold how to reach the host; but a program
 * receives every output, and the Node.js SDK prints each one with `--debug`
 * whatever its secretness. So the record holds the host's key and, sealed
 * under the stack config secret `kvm:stateKey`, the entry itself: text the
 * SDK may print without harm, opened again only by the provider that holds
 * that secret (which the engine hands it, decrypted, in `configure`). The
 * provider plugin needs none of this: the engine sends it the old inputs.
 *
 * The seal is AES-256-GCM under a key derived from `kvm:stateKey`
 * (state-key.ts), its nonce an HMAC of the entry (the same entry seals to the same
 * text, so outputs do not change at every update), the host's key bound as
 * associated data. Pure apart from node:crypto.
 */

import { createCipheriv, createDecipheriv, createHmac } from "node:crypto";
import { UPGRADE_ACTION } from "../errors";
import { canonicalJson } from "../kvm/domain/metadata";
import { isObject } from "../kvm/fields";
import type { HostEntry } from "./args";
import { derivedKey } from "./state-key";

/** A sealed record: the host's key in the clear, the entry under the seal. */
export interface SealedHostConnection {
  key: string;
  sealed: string;
}

const VERSION = "v1";
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

function keysOf(stateKey: string): { seal: Buffer; nonce: Buffer } {
  const okm = derivedKey(stateKey, "hostConnection v1", 64);
  return { seal: okm.subarray(0, 32), nonce: okm.subarray(32) };
}

/** `entry` sealed under `stateKey`. */
export function sealHostConnection(entry: HostEntry, stateKey: string): SealedHostConnection {
  const keys = keysOf(stateKey);
  const plain = Buffer.from(canonicalJson(entry), "utf8");
  const nonce = createHmac("sha256", keys.nonce).update(plain).digest().subarray(0, NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", keys.seal, nonce);
  cipher.setAAD(Buffer.from(entry.key, "utf8"));
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  const sealed = Buffer.concat([nonce, body, cipher.getAuthTag()]).toString("base64url");
  return { key: entry.key, sealed: `${VERSION}.${sealed}` };
}

/** Whether a state's `hostConnection` is a sealed record. */
export function isSealed(v: unknown): v is SealedHostConnection {
  return isObject(v) && typeof v.key === "string" && typeof v.sealed === "string";
}

/**
 * The entry `v` seals, opened with `stateKey`; or why it cannot be opened.
 * The reasons quote nothing of the seal or the key.
 */
export function openHostConnection(
  v: SealedHostConnection,
  stateKey: string | undefined,
): { entry: HostEntry } | { problem: string } {
  const how = `the state keeps how to reach host ${JSON.stringify(v.key)} sealed under the stack config secret kvm:stateKey`;
  if (stateKey === undefined) return { problem: `${how}, which is not set: set it again as it was` };
  const [version, text] = v.sealed.split(".");
  const raw = Buffer.from(text ?? "", "base64url");
  if (version !== VERSION)
    return { problem: `${how}, in a form this version cannot read: ${UPGRADE_ACTION}` };
  if (raw.length < NONCE_BYTES + TAG_BYTES) return { problem: `${how}, and the seal is cut short` };
  try {
    const decipher = createDecipheriv("aes-256-gcm", keysOf(stateKey).seal, raw.subarray(0, NONCE_BYTES));
    decipher.setAAD(Buffer.from(v.key, "utf8"));
    decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
    const plain = Buffer.concat([
      decipher.update(raw.subarray(NONCE_BYTES, raw.length - TAG_BYTES)),
      decipher.final(),
    ]);
    const entry = JSON.parse(plain.toString("utf8")) as unknown;
    if (isObject(entry) && entry.key === v.key && typeof entry.uri === "string")
      return { entry: entry as HostEntry };
  } catch {
    // A wrong key and a damaged seal fail alike: the tag does not match.
  }
  return { problem: `${how}, and the kvm:stateKey set now does not open it: set the one it was sealed with` };
}
