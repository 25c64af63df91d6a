import http from "node:http";
import type { AddressInfo } from "node:net";
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { isTransient, TimeoutError } from "../../../../provider/errors";
import { openImageSource } from "../../../../provider/kvm/host/download";
import { waitHealthy } from "../../../../provider/probes/health-check";

// The waits outside libvirt have deadlines too: a server
// that stops sending an image, and a proxy that never answers. Loopback only.

const servers: { close: () => void }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

async function listen(server: http.Server | net.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  servers.push({ close: () => server.close() });
  return (server.address() as AddressInfo).port;
}

describe("image download deadlines", () => {
  it("a server that sends headers and part of the body, then nothing, fails with a TimeoutError naming the URL", async () => {
    const held: http.ServerResponse[] = [];
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { "content-length": "1048576" });
      res.write(Buffer.alloc(1000));
      held.push(res);
    });
    servers.push({
      close: () => {
        for (const r of held) r.destroy();
      },
    });
    const port = await listen(server);
    const url = `http://127.0.0.1:${port}/stalls.qcow2`;
    const opened = await openImageSource({ kind: "http", url }, { idleTimeoutMs: 200 });
    const err = await (async () => {
      for await (const _ of opened.stream) {
        // drain
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).waitingFor).toBe(`the next bytes of ${url}`);
    expect(isTransient(err)).toBe(true);
  });

  it("a server that accepts and never answers fails with a TimeoutError naming the headers it waited for", async () => {
    const sockets: net.Socket[] = [];
    const server = net.createServer((s) => sockets.push(s));
    servers.push({
      close: () => {
        for (const s of sockets) s.destroy();
      },
    });
    const port = await listen(server);
    const url = `http://127.0.0.1:${port}/silent.qcow2`;
    const err = await openImageSource({ kind: "http", url }, { idleTimeoutMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).waitingFor).toBe(`response headers from ${url}`);
  });
});

describe("health check deadline", () => {
  it("a proxy port that never accepts fails with a TimeoutError naming the target and the last failure", async () => {
    // A port that was free a moment ago: nothing listens there.
    const probe = net.createServer();
    const port = await listen(probe);
    probe.close();
    let clock = 0;
    const err = await waitHealthy({ ip: "127.0.0.1", proxyPort: port, squidName: "kvm-proxy-0" }, 3_000, {
      pollMs: 1_000,
      now: () => clock,
      sleep: async (ms) => {
        clock += ms;
      },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).waitingFor).toMatch(
      new RegExp(`^a healthy proxy \\(squid at 127\\.0\\.0\\.1:${port}\\); last failure: .*ECONNREFUSED`),
    );
    expect((err as TimeoutError).timeoutMs).toBe(3_000);
  });

  it("names the setting of its deadline and what to change when the port never answers", async () => {
    const probe = net.createServer();
    const port = await listen(probe);
    probe.close();
    let clock = 0;
    const err = await waitHealthy({ ip: "127.0.0.1", proxyPort: port, squidName: "kvm-proxy-0" }, 587_000, {
      pollMs: 300_000,
      deadlineName: "timeouts.create",
      now: () => clock,
      sleep: async (ms) => {
        clock += ms;
      },
    }).catch((e: unknown) => e);
    const message = (err as TimeoutError).message;
    expect(message).toMatch(/^timed out after 9 min 47 s \(timeouts\.create\) waiting for a healthy proxy/);
    expect(message).toMatch(/ECONNREFUSED\. Likely: nothing listens on the proxy port yet.*timeouts\.create/);
  });

  it("a signal that aborts between probes ends the wait with its reason, without waiting for the deadline", async () => {
    const probe = net.createServer();
    const port = await listen(probe);
    probe.close();
    const stop = new AbortController();
    const reason = new Error("the VM stopped");
    setTimeout(() => stop.abort(reason), 300);
    // The next poll would come after the test's own timeout: only the signal ends this wait in time.
    const err = await waitHealthy({ ip: "127.0.0.1", proxyPort: port, squidName: "kvm-proxy-0" }, 600_000, {
      pollMs: 300_000,
      signal: stop.signal,
    }).catch((e: unknown) => e);
    expect(err).toBe(reason);
  });

  it("an aborted signal ends the wait before any probe", async () => {
    const stop = new AbortController();
    stop.abort(new Error("cancelled"));
    const err = await waitHealthy({ ip: "127.0.0.1", proxyPort: 9, squidName: "kvm-proxy-0" }, 600_000, {
      signal: stop.signal,
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe("cancelled");
  });
});
