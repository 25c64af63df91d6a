/**
 * libvirt keepalive against the real libvirtd, through the wire relay: the
 * daemon speaks the program as we use it (asked after connect_open, it
 * answers our PINGs and PINGs us), and a connection that stops forwarding
 * mid-session without closing (the relay's blackhole: a host that lost power,
 * a NAT that dropped the flow) is declared dead within the keepalive bound,
 * its calls fail transiently long before their deadline, and the next call
 * succeeds on a new connection. libvirtd's own keepalive would close its side
 * only after 30 s (5 s × 5 + 5 s), and the blackhole hides that close anyway.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CallTracer, type TraceRecord } from "../../../provider/kvm/host/call-tracer";
import { ConnectionClosedError, type LibvirtConnectionOptions } from "../../../provider/libvirt";
import { KEEPALIVE_DEFAULTS, keepaliveBoundMs } from "../../../provider/libvirt/keepalive";
import { UnixSocketTransport } from "../../../provider/transport/unix";
import { testHost } from "../../support/test-host";
import { WireRelay } from "../../support/wire-relay";
import { connect, uniqueName } from "../libvirt/support";
import { outcomeOf, RELAYED, relayedOps, writeResults } from "./support";

const host = testHost();
const relay = new WireRelay({ target: host.socketPath });
/** The per-call deadline in these tests: far beyond any keepalive bound used here. */
const CALL_TIMEOUT_MS = 60_000;
const results: Record<string, unknown>[] = [];

function viaRelay(options: Omit<LibvirtConnectionOptions, "transport"> = {}) {
  return connect(() => new UnixSocketTransport(relay.socketPath), {
    callTimeoutMs: CALL_TIMEOUT_MS,
    ...options,
  });
}

/** Keepalive packets seen on relay connection `conn`, as "<direction> <name>[ dropped]". */
function keepalives(conn: number): string[] {
  return relay.records
    .filter((r) => r.conn === conn && r.name.startsWith("keepalive"))
    .map((r) => `${r.direction} ${r.name}${r.dropped ? " dropped" : ""}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(() => relay.start());
afterEach(() => relay.reset());
afterAll(async () => {
  await relay.stop();
  writeResults("keepalive", results);
});

describe("libvirtd's keepalive program", () => {
  it("asked after connect_open, libvirtd PINGs an idle client after its own 5 s and takes our PONG", async () => {
    // Our own interval far away, so that the daemon is the one to find the line silent.
    const { conn, lv } = viaRelay({ keepalive: { intervalMs: 60_000, count: 3 } });
    expect(await lv.connectGetType()).toBe("QEMU");
    expect(relay.callNames).toEqual([
      "auth_list",
      "connect_open",
      "connect_supports_feature",
      "connect_get_type",
    ]);
    expect(conn.keepalive).toBeDefined();
    await relay.until((r) => r.direction === "to-daemon" && r.name === "keepalive_pong");
    expect(keepalives(0)).toEqual(["to-client keepalive_ping", "to-daemon keepalive_pong"]);
    expect(conn.keepalive?.pongsSent).toBe(1);
    await conn.close();
  });

  it("answers our PINGs: a connection silent for many times the bound stays up", async () => {
    const options = { intervalMs: 300, count: 2 };
    const { conn, lv } = viaRelay({ keepalive: options });
    expect(await lv.connectGetType()).toBe("QEMU");
    await sleep(10 * keepaliveBoundMs(options));
    const seen = keepalives(0);
    expect(seen.filter((s) => s === "to-daemon keepalive_ping").length).toBeGreaterThanOrEqual(5);
    expect(seen.filter((s) => s === "to-client keepalive_pong").length).toBeGreaterThanOrEqual(5);
    expect(conn.connected).toBe(true);
    expect(await lv.connectGetType()).toBe("QEMU");
    expect(relay.connections).toBe(1);
    await conn.close();
  });
});

describe("a connection that stops forwarding without closing", () => {
  it("fails the call in flight with a transient ConnectionClosedError within the bound (injected 3 × 500 ms), and the next call reconnects", async () => {
    const options = { intervalMs: 500, count: 3 };
    const { conn, lv } = viaRelay({ keepalive: options });
    expect(await lv.connectGetType()).toBe("QEMU");
    relay.onCall = (c) =>
      c.conn === 0 && c.name === "domain_lookup_by_name" ? { kind: "blackhole" } : undefined;
    const started = performance.now();
    const err = await lv.domainLookupByName(uniqueName("keepalive")).catch((e: unknown) => e);
    const detectedMs = performance.now() - started;
    expect(err).toBeInstanceOf(ConnectionClosedError);
    expect(err).toMatchObject({ kind: "transient" });
    expect((err as Error).message).toMatch(/keepalive: 3 × 500 ms/);
    // Our PINGs went into the blackhole: the daemon never saw them, nor we anything back.
    expect(keepalives(0)).toEqual(["to-daemon keepalive_ping dropped", "to-daemon keepalive_ping dropped"]);
    expect(detectedMs).toBeLessThan(CALL_TIMEOUT_MS / 4);
    expect(relay.blackholes).toBe(1);
    // A later call opens a new connection, which works.
    expect(await lv.connectGetType()).toBe("QEMU");
    expect(relay.connections).toBe(2);
    expect(relay.calls.filter((c) => c.conn === 1).map((c) => c.name)).toEqual([
      "auth_list",
      "connect_open",
      "connect_supports_feature",
      "connect_get_type",
    ]);
    results.push({ case: "call in flight, injected bound", boundMs: keepaliveBoundMs(options), detectedMs });
    await conn.close();
  });

  it("through the provider with the default bound (3 × 5 s): the operation's call fails transiently, its retry succeeds on a new connection", async () => {
    const traced: TraceRecord[] = [];
    const tracer = new CallTracer({ level: 1, sink: (_line, record) => traced.push(record) });
    const ops = relayedOps(host, relay.socketPath, {
      tracer,
      callTimeoutMs: CALL_TIMEOUT_MS,
      retry: { initialDelayMs: 5, maxDelayMs: 50, maxAttempts: 4, deadlineMs: CALL_TIMEOUT_MS },
    });
    const name = uniqueName("keepalive");
    relay.onCall = (c) =>
      c.conn === 0 && c.name === "domain_lookup_by_name" ? { kind: "blackhole" } : undefined;
    const started = performance.now();
    const outcome = await outcomeOf(ops.get(RELAYED, name));
    const tookMs = performance.now() - started;
    expect(outcome).toEqual({ result: "ok" });
    const failed = traced.filter((t) => t.error !== undefined);
    // The lookup into the blackhole, then the retry's on the new connection (no such domain: "absent").
    expect(failed.map((t) => [t.call, t.error?.constructor.name])).toEqual([
      ["virDomainLookupByName", "ConnectionClosedError"],
      ["virDomainLookupByName", "LibvirtError"],
    ]);
    const detectedMs = failed[0]?.durationMs ?? Number.NaN;
    expect(failed[0]?.error?.message).toMatch(/keepalive: 3 × 5 s/);
    // Well before the call's own deadline would have fired.
    expect(detectedMs).toBeLessThan(CALL_TIMEOUT_MS / 2);
    expect(relay.connections).toBe(2);
    results.push({
      case: "provider operation, default bound",
      boundMs: keepaliveBoundMs(KEEPALIVE_DEFAULTS),
      detectedMs,
      operationMs: tookMs,
    });
  });
});
