/**
 * The DER writer of the proxy's certificates (provider/kvm/tls/der.ts): each
 * ASN.1 type against encodings worked out from X.690 and RFC 5280 by hand,
 * and the reading step that finds a certificate's parts. What real readers
 * make of the certificates built with it: tls-certificate.test.ts (Node's
 * X509Certificate) and test/libvirtd/tls/ (OpenSSL, GnuTLS, Go, Python, curl).
 */
import { describe, expect, it } from "vitest";
import {
  bitString,
  boolean,
  childrenOf,
  explicit,
  ia5String,
  implicit,
  integer,
  namedBits,
  octetString,
  oid,
  readElement,
  sequence,
  set,
  time,
  utf8String,
} from "../../../../provider/kvm/tls/der";

const hex = (b: Buffer) => b.toString("hex");

describe("integer", () => {
  it.each<[string, bigint | number | Uint8Array, string]>([
    ["zero", 0, "020100"],
    ["127: one byte", 127, "02017f"],
    ["128: a zero byte keeps it positive", 128, "02020080"],
    ["256", 256, "02020100"],
    ["2^64 as a bigint", 2n ** 64n, "0209010000000000000000"],
    ["bytes with leading zeros, trimmed", Buffer.from([0, 0, 0x12, 0x34]), "02021234"],
    ["bytes with leading zeros before a high bit: one zero kept", Buffer.from([0, 0, 0x80]), "02020080"],
    ["all-zero bytes", Buffer.from([0, 0]), "020100"],
    ["16 bytes with the top bit clear", Buffer.alloc(16, 0x41), `0210${"41".repeat(16)}`],
  ])("%s", (_name, value, expected) => {
    expect(hex(integer(value))).toBe(expected);
  });

  it("refuses a negative integer", () => {
    expect(() => integer(-1)).toThrow(/negative/);
  });
});

describe("oid", () => {
  it.each([
    ["1.2.840.10045.4.3.2", "06082a8648ce3d040302"], // ecdsa-with-SHA256
    ["2.5.29.19", "0603551d13"], // basicConstraints
    ["1.3.6.1.5.5.7.3.1", "06082b06010505070301"], // serverAuth
    ["2.999.3", "0603883703"], // X.690 8.19.5's example: a first arc of 2 with a large second
    ["0.0", "060100"],
  ])("%s", (dotted, expected) => {
    expect(hex(oid(dotted))).toBe(expected);
  });

  it.each(["", "1", "3.1", "1.40", "1.2.", "1.02", "a.b"])("refuses %j", (dotted) => {
    expect(() => oid(dotted)).toThrow(/der\.oid/);
  });
});

describe("lengths", () => {
  it.each([
    [127, "047f"],
    [128, "048180"],
    [255, "0481ff"],
    [256, "04820100"],
    [65536, "0483010000"],
  ])("an OCTET STRING of %i bytes starts %s", (n, head) => {
    const encoded = octetString(Buffer.alloc(n));
    expect(hex(encoded.subarray(0, head.length / 2))).toBe(head);
    expect(encoded.length).toBe(head.length / 2 + n);
  });
});

describe("time (RFC 5280's rule: UTCTime for 1950-2049, GeneralizedTime otherwise)", () => {
  it.each([
    ["2049-12-31T23:59:59Z", "170d", "491231235959Z"],
    ["2050-01-01T00:00:00Z", "180f", "20500101000000Z"],
    ["1950-01-01T00:00:00Z", "170d", "500101000000Z"],
    ["1949-12-31T23:59:59Z", "180f", "19491231235959Z"],
    ["2030-06-15T12:34:56.789Z", "170d", "300615123456Z"], // milliseconds dropped
    ["2005-02-03T04:05:06Z", "170d", "050203040506Z"],
  ])("%s", (iso, head, text) => {
    const encoded = time(new Date(iso));
    expect(hex(encoded.subarray(0, 2))).toBe(head);
    expect(encoded.subarray(2).toString("ascii")).toBe(text);
  });

  it("refuses an invalid date, and a year past 9999", () => {
    expect(() => time(new Date("not a date"))).toThrow(/valid date/);
    expect(() => time(new Date("+010000-01-01T00:00:00Z"))).toThrow(/four-digit/);
  });
});

describe("bit strings", () => {
  it.each<[string, number[], string]>([
    ["no bits", [], "030100"],
    ["digitalSignature (bit 0)", [0], "03020780"],
    ["keyCertSign and cRLSign (bits 5, 6)", [5, 6], "03020106"],
    ["bits 0 and 8: a second byte", [0, 8], "0303078080"],
    ["bit 7: no unused bits", [7], "03020001"],
  ])("named bits: %s", (_name, bits, expected) => {
    expect(hex(namedBits(bits))).toBe(expected);
  });

  it("refuses a negative bit", () => {
    expect(() => namedBits([0, -1])).toThrow(/bits are numbers >= 0/);
  });

  it("whole bytes", () => {
    expect(hex(bitString(Buffer.from([1, 2])))).toBe("0303000102");
  });
});

describe("the other types", () => {
  it.each<[string, () => Buffer, string]>([
    ["TRUE is 0xff", () => boolean(true), "0101ff"],
    ["FALSE", () => boolean(false), "010100"],
    ["an empty SEQUENCE", () => sequence(), "3000"],
    ["a SEQUENCE keeps its order", () => sequence(integer(2), integer(1)), "3006020102020101"],
    ["a SET sorts its members", () => set(integer(2), integer(1)), "3106020101020102"],
    ["UTF8String", () => utf8String("é"), "0c02c3a9"],
    ["IA5String", () => ia5String("invalid"), "1607696e76616c6964"],
    ["[0] EXPLICIT", () => explicit(0, integer(2)), "a003020102"],
    ["[3] EXPLICIT", () => explicit(3, sequence()), "a3023000"],
    [
      "[7] IMPLICIT OCTET STRING (an iPAddress)",
      () => implicit(7, octetString(Buffer.from([192, 0, 2, 1]))),
      "8704c0000201",
    ],
    ["[2] IMPLICIT IA5String (an empty dNSName)", () => implicit(2, ia5String("")), "8200"],
    ["[0] IMPLICIT SEQUENCE stays constructed", () => implicit(0, sequence(integer(1))), "a003020101"],
  ])("%s", (_name, make, expected) => {
    expect(hex(make())).toBe(expected);
  });

  it("refuses non-ASCII in an IA5String and context tags past 30", () => {
    expect(() => ia5String("é")).toThrow(/ASCII/);
    expect(() => explicit(31, sequence())).toThrow(/0-30/);
  });
});

describe("readElement and childrenOf", () => {
  it("find the parts of what the writer wrote, short and long lengths alike", () => {
    const parts = [
      integer(1),
      octetString(Buffer.alloc(200, 7)),
      sequence(),
      implicit(7, octetString(Buffer.alloc(16))),
    ];
    const outer = readElement(Buffer.concat([sequence(...parts), Buffer.from([0xff])]));
    expect(outer.tag).toBe(0x30);
    const children = childrenOf(outer);
    expect(children.map((c) => c.tag)).toEqual([0x02, 0x04, 0x30, 0x87]);
    expect(children.map((c) => hex(c.encoded))).toEqual(parts.map(hex));
    expect(children[1]?.contents).toEqual(Buffer.alloc(200, 7));
  });

  it.each([
    ["a truncated element", "30", /truncated element/],
    ["truncated contents", "300502", /truncated contents/],
    ["a truncated length", "3082", /truncated length/],
    ["an indefinite length", "3080", /indefinite/],
    ["a length of five bytes", "30850000000001", /over-long/],
    ["a multi-byte tag", "1f0100", /multi-byte tag/],
  ])("refuses %s", (_name, bytes, reason) => {
    expect(() => readElement(Buffer.from(bytes, "hex"))).toThrow(reason);
  });
});
