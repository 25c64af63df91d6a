import { describe, expect, it } from "vitest";
import { isTransient, TimeoutError } from "../../../provider/errors";
import { ConnectionClosedError, Procedures, uploadStream, XdrWriter } from "../../../provider/libvirt";
import type { CallRequest } from "../../../provider/libvirt/client";
import { PacketStatus, PacketType, REMOTE_PROGRAM } from "../../../provider/libvirt/constants";
import { clientWithDaemon, uploadRequest } from "./fake-daemon";

// Every wait of an upload has a deadline: the reply to the
// opening call and the final confirmation had one; these pin the waits in
// between, for a daemon that stops reading the socket.

const setup = clientWithDaemon;

function lookupRequest(): CallRequest {
  const w = new XdrWriter();
  Procedures.domainLookupByName.encodeArgs(w, { name: "other" });
  return { program: REMOTE_PROGRAM, version: 1, proc: 23, body: w.finish(), call: "virDomainLookupByName" };
}

const PACKET = 64 * 1024;

async function* packets(n: number) {
  for (let i = 0; i < n; i++) yield Buffer.alloc(PACKET, i);
}

/** An upload (stall deadline 200 ms) whose daemon answered the call, then stopped reading. */
async function stalledUpload() {
  const { client, daemon, clientEnd } = setup();
  const upload = uploadStream(client, uploadRequest(), packets(1000), {
    chunkSize: PACKET,
    stallTimeoutMs: 200,
  }).catch((e: unknown) => e);
  const call = await daemon.next();
  clientEnd.held = [];
  daemon.reply(call);
  return { client, upload };
}

describe("upload deadlines", () => {
  it("a daemon that stops reading mid-stream fails the upload with a transient TimeoutError naming the stream", async () => {
    const { upload } = await stalledUpload();
    const err = await upload;
    expect(err).toBeInstanceOf(TimeoutError);
    expect(isTransient(err)).toBe(true);
    expect((err as TimeoutError).waitingFor).toMatch(
      /^libvirtd to accept more of the virStorageVolUpload stream \(\d+ bytes accepted so far\)$/,
    );
    expect((err as TimeoutError).timeoutMs).toBe(200);
  });

  it("the stalled connection is closed, so other calls on it fail at once instead of queueing behind it", async () => {
    const { client, upload } = await stalledUpload();
    const other = client.call(lookupRequest()).catch((e: unknown) => e);
    expect(await upload).toBeInstanceOf(TimeoutError);
    expect(await other).toBeInstanceOf(ConnectionClosedError);
    expect(client.closed).toBe(true);
  });

  it("a daemon that takes every byte but never confirms fails with a TimeoutError naming the confirmation", async () => {
    const { client, daemon } = setup();
    const upload = uploadStream(client, uploadRequest(), packets(2), {
      chunkSize: PACKET,
      timeoutMs: 200,
    }).catch((e: unknown) => e);
    const call = await daemon.next();
    daemon.reply(call);
    const rest = await daemon.nextN(3);
    expect(rest.map((p) => p.header.status)).toEqual([
      PacketStatus.CONTINUE,
      PacketStatus.CONTINUE,
      PacketStatus.OK,
    ]);
    const err = await upload;
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).waitingFor).toBe("confirmation of virStorageVolUpload");
  });

  it("a slow daemon that keeps reading is not cut: the deadline is per packet, not per upload", async () => {
    const { client, daemon, clientEnd } = setup();
    const count = 20;
    const upload = uploadStream(client, uploadRequest(), packets(count), {
      chunkSize: PACKET,
      stallTimeoutMs: 2_000,
    });
    const call = await daemon.next();
    clientEnd.held = [];
    daemon.reply(call);
    // Releases the held writes a little at a time: the upload keeps moving,
    // so no single packet waits anywhere near the deadline.
    const release = setInterval(() => {
      for (const cb of clientEnd.held?.splice(0) ?? []) cb();
    }, 20);
    const received: number[] = [];
    for (;;) {
      const p = await daemon.next();
      if (p.header.type === PacketType.STREAM && p.header.status === PacketStatus.CONTINUE) {
        received.push(p.body.length);
        continue;
      }
      daemon.stream(call, PacketStatus.OK);
      break;
    }
    clearInterval(release);
    expect(await upload).toBe(count * PACKET);
    expect(received).toHaveLength(count);
  });
});
