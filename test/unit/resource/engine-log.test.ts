/**
 * The channel to the Pulumi display, against a real gRPC server implementing
 * the engine's Log service from the same generated stubs @pulumi/pulumi uses
 * (the real wire protocol; the server records what arrives).
 */

import { createRequire } from "node:module";
import { createServer } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  type EngineLog,
  type EngineLogOptions,
  engineAddressFromArgv,
  engineLogFromArgv,
  engineLogTo,
  type Timers,
} from "../../../provider/resource/engine-log";

/** What the test uses of @grpc/grpc-js and the stubs (typed here: not our dependency). */
interface GrpcServer {
  addService(service: unknown, impl: Record<string, unknown>): void;
  bindAsync(address: string, creds: unknown, cb: (err: Error | null, port: number) => void): void;
  tryShutdown(cb: () => void): void;
  forceShutdown(): void;
}
const pulumiRequire = createRequire(require.resolve("@pulumi/pulumi"));
const grpc = pulumiRequire("@grpc/grpc-js") as {
  Server: new () => GrpcServer;
  ServerCredentials: { createInsecure(): unknown };
};
const { EngineService } = pulumiRequire("./proto/engine_grpc_pb") as { EngineService: unknown };
const { Empty } = pulumiRequire("google-protobuf/google/protobuf/empty_pb") as { Empty: new () => unknown };

const INFO = 1;
const WARNING = 2;
const URN = "urn:pulumi:dev::proj::pulumi-nodejs:dynamic:KvmProxy::edge";
const URN2 = "urn:pulumi:dev::proj::pulumi-nodejs:dynamic:KvmProxy::edge2";

interface Received {
  severity: number;
  message: string;
  urn: string;
  ephemeral: boolean;
}

interface FakeEngine {
  address: string;
  received: Received[];
  stop(): Promise<void>;
}

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

async function startEngine(): Promise<FakeEngine> {
  const server = new grpc.Server();
  const received: Received[] = [];
  server.addService(EngineService, {
    log: (call: { request: { toObject(): Received } }, cb: (err: null, res: unknown) => void) => {
      const { severity, message, urn, ephemeral } = call.request.toObject();
      received.push({ severity, message, urn, ephemeral });
      cb(null, new Empty());
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  const engine = {
    address: `127.0.0.1:${port}`,
    received,
    stop: () => new Promise<void>((resolve) => server.tryShutdown(resolve)),
  };
  cleanup.push(() => server.forceShutdown());
  return engine;
}

function open(address: string, options: EngineLogOptions = {}): EngineLog {
  const log = engineLogTo(address, { stderr: () => {}, ...options });
  cleanup.push(() => log.close());
  return log;
}

/** A clock that moves only when told; due timers run in order. */
function manualTimers(): Timers & { advance(ms: number): void } {
  let now = 0;
  let next = 0;
  const timers = new Map<number, { at: number; fn: () => void }>();
  return {
    now: () => now,
    setTimeout: (fn, ms) => {
      next += 1;
      timers.set(next, { at: now + ms, fn });
      return next;
    },
    clearTimeout: (h) => {
      timers.delete(h as number);
    },
    advance(ms) {
      const end = now + ms;
      for (;;) {
        const due = [...timers.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
        if (due === undefined) break;
        timers.delete(due[0]);
        now = due[1].at;
        due[1].fn();
      }
      now = end;
    },
  };
}

const messages = (engine: FakeEngine) => engine.received.map((r) => r.message);

describe("engine log", () => {
  it("sends a status as an ephemeral INFO message on the resource's URN", async () => {
    const engine = await startEngine();
    const log = open(engine.address);
    log.status(URN, "defining domain");
    await log.flush();
    expect(engine.received).toEqual([
      { severity: INFO, message: "defining domain", urn: URN, ephemeral: true },
    ]);
  });

  it("sends info and warnings as persistent diagnostics of their severity", async () => {
    const engine = await startEngine();
    const log = open(engine.address);
    log.warn(URN, "guest agent missing");
    log.info(URN, "VM created");
    await log.flush();
    expect(engine.received).toEqual([
      { severity: WARNING, message: "guest agent missing", urn: URN, ephemeral: false },
      { severity: INFO, message: "VM created", urn: URN, ephemeral: false },
    ]);
  });

  it("coalesces a burst of statuses into a few, and the timer delivers the last", async () => {
    const engine = await startEngine();
    const log = open(engine.address, { minIntervalMs: 50 });
    for (let i = 0; i < 50; i++) log.status(URN, `waiting for IP (${i})`);
    await vi.waitFor(() => expect(engine.received.length).toBeGreaterThanOrEqual(2), { timeout: 5_000 });
    await new Promise((r) => setTimeout(r, 200));
    expect(messages(engine)).toEqual(["waiting for IP (0)", "waiting for IP (49)"]);
  });

  it("sends at most one status per interval per URN unless forced; flush sends the one held back", async () => {
    const engine = await startEngine();
    const clock = manualTimers();
    const log = open(engine.address, { minIntervalMs: 500, timers: clock });
    log.status(URN, "a"); // t=0: sent
    clock.advance(100);
    log.status(URN, "b"); // held back until t=500
    log.status(URN2, "other"); // another URN: its own interval
    clock.advance(100);
    log.status(URN, "c"); // replaces b
    clock.advance(299); // t=499
    await log.flush();
    // flush sends the held-back one now
    expect(messages(engine)).toEqual(["a", "other", "c"]);
    log.status(URN, "d"); // t=499, c was sent at 499: held back
    clock.advance(499);
    log.status(URN, "e", { force: true }); // sent now, d dropped
    clock.advance(1);
    log.status(URN, "f"); // held back until 1498
    clock.advance(498); // t=1497: f still held back (no flush: it would send f)
    await vi.waitFor(() => expect(engine.received.length).toBeGreaterThanOrEqual(4));
    expect(messages(engine)).toEqual(["a", "other", "c", "e"]);
    clock.advance(1); // t=1498: the timer sends f
    await vi.waitFor(() => expect(engine.received.length).toBeGreaterThanOrEqual(5));
    expect(messages(engine)).toEqual(["a", "other", "c", "e", "f"]);
  });

  it("keeps the order of the calls, a held-back status before a later message of its URN", async () => {
    const engine = await startEngine();
    const clock = manualTimers();
    const log = open(engine.address, { timers: clock });
    const expected: string[] = [];
    for (let i = 0; i < 20; i++) {
      const urn = i % 2 === 0 ? URN : URN2;
      if (i % 3 === 0) log.warn(urn, `m${i}`);
      else if (i % 3 === 1) log.info(urn, `m${i}`);
      else log.status(urn, `m${i}`, { force: true });
      expected.push(`m${i}`);
    }
    log.status(URN, "held"); // within the interval of m18
    log.warn(URN, "after");
    await log.flush();
    expect(messages(engine)).toEqual([...expected, "held", "after"]);
  });

  it("redacts every message before it is cut to one line", async () => {
    const engine = await startEngine();
    const redact = (t: string) => t.replaceAll("hunter2", "[secret]");
    const log = open(engine.address, { redact, maxLength: 300 });
    log.status(URN, "password hunter2");
    log.info(URN, "line one\nline two hunter2\r\n\tend");
    log.warn(URN, `${"a".repeat(295)}hunter2`); // the secret straddles the cut
    await log.flush();
    const [status, info, warn] = messages(engine);
    expect(status).toBe("password [secret]");
    expect(info).toBe("line one line two [secret] end");
    expect(warn).toHaveLength(300);
    expect(warn).not.toContain("hunt");
    expect(warn?.endsWith("…")).toBe(true);
  });

  it("drops a message whose redaction throws, without throwing", async () => {
    const engine = await startEngine();
    const lines: string[] = [];
    const log = open(engine.address, {
      redact: (t) => {
        if (t.includes("bad")) throw new Error("redactor broke");
        return t;
      },
      stderr: (l) => lines.push(l),
    });
    expect(() => log.warn(URN, "bad secret")).not.toThrow();
    log.info(URN, "fine");
    await log.flush();
    expect(messages(engine)).toEqual(["fine"]);
    expect(lines.join("\n")).not.toContain("secret");
  });

  it("does not throw when the engine is down, and flush resolves", async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as { port: number };
        s.close(() => resolve(port));
      });
    });
    const lines: string[] = [];
    const log = open(`127.0.0.1:${port}`, { stderr: (l) => lines.push(l), callTimeoutMs: 2_000 });
    for (let i = 0; i < 10; i++) {
      expect(() => log.status(URN, `s${i}`, { force: true })).not.toThrow();
      expect(() => log.warn(URN, `w${i}`)).not.toThrow();
    }
    await expect(log.flush()).resolves.toBeUndefined();
    expect(lines.length).toBe(1);
    expect(lines[0]).toMatch(/failed and was dropped/);
    log.info(URN, "later");
    await expect(log.flush()).resolves.toBeUndefined();
    expect(lines.length).toBe(1);
  });

  it("sends a value that is not a Pulumi URN without one", async () => {
    const engine = await startEngine();
    const log = open(engine.address);
    log.info("kvm://lab/edge", "no owner");
    log.warn(undefined, "none at all");
    log.status("", "stack-wide", { force: true });
    await log.flush();
    expect(engine.received.map((r) => [r.message, r.urn])).toEqual([
      ["no owner", ""],
      ["none at all", ""],
      ["stack-wide", ""],
    ]);
  });

  it("sends nothing after close, not even to stderr", async () => {
    const engine = await startEngine();
    const lines: string[] = [];
    const log = open(engine.address, { stderr: (l) => lines.push(l) });
    log.info(URN, "before");
    await log.flush();
    log.close();
    expect(() => log.info(URN, "after")).not.toThrow();
    log.warn(URN, "after");
    log.status(URN, "after", { force: true });
    await log.flush();
    expect(messages(engine)).toEqual(["before"]);
    expect(lines).toEqual([]);
  });

  it.each([
    ["a diagnostic", (log: EngineLog) => log.info(URN, "hello"), ["info: hello", "warning: careful"]],
    ["a status", (log: EngineLog) => log.status(URN, "dropped"), ["warning: careful"]],
  ] as const)(
    "falls back to stderr, without statuses, when no client can be made (first call: %s)",
    async (_, first, expected) => {
      const lines: string[] = [];
      const log = open("", { stderr: (l) => lines.push(l) });
      first(log); // the call that finds there is no client
      log.status(URN, "dropped too");
      log.warn(URN, "careful");
      await log.flush();
      expect(lines[0]).toMatch(/^warning: pulumi-kvm-proxy: no client to the Pulumi engine/);
      expect(lines.slice(1)).toEqual(expected);
    },
  );

  it("takes the engine address from the last argument, and falls back to stderr without one", async () => {
    expect(engineAddressFromArgv(["node", "index.js", "127.0.0.1:45707"])).toBe("127.0.0.1:45707");
    expect(engineAddressFromArgv(["node", "index.js", "-v=1", "127.0.0.1:33979"])).toBe("127.0.0.1:33979");
    expect(engineAddressFromArgv(["node", "index.js", "[::1]:1234"])).toBe("[::1]:1234");
    expect(engineAddressFromArgv(["node", "vitest.mjs", "run"])).toBeUndefined();
    expect(engineAddressFromArgv(["node", "a.ts:12/x"])).toBeUndefined();

    const engine = await startEngine();
    const viaArgv = engineLogFromArgv(["node", "index.js", engine.address], { stderr: () => {} });
    cleanup.push(() => viaArgv.close());
    viaArgv.info(URN, "through argv");
    await viaArgv.flush();
    expect(messages(engine)).toEqual(["through argv"]);

    const lines: string[] = [];
    const fallback = engineLogFromArgv(["node", "script.js"], {
      stderr: (l) => lines.push(l),
      redact: (t) => t.replace("pw", "**"),
    });
    fallback.status(URN, "dropped");
    fallback.info(URN, "hello pw");
    fallback.warn(URN, "careful\nnow");
    await fallback.flush();
    fallback.close();
    expect(lines).toEqual(["info: hello **", "warning: careful now"]);
  });
});
