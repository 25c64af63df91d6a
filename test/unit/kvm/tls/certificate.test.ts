/**
 * The proxy's CA and leaf certificates (provider/kvm/tls/certificate.ts) read
 * back with Node's X509Certificate: names, CA flag, issuer and signature,
 * validity, serial numbers, the extensions' bytes; the pins; and the input
 * rules. What OpenSSL, GnuTLS, Go, Python and curl make of them, the name
 * constraints included, and a real squid serving the leaf:
 * test/libvirtd/tls/certificate-readers.test.ts.
 */
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  X509Certificate,
} from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  CA_VALIDITY_DAYS,
  CLOCK_SKEW_MS,
  certificateFingerprint,
  issueLeaf,
  LEAF_VALIDITY_DAYS,
  leafAddressesProblem,
  makeCa,
  NODE_RANDOMNESS,
  publicKeyPin,
  type Randomness,
} from "../../../../provider/kvm/tls/certificate";
import { childrenOf, type DerElement, oid, readElement } from "../../../../provider/kvm/tls/der";

const NOW = new Date("2026-03-04T05:06:07.890Z");
const DAY = 24 * 60 * 60 * 1000;

/** Randomness that hands out the given keys and serial bytes, and counts. */
function fixed(serialBytes: Buffer): Randomness & { keys: ReturnType<typeof generateKeyPairSync>[] } {
  const keys: ReturnType<typeof generateKeyPairSync>[] = [];
  return {
    keys,
    keyPair: () => {
      const k = generateKeyPairSync("ec", { namedCurve: "P-256" });
      keys.push(k);
      return k;
    },
    serialBytes: () => Buffer.from(serialBytes),
  };
}

/** A certificate's extensions by the hex of their OID's encoding: critical flag and value. */
function extensionsOf(pem: string): Map<string, { critical: boolean; value: Buffer }> {
  // Certificate → tbsCertificate → [3] → Extensions → Extension { extnID, critical?, extnValue }.
  const tbs = childrenOf(readElement(new X509Certificate(pem).raw))[0] as DerElement;
  const wrapped = childrenOf(tbs).find((e) => e.tag === 0xa3) as DerElement;
  const out = new Map<string, { critical: boolean; value: Buffer }>();
  for (const extension of childrenOf(childrenOf(wrapped)[0] as DerElement)) {
    const parts = childrenOf(extension);
    const [id, value] = [parts[0] as DerElement, parts[parts.length - 1] as DerElement];
    out.set(id.encoded.toString("hex"), {
      critical: parts[1]?.tag === 0x01 && parts[1].contents[0] === 0xff,
      value: value.contents,
    });
  }
  return out;
}
const ext = (pem: string, dotted: string) => extensionsOf(pem).get(oid(dotted).toString("hex"));

/** SHA-1 of a certificate's public key bits (its uncompressed point), hex: RFC 5280's key identifier. */
function keyId(pem: string): string {
  const jwk = new X509Certificate(pem).publicKey.export({ format: "jwk" });
  const point = [
    Buffer.from([4]),
    Buffer.from(jwk.x as string, "base64url"),
    Buffer.from(jwk.y as string, "base64url"),
  ];
  return createHash("sha1").update(Buffer.concat(point)).digest("hex");
}

const CA = makeCa({ commonName: "kvm-proxy CA edge-1", now: NOW });
const LEAF = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.7", "2001:db8::1"], now: NOW });

describe("makeCa", () => {
  const x = new X509Certificate(CA.certificatePem);

  it("is a self-signed CA named by its commonName", () => {
    expect(x.ca).toBe(true);
    expect(x.subject).toBe("CN=kvm-proxy CA edge-1");
    expect(x.issuer).toBe(x.subject);
    expect(x.checkIssued(x)).toBe(true);
    expect(x.verify(x.publicKey)).toBe(true);
    expect(x.checkPrivateKey(createPrivateKey(CA.privateKeyPem))).toBe(true);
    expect(x.publicKey.asymmetricKeyDetails).toEqual({ namedCurve: "prime256v1" });
    expect(CA.privateKeyPem).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
  });

  it("is valid from an hour before now (in whole seconds) for ten years", () => {
    expect(new Date(x.validFrom).getTime()).toBe(Math.floor((NOW.getTime() - CLOCK_SKEW_MS) / 1000) * 1000);
    expect(new Date(x.validTo).getTime()).toBe(
      Math.floor((NOW.getTime() + CA_VALIDITY_DAYS * DAY) / 1000) * 1000,
    );
    expect(CA_VALIDITY_DAYS).toBeGreaterThanOrEqual(3650);
  });

  it("holds basicConstraints CA:TRUE pathLen 0 and keyUsage keyCertSign, cRLSign, both critical", () => {
    expect(ext(CA.certificatePem, "2.5.29.19")).toEqual({
      critical: true,
      value: Buffer.from("30060101ff020100", "hex"),
    });
    expect(ext(CA.certificatePem, "2.5.29.15")).toEqual({
      critical: true,
      value: Buffer.from("03020106", "hex"),
    });
  });

  it("names its key: subjectKeyIdentifier is SHA-1 of the public key's bits", () => {
    const ski = ext(CA.certificatePem, "2.5.29.14");
    expect(ski?.critical).toBe(false);
    expect(ski?.value.toString("hex")).toBe(`0414${keyId(CA.certificatePem)}`);
  });

  it("limits itself to IP addresses: critical name constraints, every IPv4 and IPv6 address and the dNSName 'invalid' permitted, every dNSName excluded", () => {
    const nc = ext(CA.certificatePem, "2.5.29.30");
    expect(nc?.critical).toBe(true);
    const permitted = [
      `300a8708${"00".repeat(8)}`, // iPAddress 0.0.0.0/0
      `30228720${"00".repeat(32)}`, // iPAddress ::/0
      `30098207${Buffer.from("invalid").toString("hex")}`, // dNSName invalid
    ].join("");
    const excluded = "30028200"; // dNSName ""
    expect(nc?.value.toString("hex")).toBe(`3043a03b${permitted}a104${excluded}`);
  });

  it("takes its key and serial from the injected randomness: positive, non-zero, 16 bytes", () => {
    for (const first of [0x00, 0xff, 0x80, 0x3f]) {
      const random = fixed(Buffer.from([first, ...Array(15).fill(0)]));
      const made = new X509Certificate(makeCa({ commonName: "c", now: NOW, random }).certificatePem);
      expect(made.serialNumber).toHaveLength(32);
      expect(Number.parseInt(made.serialNumber.slice(0, 2), 16)).toBe((first & 0x7f) | 0x40);
      expect(made.publicKey.equals(random.keys[0]?.publicKey as never)).toBe(true);
    }
  });

  it("refuses serial bytes of another length than 16", () => {
    const random = { ...NODE_RANDOMNESS, serialBytes: () => Buffer.alloc(8, 1) };
    expect(() => makeCa({ commonName: "c", now: NOW, random })).toThrow(/16 random bytes/);
  });

  it("writes notAfter from 2050 on as GeneralizedTime, which readers take", () => {
    const late = new X509Certificate(
      makeCa({ commonName: "t", now: new Date("2045-01-01T00:00:00Z") }).certificatePem,
    );
    expect(late.validFrom).toBe("Dec 31 23:00:00 2044 GMT");
    expect(new Date(late.validTo).getUTCFullYear()).toBe(2055);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ["an empty commonName", { commonName: "" }, /commonName must be a non-empty string/],
    ["a blank commonName", { commonName: "  " }, /commonName must be a non-empty string/],
    ["a commonName over 64 characters", { commonName: "x".repeat(65) }, /at most 64/],
    ["a control character", { commonName: "a\nb" }, /control characters/],
    ["an invalid date", { now: new Date("x") }, /now must be a valid Date/],
    ["no validity days", { validityDays: 0 }, /validityDays/],
    ["a fraction of a day", { validityDays: 1.5 }, /validityDays/],
    ["over a century", { validityDays: 36501 }, /validityDays/],
  ])("refuses %s", (_name, change, reason) => {
    expect(() => makeCa({ commonName: "c", now: NOW, ...change } as never)).toThrow(reason);
  });
});

describe("issueLeaf", () => {
  const x = new X509Certificate(LEAF.certificatePem);
  const ca = new X509Certificate(CA.certificatePem);

  it("names every IP address, IPv4 as 4 bytes and IPv6 as 16, in a critical subjectAltName and nothing else", () => {
    expect(x.subjectAltName).toBe("IP Address:203.0.113.7, IP Address:2001:DB8:0:0:0:0:0:1");
    expect(x.checkIP("203.0.113.7")).toBe("203.0.113.7");
    expect(x.checkIP("2001:db8::1")).toBe("2001:db8::1");
    expect(x.checkIP("203.0.113.8")).toBeUndefined();
    expect(ext(LEAF.certificatePem, "2.5.29.17")).toEqual({
      critical: true,
      value: Buffer.from("30188704cb0071078710" + "20010db8000000000000000000000001", "hex"),
    });
    // An empty subject: no commonName for GnuTLS to hold against the CA's DNS constraints.
    expect(x.toLegacyObject().subject).toEqual({});
  });

  it("is issued and signed by the CA, and is no CA itself", () => {
    expect(x.ca).toBe(false);
    expect(x.issuer).toBe(ca.subject);
    expect(x.checkIssued(ca)).toBe(true);
    expect(x.verify(ca.publicKey)).toBe(true);
    expect(x.verify(x.publicKey)).toBe(false);
    expect(ext(LEAF.certificatePem, "2.5.29.19")).toEqual({
      critical: true,
      value: Buffer.from("3000", "hex"),
    });
  });

  it("is for TLS servers: keyUsage digitalSignature (critical), extKeyUsage serverAuth", () => {
    expect(ext(LEAF.certificatePem, "2.5.29.15")).toEqual({
      critical: true,
      value: Buffer.from("03020780", "hex"),
    });
    expect(x.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"]);
  });

  it("has a key of its own, and names it and the CA's", () => {
    const key = createPrivateKey(LEAF.privateKeyPem);
    expect(x.checkPrivateKey(key)).toBe(true);
    expect(ca.checkPrivateKey(key)).toBe(false);
    expect(ext(LEAF.certificatePem, "2.5.29.14")?.value.toString("hex")).toBe(
      `0414${keyId(LEAF.certificatePem)}`,
    );
    expect(ext(LEAF.certificatePem, "2.5.29.35")?.value.toString("hex")).toBe(
      `30168014${keyId(CA.certificatePem)}`,
    );
  });

  it("lives ten years from an hour ago, but no longer than its CA", () => {
    expect(new Date(x.validFrom).getTime()).toBe(Math.floor((NOW.getTime() - CLOCK_SKEW_MS) / 1000) * 1000);
    expect(LEAF_VALIDITY_DAYS).toBeGreaterThanOrEqual(3650);
    // Issued the same second as the CA: both end together.
    expect(x.validTo).toBe(ca.validTo);
    const later = new Date(NOW.getTime() + 100 * DAY);
    const capped = new X509Certificate(
      issueLeaf({ ca: CA, ipAddresses: ["192.0.2.1"], now: later }).certificatePem,
    );
    expect(capped.validTo).toBe(ca.validTo);
    const short = new X509Certificate(
      issueLeaf({ ca: CA, ipAddresses: ["192.0.2.1"], now: later, validityDays: 30 }).certificatePem,
    );
    expect(new Date(short.validTo).getTime()).toBe(later.getTime() - (later.getTime() % 1000) + 30 * DAY);
  });

  it("lists an address once, and takes serial and key from the injected randomness", () => {
    const random = fixed(Buffer.alloc(16, 0xab));
    const made = issueLeaf({ ca: CA, ipAddresses: ["192.0.2.1", "192.0.2.1", "::1"], now: NOW, random });
    const leaf = new X509Certificate(made.certificatePem);
    expect(leaf.subjectAltName).toBe("IP Address:192.0.2.1, IP Address:0:0:0:0:0:0:0:1");
    expect(leaf.serialNumber).toBe(`6B${"AB".repeat(15)}`);
    expect(leaf.publicKey.equals(random.keys[0]?.publicKey as never)).toBe(true);
  });

  const other = makeCa({ commonName: "other", now: NOW });
  it.each<[string, Record<string, unknown>, RegExp]>([
    ["no addresses", { ipAddresses: [] }, /at least one IP address/],
    ["addresses not in a list", { ipAddresses: "203.0.113.7" }, /at least one IP address/],
    [
      "a DNS name",
      { ipAddresses: ["proxy.example.com"] },
      /ipAddresses\[0\] must be an IPv4 or IPv6 address/,
    ],
    ["a CIDR", { ipAddresses: ["203.0.113.7/24"] }, /ipAddresses\[0\].*without a prefix length/],
    [
      "IPv6 not in canonical text",
      { ipAddresses: ["192.0.2.1", "2001:DB8::1"] },
      /ipAddresses\[1\].*canonical form: write it as 2001:db8::1/,
    ],
    ["an IPv4-mapped address", { ipAddresses: ["::ffff:192.0.2.1"] }, /IPv4-mapped/],
    ["a CA that is no CA", { ca: LEAF }, /not a CA/],
    [
      "another CA's key",
      { ca: { certificatePem: CA.certificatePem, privateKeyPem: other.privateKeyPem } },
      /not the CA certificate's key/,
    ],
    [
      "a CA certificate that does not parse",
      { ca: { ...CA, certificatePem: "nope" } },
      /CA certificate does not parse/,
    ],
    ["a CA key that does not parse", { ca: { ...CA, privateKeyPem: "nope" } }, /CA key does not parse/],
    [
      "a CA that expired",
      { now: new Date(NOW.getTime() + (CA_VALIDITY_DAYS + 1) * DAY) },
      /the CA expired at/,
    ],
    ["no validity days", { validityDays: 0 }, /validityDays/],
  ])("refuses %s", (_name, change, reason) => {
    expect(() => issueLeaf({ ca: CA, ipAddresses: ["192.0.2.1"], now: NOW, ...change } as never)).toThrow(
      reason,
    );
  });

  it("names what it refuses in leafAddressesProblem too", () => {
    expect(leafAddressesProblem(["192.0.2.1", "2001:db8::1"])).toBeUndefined();
    expect(leafAddressesProblem(["192.0.2.1", "x"])).toMatch(/^ipAddresses\[1\] /);
  });
});

describe("pins", () => {
  const x = new X509Certificate(LEAF.certificatePem);

  it("certificateFingerprint: SHA-256 of the DER in colon-separated upper-case hex", () => {
    const digest = createHash("sha256").update(x.raw).digest("hex").toUpperCase();
    expect(certificateFingerprint(LEAF.certificatePem)).toBe(digest.match(/../g)?.join(":"));
  });

  it("publicKeyPin: sha256// and the base64 SHA-256 of the leaf key's SPKI, as curl takes it", () => {
    const key = createPrivateKey(LEAF.privateKeyPem);
    const spki = createPublicKey(key).export({ type: "spki", format: "der" });
    expect(publicKeyPin(LEAF.certificatePem)).toBe(
      `sha256//${createHash("sha256").update(spki).digest("base64")}`,
    );
    expect(publicKeyPin(LEAF.certificatePem)).not.toBe(publicKeyPin(CA.certificatePem));
  });
});
