/**
 * The health check and the egress check's fetch of a proxy with TLS
 * (health-check.ts `secured`, kvm/tls/proxy-tls.ts peerProblem), against a
 * real TLS server on 127.0.0.1 answering as squid does: the probe trusts the
 * proxy's CA alone (not Node's store, which knows none of these CAs), judges
 * the certificate before it sends a byte of its request, and says what is
 * wrong with it. Each server records the request bytes it decrypted; a probe
 * refused on the certificate must leave it none.
 */
import net from "node:net";
import tls from "node:tls";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type CertificateAndKey, issueLeaf, makeCa } from "../../../provider/kvm/tls/certificate";
import type { TlsPublic } from "../../../provider/kvm/tls/proxy-tls";
import { fetchThrough, type ProbeTarget, probeOnce } from "../../../provider/probes/health-check";
import { hostChannel } from "../../support/host-channel";

const OURS = "kvm-proxy-0123456789ab";
const DEADLINE_MS = 2_000;
const NOW = new Date();
const DAY = 24 * 60 * 60 * 1000;

const CA = makeCa({ commonName: "kvm-proxy CA edge", now: NOW });
const OTHER_CA = makeCa({ commonName: "kvm-proxy CA edge", now: NOW });
const LEAF = issueLeaf({ ca: CA, ipAddresses: ["127.0.0.1"], now: NOW });
const FROM_OTHER_CA = issueLeaf({ ca: OTHER_CA, ipAddresses: ["127.0.0.1"], now: NOW });
const FOR_OTHER_IP = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.7"], now: NOW });
const EXPIRED = issueLeaf({
  ca: CA,
  ipAddresses: ["127.0.0.1"],
  now: new Date(NOW.getTime() - 30 * DAY),
  validityDays: 1,
});

const EXPECT_CA: TlsPublic = { ca: { certificate: CA.certificatePem } };

/** Squid's own answer to `GET /`, naming our squid (as squid 5.7 sends it). */
const SQUID_SELF =
  "HTTP/1.1 400 Bad Request\r\nServer: squid/5.7\r\nX-Squid-Error: ERR_INVALID_URL 0\r\n" +
  `Via: 1.1 ${OURS} (squid/5.7)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
/** An echo's answer through the proxy. */
const ECHOED = `HTTP/1.1 200 OK\r\nVia: 1.1 ${OURS} (squid/5.7)\r\nContent-Length: 12\r\nConnection: close\r\n\r\n203.0.113.9\n`;

/**
 * What a server saw: the bytes of each connection (for a TLS server, those
 * it decrypted once the handshake completed), and every TCP connection's close.
 */
interface Seen {
  bytes: string[];
  closed: Promise<void>[];
}

const servers: net.Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function listen(server: net.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as net.AddressInfo).port;
}

/** Records every connection's bytes (`socket` as the server reads it) and close on `seen`. */
function record(seen: Seen, socket: net.Socket, reply: string): void {
  const i = seen.bytes.push("") - 1;
  socket.on("error", () => undefined);
  socket.on("data", (d: Buffer) => {
    seen.bytes[i] += d.toString("latin1");
    // A request's head has arrived: answer it.
    if (seen.bytes[i]?.includes("\r\n\r\n")) socket.end(reply);
  });
}

/** A TLS server on 127.0.0.1 serving `served`, answering as squid with `reply`. */
async function tlsProxy(
  served: CertificateAndKey,
  reply = SQUID_SELF,
): Promise<{ port: number; seen: Seen }> {
  const seen: Seen = { bytes: [], closed: [] };
  const server = tls.createServer({ cert: served.certificatePem, key: served.privateKeyPem }, (s) =>
    record(seen, s, reply),
  );
  // Every TCP connection, whether or not its handshake completes.
  server.on("connection", (raw: net.Socket) =>
    seen.closed.push(new Promise((r) => raw.once("close", () => r()))),
  );
  server.on("tlsClientError", () => undefined);
  return { port: await listen(server), seen };
}

/** A plain server answering as squid, recording the bytes it was sent. */
async function plainProxy(): Promise<{ port: number; seen: Seen }> {
  const seen: Seen = { bytes: [], closed: [] };
  const server = net.createServer((s) => {
    seen.closed.push(new Promise((r) => s.once("close", () => r())));
    record(seen, s, SQUID_SELF);
    // A TLS ClientHello holds no blank line: answer it as squid answers what it cannot parse.
    s.once("data", () => setTimeout(() => s.end(SQUID_SELF), 50));
  });
  return { port: await listen(server), seen };
}

/** Once every connection `seen` had has closed: what reached the server, all of it. */
async function settled(seen: Seen): Promise<string[]> {
  await Promise.all(seen.closed);
  return seen.bytes;
}

/** Channels opened through the host since the test began. */
let channels = 0;
beforeEach(() => {
  channels = 0;
});

/** How a probe goes through the host (test/support/host-channel.ts), each channel counted. */
const viaHost = (port: number) =>
  hostChannel(port, () => {
    channels++;
  });

const at = (port: number, more: Partial<ProbeTarget> = {}): ProbeTarget => ({
  ip: "127.0.0.1",
  proxyPort: port,
  squidName: OURS,
  tls: EXPECT_CA,
  ...more,
});

type Path = [string, (port: number) => Partial<ProbeTarget>];
const PATHS: Path[] = [
  ["directly", () => ({})],
  ["through the host", (port) => ({ connect: viaHost(port) })],
];

describe.each(PATHS)("the health check of a proxy with TLS, %s", (path, via) => {
  // Every probe through the host went through its channel, and none of the others did.
  afterEach(() => {
    expect(channels > 0).toBe(path === "through the host");
  });

  it("passes on squid's own answer over TLS with a certificate the CA issued for the address", async () => {
    const { port, seen } = await tlsProxy(LEAF);
    expect(await probeOnce(at(port, via(port)), DEADLINE_MS)).toEqual({ ok: true, status: 400 });
    const [request] = await settled(seen);
    expect(request).toMatch(/^GET \/ HTTP\/1\.1\r\n/);
  });

  it.each<[string, CertificateAndKey, RegExp]>([
    [
      "a certificate of another CA (of the same name)",
      FROM_OTHER_CA,
      /the proxy's certificate is not issued by its CA \(proxyCaCertificate\)$/,
    ],
    [
      "a certificate for another address",
      FOR_OTHER_IP,
      /the proxy's certificate does not name 127\.0\.0\.1$/,
    ],
    ["an expired certificate", EXPIRED, /the proxy's certificate is not valid now \(.* to .*\)$/],
    ["the CA's own certificate", CA, /the proxy's certificate does not name 127\.0\.0\.1$/],
  ])("fails on %s, naming it, and sends no byte of its request", async (_what, served, reason) => {
    const { port, seen } = await tlsProxy(served);
    const r = await probeOnce(at(port, via(port)), DEADLINE_MS);
    // It connected, and the server read nothing from it.
    const bytes = await settled(seen);
    expect(seen.closed.length).toBe(1);
    expect(bytes.join("")).toBe("");
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(reason) });
    expect((r as { reason: string }).reason).toMatch(new RegExp(`^127\\.0\\.0\\.1:${port}: `));
  });

  it("fails on a plain listener answering as squid, and sends it no request (only the TLS greeting)", async () => {
    const { port, seen } = await plainProxy();
    const r = await probeOnce(at(port, via(port)), DEADLINE_MS);
    // What TLS made of squid's plain answer (OpenSSL's code), not a judgement of that answer.
    expect(r).toEqual({
      ok: false,
      reason: expect.stringMatching(new RegExp(`^127\\.0\\.0\\.1:${port}: ERR_SSL_`)),
    });
    const [hello] = await settled(seen);
    // A TLS handshake record (22), never an HTTP request line.
    expect(hello?.charCodeAt(0)).toBe(0x16);
    expect(hello).not.toMatch(/GET |HTTP\/1\.1/);
  });

  it.each<[string, CertificateAndKey, boolean]>([
    ["the very certificate given: passes", LEAF, true],
    [
      "another certificate, though of the same CA and address: fails",
      issueLeaf({ ca: CA, ipAddresses: ["127.0.0.1"], now: NOW }),
      false,
    ],
  ])("with a certificate given (proxy.tls.certificate), %s", async (_what, served, passes) => {
    const { port, seen } = await tlsProxy(served);
    const given: TlsPublic = { certificate: LEAF.certificatePem + CA.certificatePem };
    const r = await probeOnce(at(port, { ...via(port), tls: given }), DEADLINE_MS);
    expect((await settled(seen)).join("") === "").toBe(!passes);
    if (passes) expect(r).toEqual({ ok: true, status: 400 });
    else
      expect(r).toEqual({
        ok: false,
        reason: expect.stringMatching(/another certificate than proxy\.tls\.certificate$/),
      });
  });
});

describe("the egress check's fetch through a proxy with TLS", () => {
  const BOUNDS = { deadlineMs: DEADLINE_MS, bodyBytes: 64 };

  it("asks for the URL inside TLS and reads the echo", async () => {
    const { port, seen } = await tlsProxy(LEAF, ECHOED);
    const r = await fetchThrough(at(port), "http://echo.test/ip", BOUNDS);
    expect(r).toMatchObject({ ok: true, status: 200, body: "203.0.113.9\n" });
    const [request] = await settled(seen);
    expect(request).toMatch(/^GET http:\/\/echo\.test\/ip HTTP\/1\.1\r\n/);
  });

  it("opens an https target's tunnel inside TLS: the CONNECT is the proxy's to read", async () => {
    const { port, seen } = await tlsProxy(LEAF, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    const r = await fetchThrough(at(port), "https://echo.test/ip", BOUNDS);
    expect(r).toEqual({
      ok: false,
      reason: expect.stringContaining("refused CONNECT echo.test:443 with HTTP 403"),
    });
    const [request] = await settled(seen);
    expect(request).toMatch(/^CONNECT echo\.test:443 HTTP\/1\.1\r\n/);
  });

  it.each(PATHS)("sends nothing to a proxy whose certificate is another CA's (%s)", async (path, via) => {
    const { port, seen } = await tlsProxy(FROM_OTHER_CA, ECHOED);
    const urls = ["http://echo.test/ip", "https://echo.test/ip"];
    const results = [];
    for (const url of urls) results.push(await fetchThrough(at(port, via(port)), url, BOUNDS));
    expect((await settled(seen)).join("")).toBe("");
    for (const r of results)
      expect(r).toEqual({ ok: false, reason: expect.stringMatching(/is not issued by its CA/) });
    expect(channels).toBe(path === "through the host" ? 2 : 0);
  });
});

describe("a probe with TLS where nothing listens", () => {
  it("fails at once with the refusal, not at its deadline", async () => {
    const port = await listen(net.createServer());
    await new Promise<void>((r) => servers.pop()?.close(() => r()));
    const since = performance.now();
    const r = await probeOnce(at(port), 5_000);
    expect(r).toEqual({ ok: false, reason: `127.0.0.1:${port}: ECONNREFUSED` });
    expect(performance.now() - since).toBeLessThan(2_500);
  });
});
