/**
 * The health check of a proxy, sent from wherever Pulumi runs to the guest:
 * an HTTP request THROUGH the proxy, with its credentials, whose answer must
 * show it came from squid. A TCP connect proves nothing (sshd accepts one on
 * port 22).
 *
 * - Without a target URL: `GET http://<ip>:<port>/` through the proxy. Squid
 *   forwards it to itself, whose own listener answers an origin-form request
 *   with 400 `X-Squid-Error: ERR_INVALID_URL` before any access check; the
 *   client gets that 400 back through the proxy: squid runs and (with auth)
 *   took the credentials. 407 means it refused them; a 403 squid error page
 *   means squid runs but does not admit this client (outside
 *   `allowedClients`), which counts as up, with that said.
 * - With `url`: the target's status must be `expectStatus`, and the reply
 *   must carry squid's `Via` (plain HTTP) or come through a tunnel squid
 *   opened (HTTPS: CONNECT answered 200).
 *
 * A plain-HTTP reply must also name THIS proxy's squid (its Via or X-Cache
 * carries `squidName`, the visible_hostname our squid.conf sets). Without
 * that the image's own squid, which answers from early boot until the setup
 * script reloads it, passed the check with its default configuration
 * (found with booted guests: every request refused for a minute after up).
 * A CONNECT's 200 carries no header to tell: HTTPS targets prove the tunnel only.
 */
import http from "node:http";
import tls from "node:tls";
import { TimeoutError } from "../errors";

/** One probe's outcome. */
export type ProbeResult = { ok: true; status?: number; note?: string } | { ok: false; reason: string };

/** What to probe. */
export interface ProbeTarget {
  ip: string;
  proxyPort: number;
  /** A target through the proxy; absent: a request squid answers itself. */
  url?: string;
  expectStatus?: number;
  /** The proxy's credentials (sent as Proxy-Authorization, never logged). */
  auth?: { username: string; password: string };
  /** The name the proxy's squid gives itself (`squidName` of its setup). */
  squidName: string;
}

const USER_AGENT = "pulumi-kvm-proxy-health";

function hostOf(ip: string): string {
  return ip.includes(":") ? `[${ip}]` : ip;
}

function proxyAuthHeader(t: ProbeTarget): Record<string, string> {
  if (t.auth === undefined) return {};
  const token = Buffer.from(`${t.auth.username}:${t.auth.password}`, "utf8").toString("base64");
  return { "proxy-authorization": `Basic ${token}` };
}

function header(res: http.IncomingMessage, name: string): string {
  const v = res.headers[name];
  return Array.isArray(v) ? v.join(", ") : (v ?? "");
}

/** The reply came from (or through) squid: its error header, its Server name, or its Via entry. */
function fromSquid(res: http.IncomingMessage): boolean {
  return (
    header(res, "x-squid-error") !== "" ||
    /^squid\b/i.test(header(res, "server")) ||
    /\(squid[/)]/i.test(header(res, "via"))
  );
}

/** The names squid gave itself in the reply (Via entries, X-Cache). */
function squidNames(res: http.IncomingMessage): string[] {
  const via = [...header(res, "via").matchAll(/(?:^|,)\s*[\w./]+\s+(\S+)\s+\(squid[/)]/gi)];
  const cache = [...header(res, "x-cache").matchAll(/\bfrom\s+(\S+)/gi)];
  return [...new Set([...via, ...cache].map((m) => m[1] as string))];
}

/** Why the reply is not from this proxy's squid, or undefined when it is. */
function notOurs(res: http.IncomingMessage, t: ProbeTarget): string | undefined {
  const names = squidNames(res);
  if (names.includes(t.squidName)) return undefined;
  const seen = names.length === 0 ? "no name" : names.join(", ");
  return (
    `squid at ${where(t)} answers as ${seen}, not as ${t.squidName}: ` +
    "its setup has not run yet, or its squid.conf is not the one this proxy wrote"
  );
}

function where(t: ProbeTarget): string {
  return `${hostOf(t.ip)}:${t.proxyPort}`;
}

/** A plain-HTTP request through the proxy; `judge` decides from the reply. */
function viaProxy(
  t: ProbeTarget,
  url: string,
  timeoutMs: number,
  judge: (res: http.IncomingMessage) => ProbeResult,
): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const target = new URL(url);
    const req = http.request({
      host: t.ip,
      port: t.proxyPort,
      method: "GET",
      path: target.href,
      headers: { host: target.host, "user-agent": USER_AGENT, ...proxyAuthHeader(t) },
      timeout: timeoutMs,
    });
    req.once("response", (res) => {
      res.resume();
      resolve(judge(res));
    });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) =>
      resolve({ ok: false, reason: `via proxy ${where(t)}: ${e.code ?? e.message}` }),
    );
    req.end();
  });
}

/** The probe without a target: squid's own answer to a request for itself. */
function squidSelf(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  return viaProxy(t, `http://${where(t)}/`, timeoutMs, (res) => {
    const status = res.statusCode ?? 0;
    const server = header(res, "server") || "no Server header";
    if (!fromSquid(res))
      return { ok: false, reason: `${where(t)} answered HTTP ${status} (${server}), not as squid` };
    const other = notOurs(res, t);
    if (other !== undefined) return { ok: false, reason: other };
    const error = header(res, "x-squid-error");
    if (status === 407) return { ok: false, reason: `squid at ${where(t)} refused the credentials (407)` };
    if (status === 403 && /ERR_ACCESS_DENIED/.test(error)) {
      return {
        ok: true,
        status,
        note: `squid at ${where(t)} answers but does not admit this client (not in allowedClients)`,
      };
    }
    if (/ERR_INVALID_URL/.test(error)) return { ok: true, status };
    return {
      ok: false,
      reason: `squid at ${where(t)} answered HTTP ${status} (${error || "no X-Squid-Error"})`,
    };
  });
}

function statusResult(res: http.IncomingMessage, t: ProbeTarget): ProbeResult {
  const status = res.statusCode ?? 0;
  const want = t.expectStatus ?? 200;
  if (status !== want) {
    return { ok: false, reason: `${t.url} through the proxy returned HTTP ${status}, expected ${want}` };
  }
  if (!fromSquid(res)) {
    return {
      ok: false,
      reason: `${t.url} answered HTTP ${status} without squid's Via: not through a squid at ${where(t)}`,
    };
  }
  const other = notOurs(res, t);
  if (other !== undefined) return { ok: false, reason: other };
  return { ok: true, status };
}

function viaTunnel(t: ProbeTarget, url: URL, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const port = url.port === "" ? 443 : Number(url.port);
    const req = http.request({
      host: t.ip,
      port: t.proxyPort,
      method: "CONNECT",
      path: `${url.hostname}:${port}`,
      headers: { host: `${url.hostname}:${port}`, ...proxyAuthHeader(t) },
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
        r.resume();
        const want = t.expectStatus ?? 200;
        resolve(
          r.statusCode === want
            ? { ok: true, status: want }
            : {
                ok: false,
                reason: `${url.href} through the proxy returned HTTP ${r.statusCode}, expected ${want}`,
              },
        );
        secure.destroy();
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
export function probeOnce(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  if (t.url === undefined) return squidSelf(t, timeoutMs);
  const url = new URL(t.url);
  return url.protocol === "https:"
    ? viaTunnel(t, url, timeoutMs)
    : viaProxy(t, url.href, timeoutMs, (res) => statusResult(res, t));
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
 * TimeoutError carrying the last failure's reason.
 */
export async function waitHealthy(
  t: ProbeTarget,
  deadlineMs: number,
  options: HealthEnv & { pollMs?: number; probeTimeoutMs?: number } = {},
): Promise<ProbeResult> {
  const now = options.now ?? (() => performance.now());
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const pollMs = options.pollMs ?? 5_000;
  const start = now();
  let last = "no probe ran";
  for (;;) {
    const left = deadlineMs - (now() - start);
    const r = await probeOnce(t, Math.max(1_000, Math.min(options.probeTimeoutMs ?? 10_000, left)));
    if (r.ok) return r;
    last = r.reason;
    if (now() - start + pollMs > deadlineMs) {
      throw new TimeoutError(`a healthy proxy (${probeName(t)}); last failure: ${last}`, deadlineMs);
    }
    await sleep(pollMs);
  }
}
