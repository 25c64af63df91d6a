import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../../provider/errors";
import {
  ImageVerificationError,
  ImageVerifier,
  openImageSource,
  parseQcow2Header,
  QCOW2_HEADER_BYTES,
  verifiedStream,
} from "../../../../provider/kvm/host/download";
import type { CallRequest, OutgoingStream, RpcClient } from "../../../../provider/libvirt/client";
import { uploadStream } from "../../../../provider/libvirt/upload";

const dir = mkdtempSync(path.join(tmpdir(), "kvmp-download-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** A qcow2 image from qemu-img with the given virtual size. */
function qcow2(name: string, size: string): Buffer {
  const file = path.join(dir, name);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", file, size]);
  return readFileSync(file);
}

/** A header by hand: magic, version, backing offset, size. */
function header(opts: { version?: number; backing?: bigint; size: bigint }): Buffer {
  const b = Buffer.alloc(QCOW2_HEADER_BYTES + 100);
  b.write("QFI\xfb", 0, "latin1");
  b.writeUInt32BE(opts.version ?? 3, 4);
  b.writeBigUInt64BE(opts.backing ?? 0n, 8);
  b.writeUInt32BE(16, 20);
  b.writeBigUInt64BE(opts.size, 24);
  return b;
}

/** Feeds `data` in small chunks (so the header spans several) through a verifier. */
async function drain(data: Buffer, options: ConstructorParameters<typeof ImageVerifier>[0]) {
  const v = new ImageVerifier(options);
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += 7) chunks.push(data.subarray(i, i + 7));
  Readable.from(chunks).pipe(v);
  const out: Buffer[] = [];
  for await (const c of v) out.push(c as Buffer);
  return { v, out: Buffer.concat(out) };
}

describe("parseQcow2Header", () => {
  it("reads the virtual size (bytes 24..31, big-endian) of images made by qemu-img", () => {
    expect(parseQcow2Header(qcow2("a.qcow2", "64M")).virtualSize).toBe(64 * 1024 * 1024);
    expect(parseQcow2Header(qcow2("b.qcow2", "3G")).virtualSize).toBe(3 * 1024 ** 3);
    expect(parseQcow2Header(qcow2("c.qcow2", "1000000512")).virtualSize).toBe(1000000512);
    const h = parseQcow2Header(qcow2("d.qcow2", "1M"));
    expect(h).toMatchObject({ version: 3, backingFileOffset: 0n, clusterBits: 16 });
  });

  it("reads sizes beyond 32 bits and version 2 headers", () => {
    expect(parseQcow2Header(header({ size: 5n * 1024n ** 4n, version: 2 })).virtualSize).toBe(5 * 1024 ** 4);
  });

  it.each([
    ["too short", Buffer.from("QFI\xfb", "latin1"), /shorter than a qcow2 header/],
    ["no magic", Buffer.alloc(64), /not qcow2/],
    ["an unknown version", header({ version: 4, size: 1n }), /unsupported qcow2 version 4/],
    ["a zero size", header({ size: 0n }), /out of range/],
    ["a size beyond 2^53", header({ size: 1n << 60n }), /out of range/],
  ])("rejects %s", (_what, data, message) => {
    expect(() => parseQcow2Header(data)).toThrow(message);
  });
});

describe("ImageVerifier", () => {
  const image = qcow2("v.qcow2", "64M");

  it("passes the bytes through unchanged and reports size, sha256 and virtual size", async () => {
    const { v, out } = await drain(image, {
      format: "qcow2",
      sha256: sha(image),
      expectedBytes: image.length,
    });
    expect(out.equals(image)).toBe(true);
    expect(v.result).toEqual({ bytes: image.length, sha256: sha(image), virtualSize: 64 * 1024 * 1024 });
  });

  it("accepts an upper-case pinned checksum", async () => {
    const { v } = await drain(image, { format: "qcow2", sha256: sha(image).toUpperCase() });
    expect(v.result?.sha256).toBe(sha(image));
  });

  it("reports a raw image's virtual size as its length", async () => {
    const raw = Buffer.alloc(4096, 7);
    const { v } = await drain(raw, { format: "raw" });
    expect(v.result).toMatchObject({ bytes: 4096, virtualSize: 4096 });
  });

  it.each([
    [
      "a sha256 mismatch",
      image,
      { format: "qcow2" as const, sha256: "0".repeat(64) },
      /has sha256 [0-9a-f]{64}, expected 0{64}/,
    ],
    [
      "qcow2 declared but absent",
      Buffer.alloc(4096, 1),
      { format: "qcow2" as const },
      /declared qcow2 but is not/,
    ],
    ["a qcow2 declared raw", image, { format: "raw" as const }, /declared raw but is a qcow2 image/],
    [
      "a qcow2 with a backing file",
      header({ size: 1024n, backing: 512n }),
      { format: "qcow2" as const },
      /names a backing file/,
    ],
    ["an empty raw image", Buffer.alloc(0), { format: "raw" as const }, /is empty/],
  ])("fails permanently on %s", async (_what, data, options, message) => {
    const err = await drain(data, { ...options, label: "img" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImageVerificationError);
    expect((err as ProviderError).kind).toBe("permanent");
    expect((err as Error).message).toMatch(message);
  });

  it("fails transiently when the stream ends before the announced length", async () => {
    const err = await drain(image.subarray(0, 1000), { format: "qcow2", expectedBytes: image.length }).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ kind: "transient" });
    expect((err as Error).message).toMatch(`ended after 1000 of ${image.length} announced bytes`);
  });

  it("fails when the stream is longer than announced", async () => {
    const err = await drain(image, { format: "qcow2", expectedBytes: 100 }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/longer than the announced 100 bytes/);
  });
});

/** A stand-in for the RPC client's stream: records what the upload did. */
function fakeClient() {
  const events: string[] = [];
  let bytes = 0;
  const stream = {
    failure: null,
    write: async (pieces: readonly Buffer[]) => {
      for (const p of pieces) bytes += p.length;
      events.push("write");
    },
    finish: async () => {
      events.push("finish");
    },
    abort: async () => {
      events.push("abort");
    },
  };
  const client = { startUpload: async () => stream as unknown as OutgoingStream } as unknown as RpcClient;
  const start = {
    program: 0,
    version: 1,
    proc: 208,
    body: Buffer.alloc(0),
    call: "virStorageVolUpload",
  } as CallRequest;
  return { client, start, events, bytes: () => bytes };
}

describe("a verified upload", () => {
  // Bigger than one upload packet, so data has gone out before the end is reached.
  const big = Buffer.concat([qcow2("big.qcow2", "64M"), Buffer.alloc(3 * 1024 * 1024, 9)]);

  it("with a sha256 mismatch is aborted, never finished", async () => {
    const { client, start, events } = fakeClient();
    const { stream } = verifiedStream(
      { stream: Readable.from([big]), length: big.length },
      {
        format: "qcow2",
        sha256: "f".repeat(64),
      },
    );
    const err = await uploadStream(client, start, stream, { chunkSize: 1024 * 1024 }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ImageVerificationError);
    expect(events).toContain("write");
    expect(events).toContain("abort");
    expect(events).not.toContain("finish");
  });

  it("with the right sha256 is finished with every byte sent", async () => {
    const { client, start, events, bytes } = fakeClient();
    const { stream, verifier } = verifiedStream(
      { stream: Readable.from([big]), length: big.length },
      {
        format: "qcow2",
        sha256: sha(big),
      },
    );
    await uploadStream(client, start, stream, { chunkSize: 1024 * 1024 });
    expect(events.at(-1)).toBe("finish");
    expect(bytes()).toBe(big.length);
    expect(verifier.result?.sha256).toBe(sha(big));
  });

  it("whose source fails mid-way is aborted with the source's error", async () => {
    const { client, start, events } = fakeClient();
    const source = new Readable({ read() {} });
    source.push(big.subarray(0, 2 * 1024 * 1024));
    setImmediate(() => source.destroy(new ProviderError("transient", "connection reset mid-body")));
    const { stream } = verifiedStream({ stream: source, length: big.length }, { format: "qcow2" });
    const err = await uploadStream(client, start, stream, { chunkSize: 1024 * 1024 }).catch(
      (e: unknown) => e,
    );
    expect((err as Error).message).toBe("connection reset mid-body");
    expect(events).toContain("abort");
    expect(events).not.toContain("finish");
  });
});

describe("openImageSource", () => {
  let server: http.Server;
  let base: string;
  const body = Buffer.from("image bytes ".repeat(1000));
  let hits: string[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      hits.push(req.url ?? "");
      const url = req.url ?? "/";
      if (url === "/img") {
        res.writeHead(200, { "content-length": body.length });
        res.end(body);
      } else if (url.startsWith("/hop/")) {
        const n = Number(url.slice(5));
        res.writeHead(302, { location: n <= 1 ? "/img" : `/hop/${n - 1}` });
        res.end();
      } else if (url === "/busy") {
        res.writeHead(503);
        res.end();
      } else {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  async function read(s: Readable): Promise<Buffer> {
    const out: Buffer[] = [];
    for await (const c of s) out.push(c as Buffer);
    return Buffer.concat(out);
  }

  it("streams an http body and announces its length", async () => {
    const opened = await openImageSource({ kind: "http", url: `${base}/img` });
    expect(opened.length).toBe(body.length);
    expect((await read(opened.stream)).equals(body)).toBe(true);
  });

  it("follows redirects up to the limit", async () => {
    hits = [];
    const opened = await openImageSource({ kind: "http", url: `${base}/hop/3` }, { maxRedirects: 3 });
    expect((await read(opened.stream)).equals(body)).toBe(true);
    expect(hits).toEqual(["/hop/3", "/hop/2", "/hop/1", "/img"]);
    await expect(
      openImageSource({ kind: "http", url: `${base}/hop/3` }, { maxRedirects: 2 }),
    ).rejects.toThrow(/too many redirects/);
  });

  it("classifies HTTP failures: 5xx transient, 404 permanent, refused connections transient", async () => {
    await expect(openImageSource({ kind: "http", url: `${base}/busy` })).rejects.toMatchObject({
      kind: "transient",
    });
    await expect(openImageSource({ kind: "http", url: `${base}/nothing` })).rejects.toMatchObject({
      kind: "permanent",
      message: expect.stringContaining("HTTP 404"),
    });
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    await expect(openImageSource({ kind: "http", url: `http://127.0.0.1:${port}/x` })).rejects.toMatchObject({
      kind: "transient",
    });
  });

  it("opens a local file with its size, and fails permanently for a missing one", async () => {
    const file = path.join(dir, "local.img");
    writeFileSync(file, body);
    const opened = await openImageSource({ kind: "file", path: file });
    expect(opened.length).toBe(body.length);
    expect((await read(opened.stream)).equals(body)).toBe(true);
    await expect(openImageSource({ kind: "file", path: path.join(dir, "missing") })).rejects.toMatchObject({
      kind: "permanent",
    });
  });
});
