import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import { ProtocolError, REMOTE_STRING_MAX, XdrReader, XdrWriter } from "../../../provider/libvirt";
import { readDomain, uuidFromBytes, uuidToBytes, writeDomain } from "../../../provider/libvirt/codec";

type Case = {
  name: string;
  write: (w: XdrWriter) => void;
  read: (r: XdrReader) => unknown;
  expected: unknown;
  hex?: string;
};

const cases: Case[] = [
  { name: "int 0", write: (w) => w.int(0), read: (r) => r.int(), expected: 0, hex: "00000000" },
  { name: "int -1", write: (w) => w.int(-1), read: (r) => r.int(), expected: -1, hex: "ffffffff" },
  { name: "int min", write: (w) => w.int(-0x80000000), read: (r) => r.int(), expected: -0x80000000 },
  { name: "int max", write: (w) => w.int(0x7fffffff), read: (r) => r.int(), expected: 0x7fffffff },
  { name: "uint max", write: (w) => w.uint(0xffffffff), read: (r) => r.uint(), expected: 0xffffffff },
  {
    name: "hyper min",
    write: (w) => w.hyper(-(1n << 63n)),
    read: (r) => r.hyper(),
    expected: -(1n << 63n),
    hex: "8000000000000000",
  },
  { name: "hyper from number", write: (w) => w.hyper(-5), read: (r) => r.hyperNumber(), expected: -5 },
  {
    name: "uhyper max",
    write: (w) => w.uhyper((1n << 64n) - 1n),
    read: (r) => r.uhyper(),
    expected: (1n << 64n) - 1n,
  },
  {
    name: "uhyper 1 GiB as number",
    write: (w) => w.uhyper(1024 ** 3),
    read: (r) => r.uhyperNumber(),
    expected: 1024 ** 3,
    hex: "0000000040000000",
  },
  { name: "bool true", write: (w) => w.bool(true), read: (r) => r.bool(), expected: true, hex: "00000001" },
  { name: "bool false", write: (w) => w.bool(false), read: (r) => r.bool(), expected: false },
  {
    name: "empty string",
    write: (w) => w.string(""),
    read: (r) => r.string(),
    expected: "",
    hex: "00000000",
  },
  {
    name: "string padded to 4",
    write: (w) => w.string("abc"),
    read: (r) => r.string(),
    expected: "abc",
    hex: "0000000361626300",
  },
  {
    name: "string of exactly 4",
    write: (w) => w.string("abcd"),
    read: (r) => r.string(),
    expected: "abcd",
    hex: "0000000461626364",
  },
  {
    name: "string of 5 (3 pad bytes)",
    write: (w) => w.string("abcde"),
    read: (r) => r.string(),
    expected: "abcde",
    hex: "000000056162636465000000",
  },
  { name: "UTF-8 string", write: (w) => w.string("é✓"), read: (r) => r.string(), expected: "é✓" },
  {
    name: "variable opaque",
    write: (w) => w.opaque(Buffer.from([1, 2, 3, 4, 5]), 16),
    read: (r) => [...r.opaque(16)],
    expected: [1, 2, 3, 4, 5],
    hex: "000000050102030405000000",
  },
  {
    name: "fixed opaque (no length)",
    write: (w) => w.fixedOpaque(Buffer.from([9, 8, 7]), 3),
    read: (r) => [...r.fixedOpaque(3)],
    expected: [9, 8, 7],
    hex: "09080700",
  },
  {
    name: "optional absent",
    write: (w) => w.optional(null as string | null, (w2, v) => w2.string(v)),
    read: (r) => r.optional((r2) => r2.string()),
    expected: null,
    hex: "00000000",
  },
  {
    name: "optional present",
    write: (w) => w.optional("x", (w2, v) => w2.string(v)),
    read: (r) => r.optional((r2) => r2.string()),
    expected: "x",
    hex: "000000010000000178000000",
  },
  {
    name: "array of ints",
    write: (w) => w.array([3, -4], 20, (w2, v) => w2.int(v)),
    read: (r) => r.array(20, (r2) => r2.int()),
    expected: [3, -4],
    hex: "0000000200000003fffffffc",
  },
  {
    name: "array of strings",
    write: (w) => w.array(["a", "bcde", ""], 5, (w2, v) => w2.string(v)),
    read: (r) => r.array(5, (r2) => r2.string()),
    expected: ["a", "bcde", ""],
  },
  {
    name: "remote_nonnull_domain",
    write: (w) => writeDomain(w, { name: "kvmp-a", uuid: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", id: -1 }),
    read: readDomain,
    expected: { name: "kvmp-a", uuid: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", id: -1 },
  },
];

describe("XDR round trips", () => {
  it.each(cases)("$name", ({ write, read, expected, hex }) => {
    const w = new XdrWriter(4);
    write(w);
    const bytes = w.finish();
    expect(bytes.length % 4).toBe(0);
    if (hex) expect(bytes.toString("hex")).toBe(hex);
    const r = new XdrReader(bytes);
    expect(read(r)).toEqual(expected);
    r.end();
  });

  it("grows the writer geometrically and keeps every byte", () => {
    const w = new XdrWriter(1);
    for (let i = 0; i < 10_000; i++) w.string(`item-${i}`);
    const r = new XdrReader(w.finish());
    for (let i = 0; i < 10_000; i++) expect(r.string()).toBe(`item-${i}`);
    r.end();
  });

  it("UUIDs convert between the 16 wire bytes and the canonical string", () => {
    const s = "00112233-4455-6677-8899-aabbccddeeff";
    expect(uuidToBytes(s).toString("hex")).toBe("00112233445566778899aabbccddeeff");
    expect(uuidFromBytes(uuidToBytes(s.toUpperCase()))).toBe(s);
    // Every byte value maps to its two digits.
    const all = Buffer.from(Array.from({ length: 16 }, (_, i) => i * 17));
    expect(uuidFromBytes(all)).toBe("00112233-4455-6677-8899-aabbccddeeff");
    expect(() => uuidFromBytes(Buffer.alloc(15))).toThrow(ProtocolError);
  });

  it("headroom: bytes left free before the data, outside finish() and inside finishFrame()", () => {
    const w = new XdrWriter(4, 28);
    w.string("grows past the initial size").uint(7);
    expect(w.length).toBe(4 + 28 + 4);
    const frame = w.finishFrame();
    expect(frame.length).toBe(28 + w.length);
    const body = w.finish();
    expect(body.equals(frame.subarray(28))).toBe(true);
    const r = new XdrReader(body);
    expect(r.string()).toBe("grows past the initial size");
    expect(r.uint()).toBe(7);
    r.end();
  });

  it("fixedOpaqueView reads like fixedOpaque (padding included) without copying", () => {
    const packet = new XdrWriter()
      .fixedOpaque(Buffer.from([1, 2, 3]), 3)
      .uint(9)
      .finish();
    const r = new XdrReader(packet);
    const v = r.fixedOpaqueView(3);
    expect([...v]).toEqual([1, 2, 3]);
    expect(v.buffer).toBe(packet.buffer);
    expect(r.uint()).toBe(9);
    expect(() => new XdrReader(Buffer.alloc(2)).fixedOpaqueView(3)).toThrow(ProtocolError);
  });
});

describe("XDR rejects malformed input with a permanent ProtocolError", () => {
  const hex = (h: string) => new XdrReader(Buffer.from(h, "hex"));
  it.each([
    ["truncated int", () => hex("000000").int()],
    ["truncated hyper", () => hex("00000000000000").hyper()],
    ["string shorter than its length", () => hex("0000000561626364").string()],
    ["string longer than its maximum", () => hex("0000000561626364650000").string(4)],
    [
      "string longer than REMOTE_STRING_MAX",
      () => hex((REMOTE_STRING_MAX + 1).toString(16).padStart(8, "0")).string(),
    ],
    ["opaque longer than its maximum", () => hex("00000003010203").opaque(2)],
    ["array longer than its maximum", () => hex("00000003000000010000000200000003").array(2, (r) => r.int())],
    ["array count the body cannot hold", () => hex("7fffffff").array(0x7fffffff, (r) => r.int())],
    ["bool that is neither 0 nor 1", () => hex("00000002").bool()],
    ["uhyper beyond the safe integer range", () => hex("0020000000000000").uhyperNumber()],
    ["trailing bytes after the struct", () => hex("0000000100000002").end()],
    ["uuid that is not one", () => uuidToBytes("not-a-uuid")],
  ])("%s", (_name, fn) => {
    let caught: unknown;
    try {
      fn();
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(ProtocolError);
    expect(isTransient(caught)).toBe(false);
  });

  it.each([
    ["int out of range", (w: XdrWriter) => w.int(2 ** 31)],
    ["non-integer int", (w: XdrWriter) => w.int(1.5)],
    ["negative uint", (w: XdrWriter) => w.uint(-1)],
    ["negative uhyper", (w: XdrWriter) => w.uhyper(-1n)],
    ["hyper beyond 64 bits", (w: XdrWriter) => w.hyper(1n << 63n)],
    ["string beyond its maximum", (w: XdrWriter) => w.string("abcde", 4)],
    ["opaque beyond its maximum", (w: XdrWriter) => w.opaque(Buffer.alloc(5), 4)],
    ["fixed opaque of the wrong size", (w: XdrWriter) => w.fixedOpaque(Buffer.alloc(15), 16)],
    ["array beyond its maximum", (w: XdrWriter) => w.array([1, 2, 3], 2, (w2, v) => w2.int(v))],
  ])("writer refuses %s", (_name, fn) => {
    expect(() => fn(new XdrWriter())).toThrow(ProtocolError);
  });
});
