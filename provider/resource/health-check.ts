/**
 * The create-time health check of a proxy, sent from wherever Pulumi runs to
 * the guest's IP: either a TCP connect to the proxy port, or an HTTP request
 * THROUGH the proxy (plain HTTP as an absolute-URI request; HTTPS through a
 * CONNECT tunnel) whose status must match.
 */
import http from "node:http";
import net from "node:net";
import tls from "node:tls";
import { TimeoutError } from "../errors";

/** One probe's outcome. */
export type ProbeResult = { ok: true; status?: number } | { ok: false; reason: string };

/** What to probe. */
export interface ProbeTarget {
  ip: string;
  proxyPort: number;
  /** Absent: TCP connect only. */
  url?: string;
  expectStatus?: number;
}

function tcpConnect(ip: string, port: number, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const s = net.connect({ host: ip, port });
    const done = (r: ProbeResult) => {
      s.destroy();
      resolve(r);
    };
    s.setTimeout(timeoutMs, () =>
      done({ ok: false, reason: `no TCP answer from ${ip}:${port} in ${timeoutMs} ms` }),
    );
    s.once("connect", () => done({ ok: true }));
    s.once("error", (e: NodeJS.ErrnoException) =>
      done({ ok: false, reason: `${ip}:${port}: ${e.code ?? e.message}` }),
    );
  });
}

function viaProxyHttp(t: ProbeTarget, url: URL, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const req = http.request({
      host: t.ip,
      port: t.proxyPort,
      method: "GET",
      path: url.href,
      headers: { host: url.host, "user-agent": "pulumi-kvm-proxy-health" },
      timeout: timeoutMs,
    });
    req.once("response", (res) => {
      res.resume();
      resolve(statusResult(res.statusCode ?? 0, t));
    });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) =>
      resolve({ ok: false, reason: `via proxy ${t.ip}:${t.proxyPort}: ${e.code ?? e.message}` }),
    );
    req.end();
  });
}

function viaProxyHttps(t: ProbeTarget, url: URL, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const port = url.port === "" ? 443 : Number(url.port);
    const req = http.request({
      host: t.ip,
      port: t.proxyPort,
      method: "CONNECT",
      path: `${url.hostname}:${port}`,
      headers: { host: `${url.hostname}:${port}` },
      timeout: timeoutMs,
    });
    const fail = (reason: string) => resolve({ ok: false, reason });
    req.once("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.once("error", (e: NodeJS.ErrnoException) =>
      fail(`via proxy ${t.ip}:${t.proxyPort}: ${e.code ?? e.message}`),
    );
    req.once("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        fail(
          `proxy ${t.ip}:${t.proxyPort} refused CONNECT ${url.hostname}:${port} with HTTP ${res.statusCode}`,
        );
        return;
      }
      const secure = tls.connect({ socket, servername: url.hostname });
      const inner = http.request({
        createConnection: () => secure,
        method: "GET",
        path: `${url.pathname}${url.search}`,
        headers: { host: url.host, "user-agent": "pulumi-kvm-proxy-health" },
        timeout: timeoutMs,
      });
      inner.once("response", (r) => {
        r.resume();
        resolve(statusResult(r.statusCode ?? 0, t));
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

function statusResult(status: number, t: ProbeTarget): ProbeResult {
  const want = t.expectStatus ?? 200;
  return status === want
    ? { ok: true, status }
    : { ok: false, reason: `${t.url} through the proxy returned HTTP ${status}, expected ${want}` };
}

/** One probe, bounded by `timeoutMs`. */
export function probeOnce(t: ProbeTarget, timeoutMs: number): Promise<ProbeResult> {
  if (t.url === undefined) return tcpConnect(t.ip, t.proxyPort, timeoutMs);
  const url = new URL(t.url);
  return url.protocol === "https:" ? viaProxyHttps(t, url, timeoutMs) : viaProxyHttp(t, url, timeoutMs);
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
      const what =
        t.url === undefined ? `TCP ${t.ip}:${t.proxyPort}` : `${t.url} through ${t.ip}:${t.proxyPort}`;
      const err = new TimeoutError(`a healthy proxy (${what}); last failure: ${last}`, deadlineMs);
      throw err;
    }
    await sleep(pollMs);
  }
}
