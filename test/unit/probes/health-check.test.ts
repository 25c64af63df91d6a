/**
 * The health check refuses listeners that are not squid: what a proxy port
 * of 22 meets on a real cloud image (sshd), and an HTTP server that is not a
 * proxy. Squid itself answering is proved against real squid in the guest
 * project (test/guest/pulumi.test.ts); these servers are the neighbours a
 * proxy port can collide with.
 */
import http from "node:http";
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import {
  fetchThrough,
  judgeSocks,
  type ProbeTarget,
  probeOnce,
  socksGreeting,
} from "../../../provider/probes/health-check";

const servers: net.Server[] = [];
/** The name this proxy's squid.conf gives squid, and what the test image's default configuration calls it. */
const OURS = "kvm-proxy-0123456789ab";
const IMAGE_DEFAULT = "kvmp-proxy";

/** A probe of 127.0.0.1:port expecting our squid. */
const at = (port: number, more: Partial<ProbeTarget> = {}): ProbeTarget => ({
  ip: "127.0.0.1",
  proxyPort: port,
  squidName: OURS,
  ...more,
});

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

function listen(server: net.Server): Promise<number> {
  servers.push(server);
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as net.AddressInfo).port)),
  );
}

/** A listener that greets as sshd does and never speaks HTTP. */
function sshdLike(): net.Server {
  return net.createServer((socket) => {
    socket.write("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n");
    socket.on("data", () => socket.end("Invalid SSH identification string.\r\n"));
    socket.on("error", () => {});
  });
}

/** An HTTP server answering every request with `status` and `headers`, recording the requests. */
function httpServer(status: number, headers: Record<string, string> = {}) {
  const seen: http.IncomingMessage[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req);
    res.writeHead(status, headers);
    res.end();
  });
  return { server, seen };
}

describe("the health check", () => {
  it("fails on a port sshd holds: a TCP connect would have passed", async () => {
    const port = await listen(sshdLike());
    const r = await probeOnce(at(port), 2_000);
    expect(r.ok).toBe(false);
    expect(r.ok ? "" : r.reason).toContain(`127.0.0.1:${port}`);
  });

  it.each([
    ["200 from a web server", 200, { server: "nginx" }],
    ["400 from another proxy", 400, { server: "tinyproxy/1.11" }],
  ])("fails without a target when %s answers: it is not squid", async (_what, status, headers) => {
    const { server } = httpServer(status, headers);
    const port = await listen(server);
    const r = await probeOnce(at(port), 2_000);
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/not as squid/) });
  });

  it("fails with a target when the expected status comes without squid's Via", async () => {
    const { server } = httpServer(204);
    const port = await listen(server);
    const r = await probeOnce(at(port, { url: "http://target.test/", expectStatus: 204 }), 2_000);
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/without squid's Via/) });
  });

  it("sends no credentials: the provider has none (the password stays in the program)", async () => {
    const { server, seen } = httpServer(400, {
      "x-squid-error": "ERR_INVALID_URL 0",
      via: `1.1 ${OURS} (squid)`,
    });
    const port = await listen(server);
    await probeOnce(at(port), 2_000);
    await probeOnce(at(port, { url: "http://target.test/", expectStatus: 204 }), 2_000);
    expect(seen.map((r) => r.headers["proxy-authorization"])).toEqual([undefined, undefined]);
  });

  it("without a target asks the proxy port for / as a web server would: squid answers that itself, before any access check", async () => {
    const { server, seen } = httpServer(400, {
      "x-squid-error": "ERR_INVALID_URL 0",
      via: `1.1 ${OURS} (squid)`,
    });
    const port = await listen(server);
    await probeOnce(at(port), 2_000);
    expect(seen[0]?.url).toBe("/");
  });
});

describe("the health check knows its own squid", () => {
  // Headers as squid 5.7 sends them (seen on the test guest), with the name varied.
  const squidReply = (status: number, error: string, name: string) =>
    httpServer(status, {
      server: "squid/5.7",
      "x-squid-error": `${error} 0`,
      "x-cache": `MISS from ${name}`,
      via: `1.1 ${name} (squid/5.7)`,
    });

  it.each([
    ["400 ERR_INVALID_URL", 400, "ERR_INVALID_URL"],
    ["403 ERR_ACCESS_DENIED", 403, "ERR_ACCESS_DENIED"],
  ])("fails while the image's own squid answers %s: it names another squid", async (_what, status, error) => {
    const port = await listen(squidReply(status, error, IMAGE_DEFAULT).server);
    const r = await probeOnce(at(port), 2_000);
    expect(r).toEqual({
      ok: false,
      reason: expect.stringContaining(`answers as ${IMAGE_DEFAULT}, not as ${OURS}`),
    });
  });

  it("passes when our squid answers for itself (400 ERR_INVALID_URL naming our squid)", async () => {
    const port = await listen(squidReply(400, "ERR_INVALID_URL", OURS).server);
    expect(await probeOnce(at(port), 2_000)).toEqual({ ok: true, status: 400 });
  });

  it("fails when our squid answers with anything but its own 400 (a 403 is no pass)", async () => {
    const port = await listen(squidReply(403, "ERR_ACCESS_DENIED", OURS).server);
    expect(await probeOnce(at(port), 2_000)).toEqual({
      ok: false,
      reason: expect.stringContaining("answered HTTP 403 (ERR_ACCESS_DENIED 0)"),
    });
  });

  it("finds the name among several Via entries, or in X-Cache alone", async () => {
    const chained = await listen(
      httpServer(400, {
        "x-squid-error": "ERR_INVALID_URL 0",
        via: `1.1 ${OURS} (squid), 1.1 ${OURS} (squid)`,
      }).server,
    );
    expect((await probeOnce(at(chained), 2_000)).ok).toBe(true);
    const cacheOnly = await listen(
      httpServer(400, { "x-squid-error": "ERR_INVALID_URL 0", "x-cache": `MISS from ${OURS}` }).server,
    );
    expect((await probeOnce(at(cacheOnly), 2_000)).ok).toBe(true);
  });

  it("with a target: the expected status through another squid fails, through ours passes", async () => {
    const other = await listen(httpServer(204, { via: `1.1 ${IMAGE_DEFAULT} (squid/5.7)` }).server);
    const target = { url: "http://target.test/", expectStatus: 204 };
    expect(await probeOnce(at(other, target), 2_000)).toEqual({
      ok: false,
      reason: expect.stringContaining(`not as ${OURS}`),
    });
    const ours = await listen(httpServer(204, { via: `1.1 ${OURS} (squid)` }).server);
    expect(await probeOnce(at(ours, target), 2_000)).toEqual({ ok: true, status: 204 });
  });
});

describe("a fetch through the proxy (the egress check)", () => {
  /** A proxy-like server answering every request with `body`, recording the request lines. */
  function echoing(body: string) {
    const seen: string[] = [];
    const server = http.createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(200, { "content-length": String(Buffer.byteLength(body)) });
      res.end(body);
    });
    return { server, seen };
  }

  it("asks for the URL in absolute form and reads the body", async () => {
    const { server, seen } = echoing("203.0.113.7\n");
    const port = await listen(server);
    const r = await fetchThrough(at(port), "http://echo.test/ip", { deadlineMs: 2_000, bodyBytes: 12 });
    expect(r).toMatchObject({ ok: true, status: 200, body: "203.0.113.7\n" });
    expect(seen).toEqual(["GET http://echo.test/ip"]);
  });

  it("reads no body when its bounds read none, and says where it failed", async () => {
    const { server } = echoing("203.0.113.7");
    const port = await listen(server);
    const none = { deadlineMs: 2_000, bodyBytes: 0 };
    expect(await fetchThrough(at(port), "http://echo.test/", none)).toMatchObject({ ok: true, body: "" });
    const closed = await listen(net.createServer((s) => s.destroy()));
    expect(await fetchThrough(at(closed), "http://echo.test/", none)).toEqual({
      ok: false,
      reason: expect.stringMatching(new RegExp(`^via proxy 127\\.0\\.0\\.1:${closed}: `)),
    });
  });
});

describe("the SOCKS5 greeting", () => {
  /** A listener that answers the greeting with `reply`, closes, or resets. */
  function socksLike(behaviour: Buffer | "close" | "reset"): net.Server {
    return net.createServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () => {
        if (behaviour === "close") socket.end();
        else if (behaviour === "reset") socket.resetAndDestroy();
        else socket.write(behaviour);
      });
    });
  }

  it.each<[string, Buffer | "close" | "reset", boolean, { ok: boolean; reason?: RegExp; note?: RegExp }]>([
    ["the password method, with auth", Buffer.from([5, 2]), true, { ok: true }],
    ["no method, without auth", Buffer.from([5, 0]), false, { ok: true }],
    [
      "no method where auth is set up: an open SOCKS",
      Buffer.from([5, 0]),
      true,
      { ok: false, reason: /admits clients without a password/ },
    ],
    ["no acceptable method", Buffer.from([5, 0xff]), true, { ok: false, reason: /answered 05ff, not 0502/ }],
    [
      "a close without a byte: a client refused",
      "close",
      true,
      { ok: true, note: /refuses the probe's source/ },
    ],
    [
      "a reset without a byte (Dante's refusal)",
      "reset",
      true,
      { ok: true, note: /refuses the probe's source/ },
    ],
  ])("judges %s", async (_what, behaviour, auth, want) => {
    const port = await listen(socksLike(behaviour));
    const a = await socksGreeting({ ip: "127.0.0.1", port }, 2_000);
    const r = judgeSocks(a, { auth, where: `127.0.0.1:${port}`, closedIsRefusal: true });
    expect(r.ok).toBe(want.ok);
    if (want.reason !== undefined) expect(r.ok ? "" : r.reason).toMatch(want.reason);
    if (want.note !== undefined) expect(r.ok ? r.note : "").toMatch(want.note);
  });

  it("fails on nothing listening, and on a refusal where the client must be admitted (inside the guest)", async () => {
    const closed = await listen(net.createServer((s) => s.destroy()));
    await new Promise<void>((r) => servers.pop()?.close(() => r()));
    const refused = await socksGreeting({ ip: "127.0.0.1", port: closed }, 2_000);
    expect(judgeSocks(refused, { auth: true, where: "x", closedIsRefusal: true })).toEqual({
      ok: false,
      reason: "SOCKS5 at x: ECONNREFUSED",
    });
    expect(judgeSocks({ closed: true }, { auth: true, where: "x", closedIsRefusal: false })).toEqual({
      ok: false,
      reason: "SOCKS5 at x closed the connection without an answer",
    });
  });
});
