import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import { encodePacket, PacketDecoder, ProtocolError } from "../../../provider/libvirt";
import {
  MAX_MESSAGE_SIZE,
  PacketStatus,
  PacketType,
  REMOTE_PROGRAM,
} from "../../../provider/libvirt/constants";
import { sealPacket } from "../../../provider/libvirt/packet";
import { prng } from "./fake-daemon";

function packet(serial: number, bodyLength: number): Buffer {
  const body = Buffer.alloc(bodyLength, serial & 0xff);
  return encodePacket(
    { prog: REMOTE_PROGRAM, vers: 1, proc: 23, type: PacketType.REPLY, serial, status: PacketStatus.OK },
    body,
  );
}

function decodeAll(chunks: Buffer[]) {
  const d = new PacketDecoder();
  const out = chunks.flatMap((c) => d.push(c));
  expect(d.pending).toBe(0);
  return out.map((p) => ({ serial: p.header.serial, len: p.body.length, fill: p.body[0] }));
}

// Bodies of 0..9 bytes plus one larger, so splits land inside headers and bodies alike.
const packets = [...Array.from({ length: 10 }, (_, i) => packet(i + 1, i)), packet(11, 70_000)];
const stream = Buffer.concat(packets);
const expected = packets.map((_, i) => ({
  serial: i + 1,
  len: i === 10 ? 70_000 : i,
  fill: i === 0 ? undefined : (i + 1) & 0xff,
}));

describe("packet framing", () => {
  it("writes the length word (counting itself) and the six header words", () => {
    const b = encodePacket(
      { prog: REMOTE_PROGRAM, vers: 1, proc: 66, type: PacketType.CALL, serial: 7, status: PacketStatus.OK },
      Buffer.from([1, 2, 3, 4]),
    );
    expect(b.toString("hex")).toBe(`00000020200080860000000100000042000000000000000700000000${"01020304"}`);
  });

  it("seals a frame in place: the header goes into its first 28 bytes, the body stays", () => {
    const header = {
      prog: REMOTE_PROGRAM,
      vers: 1,
      proc: 66,
      type: PacketType.CALL,
      serial: 7,
      status: PacketStatus.OK,
    };
    const frame = Buffer.concat([Buffer.alloc(28, 0xee), Buffer.from([1, 2, 3, 4])]);
    expect(sealPacket(header, frame)).toBe(frame);
    expect(frame.equals(encodePacket(header, Buffer.from([1, 2, 3, 4])))).toBe(true);
    expect(() => sealPacket(header, Buffer.alloc(27))).toThrow(ProtocolError);
  });

  it("decodes packets fed one byte at a time", () => {
    const bytes = [...stream].map((b) => Buffer.from([b]));
    expect(decodeAll(bytes)).toEqual(expected);
  });

  it.each([1, 2, 3, 4, 5])("decodes packets cut at random places (seed %i)", (seed) => {
    const rand = prng(seed);
    const chunks: Buffer[] = [];
    for (let at = 0; at < stream.length; ) {
      const n = 1 + Math.floor(rand() * 200);
      chunks.push(stream.subarray(at, at + n));
      at += n;
    }
    expect(decodeAll(chunks)).toEqual(expected);
  });

  it("decodes many packets coalesced into one chunk", () => {
    expect(decodeAll([stream])).toEqual(expected);
  });

  it("keeps a partial packet until the rest arrives", () => {
    const d = new PacketDecoder();
    expect(d.push(stream.subarray(0, 30))).toHaveLength(1);
    expect(d.pending).toBe(2);
    expect(d.push(stream.subarray(30, 58))).toHaveLength(1);
  });

  it("accepts the largest packet libvirt allows", () => {
    const d = new PacketDecoder();
    const big = packet(1, MAX_MESSAGE_SIZE - 24);
    expect(d.push(big)).toHaveLength(1);
  });

  it.each([
    ["shorter than the header", 27],
    ["zero", 0],
    ["beyond the maximum packet size", MAX_MESSAGE_SIZE + 5],
  ])("rejects a length %s as a permanent protocol error", (_name, len) => {
    const d = new PacketDecoder();
    const word = Buffer.alloc(4);
    word.writeUInt32BE(len);
    let caught: unknown;
    try {
      d.push(word);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(ProtocolError);
    expect(isTransient(caught)).toBe(false);
  });

  it("refuses to encode a packet beyond the maximum", () => {
    expect(() => packet(1, MAX_MESSAGE_SIZE)).toThrow(ProtocolError);
  });
});
