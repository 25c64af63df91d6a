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
import type http from "node:http";
import net, { type Socket } from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { TimeoutError } from "../errors";
import { hostPort } from "../kvm/network/ip";
import { peerProblem, type TlsPublic } from "../kvm/tls/proxy-tls";
import { sleep as sleepFor } from "../timers";
import { withProbeHint } from "./failure-hints";
import { bounded, failureText, type ProbeBounds, type ProbeExchange } from "./probe-reader";

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
  /** The proxy listens with TLS: the certificate it must present (kvm/tls/proxy-tls.ts peerProblem). */
  tls?: TlsPublic;
}

/**
 * Where a probe's request goes: `ip:proxyPort` directly, or the stream
 * `t.connect` opens (with the socket methods http asks of a connection);
 * with TLS to the proxy when it listens so, its certificate judged before a
 * byte of the request is sent. What it opens is held by the exchange `x`.
 */
function endpoint(t: ProbeTarget, x: ProbeExchange): http.RequestOptions {
  const { connect, tls: expect } = t;
  if (connect === undefined && expect === undefined) return { host: t.ip, port: t.proxyPort };
  const open = async (): Promise<Duplex> => {
    const raw = x.hold(connect !== undefined ? await connect() : net.connect(t.proxyPort, t.ip));
    return expect === undefined ? raw : x.hold(await secured(raw, t.ip, expect));
  };
  return {
    createConnection: (_options, done) => {
      open().then(
        (stream) => done(null, asSocket(stream)),
        (err: unknown) => done(err instanceof Error ? err : new Error(String(err)), undefined as never),
      );
      return undefined as never;
    },
  };
}

/**
 * TLS over `raw` to the proxy at `ip`, once its certificate is the one
 * `expect` describes (issued by its CA for `ip`, or the one given); Node's
 * own check is not used: it would trust the machine's CAs too.
 */
function secured(raw: Duplex, ip: string, expect: TlsPublic): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ socket: raw, rejectUnauthorized: false });
    s.once("secureConnect", () => {
      const problem = peerProblem(s.getPeerCertificate().raw, expect, ip, new Date());
      if (problem === undefined) resolve(s);
      else {
        s.destroy();
        reject(new Error(problem));
      }
    });
    s.once("error", reject);
  });
}

/**
 * A stream as http uses a socket: the socket methods it may call do nothing
 * (the probe's deadline is its reader's, probe-reader.ts; the TCP options
 * are the far end's).
 */
function asSocket(stream: Duplex): Socket {
  const s = stream as Duplex &
    Partial<Record<"setTimeout" | "setNoDelay" | "setKeepAlive" | "ref" | "unref", unknown>>;
  for (const k of ["setTimeout", "setNoDelay", "setKeepAlive", "ref", "unref"] as const) {
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

/** A reply fetched through the proxy: its status, headers and body (as much as the bounds read). */
export type Fetched =
  | { ok: true; status: number; headers: ReplyHeaders; body: string }
  | { ok: false; reason: string };

/**
 * `url` fetched through the proxy within `bounds` (probe-reader.ts): plain
 * HTTP as an absolute-form request, https through a CONNECT tunnel (TLS to
 * the target inside it).
 */
export async function fetchThrough(t: ProbeTarget, url: string, bounds: ProbeBounds): Promise<Fetched> {
  const target = new URL(url);
  try {
    return await bounded(bounds, (x) =>
      target.protocol === "https:" ? viaTunnel(x, t, target) : viaProxy(x, t, target),
    );
  } catch (err) {
    return { ok: false, reason: `via proxy ${where(t)}: ${failureText(err)}` };
  }
}

async function viaProxy(x: ProbeExchange, t: ProbeTarget, target: URL): Promise<Fetched> {
  const res = await x.request({
    ...endpoint(t, x),
    method: "GET",
    path: target.href,
    headers: { host: target.host, "user-agent": USER_AGENT },
  });
  const body = await x.body(res);
  return { ok: true, status: res.statusCode ?? 0, headers: res.headers, body: body.toString("utf8") };
}

/** The probe without a target: `GET /` to the proxy port, which squid answers itself (its body unread). */
async function squidSelf(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  try {
    const res = await bounded({ deadlineMs: timeoutMs, bodyBytes: 0 }, (x) =>
      x.request({
        ...endpoint(t, x),
        method: "GET",
        path: "/",
        headers: { host: where(t), "user-agent": USER_AGENT },
      }),
    );
    return judgeSelf(res.statusCode ?? 0, res.headers, t);
  } catch (err) {
    return { ok: false, reason: `${where(t)}: ${failureText(err)}` };
  }
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

async function viaTunnel(x: ProbeExchange, t: ProbeTarget, url: URL): Promise<Fetched> {
  const port = url.port === "" ? 443 : Number(url.port);
  const { res, socket } = await x.tunnel({
    ...endpoint(t, x),
    path: `${url.hostname}:${port}`,
    headers: { host: `${url.hostname}:${port}` },
  });
  if (res.statusCode !== 200) {
    return {
      ok: false,
      reason: `proxy ${where(t)} refused CONNECT ${url.hostname}:${port} with HTTP ${res.statusCode}`,
    };
  }
  const secure = x.hold(tls.connect({ socket: socket as Duplex, servername: url.hostname }));
  try {
    const reply = await x.request({
      createConnection: () => secure,
      method: "GET",
      path: `${url.pathname}${url.search}`,
      headers: { host: url.host, "user-agent": USER_AGENT },
    });
    const body = await x.body(reply);
    return { ok: true, status: reply.statusCode ?? 0, headers: reply.headers, body: body.toString("utf8") };
  } catch (err) {
    return { ok: false, reason: `${url.href} through the tunnel: ${failureText(err)}` };
  }
}

/** One probe (status and headers judged, no body read), ended by `timeoutMs` whatever the far end does. */
export async function probeOnce(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  if (t.url === undefined) return squidSelf(t, timeoutMs);
  const r = await fetchThrough(t, t.url, { deadlineMs: timeoutMs, bodyBytes: 0 });
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

/** The deadline of one probe while a create waits for a healthy proxy, ms (at most; less when less is left). */
export const GATE_PROBE_MS = 10_000;

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
  options: HealthEnv & {
    pollMs?: number;
    probeTimeoutMs?: number;
    signal?: AbortSignal;
    /** The setting the deadline comes from, named in the timeout message (e.g. `timeouts.create`). */
    deadlineName?: string;
  } = {},
): Promise<ProbeResult> {
  const { signal } = options;
  const now = options.now ?? (() => performance.now());
  const sleep = options.sleep ?? ((ms: number) => sleepFor(ms, signal));
  const pollMs = options.pollMs ?? 5_000;
  const start = now();
  let last = "no probe ran";
  for (;;) {
    signal?.throwIfAborted();
    const left = deadlineMs - (now() - start);
    const r = await probeOnce(t, Math.max(1_000, Math.min(options.probeTimeoutMs ?? GATE_PROBE_MS, left)));
    if (r.ok) return r;
    signal?.throwIfAborted();
    last = r.reason;
    if (now() - start + pollMs > deadlineMs) {
      const why = withProbeHint(last, { check: "healthCheck", viaHost: t.connect !== undefined });
      throw new TimeoutError(
        `a healthy proxy (${probeName(t)}); last failure: ${why}`,
        deadlineMs,
        options.deadlineName,
      );
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

/** The SOCKS5 greeting sent to `ip:port`, or through `connect`; its answer's first 2 bytes read, within `timeoutMs`. */
export async function socksGreeting(
  t: { ip: string; port: number; connect?: () => Promise<Duplex> },
  timeoutMs: number,
): Promise<SocksAnswer> {
  try {
    return await bounded({ deadlineMs: timeoutMs, bodyBytes: 2 }, async (x) => {
      const s = x.hold(t.connect !== undefined ? await t.connect() : net.connect(t.port, t.ip));
      s.write(Buffer.from([5, 2, 0, 2]));
      try {
        const got = await x.first(s, 2);
        return got.length === 0 ? { closed: true } : { reply: got.toString("hex") };
      } catch (err) {
        // Dante resets a client outside its client rules (its unread greeting): a refusal, as a close is.
        if ((err as NodeJS.ErrnoException).code === "ECONNRESET" && x.received === 0) return { closed: true };
        throw err;
      }
    });
  } catch (err) {
    return { error: failureText(err) };
  }
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
