import { Readable } from "node:stream";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isTransient, TimeoutError } from "../../../provider/errors";
import {
  ConnectionClosedError,
  LibvirtError,
  Procedures,
  ProtocolError,
  RpcClient,
  uploadStream,
  XdrReader,
  XdrWriter,
} from "../../../provider/libvirt";
import type { CallRequest } from "../../../provider/libvirt/client";
import {
  PACKET_HEADER_SIZE,
  PacketStatus,
  PacketType,
  REMOTE_PROGRAM,
} from "../../../provider/libvirt/constants";
import type { Packet } from "../../../provider/libvirt/packet";
import { clientWithDaemon, duplexPair, errorBody, FakeDaemon, uploadRequest } from "./fake-daemon";

const setup = clientWithDaemon;

function lookup(name: string, timeoutMs?: number): CallRequest {
  const w = new XdrWriter();
  Procedures.domainLookupByName.encodeArgs(w, { name });
  return {
    program: REMOTE_PROGRAM,
    version: 1,
    proc: 23,
    body: w.finish(),
    call: "virDomainLookupByName",
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
  };
}

function nameArg(body: Buffer): string {
  return new XdrReader(body).string();
}

function stringBody(s: string): Buffer {
  return new XdrWriter().string(s).finish();
}

afterEach(() => {
  vi.useRealTimers();
});

describe("RpcClient calls", () => {
  it("sends a CALL with a fresh serial and resolves with the REPLY body", async () => {
    const { client, daemon } = setup();
    const reply = client.call(lookup("a"));
    const call = await daemon.next();
    expect(call.header).toMatchObject({
      prog: REMOTE_PROGRAM,
      vers: 1,
      proc: 23,
      type: PacketType.CALL,
      status: 0,
    });
    expect(nameArg(call.body)).toBe("a");
    daemon.reply(call, stringBody("ok"));
    expect(nameArg(await reply)).toBe("ok");
    expect(client.inFlight).toBe(0);
  });

  it("matches out-of-order replies to their calls by serial", async () => {
    const { client, daemon } = setup();
    const names = Array.from({ length: 50 }, (_, i) => `d${i}`);
    const replies = names.map((n) => client.call(lookup(n)));
    const calls = await daemon.nextN(names.length);
    expect(new Set(calls.map((c) => c.header.serial)).size).toBe(names.length);
    // Answer in reverse, each with its own argument echoed back.
    for (const c of [...calls].reverse()) daemon.reply(c, stringBody(`reply-to-${nameArg(c.body)}`));
    const bodies = await Promise.all(replies);
    expect(bodies.map(nameArg)).toEqual(names.map((n) => `reply-to-${n}`));
  });

  it("rejects with a LibvirtError decoded from an ERROR reply, naming the call", async () => {
    const { client, daemon } = setup();
    const reply = client.call(lookup("missing"));
    const call = await daemon.next();
    daemon.replyError(call, {
      code: 42,
      message: "Domain not found: no domain with matching name 'missing'",
    });
    const err = await reply.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({ code: 42, codeName: "VIR_ERR_NO_DOMAIN", call: "virDomainLookupByName" });
  });

  it("ignores event MESSAGE packets and replies nobody waits for", async () => {
    const { client, daemon } = setup();
    const reply = client.call(lookup("a"));
    const call = await daemon.next();
    daemon.send({ ...call.header, type: PacketType.MESSAGE, serial: 0, proc: 107 }, Buffer.from("garbage!"));
    daemon.send({ ...call.header, type: PacketType.REPLY, serial: 999 }, stringBody("stray"));
    daemon.reply(call, stringBody("mine"));
    expect(nameArg(await reply)).toBe("mine");
    expect(client.closed).toBe(false);
  });

  it("rejects a call whose deadline passes with a TimeoutError naming it, and drops its late reply", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { client, daemon } = setup();
    const slow = client.call(lookup("slow", 5_000));
    const caught = slow.catch((e: unknown) => e);
    const call = await daemon.next();
    vi.advanceTimersByTime(5_000);
    const err = await caught;
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).waitingFor).toBe("reply to virDomainLookupByName");
    expect(isTransient(err)).toBe(true);
    // The late reply is dropped and the connection keeps working.
    daemon.reply(call, stringBody("late"));
    const next = client.call(lookup("next"));
    daemon.reply(await daemon.next(), stringBody("fine"));
    expect(nameArg(await next)).toBe("fine");
  });

  it("rejects every pending call at once with a transient error when the stream drops", async () => {
    const { client, daemon } = setup();
    const closed = new Promise<Error>((resolve) => client.onClose(resolve));
    const replies = Array.from({ length: 10 }, (_, i) =>
      client.call(lookup(`d${i}`)).catch((e: unknown) => e),
    );
    await daemon.nextN(10);
    daemon.drop();
    const errs = await Promise.all(replies);
    for (const e of errs) {
      expect(e).toBeInstanceOf(ConnectionClosedError);
      expect(isTransient(e)).toBe(true);
    }
    expect(new Set(errs).size).toBe(1);
    expect(await closed).toBe(errs[0]);
    expect(client.closed).toBe(true);
    await expect(client.call(lookup("after"))).rejects.toBeInstanceOf(ConnectionClosedError);
  });

  it("a malformed length from the peer fails pending calls with a permanent protocol error", async () => {
    const { client, daemon } = setup();
    const reply = client.call(lookup("a")).catch((e: unknown) => e);
    await daemon.next();
    daemon.socket.write(Buffer.from([0, 0, 0, 3]));
    const err = await reply;
    expect(err).toBeInstanceOf(ProtocolError);
    expect(isTransient(err)).toBe(false);
  });

  it("close() sends nothing and rejects pending calls", async () => {
    const { client, daemon } = setup();
    const reply = client.call(lookup("a")).catch((e: unknown) => e);
    await daemon.next();
    client.close();
    expect(await reply).toBeInstanceOf(ConnectionClosedError);
    expect(daemon.received).toHaveLength(1);
  });

  it("an aborted signal rejects the call with the signal's reason", async () => {
    const { client, daemon } = setup();
    const ac = new AbortController();
    const reply = client.call({ ...lookup("a"), signal: ac.signal }).catch((e: unknown) => e);
    await daemon.next();
    const reason = new Error("stop");
    ac.abort(reason);
    expect(await reply).toBe(reason);
    expect(client.inFlight).toBe(0);
  });
});

/** A lookup whose body was encoded behind header headroom, as LibvirtConnection encodes every call. */
function framedLookup(name: string, timeoutMs?: number): CallRequest {
  const w = new XdrWriter(256, PACKET_HEADER_SIZE);
  Procedures.domainLookupByName.encodeArgs(w, { name });
  const frame = w.finishFrame();
  return { ...lookup(name, timeoutMs), body: frame.subarray(PACKET_HEADER_SIZE), frame };
}

/** Timers that keep the process alive right now (unref'd ones are not listed). */
function liveTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
}

describe("RpcClient hot path", () => {
  it("writes each call to the transport once, header and body in one buffer", async () => {
    const { client, daemon, clientEnd } = setup();
    const write = vi.spyOn(clientEnd, "write");
    const replies = [client.call(lookup("plain")), client.call(framedLookup("framed"))];
    const calls = await daemon.nextN(2);
    expect(write).toHaveBeenCalledTimes(2);
    for (const [i, c] of calls.entries()) {
      const written = write.mock.calls[i]?.[0] as Buffer;
      // The whole packet: its length word counts every byte of this one write.
      expect(written.readUInt32BE(0)).toBe(written.length);
      expect(written.length).toBe(PACKET_HEADER_SIZE + c.body.length);
      daemon.reply(c, stringBody(nameArg(c.body)));
    }
    expect((await Promise.all(replies)).map(nameArg)).toEqual(["plain", "framed"]);
  });

  it("seals a framed request in place: the buffer written is the request's own frame", async () => {
    const { client, daemon, clientEnd } = setup();
    const write = vi.spyOn(clientEnd, "write");
    const req = framedLookup("in-place");
    const reply = client.call(req);
    const call = await daemon.next();
    expect(write.mock.calls[0]?.[0]).toBe(req.frame);
    expect(call.header).toMatchObject({ proc: 23, type: PacketType.CALL, serial: 1 });
    expect(nameArg(call.body)).toBe("in-place");
    daemon.reply(call, stringBody("ok"));
    await reply;
  });

  it("arms one deadline timer per client however many calls are in flight", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const [clientEnd, serverEnd] = duplexPair();
    const client = new RpcClient(clientEnd, { defaultTimeoutMs: 60_000 });
    const daemon = new FakeDaemon(serverEnd);
    const armed = vi.spyOn(globalThis, "setTimeout");
    const replies = Array.from({ length: 64 }, (_, i) => client.call(lookup(`p${i}`)));
    const calls = await daemon.nextN(64);
    expect(vi.getTimerCount()).toBe(1);
    for (const c of calls) daemon.reply(c, stringBody("ok"));
    await Promise.all(replies);
    // 100 sequential calls reuse it too: settling a call does not touch the timer.
    for (let i = 0; i < 100; i++) {
      const r = client.call(lookup(`s${i}`));
      daemon.reply(await daemon.next(), stringBody("ok"));
      await r;
    }
    expect(armed).toHaveBeenCalledTimes(1);
    expect(vi.getTimerCount()).toBe(1);
  });

  it("a call with an earlier deadline times out on its own, naming it, while a later one waits", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { client, daemon } = setup();
    const long = client.call(lookup("long", 60_000)).catch((e: unknown) => e);
    const short = client
      .call({ ...lookup("short", 1_000), call: "virDomainGetState" })
      .catch((e: unknown) => e);
    const [longCall] = await daemon.nextN(2);
    vi.advanceTimersByTime(1_000);
    expect(await short).toMatchObject({ name: "TimeoutError", waitingFor: "reply to virDomainGetState" });
    expect(client.inFlight).toBe(1);
    vi.advanceTimersByTime(50_000);
    daemon.reply(longCall as Packet, stringBody("in time"));
    expect(nameArg((await long) as Buffer)).toBe("in time");
  });

  it("the deadline timer keeps the process alive only while a call waits for its reply", async () => {
    const [clientEnd, serverEnd] = duplexPair();
    const client = new RpcClient(clientEnd, { defaultTimeoutMs: 60_000 });
    const daemon = new FakeDaemon(serverEnd);
    const before = liveTimers();
    const replies = Array.from({ length: 8 }, (_, i) => client.call(lookup(`r${i}`)));
    const calls = await daemon.nextN(8);
    expect(liveTimers()).toBe(before + 1);
    for (const c of calls) daemon.reply(c, stringBody("ok"));
    await Promise.all(replies);
    expect(liveTimers()).toBe(before);
    const again = client.call(lookup("again"));
    expect(liveTimers()).toBe(before + 1);
    daemon.reply(await daemon.next(), stringBody("ok"));
    await again;
    client.close();
    expect(liveTimers()).toBe(before);
  });
});

/** Plays libvirtd's side of an upload: REPLY OK to the call, collect data, confirm the end. */
async function serveUpload(daemon: FakeDaemon) {
  const call = await daemon.next();
  daemon.reply(call);
  const data: Buffer[] = [];
  const statuses: number[] = [];
  for (;;) {
    const p = await daemon.next();
    expect(p.header).toMatchObject({ type: PacketType.STREAM, serial: call.header.serial, proc: 208 });
    statuses.push(p.header.status);
    if (p.header.status !== PacketStatus.CONTINUE) {
      if (p.header.status === PacketStatus.OK) daemon.stream(call, PacketStatus.OK);
      return { call, data: Buffer.concat(data), packets: data.map((d) => d.length), statuses };
    }
    data.push(p.body);
  }
}

describe("upload streams", () => {
  it("sends the data as STREAM packets of the call's serial, ends with OK and waits for confirmation", async () => {
    const { client, daemon } = setup();
    const source = Buffer.alloc(2_500_000);
    for (let i = 0; i < source.length; i++) source[i] = (i * 7) & 0xff;
    // Source chunks of odd sizes, re-cut into packets of exactly chunkSize.
    const chunks = Array.from({ length: Math.ceil(source.length / 77_777) }, (_, i) =>
      source.subarray(i * 77_777, (i + 1) * 77_777),
    );
    const served = serveUpload(daemon);
    const sent = await uploadStream(client, uploadRequest(), Readable.from(chunks), { chunkSize: 1_000_000 });
    const { data, packets, statuses } = await served;
    expect(sent).toBe(source.length);
    expect(data.equals(source)).toBe(true);
    expect(packets).toEqual([1_000_000, 1_000_000, 500_000]);
    expect(statuses.at(-1)).toBe(PacketStatus.OK);
    expect(client.inFlight).toBe(0);
  });

  it("rejects with the server's LibvirtError when it reports a STREAM ERROR", async () => {
    const { client, daemon } = setup();
    async function* source() {
      for (let i = 0; i < 100; i++) yield Buffer.alloc(1000, i);
    }
    const upload = uploadStream(client, uploadRequest(), source(), { chunkSize: 1000 }).catch(
      (e: unknown) => e,
    );
    const call = await daemon.next();
    daemon.reply(call);
    await daemon.next();
    daemon.send(
      { ...call.header, type: PacketType.STREAM, status: PacketStatus.ERROR },
      errorBody({ code: 38, domain: 18, message: "cannot write: No space left on device" }),
    );
    const err = await upload;
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({ code: 38, call: "virStorageVolUpload", domainName: "VIR_FROM_STORAGE" });
  });

  it("treats a REPLY ERROR for the stream's serial (libvirtd's write failure path) as the stream's error", async () => {
    const { client, daemon } = setup();
    const upload = uploadStream(client, uploadRequest(), Readable.from([Buffer.alloc(10)])).catch(
      (e: unknown) => e,
    );
    const call = await daemon.next();
    daemon.reply(call);
    await daemon.next(); // data
    await daemon.next(); // OK (finish)
    daemon.replyError(call, { code: 1, message: "internal error: write failed" });
    expect(await upload).toMatchObject({ code: 1, codeName: "VIR_ERR_INTERNAL_ERROR" });
  });

  it("aborts the stream with STREAM ERROR and rejects with the source's error when the source fails", async () => {
    const { client, daemon } = setup();
    const boom = new Error("disk read failed");
    async function* source() {
      yield Buffer.alloc(10);
      throw boom;
    }
    const upload = uploadStream(client, uploadRequest(), source(), { chunkSize: 4 }).catch((e: unknown) => e);
    const call = await daemon.next();
    daemon.reply(call);
    const statuses: number[] = [];
    for (;;) {
      const p = await daemon.next();
      statuses.push(p.header.status);
      if (p.header.status === PacketStatus.ERROR) break;
    }
    daemon.stream(call, PacketStatus.OK);
    expect(await upload).toBe(boom);
    expect(statuses).toEqual([PacketStatus.CONTINUE, PacketStatus.CONTINUE, PacketStatus.ERROR]);
    expect(client.inFlight).toBe(0);
  });

  it("does not read ahead of the transport: a peer that stops reading stops the source", async () => {
    const { client, daemon, clientEnd } = setup();
    let pulled = 0;
    async function* source() {
      for (let i = 0; i < 1000; i++) {
        pulled++;
        yield Buffer.alloc(64 * 1024);
      }
    }
    const upload = uploadStream(client, uploadRequest(), source(), { chunkSize: 64 * 1024 }).catch(
      (e: unknown) => e,
    );
    const call = await daemon.next();
    clientEnd.held = [];
    daemon.reply(call);
    // Let the uploader run until it blocks on drain.
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(pulled).toBeLessThanOrEqual(3);
    daemon.drop();
    expect(await upload).toBeInstanceOf(ConnectionClosedError);
  });

  it("a rejected upload call (e.g. no such volume) fails before any data is read", async () => {
    const { client, daemon } = setup();
    let pulled = 0;
    async function* source() {
      pulled++;
      yield Buffer.alloc(1);
    }
    const upload = uploadStream(client, uploadRequest(), source()).catch((e: unknown) => e);
    daemon.replyError(await daemon.next(), { code: 50, domain: 18, message: "Storage volume not found" });
    expect(await upload).toMatchObject({ codeName: "VIR_ERR_NO_STORAGE_VOL" });
    expect(pulled).toBe(0);
  });
});

/** A domain_open_console call of a made-up domain, as the client would send it. */
function consoleRequest(): CallRequest {
  const w = new XdrWriter();
  Procedures.domainOpenConsole.encodeArgs(w, {
    dom: { name: "d", uuid: "00000000-0000-0000-0000-000000000001", id: 1 },
    devName: null,
    flags: 0,
  });
  return { program: REMOTE_PROGRAM, version: 1, proc: 201, body: w.finish(), call: "virDomainOpenConsole" };
}

describe("read streams", () => {
  it("hands the server's data packets to onData in order, and ends when the server sends STREAM OK", async () => {
    const { client, daemon } = setup();
    const got: string[] = [];
    const opening = client.startRead(consoleRequest(), (chunk) => got.push(chunk.toString()));
    const call = await daemon.next();
    expect(call.header).toMatchObject({ type: PacketType.CALL, proc: 201 });
    daemon.reply(call);
    const stream = await opening;
    for (const text of ["Debian GNU/Linux 12 ", "kvmp ttyS0\r\n", "login: "]) {
      daemon.stream(call, PacketStatus.CONTINUE, Buffer.from(text));
    }
    daemon.stream(call, PacketStatus.OK);
    expect(await stream.whenEnded()).toBeNull();
    expect(got.join("")).toBe("Debian GNU/Linux 12 kvmp ttyS0\r\nlogin: ");
    expect(client.inFlight).toBe(0);
  });

  it("data sent in the same chunk as the REPLY is not lost", async () => {
    const { client, daemon } = setup();
    const got: Buffer[] = [];
    const opening = client.startRead(consoleRequest(), (chunk) => got.push(chunk));
    const call = await daemon.next();
    daemon.reply(call);
    daemon.stream(call, PacketStatus.CONTINUE, Buffer.from("early"));
    await opening;
    await new Promise((r) => setImmediate(r));
    expect(Buffer.concat(got).toString()).toBe("early");
  });

  it("ends with the server's LibvirtError when it sends STREAM ERROR", async () => {
    const { client, daemon } = setup();
    const opening = client.startRead(consoleRequest(), () => undefined);
    const call = await daemon.next();
    daemon.reply(call);
    const stream = await opening;
    daemon.stream(call, PacketStatus.ERROR, errorBody({ code: 1, message: "console went away" }));
    expect(await stream.whenEnded()).toMatchObject({ codeName: "VIR_ERR_INTERNAL_ERROR" });
  });

  it("abort() sends STREAM ERROR for the serial, ends the stream, and drops later data", async () => {
    const { client, daemon } = setup();
    const got: Buffer[] = [];
    const opening = client.startRead(consoleRequest(), (chunk) => got.push(chunk));
    const call = await daemon.next();
    daemon.reply(call);
    const stream = await opening;
    const aborting = stream.abort();
    const sent = await daemon.next();
    expect(sent.header).toMatchObject({
      type: PacketType.STREAM,
      status: PacketStatus.ERROR,
      serial: call.header.serial,
    });
    // libvirtd acknowledges an abort with an error reply for the serial.
    daemon.replyError(call, { code: 7, message: "stream aborted at client request" });
    await aborting;
    expect(await stream.whenEnded()).toBeNull();
    daemon.stream(call, PacketStatus.CONTINUE, Buffer.from("late"));
    await new Promise((r) => setImmediate(r));
    expect(got).toEqual([]);
    expect(client.inFlight).toBe(0);
  });

  it("a lost connection ends the stream with a transient error", async () => {
    const { client, daemon } = setup();
    const opening = client.startRead(consoleRequest(), () => undefined);
    const call = await daemon.next();
    daemon.reply(call);
    const stream = await opening;
    daemon.drop();
    const err = await stream.whenEnded();
    expect(err).toBeInstanceOf(ConnectionClosedError);
    expect(isTransient(err)).toBe(true);
  });

  it("a refused open (another client holds the console) rejects and keeps nothing in flight", async () => {
    const { client, daemon } = setup();
    const opening = client.startRead(consoleRequest(), () => undefined).catch((e: unknown) => e);
    daemon.replyError(await daemon.next(), {
      code: 9,
      message: "Active console session exists for this domain",
    });
    expect(await opening).toMatchObject({ codeName: "VIR_ERR_OPERATION_FAILED" });
    expect(client.inFlight).toBe(0);
  });
});
