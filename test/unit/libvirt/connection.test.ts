import type { Duplex } from "node:stream";
import { describe, expect, it, vi } from "vitest";
import { isTransient, ProviderError } from "../../../provider/errors";
import {
  type CallTrace,
  ConnectionClosedError,
  Libvirt,
  LibvirtConnection,
  Procedures,
  ProtocolError,
  XdrReader,
  XdrWriter,
} from "../../../provider/libvirt";
import { PacketStatus, RemoteProcedure } from "../../../provider/libvirt/constants";
import type { Packet } from "../../../provider/libvirt/packet";
import type { Transport } from "../../../provider/transport/types";
import { duplexPair, FakeDaemon } from "./fake-daemon";

const DOM_UUID = "11111111-2222-3333-4444-555555555555";

/** A transport whose every open() yields a fresh in-process daemon answering a few procedures. */
class FakeTransport implements Transport {
  readonly description = "fake:test";
  readonly daemons: FakeDaemon[] = [];
  /** The client's end of each opened stream. */
  readonly ends: Duplex[] = [];
  opens = 0;
  closes = 0;

  constructor(private readonly authTypes: number[] = [0]) {}

  async open(): Promise<Duplex> {
    this.opens++;
    // Yield once so concurrent callers really do overlap with the handshake.
    await new Promise((r) => setImmediate(r));
    const [clientEnd, serverEnd] = duplexPair();
    this.daemons.push(new FakeDaemon(serverEnd, (p, d) => this.answer(p, d)));
    this.ends.push(clientEnd);
    return clientEnd;
  }

  async close(): Promise<void> {
    this.closes++;
  }

  get procs(): number[][] {
    return this.daemons.map((d) => d.received.map((p) => p.header.proc));
  }

  private answer(p: Packet, d: FakeDaemon): void {
    switch (p.header.proc) {
      case RemoteProcedure.AUTH_LIST:
        d.reply(p, new XdrWriter().array(this.authTypes, 20, (w, v) => w.int(v)).finish());
        return;
      case RemoteProcedure.CONNECT_OPEN:
      case RemoteProcedure.CONNECT_CLOSE:
        d.reply(p);
        return;
      case RemoteProcedure.CONNECT_SUPPORTS_FEATURE:
        // No keepalive here (test/unit/libvirt/keepalive.test.ts has a daemon with one).
        d.reply(p, new XdrWriter().int(0).finish());
        return;
      case RemoteProcedure.DOMAIN_LOOKUP_BY_NAME: {
        const name = new XdrReader(p.body).string();
        if (name === "hang") return;
        const w = new XdrWriter()
          .string(name)
          .fixedOpaque(Buffer.from(DOM_UUID.replace(/-/g, ""), "hex"), 16)
          .int(7);
        d.reply(p, w.finish());
        return;
      }
      default:
        d.replyError(p, { code: 3, message: "this function is not supported by the connection driver" });
    }
  }
}

describe("LibvirtConnection", () => {
  it("connects lazily: nothing happens until the first call, which runs auth_list, connect_open, then asks for keepalive", async () => {
    const transport = new FakeTransport();
    const conn = new LibvirtConnection({ transport, uri: "test:///default" });
    expect(transport.opens).toBe(0);
    const lv = new Libvirt(conn);
    expect(await lv.domainLookupByName("a")).toEqual({ name: "a", uuid: DOM_UUID, id: 7 });
    expect(transport.procs).toEqual([[66, 1, 60, 23]]);
    const open = transport.daemons[0]?.received[1] as Packet;
    expect(new XdrReader(open.body).optional((r) => r.string())).toBe("test:///default");
  });

  it("shares one handshake between concurrent first callers and one stream between all callers", async () => {
    const transport = new FakeTransport();
    const lv = new Libvirt(new LibvirtConnection({ transport }));
    const names = Array.from({ length: 20 }, (_, i) => `d${i}`);
    const doms = await Promise.all(names.map((n) => lv.domainLookupByName(n)));
    expect(doms.map((d) => d.name)).toEqual(names);
    expect(transport.opens).toBe(1);
    expect(transport.procs[0]?.filter((p) => p === 66)).toHaveLength(1);
  });

  it("after a drop, pending calls fail transiently and the next call reconnects", async () => {
    const transport = new FakeTransport();
    const conn = new LibvirtConnection({ transport });
    const lv = new Libvirt(conn);
    await lv.domainLookupByName("a");
    const hanging = lv.domainLookupByName("hang").catch((e: unknown) => e);
    await new Promise((r) => setImmediate(r));
    transport.daemons[0]?.drop();
    const err = await hanging;
    expect(err).toBeInstanceOf(ConnectionClosedError);
    expect(isTransient(err)).toBe(true);
    expect(await lv.domainLookupByName("b")).toMatchObject({ name: "b" });
    expect(transport.opens).toBe(2);
    expect(transport.procs[1]).toEqual([66, 1, 60, 23]);
  });

  it("refuses daemons that offer no 'none' authentication, permanently", async () => {
    const transport = new FakeTransport([2]);
    const lv = new Libvirt(new LibvirtConnection({ transport }));
    const err = await lv.connectGetType().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect((err as Error).message).toMatch(/requires polkit authentication/);
    expect(isTransient(err)).toBe(false);
    expect(transport.procs[0]).toEqual([66]);
  });

  it("close() sends connect_close, then closes the transport; later calls fail permanently", async () => {
    const transport = new FakeTransport();
    const conn = new LibvirtConnection({ transport });
    await new Libvirt(conn).domainLookupByName("a");
    await conn.close();
    expect(transport.procs[0]).toEqual([66, 1, 60, 23, 2]);
    expect(transport.closes).toBe(1);
    const err = await conn.call(Procedures.connectGetType, undefined).catch((e: unknown) => e);
    expect(isTransient(err)).toBe(false);
  });

  it("once connected, a call is written before the caller's next statement runs (no wait for the client)", async () => {
    const transport = new FakeTransport();
    const lv = new Libvirt(new LibvirtConnection({ transport }));
    await lv.domainLookupByName("first");
    const write = vi.spyOn(transport.ends[0] as Duplex, "write");
    const second = lv.domainLookupByName("second");
    expect(write).toHaveBeenCalledTimes(1);
    await expect(second).resolves.toMatchObject({ name: "second", uuid: DOM_UUID });
    expect(transport.opens).toBe(1);
  });

  it("an argument that cannot be encoded rejects the call's promise rather than throwing", async () => {
    const transport = new FakeTransport();
    const lv = new Libvirt(new LibvirtConnection({ transport }));
    await lv.domainLookupByName("first");
    const bad = lv.domainLookupByUuid("not-a-uuid");
    await expect(bad).rejects.toBeInstanceOf(ProtocolError);
  });

  it("close() before any call opens nothing", async () => {
    const transport = new FakeTransport();
    await new LibvirtConnection({ transport }).close();
    expect(transport.opens).toBe(0);
    expect(transport.closes).toBe(1);
  });

  it("traces each call once with its public name and a short argument summary", async () => {
    const transport = new FakeTransport();
    const traces: CallTrace[] = [];
    const lv = new Libvirt(new LibvirtConnection({ transport, onCall: (t) => traces.push(t) }));
    await lv.domainLookupByName("kvmp-a");
    await lv.domainDefineXml(`<domain>${"x".repeat(500)}</domain>`).catch(() => {});
    expect(traces.map((t) => [t.call, t.args, t.error?.constructor.name])).toEqual([
      ["virAuthList", "", undefined],
      ["virConnectOpen", 'name="qemu:///system" flags=0', undefined],
      ["virConnectSupportsFeature", "feature=10", undefined],
      ["virDomainLookupByName", 'name="kvmp-a"', undefined],
      ["virDomainDefineXML", "xml=<517 chars>", "LibvirtError"],
    ]);
    for (const t of traces) expect(t.durationMs).toBeGreaterThanOrEqual(0);
  });

  it("a throwing trace hook does not break calls", async () => {
    const lv = new Libvirt(
      new LibvirtConnection({
        transport: new FakeTransport(),
        onCall: () => {
          throw new Error("broken hook");
        },
      }),
    );
    await expect(lv.domainLookupByName("a")).resolves.toMatchObject({ name: "a" });
  });

  it("an upload is traced without its body", async () => {
    const transport = new FakeTransport();
    const traces: CallTrace[] = [];
    const conn = new LibvirtConnection({ transport, onCall: (t) => traces.push(t) });
    const lv = new Libvirt(conn);
    await lv.connectGetType().catch(() => {});
    const daemon = transport.daemons[0] as FakeDaemon;
    // The fake daemon refuses the upload call itself, so only the CALL goes out.
    const upload = lv.storageVolUpload({ pool: "kvmp", name: "v", key: "/k" }, [Buffer.from("secret-bytes")]);
    await expect(upload).rejects.toMatchObject({ code: 3 });
    const t = traces.at(-1) as CallTrace;
    expect(t.call).toBe("virStorageVolUpload");
    expect(t.args).toBe("vol=kvmp/v offset=0 length=0 flags=0");
    expect(JSON.stringify(t)).not.toContain("secret");
    expect(daemon.received.at(-1)?.header).toMatchObject({ proc: 208, status: PacketStatus.OK });
  });
});
