/**
 * The one reader of every probe's exchange with the network from here
 * (health-check.ts: the health check, the egress check's fetch through the
 * proxy, the SOCKS greeting; directly or through the host). A probe's far
 * end may be hostile: the egress check fetches the URL the user gives, from
 * whatever answers there. Every exchange keeps its {@link ProbeBounds}:
 *
 * - one deadline for all of it (connect, headers, body), not an idle timer:
 *   a reply trickled a byte at a time ends with it;
 * - a cap on the bytes of a reply's body read (none for a probe that judges
 *   status and headers): past it reading stops, the connection is destroyed
 *   and the probe fails; a declared Content-Length past it fails at once.
 *   Headers stop at {@link HEADER_LIMIT} (the HTTP parser's own bound).
 *
 * A bound hit is a {@link ProbeBoundError} naming the bound and its value.
 * Whatever the exchange held open (requests, sockets, tunnels, TLS) is
 * destroyed when it ends, by success, failure or a bound. The probe inside
 * the guest keeps the same bounds in its own program (kvm/guest/guest-probe.ts).
 */
import http from "node:http";
import type { Readable } from "node:stream";
import { messageOf } from "../errors";
import { deadlineReason, type ProbeBounds, sizeReason } from "../kvm/guest/guest-probe";
import { later } from "../timers";

export type { ProbeBounds } from "../kvm/guest/guest-probe";

/** Largest reply headers read, bytes: Node's own default, held here whatever flags the process runs with; big sites' headers fit. */
export const HEADER_LIMIT = 16 * 1024;

/**
 * A probe's request as sent: on a connection of its own (none pooled, none
 * reused: an agent of its own, unless the probe brings its connection, which
 * an agent would ignore), its headers capped.
 */
function probeRequest(options: http.RequestOptions): http.RequestOptions {
  return {
    ...(options.createConnection === undefined ? { agent: false } : {}),
    ...options,
    maxHeaderSize: HEADER_LIMIT,
  };
}

/** A probe ended by one of its bounds. */
export class ProbeBoundError extends Error {
  constructor(
    readonly bound: "deadline" | "size",
    message: string,
  ) {
    super(message);
    this.name = "ProbeBoundError";
  }
}

/** What an exchange destroys when it ends. */
interface Held {
  destroy(): unknown;
  on?(event: "error", listener: () => void): unknown;
}

/** One exchange under its bounds (see the module header); made by {@link bounded}. */
export class ProbeExchange {
  /** Bytes read from the far end's replies so far (bodies and greetings; headers are the parser's). */
  received = 0;
  private readonly held = new Set<Held>();
  private ended = false;
  private readonly timer: NodeJS.Timeout;
  /** Rejects with the deadline's ProbeBoundError when it passes. */
  readonly expired: Promise<never>;

  constructor(readonly bounds: ProbeBounds) {
    let expire: (err: Error) => void = () => undefined;
    this.expired = new Promise<never>((_, reject) => {
      expire = reject;
    });
    this.timer = later(() => {
      expire(new ProbeBoundError("deadline", deadlineReason(bounds.deadlineMs)));
      this.end();
    }, bounds.deadlineMs);
  }

  /** `s`, destroyed when the exchange ends (at once when it has ended). */
  hold<T extends Held>(s: T): T {
    // Its errors surface through the request or read that uses it; a stray one must not crash the process.
    s.on?.("error", () => undefined);
    if (this.ended) s.destroy();
    else this.held.add(s);
    return s;
  }

  /** Ends the exchange: its deadline cleared, everything it held destroyed. */
  end(): void {
    this.ended = true;
    clearTimeout(this.timer);
    for (const s of this.held) s.destroy();
    this.held.clear();
  }

  /** The reply (status and headers) to a request of `options`. */
  request(options: http.RequestOptions): Promise<http.IncomingMessage> {
    const req = this.hold(http.request(probeRequest(options)));
    return new Promise((resolve, reject) => {
      req.once("response", (res: http.IncomingMessage) => resolve(this.hold(res)));
      req.once("error", reject);
      req.end();
    });
  }

  /** A CONNECT of `options`: the proxy's reply and the tunnel's socket (held). */
  tunnel(options: http.RequestOptions): Promise<{ res: http.IncomingMessage; socket: Readable & Held }> {
    const req = this.hold(http.request(probeRequest({ ...options, method: "CONNECT" })));
    return new Promise((resolve, reject) => {
      // Node hands every reply to a CONNECT, whatever its status, to "connect".
      req.once("connect", (res: http.IncomingMessage, socket: Readable & Held) =>
        resolve({ res, socket: this.hold(socket) }),
      );
      req.once("error", reject);
      req.end();
    });
  }

  /** `res`'s body, at most `bounds.bodyBytes` (none read when that is 0); past it a size ProbeBoundError. */
  body(res: http.IncomingMessage): Promise<Buffer> {
    const cap = this.bounds.bodyBytes;
    if (cap === 0) return Promise.resolve(Buffer.alloc(0));
    const declared = Number(res.headers["content-length"]);
    if (declared > cap) return Promise.reject(new ProbeBoundError("size", sizeReason(cap)));
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (d: Buffer) => {
        size += d.length;
        this.received += d.length;
        if (size > cap) {
          res.destroy();
          reject(new ProbeBoundError("size", sizeReason(cap)));
        } else chunks.push(d);
      });
      res.once("end", () => resolve(Buffer.concat(chunks)));
      res.once("error", reject);
      res.once("close", () => reject(new Error("the reply was cut off")));
    });
  }

  /** The first `n` bytes `s` sends (fewer when it ends first); it is read no further. */
  first(s: Readable, n: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      let got = Buffer.alloc(0);
      s.on("data", (d: Buffer) => {
        this.received += d.length;
        got = Buffer.concat([got, d]);
        if (got.length >= n) {
          s.pause();
          resolve(got.subarray(0, n));
        }
      });
      s.once("end", () => resolve(got));
      s.once("close", () => resolve(got));
      s.once("error", reject);
    });
  }
}

/** Runs one exchange under `bounds`: `run`'s outcome, or the bound that ended it; then ends it. */
export async function bounded<T>(bounds: ProbeBounds, run: (x: ProbeExchange) => Promise<T>): Promise<T> {
  const x = new ProbeExchange(bounds);
  try {
    return await Promise.race([run(x), x.expired]);
  } finally {
    x.end();
  }
}

/** A probe's failure as text: a bound's reason, the header cap, else the error's code or message. */
export function failureText(err: unknown): string {
  if (err instanceof ProbeBoundError) return err.message;
  const e = err as NodeJS.ErrnoException;
  if (e.code === "HPE_HEADER_OVERFLOW") return `reply headers larger than ${HEADER_LIMIT} bytes`;
  return e.code ?? messageOf(err);
}
