/**
 * The health check of a proxy, sent from wherever Pulumi runs to the guest.
 * A TCP connect proves nothing (sshd accepts one on port 22): the answer
 * must come from squid, and from THIS proxy's squid (its Via or X-Cache
 * carries `squidName`, the visible_hostname our squid.conf sets). Without
 * that the image's own squid, which answers from early boot until the setup
 * script has reloaded it, passed with its default configuration.
 *
 * - Without a target URL: `GET /` sent to the proxy port as to a web
 *   server. Squid answers such an origin-form request itself, before any
 *   access check (so with no credentials, from any client): 400 with
 *   `X-Squid-Error: ERR_INVALID_URL` and its name.
 * - With `url` (proxies without auth): a request for `url` through the
 *   proxy; its status must be `expectStatus` and the reply must carry this
 *   squid's name (plain HTTP), or come through a tunnel squid opened (HTTPS:
 *   CONNECT answered 200, which carries no header to tell whose squid).
 * - Proxies with auth: the provider never learns the password, so `url` is
 *   requested inside the guest through its agent (kvm/guest/guest-probe.ts) and
 *   judged by {@link judgeStatus} like a reply from here.
 */
import http from "node:http";
import net, { type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { setTimeout as delay } from "node:timers/promises";
import tls from "node:tls";
import { TimeoutError } from "../errors";
import { hostPort } from "../kvm/network/ip";

/** One probe's outcome. */
export type ProbeResult = { ok: true; status?: number; note?: string } | { ok: false; reason: string };

/** What to probe. */
export interface ProbeTarget {
  ip: string;
  proxyPort: number;
  /** A target through the proxy; absent: a request squid answers itself. */
  url?: string;
  expectStatus?: number;
  /** The name the proxy's squid gives itself (`squidName` of its setup). */
  squidName: string;
  /**
   * How to reach `ip:proxyPort` when not directly from here: a connection
   * through the VM's host (`healthCheck.via: "host"`, HostPool.tunnel).
   */
  connect?: () => Promise<Duplex>;
}

/**
 * Where a probe's request goes: `ip:proxyPort` directly, or the stream
 * `t.connect` opens (with the socket methods http asks of a connection).
 */
function endpoint(t: ProbeTarget): http.RequestOptions {
  const connect = t.connect;
  if (connect === undefined) return { host: t.ip, port: t.proxyPort };
  return {
    createConnection: (_options, done) => {
      connect().then(
        (stream) => done(null, asSocket(stream)),
        (err: unknown) => done(err instanceof Error ? err : new Error(String(err)), undefined as never),
      );
      return undefined as never;
    },
  };
}

/**
 * A stream as http uses a socket: `setTimeout` a timer from when it is set
 * (a probe is one short exchange, so it bounds it as an idle timeout
 * would), the TCP options ignored (the far end has them).
 */
function asSocket(stream: Duplex): Socket {
  const s = stream as Duplex &
    Partial<Record<"setTimeout" | "setNoDelay" | "setKeepAlive" | "ref" | "unref", unknown>>;
  let timer: NodeJS.Timeout | undefined;
  stream.once("close", () => clearTimeout(timer));
  if (typeof s.setTimeout !== "function") {
    s.setTimeout = (ms: number, cb?: () => void) => {
      clearTimeout(timer);
      if (cb !== undefined) stream.once("timeout", cb);
      if (ms > 0) timer = setTimeout(() => stream.emit("timeout"), ms);
      return stream;
    };
  }
  for (const k of ["setNoDelay", "setKeepAlive", "ref", "unref"] as const) {
    if (typeof s[k] !== "function") s[k] = () => stream;
  }
  return stream as unknown as Socket;
}

/** The headers of a reply a probe judges, by lower-case name. */
export type ReplyHeaders = Readonly<Record<string, string | string[] | undefined>>;

const USER_AGENT = "pulumi-kvm-proxy-health";

function header(headers: ReplyHeaders, name: string): string {
  const v = headers[name];
  return Array.isArray(v) ? v.join(", ") : (v ?? "");
}

/** The reply came from (or through) squid: its error header, its Server name, or its Via entry. */
function fromSquid(h: ReplyHeaders): boolean {
  return (
    header(h, "x-squid-error") !== "" ||
    /^squid\b/i.test(header(h, "server")) ||
    /\(squid[/)]/i.test(header(h, "via"))
  );
}

/** The names squid gave itself in the reply (Via entries, X-Cache). */
function squidNames(h: ReplyHeaders): string[] {
  const via = [...header(h, "via").matchAll(/(?:^|,)\s*[\w./]+\s+(\S+)\s+\(squid[/)]/gi)];
  const cache = [...header(h, "x-cache").matchAll(/\bfrom\s+(\S+)/gi)];
  return [...new Set([...via, ...cache].map((m) => m[1] as string))];
}

/** Why the reply is not from this proxy's squid, or undefined when it is. */
function notOurs(
  h: ReplyHeaders,
  t: Pick<ProbeTarget, "squidName" | "ip" | "proxyPort">,
): string | undefined {
  const names = squidNames(h);
  if (names.includes(t.squidName)) return undefined;
  const seen = names.length === 0 ? "no name" : names.join(", ");
  return (
    `squid at ${where(t)} answers as ${seen}, not as ${t.squidName}: ` +
    "its setup has not run yet, or its squid.conf is not the one this proxy wrote"
  );
}

function where(t: Pick<ProbeTarget, "ip" | "proxyPort">): string {
  return hostPort(t.ip, t.proxyPort);
}

/** A reply fetched through the proxy: its status, headers and the first bytes of its body. */
export type Fetched =
  | { ok: true; status: number; headers: ReplyHeaders; body: string }
  | { ok: false; reason: string };

/** Reads at most `limit` bytes of `res`'s body (the rest is drained), as UTF-8 text. */
function bodyOf(res: http.IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (d: Buffer) => {
      if (size < limit) chunks.push(d.subarray(0, limit - size));
      size += d.length;
    });
    const done = () => resolve(Buffer.concat(chunks).toString("utf8"));
    res.once("end", done);
    res.once("close", done);
    res.once("error", done);
  });
}

/**
 * `url` fetched through the proxy: plain HTTP as an absolute-form request,
 * https through a CONNECT tunnel (TLS to the target inside it). The body is
 * read up to `bodyLimit` bytes (default none).
 */
export function fetchThrough(
  t: ProbeTarget,
  url: string,
  timeoutMs: number,
  bodyLimit = 0,
): Promise<Fetched> {
  const target = new URL(url);
  return target.protocol === "https:"
    ? viaTunnel(t, target, timeoutMs, bodyLimit)
    : viaProxy(t, target, timeoutMs, bodyLimit);
}

function viaProxy(t: ProbeTarget, target: URL, timeoutMs: number, bodyLimit: number): Promise<Fetched> {
  return new Promise((resolve) => {
    const req = http.request({
      ...endpoint(t),
      method: "GET",
      path: target.href,
      headers: { host: target.host, "user-agent": USER_AGENT },
      timeout: timeoutMs,
    });
    req.once("response", (res) => {
      bodyOf(res, bodyLimit).then((body) =>
        resolve({ ok: true, status: res.statusCode ?? 0, headers: res.headers, body }),
      );
    });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) =>
      resolve({ ok: false, reason: `via proxy ${where(t)}: ${e.code ?? e.message}` }),
    );
    req.end();
  });
}

/** The probe without a target: `GET /` to the proxy port, which squid answers itself. */
function squidSelf(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const req = http.request({
      ...endpoint(t),
      method: "GET",
      path: "/",
      headers: { host: where(t), "user-agent": USER_AGENT },
      timeout: timeoutMs,
    });
    req.once("response", (res) => {
      res.resume();
      resolve(judgeSelf(res.statusCode ?? 0, res.headers, t));
    });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) =>
      resolve({ ok: false, reason: `${where(t)}: ${e.code ?? e.message}` }),
    );
    req.end();
  });
}

/** Squid's own answer to `GET /`: 400 ERR_INVALID_URL, named as this proxy's squid. */
export function judgeSelf(
  status: number,
  h: ReplyHeaders,
  t: Pick<ProbeTarget, "squidName" | "ip" | "proxyPort">,
): ProbeResult {
  const server = header(h, "server") || "no Server header";
  if (!fromSquid(h))
    return { ok: false, reason: `${where(t)} answered HTTP ${status} (${server}), not as squid` };
  const other = notOurs(h, t);
  if (other !== undefined) return { ok: false, reason: other };
  const error = header(h, "x-squid-error");
  if (/ERR_INVALID_URL/.test(error)) return { ok: true, status };
  return {
    ok: false,
    reason: `squid at ${where(t)} answered HTTP ${status} (${error || "no X-Squid-Error"})`,
  };
}

/** A reply for the health check's URL: `expectStatus`, through this proxy's squid. */
export function judgeStatus(
  status: number,
  h: ReplyHeaders,
  t: Pick<ProbeTarget, "squidName" | "ip" | "proxyPort" | "url" | "expectStatus">,
): ProbeResult {
  const want = t.expectStatus ?? 200;
  if (status !== want) {
    return { ok: false, reason: `${t.url} through the proxy returned HTTP ${status}, expected ${want}` };
  }
  if (!fromSquid(h)) {
    return {
      ok: false,
      reason: `${t.url} answered HTTP ${status} without squid's Via: not through a squid at ${where(t)}`,
    };
  }
  const other = notOurs(h, t);
  if (other !== undefined) return { ok: false, reason: other };
  return { ok: true, status };
}

function viaTunnel(t: ProbeTarget, url: URL, timeoutMs: number, bodyLimit: number): Promise<Fetched> {
  return new Promise((resolve) => {
    const port = url.port === "" ? 443 : Number(url.port);
    const req = http.request({
      ...endpoint(t),
      method: "CONNECT",
      path: `${url.hostname}:${port}`,
      headers: { host: `${url.hostname}:${port}` },
      timeout: timeoutMs,
    });
    const fail = (reason: string) => resolve({ ok: false, reason });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) => fail(`via proxy ${where(t)}: ${e.code ?? e.message}`));
    req.once("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        fail(`proxy ${where(t)} refused CONNECT ${url.hostname}:${port} with HTTP ${res.statusCode}`);
        return;
      }
      const secure = tls.connect({ socket, servername: url.hostname });
      const inner = http.request({
        createConnection: () => secure,
        method: "GET",
        path: `${url.pathname}${url.search}`,
        headers: { host: url.host, "user-agent": USER_AGENT },
        timeout: timeoutMs,
      });
      inner.once("response", (r) => {
        bodyOf(r, bodyLimit).then((body) => {
          resolve({ ok: true, status: r.statusCode ?? 0, headers: r.headers, body });
          secure.destroy();
        });
      });
      inner.once("timeout", () => inner.destroy(new Error(`no answer in ${timeoutMs} ms`)));
      inner.once("error", (e: NodeJS.ErrnoException) => {
        secure.destroy();
        fail(`${url.href} through the tunnel: ${e.code ?? e.message}`);
      });
      inner.end();
    });
    req.end();
  });
}

/** One probe, bounded by `timeoutMs`. */
export async function probeOnce(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  if (t.url === undefined) return squidSelf(t, timeoutMs);
  const r = await fetchThrough(t, t.url, timeoutMs);
  if (!r.ok) return r;
  if (new URL(t.url).protocol === "http:") return judgeStatus(r.status, r.headers, t);
  // Through a tunnel squid opened: the reply is the target's own, with no header of squid's to judge.
  const want = t.expectStatus ?? 200;
  return r.status === want
    ? { ok: true, status: want }
    : { ok: false, reason: `${t.url} through the proxy returned HTTP ${r.status}, expected ${want}` };
}

/** What a probe is called in messages. */
export function probeName(t: ProbeTarget): string {
  return t.url === undefined ? `squid at ${where(t)}` : `${t.url} through ${where(t)}`;
}

/** Clock and sleep, injectable for tests. */
export interface HealthEnv {
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * Probes until one succeeds or `deadlineMs` (from now) passes; then throws a
 * TimeoutError carrying the last failure's reason. `signal` (the
 * provision's deadline, a cancel, a VM that stopped) ends the wait between
 * probes with its reason.
 */
export async function waitHealthy(
  t: ProbeTarget,
  deadlineMs: number,
  options: HealthEnv & { pollMs?: number; probeTimeoutMs?: number; signal?: AbortSignal } = {},
): Promise<ProbeResult> {
  const { signal } = options;
  const now = options.now ?? (() => performance.now());
  const sleep =
    options.sleep ??
    ((ms: number) =>
      delay(ms, undefined, signal === undefined ? {} : { signal }).catch((err: unknown) => {
        throw signal?.aborted ? signal.reason : err;
      }));
  const pollMs = options.pollMs ?? 5_000;
  const start = now();
  let last = "no probe ran";
  for (;;) {
    signal?.throwIfAborted();
    const left = deadlineMs - (now() - start);
    const r = await probeOnce(t, Math.max(1_000, Math.min(options.probeTimeoutMs ?? 10_000, left)));
    if (r.ok) return r;
    signal?.throwIfAborted();
    last = r.reason;
    if (now() - start + pollMs > deadlineMs) {
      throw new TimeoutError(`a healthy proxy (${probeName(t)}); last failure: ${last}`, deadlineMs);
    }
    await sleep(pollMs);
  }
}

/**
 * What a SOCKS5 listener answered a greeting offering "no authentication"
 * and "username/password" (RFC 1928): its choice as hex (`0502`), `closed`
 * when it closed or reset the connection without a byte (Dante resets a
 * client outside its client rules), or why nothing answered.
 */
export type SocksAnswer = { reply: string } | { closed: true } | { error: string };

/** The SOCKS5 greeting sent to `ip:port`, or through `connect`. */
export function socksGreeting(
  t: { ip: string; port: number; connect?: () => Promise<Duplex> },
  timeoutMs: number,
): Promise<SocksAnswer> {
  return new Promise((resolve) => {
    let got = Buffer.alloc(0);
    let stream: Duplex | undefined;
    const timer = setTimeout(() => finish({ error: `no answer in ${timeoutMs} ms` }), timeoutMs);
    const finish = (a: SocksAnswer) => {
      clearTimeout(timer);
      stream?.destroy();
      resolve(a);
    };
    const opened = t.connect !== undefined ? t.connect() : Promise.resolve(net.connect(t.port, t.ip));
    opened.then(
      (s) => {
        stream = s;
        s.on("data", (d: Buffer) => {
          got = Buffer.concat([got, d]);
          if (got.length >= 2) finish({ reply: got.subarray(0, 2).toString("hex") });
        });
        s.once("end", () => finish(got.length === 0 ? { closed: true } : { reply: got.toString("hex") }));
        s.once("close", () => finish(got.length === 0 ? { closed: true } : { reply: got.toString("hex") }));
        // Dante resets a client outside its client rules (its unread greeting): a refusal, as a close is.
        s.once("error", (e: NodeJS.ErrnoException) =>
          finish(
            e.code === "ECONNRESET" && got.length === 0 ? { closed: true } : { error: e.code ?? e.message },
          ),
        );
        s.write(Buffer.from([5, 2, 0, 2]));
      },
      (e: unknown) => finish({ error: e instanceof Error ? e.message : String(e) }),
    );
  });
}

/**
 * A SOCKS answer judged for a listener set up with (or without) auth: it
 * must choose username/password (`0502`), or with no auth none (`0500`).
 * A connection closed without a byte is a listener refusing this client
 * (outside allowedClients): healthy only when `closedIsRefusal`.
 */
export function judgeSocks(
  a: SocksAnswer,
  o: { auth: boolean; where: string; closedIsRefusal: boolean },
): ProbeResult {
  if ("error" in a) return { ok: false, reason: `SOCKS5 at ${o.where}: ${a.error}` };
  if ("closed" in a) {
    return o.closedIsRefusal
      ? { ok: true, note: `SOCKS5 at ${o.where} refuses the probe's source (outside allowedClients)` }
      : { ok: false, reason: `SOCKS5 at ${o.where} closed the connection without an answer` };
  }
  const want = o.auth ? "0502" : "0500";
  if (a.reply === want) return { ok: true };
  if (o.auth && a.reply === "0500")
    return { ok: false, reason: `SOCKS5 at ${o.where} admits clients without a password` };
  return { ok: false, reason: `SOCKS5 at ${o.where} answered ${a.reply}, not ${want}` };
}
