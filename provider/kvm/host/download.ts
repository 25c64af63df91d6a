/**
 * Image sources and the checks made while an image streams to the host.
 *
 * Bytes flow source → {@link ImageVerifier} → libvirt upload stream, one chunk
 * at a time with backpressure: the image is never held in memory whole. The
 * verifier hashes the bytes, checks the declared format from the first bytes,
 * learns the qcow2 virtual size from the header, and fails the stream (so the
 * upload is aborted, never finished) when the checksum, the format or the
 * announced length is wrong.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream, promises as fs } from "node:fs";
import http from "node:http";
import https from "node:https";
import { Readable, Transform, type TransformCallback } from "node:stream";
import { ProviderError, TimeoutError } from "../../errors";
import { timerDelay } from "../../timers";
import type { ImageFormat, ImageSource } from "../config/image";

/** qcow2 magic: 'Q' 'F' 'I' 0xfb. */
export const QCOW2_MAGIC = Buffer.from([0x51, 0x46, 0x49, 0xfb]);
/** Bytes of the qcow2 header {@link parseQcow2Header} needs (through the size field). */
export const QCOW2_HEADER_BYTES = 32;

/** What the fixed part of a qcow2 header says. */
export interface Qcow2Header {
  version: number;
  /** Offset of the backing file name; 0 when the image has no backing file. */
  backingFileOffset: bigint;
  clusterBits: number;
  /** Virtual disk size in bytes (bytes 24..31, big-endian). */
  virtualSize: number;
}

/** An image's bytes are not what was declared. Permanent: the same source gives the same bytes. */
export class ImageVerificationError extends ProviderError {
  constructor(message: string) {
    super("permanent", message);
  }
}

/** True when `head` starts with the qcow2 magic. */
export function isQcow2(head: Uint8Array): boolean {
  return head.length >= 4 && Buffer.from(head.buffer, head.byteOffset, 4).equals(QCOW2_MAGIC);
}

/**
 * Parses the first {@link QCOW2_HEADER_BYTES} bytes of a qcow2 image. Throws
 * ImageVerificationError when the magic, version or size is wrong.
 */
export function parseQcow2Header(head: Uint8Array): Qcow2Header {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (b.length < QCOW2_HEADER_BYTES) {
    throw new ImageVerificationError(`image is ${b.length} bytes, shorter than a qcow2 header`);
  }
  if (!isQcow2(b)) throw new ImageVerificationError("image is not qcow2 (no QFI\\xfb magic)");
  const version = b.readUInt32BE(4);
  if (version !== 2 && version !== 3)
    throw new ImageVerificationError(`unsupported qcow2 version ${version}`);
  const virtualSize = b.readBigUInt64BE(24);
  if (virtualSize === 0n || virtualSize > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ImageVerificationError(`qcow2 virtual size ${virtualSize} is out of range`);
  }
  return {
    version,
    backingFileOffset: b.readBigUInt64BE(8),
    clusterBits: b.readUInt32BE(20),
    virtualSize: Number(virtualSize),
  };
}

/** What the verifier learned once the stream ended cleanly. */
export interface VerifiedImage {
  bytes: number;
  /** Lower-case hex SHA-256 of every byte. */
  sha256: string;
  /** Virtual disk size: the qcow2 header's size, or the byte count for raw. */
  virtualSize: number;
}

/** Options of {@link ImageVerifier}. */
export interface ImageVerifierOptions {
  format: ImageFormat;
  /** Expected lower-case hex SHA-256; a mismatch fails the stream at its end. */
  sha256?: string;
  /** Expected byte count (e.g. Content-Length); a shorter or longer stream fails. */
  expectedBytes?: number;
  /** Names the image in messages (its URL). */
  label?: string;
}

/**
 * A pass-through stream that verifies an image on the way. It errors (which
 * aborts the upload reading from it) when:
 * - the declared format is qcow2 and the magic is missing, or the qcow2 image
 *   names a backing file (it would make QEMU open a file on the host);
 * - the declared format is raw but the bytes are a qcow2 image (the guest
 *   would see the qcow2 container as its disk and never boot; declare qcow2);
 * - the total length differs from `expectedBytes`, or is zero;
 * - the SHA-256 differs from `sha256`. This is checked at the end, before the
 *   last bytes are released, so a mismatching upload is never completed.
 */
export class ImageVerifier extends Transform {
  private readonly hash: Hash = createHash("sha256");
  private readonly options: ImageVerifierOptions;
  private head: Buffer = Buffer.alloc(0);
  private headChecked = false;
  private count = 0;
  private qcow2: Qcow2Header | undefined;
  /** Set once the stream has ended and every check passed. */
  result: VerifiedImage | undefined;

  constructor(options: ImageVerifierOptions) {
    super();
    this.options = options;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    try {
      this.hash.update(chunk);
      this.count += chunk.length;
      if (!this.headChecked) {
        this.head = Buffer.concat([this.head, chunk.subarray(0, QCOW2_HEADER_BYTES - this.head.length)]);
        if (this.head.length >= QCOW2_HEADER_BYTES) this.checkHead();
      }
      if (this.options.expectedBytes !== undefined && this.count > this.options.expectedBytes) {
        throw new ImageVerificationError(
          `${this.what()} is longer than the announced ${this.options.expectedBytes} bytes`,
        );
      }
      done(null, chunk);
    } catch (err) {
      done(err as Error);
    }
  }

  override _flush(done: TransformCallback): void {
    try {
      if (!this.headChecked) this.checkHead();
      const { expectedBytes, sha256 } = this.options;
      if (this.count === 0) throw new ImageVerificationError(`${this.what()} is empty`);
      if (expectedBytes !== undefined && this.count !== expectedBytes) {
        // A connection cut short: not the image's fault, a retry may succeed.
        throw new ProviderError(
          "transient",
          `${this.what()} ended after ${this.count} of ${expectedBytes} announced bytes`,
        );
      }
      const digest = this.hash.digest("hex");
      if (sha256 !== undefined && digest !== sha256.toLowerCase()) {
        throw new ImageVerificationError(
          `${this.what()} has sha256 ${digest}, expected ${sha256.toLowerCase()}`,
        );
      }
      this.result = { bytes: this.count, sha256: digest, virtualSize: this.qcow2?.virtualSize ?? this.count };
      done();
    } catch (err) {
      done(err as Error);
    }
  }

  private what(): string {
    return this.options.label !== undefined ? `image ${this.options.label}` : "image";
  }

  private checkHead(): void {
    this.headChecked = true;
    if (this.options.format === "qcow2") {
      if (!isQcow2(this.head)) {
        throw new ImageVerificationError(`${this.what()} was declared qcow2 but is not (no QFI\\xfb magic)`);
      }
      this.qcow2 = parseQcow2Header(this.head);
      if (this.qcow2.backingFileOffset !== 0n) {
        throw new ImageVerificationError(
          `${this.what()} names a backing file; only standalone images are accepted`,
        );
      }
    } else if (isQcow2(this.head)) {
      throw new ImageVerificationError(
        `${this.what()} was declared raw but is a qcow2 image; declare format qcow2`,
      );
    }
  }
}

/** An opened image source. */
export interface OpenedImage {
  stream: Readable;
  /** Announced length (Content-Length or file size), when known. */
  length?: number;
}

/** Options of {@link openImageSource}. */
export interface OpenImageOptions {
  signal?: AbortSignal;
  /** Most redirects followed (default 5). */
  maxRedirects?: number;
  /** Deadline for the response headers and for any pause between body chunks (default 60 s). */
  idleTimeoutMs?: number;
}

const TRANSIENT_NET_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ETIMEDOUT",
  "EPIPE",
  "EAI_AGAIN",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

function netError(url: string, err: NodeJS.ErrnoException): ProviderError {
  const kind = err.code !== undefined && TRANSIENT_NET_CODES.has(err.code) ? "transient" : "permanent";
  return new ProviderError(kind, `downloading ${url} failed: ${err.code ?? err.message}`, { cause: err });
}

/**
 * Opens an image source as a byte stream: a local file (fs stream) or an
 * http(s) URL (node:http/https, following at most `maxRedirects` redirects).
 * HTTP 5xx, 408, 429 and network failures are transient; other statuses and
 * a missing file are permanent.
 */
export async function openImageSource(
  source: ImageSource,
  options: OpenImageOptions = {},
): Promise<OpenedImage> {
  if (source.kind === "file") {
    let size: number;
    try {
      const st = await fs.stat(source.path);
      if (!st.isFile()) throw new ProviderError("permanent", `image ${source.path} is not a regular file`);
      size = st.size;
    } catch (err) {
      if (err instanceof ProviderError) throw err;
      const code = (err as NodeJS.ErrnoException).code ?? "error";
      throw new ProviderError("permanent", `image ${source.path} cannot be read (${code})`, { cause: err });
    }
    const stream = createReadStream(source.path, { signal: options.signal });
    return { stream, length: size };
  }
  return httpGet(source.url, options, options.maxRedirects ?? 5);
}

function httpGet(url: string, options: OpenImageOptions, redirectsLeft: number): Promise<OpenedImage> {
  const idle = options.idleTimeoutMs ?? 60_000;
  return new Promise<OpenedImage>((resolve, reject) => {
    const u = new URL(url);
    const mod = u.protocol === "https:" ? https : u.protocol === "http:" ? http : undefined;
    if (mod === undefined) {
      reject(new ProviderError("permanent", `cannot download ${url}: unsupported scheme ${u.protocol}`));
      return;
    }
    const req = mod.get(
      u,
      { signal: options.signal, headers: { "user-agent": "pulumi-kvm-proxy" } },
      (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 300 && status < 400 && res.headers.location !== undefined) {
          res.resume();
          if (redirectsLeft <= 0) {
            reject(new ProviderError("permanent", `downloading ${url}: too many redirects`));
            return;
          }
          const next = new URL(res.headers.location, u);
          if (next.protocol !== "https:" && next.protocol !== "http:") {
            reject(
              new ProviderError("permanent", `downloading ${url}: redirect to unsupported ${next.protocol}`),
            );
            return;
          }
          httpGet(next.href, options, redirectsLeft - 1).then(resolve, reject);
          return;
        }
        if (status !== 200) {
          res.resume();
          const kind = status >= 500 || status === 408 || status === 429 ? "transient" : "permanent";
          reject(new ProviderError(kind, `downloading ${url}: HTTP ${status}`));
          return;
        }
        // Idle deadline for the body: a stalled server must not hang the upload.
        res.setTimeout(timerDelay(idle), () =>
          res.destroy(new TimeoutError(`the next bytes of ${url}`, idle)),
        );
        res.on("error", () => {});
        const len = res.headers["content-length"];
        const length = len !== undefined && /^\d+$/.test(len) ? Number(len) : undefined;
        // Errors from the body become classified ProviderErrors for the upload to surface.
        const stream = Readable.from(classified(res, url));
        resolve(length === undefined ? { stream } : { stream, length });
      },
    );
    req.setTimeout(timerDelay(idle), () =>
      req.destroy(new TimeoutError(`response headers from ${url}`, idle)),
    );
    req.on("error", (err: NodeJS.ErrnoException) => {
      reject(err instanceof ProviderError ? err : netError(url, err));
    });
  });
}

async function* classified(res: http.IncomingMessage, url: string): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of res) yield chunk as Buffer;
  } catch (err) {
    if (err instanceof ProviderError) throw err;
    throw netError(url, err as NodeJS.ErrnoException);
  } finally {
    res.destroy();
  }
}

/**
 * The source piped through a verifier: what the upload reads. The verifier's
 * `result` is set once the returned stream has ended without error.
 */
export function verifiedStream(
  opened: OpenedImage,
  options: Omit<ImageVerifierOptions, "expectedBytes">,
): { stream: Readable; verifier: ImageVerifier } {
  const verifier = new ImageVerifier({
    ...options,
    ...(opened.length !== undefined ? { expectedBytes: opened.length } : {}),
  });
  opened.stream.on("error", (err) => verifier.destroy(err));
  // Closing the verifier early (an aborted upload) must also release the source.
  verifier.on("close", () => {
    if (!opened.stream.destroyed) opened.stream.destroy();
  });
  opened.stream.pipe(verifier);
  return { stream: verifier, verifier };
}
