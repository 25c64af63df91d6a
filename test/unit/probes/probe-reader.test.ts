/**
 * Every probe keeps two bounds whatever its far end does (probe-reader.ts
 * from here, kvm/guest/guest-probe.ts's program in the guest): one deadline
 * for the whole exchange, and a cap on the body it reads. The far ends are
 * real servers on 127.0.0.1 writing raw bytes: a reply trickled a byte every
 * 200 ms without end, a body of 64 MiB, and a normal reply. Each reply is
 * squid's own answer to a probe (400 ERR_INVALID_URL naming our squid), so
 * every probe passes on it once it has what it reads; the echo probes read
 * its body.
 */
import { execFile } from "node:child_process";
import net from "node:net";
import type { Duplex } from "node:stream";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import {
  deadlineReason,
  guestProbeArgs,
  type ProbeBounds,
  parseGuestProbe,
  sizeReason,
} from "../../../provider/kvm/guest/guest-probe";
import { ECHO_BODY_LIMIT } from "../../../provider/probes/egress";
import {
  fetchThrough,
  type ProbeTarget,
  probeOnce,
  socksGreeting,
} from "../../../provider/probes/health-check";
import { HEADER_LIMIT } from "../../../provider/probes/probe-reader";
import { hostChannel } from "../../support/host-channel";
import { duplexPair } from "../libvirt/fake-daemon";

const OURS = "kvm-proxy-0123456789ab";
const DEADLINE_MS = 1_000;
const ECHO = "http://echo.test/ip";
const ECHO_BOUNDS: ProbeBounds = { deadlineMs: DEADLINE_MS, bodyBytes: ECHO_BODY_LIMIT };
/** A body far past every cap, and past what loopback's socket buffers hold (a few MiB). */
const HUGE = 64 * 1024 * 1024;

/** The head of squid's own answer to `GET /`, naming our squid; `framing` ends it. */
const head = (framing: string) =>
  "HTTP/1.1 400 Bad Request\r\nServer: squid/5.7\r\nX-Squid-Error: ERR_INVALID_URL 0\r\n" +
  `Via: 1.1 ${OURS} (squid/5.7)\r\n${framing}\r\n`;

/** One connection as its server saw it: bytes the kernel took from it, and its close. */
interface Far {
  written: number;
  closed: Promise<void>;
}

const servers: net.Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A server on 127.0.0.1 that calls `answer` once a connection's request has arrived. */
async function serve(answer: (s: net.Socket, far: Far) => void): Promise<{ port: number; fars: Far[] }> {
  const fars: Far[] = [];
  const server = net.createServer((s) => {
    s.on("error", () => undefined);
    const far: Far = { written: 0, closed: new Promise((r) => s.once("close", () => r())) };
    fars.push(far);
    s.once("data", () => answer(s, far));
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as net.AddressInfo).port, fars };
}

/** Writes `text` then `forever` over and over, one byte every 200 ms, until the connection closes. */
function trickle(s: net.Socket, far: Far, text: string, forever: string): void {
  let i = 0;
  const timer = setInterval(() => {
    const byte = i < text.length ? text[i] : forever[(i - text.length) % forever.length];
    i++;
    s.write(byte as string, (err) => {
      if (!err) far.written++;
    });
  }, 200);
  s.once("close", () => clearInterval(timer));
}

/** Writes `text`, then `total` bytes of body as fast as the reader takes them. */
function flood(s: net.Socket, far: Far, text: string, total: number): void {
  s.write(text);
  const chunk = Buffer.alloc(64 * 1024, "a");
  let offered = 0;
  const pump = (): void => {
    while (offered < total && !s.destroyed) {
      offered += chunk.length;
      const more = s.write(chunk, (err) => {
        if (!err) far.written += chunk.length;
      });
      if (!more) {
        s.once("drain", pump);
        return;
      }
    }
    s.end();
  };
  pump();
}

/** How a probe goes through the host (test/support/host-channel.ts). */
const viaHost = (port: number) => hostChannel(port);

const at = (port: number, more: Partial<ProbeTarget> = {}): ProbeTarget => ({
  ip: "127.0.0.1",
  proxyPort: port,
  squidName: OURS,
  ...more,
});

type Outcome = { ok: true; body?: string } | { ok: false; reason: string };

/** The in-guest probe's own program, run here with the server as its squid. */
async function inGuest(port: number, bounds: ProbeBounds): Promise<Outcome> {
  const [, ...args] = guestProbeArgs(port, ECHO, bounds);
  const { stdout } = await promisify(execFile)("python3", ["-c", ...args]);
  const reply = parseGuestProbe(stdout, 0);
  return "error" in reply ? { ok: false, reason: reply.error } : { ok: true, body: reply.body };
}

/** What every probe reads: status and headers only, or the body too (the egress check's echo). */
type Reads = "headers" | "body";

const PROBES: [string, Reads, (port: number) => Promise<Outcome>][] = [
  ["the health check (squid's own answer)", "headers", (port) => probeOnce(at(port), DEADLINE_MS)],
  [
    "the health check through the host",
    "headers",
    (port) => probeOnce(at(port, { connect: viaHost(port) }), DEADLINE_MS),
  ],
  [
    "the health check of a URL",
    "headers",
    (port) => probeOnce(at(port, { url: ECHO, expectStatus: 400 }), DEADLINE_MS),
  ],
  [
    "the health check in the guest",
    "headers",
    (port) => inGuest(port, { deadlineMs: DEADLINE_MS, bodyBytes: 0 }),
  ],
  ["the egress check's fetch", "body", (port) => fetchThrough(at(port), ECHO, ECHO_BOUNDS)],
  [
    "the egress check's fetch through the host",
    "body",
    (port) => fetchThrough(at(port, { connect: viaHost(port) }), ECHO, ECHO_BOUNDS),
  ],
  ["the egress check in the guest", "body", (port) => inGuest(port, ECHO_BOUNDS)],
];

const reasonOf = (o: Outcome) => (o.ok ? "passed" : o.reason);

describe("a reply trickled a byte every 200 ms, without end", () => {
  it.each(PROBES)(
    "%s ends at its deadline, saying so, and closes the connection",
    async (_what, _reads, probe) => {
      const { port, fars } = await serve((s, far) =>
        trickle(s, far, "HTTP/1.1 400 Bad Request\r\n", "X-Pad: a\r\n"),
      );
      expect(reasonOf(await probe(port))).toContain(deadlineReason(DEADLINE_MS));
      await Promise.all(fars.map((f) => f.closed));
    },
  );

  it.each(PROBES)(
    "in its body: %s ends too (a probe of headers passes without it)",
    async (_what, reads, probe) => {
      const { port, fars } = await serve((s, far) => {
        s.write(head("Connection: close\r\n"));
        trickle(s, far, "", "203.0.113.7\n");
      });
      const outcome = await probe(port);
      if (reads === "headers") expect(outcome).toMatchObject({ ok: true });
      else expect(reasonOf(outcome)).toContain(deadlineReason(DEADLINE_MS));
      await Promise.all(fars.map((f) => f.closed));
    },
  );
});

describe.each([
  ["declared (Content-Length)", head(`Content-Length: ${HUGE}\r\n`)],
  ["streamed to the connection's close", head("Connection: close\r\n")],
])("a body of 64 MiB, %s", (_how, text) => {
  it.each(PROBES)(
    "%s reads no more than its cap: an echo probe fails naming it, a probe of headers passes",
    async (_what, reads, probe) => {
      const { port, fars } = await serve((s, far) => flood(s, far, text, HUGE));
      const outcome = await probe(port);
      if (reads === "headers") expect(outcome).toMatchObject({ ok: true });
      else expect(reasonOf(outcome)).toContain(sizeReason(ECHO_BODY_LIMIT));
      await Promise.all(fars.map((f) => f.closed));
      // The connection closed long before the body's end: what the kernel took is its buffers' worth at most.
      for (const f of fars) expect(f.written).toBeLessThan(HUGE / 4);
    },
  );
});

describe("a normal reply", () => {
  it.each(PROBES)("%s passes, an echo probe with the body", async (_what, reads, probe) => {
    const body = "203.0.113.7\n";
    const { port } = await serve((s) => s.end(`${head(`Content-Length: ${body.length}\r\n`)}${body}`));
    const outcome = await probe(port);
    expect(outcome).toMatchObject(reads === "headers" ? { ok: true } : { ok: true, body });
  });
});

describe("the bounds' other edges", () => {
  it("fails headers past the cap, naming it", async () => {
    const { port } = await serve((s) =>
      s.end(`HTTP/1.1 200 OK\r\nX-Pad: ${"a".repeat(HEADER_LIMIT)}\r\n\r\n`),
    );
    expect(await fetchThrough(at(port), ECHO, ECHO_BOUNDS)).toEqual({
      ok: false,
      reason: `via proxy 127.0.0.1:${port}: reply headers larger than ${HEADER_LIMIT} bytes`,
    });
  });

  it("ends an https fetch whose tunnel trickles the TLS handshake", async () => {
    // CONNECT answered, then a TLS record's header announcing 16 KiB that comes a byte at a time.
    const { port, fars } = await serve((s, far) =>
      trickle(s, far, "HTTP/1.1 200 Connection established\r\n\r\n\x16\x03\x03\x40\x00", "a"),
    );
    const r = await fetchThrough(at(port), "https://echo.test/ip", ECHO_BOUNDS);
    expect(reasonOf(r)).toContain(deadlineReason(DEADLINE_MS));
    await Promise.all(fars.map((f) => f.closed));
  });

  it("ends a probe through the host whose channel never opens, and closes one that opens late", async () => {
    let open: (s: Duplex) => void = () => undefined;
    const late = new Promise<Duplex>((r) => {
      open = r;
    });
    const r = await probeOnce(at(1, { connect: () => late }), DEADLINE_MS);
    expect(reasonOf(r)).toContain(deadlineReason(DEADLINE_MS));
    const [near] = duplexPair();
    open(near);
    await new Promise((r) => near.once("close", r));
    expect(near.destroyed).toBe(true);
  });

  it("ends a SOCKS greeting nobody answers", async () => {
    const { port, fars } = await serve(() => undefined);
    expect(await socksGreeting({ ip: "127.0.0.1", port }, DEADLINE_MS)).toEqual({
      error: deadlineReason(DEADLINE_MS),
    });
    await Promise.all(fars.map((f) => f.closed));
  });
});
