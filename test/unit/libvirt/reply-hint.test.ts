/**
 * The RPC layer's hint to the transport (transport/types.ts ReplyHint): an
 * upload calls the stream's `awaitReply` right before its end packet and
 * ends the hint once libvirtd confirmed (or failed) the stream. Plain calls
 * and data packets never use it. Against the in-process fake daemon.
 */
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { uploadStream } from "../../../provider/libvirt";
import { PacketStatus } from "../../../provider/libvirt/constants";
import { awaitReply } from "../../../provider/transport/types";
import { clientWithDaemon, uploadRequest } from "./fake-daemon";

/** Attaches a recording `awaitReply` to the client's end of the pipe. */
function hinted() {
  const setup = clientWithDaemon();
  const events: string[] = [];
  let active = 0;
  Object.assign(setup.clientEnd, {
    awaitReply: () => {
      events.push("begin");
      active++;
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        active--;
        events.push("end");
      };
    },
  });
  return { ...setup, events, isActive: () => active > 0 };
}

describe("the reply hint", () => {
  it("is begun right before an upload's end packet and ended after the confirmation", async () => {
    const { client, daemon, events, isActive } = hinted();
    const upload = uploadStream(client, uploadRequest(), Readable.from([Buffer.alloc(3000, 1)]), {
      chunkSize: 1000,
    });
    const call = await daemon.next();
    daemon.reply(call);
    const seen: { status: number; active: boolean }[] = [];
    for (;;) {
      const p = await daemon.next();
      seen.push({ status: p.header.status, active: isActive() });
      if (p.header.status === PacketStatus.OK) break;
    }
    // Data packets go out without it; the end packet with it.
    expect(seen).toEqual([
      { status: PacketStatus.CONTINUE, active: false },
      { status: PacketStatus.CONTINUE, active: false },
      { status: PacketStatus.CONTINUE, active: false },
      { status: PacketStatus.OK, active: true },
    ]);
    // Still begun while the confirmation is awaited, however long that takes.
    await new Promise((r) => setImmediate(r));
    expect(events).toEqual(["begin"]);
    expect(isActive()).toBe(true);
    daemon.stream(call, PacketStatus.OK);
    expect(await upload).toBe(3000);
    expect(events).toEqual(["begin", "end"]);
  });

  it("is ended when the daemon fails the stream instead of confirming it", async () => {
    const { client, daemon, events } = hinted();
    const upload = uploadStream(client, uploadRequest(), Readable.from([Buffer.alloc(10)])).catch(
      (e: unknown) => e,
    );
    const call = await daemon.next();
    daemon.reply(call);
    await daemon.next(); // data
    await daemon.next(); // OK (finish)
    daemon.replyError(call, { code: 1, message: "internal error: write failed" });
    expect(await upload).toMatchObject({ code: 1 });
    expect(events).toEqual(["begin", "end"]);
  });

  it("is never used by a plain call", async () => {
    const { client, daemon, events } = hinted();
    const reply = client.call({ ...uploadRequest(), call: "virConnectGetLibVersion", proc: 157 });
    daemon.reply(await daemon.next());
    await reply;
    expect(events).toEqual([]);
  });

  it("is a no-op on streams without it", () => {
    const { clientEnd } = clientWithDaemon();
    const end = awaitReply(clientEnd);
    expect(() => end()).not.toThrow();
  });
});
