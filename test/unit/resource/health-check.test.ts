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
import { probeOnce } from "../../../provider/resource/health-check";

const servers: net.Server[] = [];

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
    const r = await probeOnce({ ip: "127.0.0.1", proxyPort: port }, 2_000);
    expect(r.ok).toBe(false);
    expect(r.ok ? "" : r.reason).toContain(`127.0.0.1:${port}`);
  });

  it.each([
    ["200 from a web server", 200, { server: "nginx" }],
    ["400 from another proxy", 400, { server: "tinyproxy/1.11" }],
  ])("fails without a target when %s answers: it is not squid", async (_what, status, headers) => {
    const { server } = httpServer(status, headers);
    const port = await listen(server);
    const r = await probeOnce({ ip: "127.0.0.1", proxyPort: port }, 2_000);
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/not as squid/) });
  });

  it("fails with a target when the expected status comes without squid's Via", async () => {
    const { server } = httpServer(204);
    const port = await listen(server);
    const r = await probeOnce(
      { ip: "127.0.0.1", proxyPort: port, url: "http://target.test/", expectStatus: 204 },
      2_000,
    );
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/without squid's Via/) });
  });

  it("sends the proxy's credentials as Proxy-Authorization and never names them in its reasons", async () => {
    const { server, seen } = httpServer(407, {
      server: "squid",
      "x-squid-error": "ERR_CACHE_ACCESS_DENIED 0",
    });
    const port = await listen(server);
    const r = await probeOnce(
      { ip: "127.0.0.1", proxyPort: port, auth: { username: "crawler", password: "pa55:word" } },
      2_000,
    );
    expect(seen[0]?.headers["proxy-authorization"]).toBe(
      `Basic ${Buffer.from("crawler:pa55:word").toString("base64")}`,
    );
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/refused the credentials \(407\)/) });
    expect(JSON.stringify(r)).not.toContain("pa55");
  });

  it("asks the proxy for itself when no target is set", async () => {
    const { server, seen } = httpServer(400, {
      "x-squid-error": "ERR_INVALID_URL 0",
      via: "1.1 kvm-proxy (squid)",
    });
    const port = await listen(server);
    await probeOnce({ ip: "127.0.0.1", proxyPort: port }, 2_000);
    expect(seen[0]?.url).toBe(`http://127.0.0.1:${port}/`);
  });
});
