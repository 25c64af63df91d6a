import type { RemoteErrorFields } from "./errors";
import { LibvirtError, ProtocolError } from "./errors";
import type { Domain, StoragePool, StorageVol } from "./types";
import { UUID_LEN, XdrReader, type XdrWriter } from "./xdr";

/** Encoders and decoders for the structs shared by many procedures. */

const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

export function uuidToBytes(uuid: string): Buffer {
  if (!UUID_RE.test(uuid)) throw new ProtocolError(`not a UUID: ${JSON.stringify(uuid)}`);
  return Buffer.from(uuid.replace(/-/g, ""), "hex");
}

// Two hex digits per byte value: a UUID is read on every domain lookup, and
// one string concatenation beats toString('hex') plus five slices.
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

export function uuidFromBytes(b: Uint8Array): string {
  if (b.length !== UUID_LEN) throw new ProtocolError(`a UUID has ${UUID_LEN} bytes, got ${b.length}`);
  const h = (i: number): string => HEX[b[i] as number] as string;
  return `${h(0)}${h(1)}${h(2)}${h(3)}-${h(4)}${h(5)}-${h(6)}${h(7)}-${h(8)}${h(9)}-${h(10)}${h(11)}${h(12)}${h(13)}${h(14)}${h(15)}`;
}

export function writeUuid(w: XdrWriter, uuid: string): void {
  w.fixedOpaque(uuidToBytes(uuid), UUID_LEN);
}

export function readUuid(r: XdrReader): string {
  // A view, not a copy: the bytes become a string at once.
  return uuidFromBytes(r.fixedOpaqueView(UUID_LEN));
}

/** remote_string: an optional string. */
export function writeOptString(w: XdrWriter, s: string | null | undefined): void {
  w.optional(s, (w2, v) => w2.string(v));
}

export function readOptString(r: XdrReader): string | null {
  return r.optional((r2) => r2.string());
}

export function writeDomain(w: XdrWriter, d: Domain): void {
  w.string(d.name);
  writeUuid(w, d.uuid);
  w.int(d.id);
}

export function readDomain(r: XdrReader): Domain {
  return { name: r.string(), uuid: readUuid(r), id: r.int() };
}

export function writeStoragePool(w: XdrWriter, p: StoragePool): void {
  w.string(p.name);
  writeUuid(w, p.uuid);
}

export function readStoragePool(r: XdrReader): StoragePool {
  return { name: r.string(), uuid: readUuid(r) };
}

export function writeStorageVol(w: XdrWriter, v: StorageVol): void {
  w.string(v.pool);
  w.string(v.name);
  w.string(v.key);
}

export function readStorageVol(r: XdrReader): StorageVol {
  return { pool: r.string(), name: r.string(), key: r.string() };
}

/** remote_error. The dom and net members are decoded and dropped (deprecated, unused). */
export function readRemoteError(r: XdrReader): RemoteErrorFields {
  const code = r.int();
  const domain = r.int();
  const message = readOptString(r);
  const level = r.int();
  r.optional(readDomain);
  const str1 = readOptString(r);
  const str2 = readOptString(r);
  const str3 = readOptString(r);
  const int1 = r.int();
  const int2 = r.int();
  r.optional((r2) => {
    r2.string();
    return r2.fixedOpaque(UUID_LEN);
  });
  return { code, domain, message, level, str1, str2, str3, int1, int2 };
}

/** Encodes a remote_error (for tests and in-process fakes speaking the real protocol). */
export function writeRemoteError(
  w: XdrWriter,
  e: RemoteErrorFields & { dom?: Domain | null; net?: { name: string; uuid: string } | null },
): void {
  w.int(e.code);
  w.int(e.domain);
  writeOptString(w, e.message);
  w.int(e.level);
  w.optional(e.dom, writeDomain);
  writeOptString(w, e.str1);
  writeOptString(w, e.str2);
  writeOptString(w, e.str3);
  w.int(e.int1);
  w.int(e.int2);
  w.optional(e.net, (w2, n) => {
    w2.string(n.name);
    writeUuid(w2, n.uuid);
  });
}

/** Decodes a remote_error body into a LibvirtError; a malformed body becomes a ProtocolError. */
export function decodeError(body: Buffer, call: string): Error {
  try {
    return new LibvirtError(readRemoteError(new XdrReader(body)), call);
  } catch (err) {
    return err instanceof ProtocolError
      ? new ProtocolError(`${call}: malformed error reply: ${err.message}`)
      : (err as Error);
  }
}
