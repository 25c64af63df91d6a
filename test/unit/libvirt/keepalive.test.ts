/**
 * libvirt keepalive (provider/libvirt/keepalive.ts) through LibvirtConnection
 * against the in-process fake daemon, which speaks the real framing: PINGs
 * after silence, PONGs to the daemon's PINGs, messages of other programs,
 * a silent daemon declared dead (pending calls fail transiently, the next
 * call reconnects), and no keepalive where the daemon has none. Timers and
 * performance.now() are faked, so the bounds are exact.
 */
import type { Duplex } from "node:stream";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { isTransient } from "../../../provider/errors";
import {
  ConnectionClosedError,
  Libvirt,
  LibvirtConnection,
  XdrReader,
  XdrWriter,
} from "../../../provider/libvirt";
import {
  KEEPALIVE_PROGRAM,
  KeepaliveProcedure,
  PacketStatus,
  PacketType,
  RemoteProcedure,
} from "../../../provider/libvirt/constants";
import { Keepalive, type KeepaliveClock, type KeepalivePeer } from "../../../provider/libvirt/keepalive";
import type { Packet, PacketHeader } from "../../../provider/libvirt/packet";
import type { Transport } from "../../../provider/transport/types";
import { duplexPair, FakeDaemon } from "./fake-daemon";

const INTERVAL = 5_000;
const COUNT = 3;
/** Far beyond the keepalive bound: a failure before it is the keepalive's. */
const CALL_TIMEOUT = 600_000;

const PING_HEADER: PacketHeader = {
  prog: KEEPALIVE_PROGRAM,
  vers: 1,
  proc: KeepaliveProcedure.PING,
  type: PacketType.MESSAGE,
  serial: 0,
  status: PacketStatus.OK,
};

/** A daemon per open(): answers the handshake, lookups (except "hang"), and PINGs when `pong` is on. */
class KeepaliveTransport implements Transport {
  readonly description = "fake:keepalive";
  readonly daemons: FakeDaemon[] = [];
  readonly ends: Duplex[] = [];
  closes = 0;
  /** The reply to connect_supports_feature(PROGRAM_KEEPALIVE). */
  feature: 1 | 0 | "error" = 1;
  /** Whether the daemon answers our PINGs. */
  pong = true;

  async open(): Promise<Duplex> {
    await new Promise((r) => setImmediate(r));
    const [clientEnd, serverEnd] = duplexPair();
    this.daemons.push(new FakeDaemon(serverEnd, (p, d) => this.answer(p, d)));
    this.ends.push(clientEnd);
    return clientEnd;
  }

  async close(): Promise<void> {
    this.closes++;
  }

  get daemon(): FakeDaemon {
    return this.daemons.at(-1) as FakeDaemon;
  }

  /** Keepalive packets the client sent to the latest daemon. */
  keepalives(daemon = this.daemon): PacketHeader[] {
    return daemon.received.filter((p) => p.header.prog === KEEPALIVE_PROGRAM).map((p) => p.header);
  }

  private answer(p: Packet, d: FakeDaemon): void {
    if (p.header.prog === KEEPALIVE_PROGRAM) {
      if (this.pong && p.header.proc === KeepaliveProcedure.PING) {
        d.send({ ...PING_HEADER, proc: KeepaliveProcedure.PONG });
      }
      return;
    }
    switch (p.header.proc) {
      case RemoteProcedure.AUTH_LIST:
        d.reply(p, new XdrWriter().array([0], 20, (w, v) => w.int(v)).finish());
        return;
      case RemoteProcedure.CONNECT_OPEN:
      case RemoteProcedure.CONNECT_CLOSE:
        d.reply(p);
        return;
      case RemoteProcedure.CONNECT_SUPPORTS_FEATURE:
        expect(new XdrReader(p.body).int()).toBe(10);
        if (this.feature === "error") d.replyError(p, { code: 3, message: "not supported" });
        else d.reply(p, new XdrWriter().int(this.feature).finish());
        return;
      case RemoteProcedure.DOMAIN_LOOKUP_BY_NAME: {
        const name = new XdrReader(p.body).string();
        if (name === "hang") return;
        d.reply(p, new XdrWriter().string(name).fixedOpaque(Buffer.alloc(16), 16).int(1).finish());
        return;
      }
      default:
        d.replyError(p, { code: 3, message: "not supported" });
    }
  }
}

function setup(options: { keepalive?: false } = {}) {
  const transport = new KeepaliveTransport();
  const conn = new LibvirtConnection({
    transport,
    callTimeoutMs: CALL_TIMEOUT,
    keepalive: options.keepalive ?? { intervalMs: INTERVAL, count: COUNT },
  });
  return { transport, conn, lv: new Libvirt(conn) };
}

/** Advances the fake clock and lets the in-process streams deliver what the timers wrote. */
async function advance(ms: number): Promise<void> {
  await vi.advanceTimersByTimeAsync(ms);
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe("libvirt keepalive", () => {
  it("sends a body-less PING (MESSAGE, status OK) after intervalMs of silence, none while replies arrive", async () => {
    const { transport, lv } = setup();
    await lv.domainLookupByName("a");
    await advance(INTERVAL - 2_000);
    // Traffic 3 s in: the silence starts again.
    await lv.domainLookupByName("b");
    await advance(INTERVAL - 1);
    expect(transport.keepalives()).toEqual([]);
    await advance(1);
    expect(transport.keepalives()).toEqual([PING_HEADER]);
    const ping = transport.daemon.received.at(-1) as Packet;
    expect(ping.body.length).toBe(0);
  });

  it("a daemon that answers PINGs keeps an idle connection for good", async () => {
    const { transport, conn, lv } = setup();
    await lv.domainLookupByName("a");
    await advance(10 * INTERVAL * COUNT);
    expect(transport.keepalives().length).toBe(10 * COUNT);
    expect(conn.connected).toBe(true);
    expect(await lv.domainLookupByName("b")).toMatchObject({ name: "b" });
    expect(transport.daemons).toHaveLength(1);
  });

  it("answers the daemon's PING with a PONG and does not take it for a reply", async () => {
    const { transport, conn, lv } = setup();
    await lv.domainLookupByName("a");
    const pending = lv.domainLookupByName("slow");
    const call = transport.daemon.received.at(-1) as Packet;
    // Even carrying the pending call's serial, a keepalive MESSAGE answers no call.
    transport.daemon.send({ ...PING_HEADER, serial: call.header.serial });
    await advance(0);
    expect(transport.keepalives()).toEqual([{ ...PING_HEADER, proc: KeepaliveProcedure.PONG }]);
    expect(conn.keepalive?.pongsSent).toBe(1);
    expect(await pending).toMatchObject({ name: "slow" });
  });

  it("ignores messages of other programs and unknown keepalive procedures, and counts them as life", async () => {
    const { transport, conn, lv } = setup();
    await lv.domainLookupByName("a");
    const hanging = lv.domainLookupByName("hang");
    let settled = false;
    hanging.then(
      () => (settled = true),
      () => (settled = true),
    );
    await advance(INTERVAL - 1_000);
    transport.daemon.send({ ...PING_HEADER, prog: 0x12345678, proc: 1 }, Buffer.from("not for us"));
    transport.daemon.send({ ...PING_HEADER, proc: 7 });
    transport.daemon.send({ ...PING_HEADER, vers: 2 });
    await advance(INTERVAL - 1);
    // Nothing answered, no PING: those bytes were life.
    expect(transport.keepalives()).toEqual([]);
    await advance(1);
    expect(transport.keepalives()).toEqual([PING_HEADER]);
    expect(settled).toBe(false);
    expect(conn.connected).toBe(true);
  });

  it("declares a silent daemon dead after count × intervalMs: pending calls fail transiently, the next call reconnects", async () => {
    const { transport, conn, lv } = setup();
    await lv.domainLookupByName("a");
    const first = transport.daemon;
    transport.pong = false;
    const hanging = lv.domainLookupByName("hang").catch((e: unknown) => e);
    let settled = false;
    void hanging.then(() => (settled = true));
    await advance(INTERVAL * COUNT - 1);
    expect(settled).toBe(false);
    // One PING per silent interval before the last.
    expect(transport.keepalives(first)).toHaveLength(COUNT - 1);
    await advance(1);
    const err = await hanging;
    expect(err).toBeInstanceOf(ConnectionClosedError);
    expect(isTransient(err)).toBe(true);
    expect((err as Error).message).toMatch(/sent nothing for 15 s \(keepalive: 3 × 5 s/);
    expect(conn.connected).toBe(false);
    // The transport (for SSH, the session under the channel) is released too.
    expect(transport.closes).toBe(1);
    transport.pong = true;
    expect(await lv.domainLookupByName("b")).toMatchObject({ name: "b" });
    expect(transport.daemons).toHaveLength(2);
    expect(conn.keepalive).toBeDefined();
  });

  it.each([0, "error"] as const)(
    "no keepalive when the daemon answers the feature question with %s",
    async (answer) => {
      const { transport, conn, lv } = setup();
      transport.feature = answer;
      await lv.domainLookupByName("a");
      const hanging = lv.domainLookupByName("hang");
      let settled = false;
      hanging.then(
        () => (settled = true),
        () => (settled = true),
      );
      await advance(10 * INTERVAL * COUNT);
      expect(transport.keepalives()).toEqual([]);
      expect(conn.keepalive).toBeUndefined();
      // A daemon PING goes unanswered too: we never asked for the program.
      transport.daemon.send(PING_HEADER);
      await advance(0);
      expect(transport.keepalives()).toEqual([]);
      expect(settled).toBe(false);
      expect(conn.connected).toBe(true);
    },
  );

  it("keepalive: false asks nothing and sends nothing", async () => {
    const { transport, conn, lv } = setup({ keepalive: false });
    await lv.domainLookupByName("a");
    await advance(10 * INTERVAL * COUNT);
    expect(transport.daemon.received.map((p) => p.header.proc)).toEqual([66, 1, 23]);
    expect(conn.connected).toBe(true);
  });
});

describe("Keepalive with injected timers", () => {
  /** A peer and a clock driven by hand. */
  function manual() {
    let now = 0;
    const timers: { due: number; fn: () => void }[] = [];
    const armed = { count: 0 };
    const clock: KeepaliveClock = {
      now: () => now,
      setTimeout: (fn, ms) => {
        armed.count++;
        const t = { due: now + ms, fn };
        timers.push(t);
        return t;
      },
      clearTimeout: (t) => timers.splice(timers.indexOf(t as (typeof timers)[number]), 1),
    };
    const sent: number[] = [];
    const peer: KeepalivePeer & { lastInboundAt: number } = {
      lastInboundAt: 0,
      onMessage: undefined,
      writePacket: async (h) => {
        sent.push(h.proc);
      },
      onClose: () => {},
    };
    const deaths: Error[] = [];
    const keepalive = new Keepalive(
      peer,
      "peer",
      (e) => deaths.push(e),
      { intervalMs: 100, count: 4 },
      clock,
    );
    /** Moves the clock to `t`, firing due timers in order. */
    const runTo = (t: number): void => {
      for (;;) {
        timers.sort((a, b) => a.due - b.due);
        const next = timers[0];
        if (!next || next.due > t) break;
        timers.shift();
        now = next.due;
        next.fn();
      }
      now = t;
    };
    return { peer, sent, deaths, keepalive, timers, armed, runTo };
  }

  it("holds one timer, armed once per interval however much traffic arrives; the bound is intervalMs × count", () => {
    const { peer, sent, deaths, keepalive, timers, armed, runTo } = manual();
    keepalive.start();
    expect(keepalive.boundMs).toBe(400);
    // Inbound bytes every 10 ms for 1 s (100 arrivals): only the timer's own firings re-arm it.
    for (let t = 10; t <= 1_000; t += 10) {
      runTo(t);
      peer.lastInboundAt = t;
      expect(timers).toHaveLength(1);
    }
    // One arming per firing, every 90 ms here (due an interval after the last arrival seen), not one per arrival.
    expect(armed.count).toBeLessThanOrEqual(12);
    expect(sent).toEqual([]);
    runTo(1_399);
    expect(sent).toEqual([1, 1, 1]);
    expect(deaths).toEqual([]);
    runTo(1_400);
    expect(deaths).toHaveLength(1);
    expect(deaths[0]).toBeInstanceOf(ConnectionClosedError);
    expect(timers).toHaveLength(0);
  });

  it("refuses settings that could never detect anything", () => {
    const { peer } = manual();
    expect(() => new Keepalive(peer, "p", () => {}, { intervalMs: 0 })).toThrow(RangeError);
    expect(() => new Keepalive(peer, "p", () => {}, { count: 0 })).toThrow(RangeError);
  });
});
