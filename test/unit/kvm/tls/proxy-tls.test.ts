/**
 * The proxy's TLS (provider/kvm/tls/proxy-tls.ts): `proxy.tls` as given
 * (every shape accepted and refused, failures named by property, never
 * quoting a certificate or key), what squid serves for it, its public part,
 * and how a probe judges the certificate a proxy presented. Certificates are
 * made with certificate.ts (tested in tls-certificate.test.ts) and, for keys
 * it does not sign with, built here with der.ts and node:crypto.
 */
import { createPrivateKey, generateKeyPairSync, type KeyObject, sign, X509Certificate } from "node:crypto";
import { describe, expect, it } from "vitest";
import { issueLeaf, makeCa } from "../../../../provider/kvm/tls/certificate";
import {
  bitString,
  boolean,
  explicit,
  integer,
  octetString,
  oid,
  sequence,
  set,
  time,
  utf8String,
} from "../../../../provider/kvm/tls/der";
import {
  issuedAtCreate,
  type ProxyTls,
  peerProblem,
  readProxyTls,
  servedTls,
  tlsPublic,
} from "../../../../provider/kvm/tls/proxy-tls";
import { Failures } from "../../../../provider/kvm/validation";

// readProxyTls judges expiry by the clock: the fixtures are made now.
const NOW = new Date();
const DAY = 24 * 60 * 60 * 1000;
const IP = "203.0.113.7";

const CA = makeCa({ commonName: "kvm-proxy CA edge", now: NOW });
const OTHER_CA = makeCa({ commonName: "kvm-proxy CA other", now: NOW });
const LEAF = issueLeaf({ ca: CA, ipAddresses: [IP], now: NOW });
const EXPIRED_LEAF = issueLeaf({
  ca: CA,
  ipAddresses: [IP],
  now: new Date(NOW.getTime() - 30 * DAY),
  validityDays: 1,
});
const EXPIRED_CA = makeCa({ commonName: "old", now: new Date(NOW.getTime() - 30 * DAY), validityDays: 1 });

/**
 * A self-signed CA certificate (CA:TRUE) for a key certificate.ts does not
 * sign with: signed with that key under `signatureOid` (no parameters).
 */
function foreignCa(keys: { privateKey: KeyObject; publicKey: KeyObject }, signatureOid: string): string {
  const algorithm = sequence(oid(signatureOid));
  const name = sequence(set(sequence(oid("2.5.4.3"), utf8String("foreign CA"))));
  const tbs = sequence(
    explicit(0, integer(2)),
    integer(0x4242),
    algorithm,
    name,
    sequence(time(new Date(NOW.getTime() - DAY)), time(new Date(NOW.getTime() + 365 * DAY))),
    name,
    keys.publicKey.export({ type: "spki", format: "der" }),
    explicit(3, sequence(sequence(oid("2.5.29.19"), boolean(true), octetString(sequence(boolean(true)))))),
  );
  const der = sequence(tbs, algorithm, bitString(sign("sha256", tbs, keys.privateKey)));
  const lines = der.toString("base64").match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

/** A CA pair of the given key type, signed with it (its OID: sha256WithRSAEncryption, ecdsa-with-SHA256, dsa-with-SHA256). */
function caOf(type: "rsa" | "dsa" | "ec", options: object, signatureOid: string) {
  const keys = generateKeyPairSync(type as never, options as never) as unknown as {
    privateKey: KeyObject;
    publicKey: KeyObject;
  };
  return {
    certificate: foreignCa(keys, signatureOid),
    privateKey: keys.privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
  };
}
const RSA_CA = caOf("rsa", { modulusLength: 2048 }, "1.2.840.113549.1.1.11");
const P384_CA = caOf("ec", { namedCurve: "P-384" }, "1.2.840.10045.4.3.2");
const BRAINPOOL_CA = caOf("ec", { namedCurve: "brainpoolP256r1" }, "1.2.840.10045.4.3.2");
const DSA_CA = caOf("dsa", { modulusLength: 2048 }, "2.16.840.1.101.3.4.3.2");
const RSA_KEY = generateKeyPairSync("rsa", { modulusLength: 2048 })
  .privateKey.export({ type: "pkcs8", format: "pem" })
  .toString();

/** Text that is no PEM, marked so that a failure quoting it shows. */
const NOT_PEM = "s3cr3tMarkerNotPem: no certificate here";
const ARMOURED_GARBAGE = `-----BEGIN CERTIFICATE-----\ns3cr3tMarkerArmouredGarbage\n-----END CERTIFICATE-----\n`;
const NOT_A_KEY = "-----BEGIN PRIVATE KEY-----\ns3cr3tMarkerNotAKey\n-----END PRIVATE KEY-----\n";
const PUBLIC_KEY = createPrivateKey(LEAF.privateKeyPem)
  .export({ type: "pkcs8", format: "pem" })
  .toString()
  .replace(/PRIVATE/g, "PUBLIC");

const served = (certificate: string, privateKey: string) => ({ certificate, privateKey });
const ca = (certificate: string, privateKey: string) => ({ ca: { certificate, privateKey } });

function read(v: unknown): { tls: ReturnType<typeof readProxyTls>; failures: Failures["list"] } {
  const f = new Failures();
  const tls = readProxyTls(f, v);
  return { tls, failures: f.list };
}

describe("readProxyTls accepts", () => {
  it.each<[string, unknown, ReturnType<typeof readProxyTls>]>([
    ["absence (undefined)", undefined, undefined],
    ["absence (null)", null, undefined],
    ["{}: a CA made for the proxy", {}, "make"],
    ["{ca: null}: a CA made for the proxy", { ca: null }, "make"],
    [
      "a CA of the user's, kept as given and not marked as made",
      ca(CA.certificatePem, CA.privateKeyPem),
      ca(CA.certificatePem, CA.privateKeyPem),
    ],
    [
      "the proxy's certificate and key, served as given",
      served(LEAF.certificatePem, LEAF.privateKeyPem),
      served(LEAF.certificatePem, LEAF.privateKeyPem),
    ],
    [
      "a chain with the proxy's certificate first",
      served(LEAF.certificatePem + CA.certificatePem, LEAF.privateKeyPem),
      served(LEAF.certificatePem + CA.certificatePem, LEAF.privateKeyPem),
    ],
    [
      "a key in SEC1 form (BEGIN EC PRIVATE KEY), kept as PKCS#8",
      served(LEAF.certificatePem, sec1(LEAF.privateKeyPem)),
      served(LEAF.certificatePem, LEAF.privateKeyPem),
    ],
    [
      "text around and between the PEM blocks (openssl's attribute lines), kept without it",
      served(
        `Bag Attributes\n    localKeyID: 01\n${LEAF.certificatePem}issuer=CN = x\n${CA.certificatePem}\n`,
        `Key Attributes: <No Attributes>\n${LEAF.privateKeyPem}`,
      ),
      served(LEAF.certificatePem + CA.certificatePem, LEAF.privateKeyPem),
    ],
    [
      "a CA with text around its PEM, kept without it",
      ca(`subject=CN = kvm-proxy CA edge\n${CA.certificatePem}`, `\n${CA.privateKeyPem}\n`),
      ca(CA.certificatePem, CA.privateKeyPem),
    ],
  ])("%s", (_what, v, want) => {
    expect(read(v)).toEqual({ tls: want, failures: [] });
  });
});

function sec1(pkcs8: string): string {
  return createPrivateKey(pkcs8).export({ type: "sec1", format: "pem" }).toString();
}

// Each row: proxy.tls as given → every failure it gets: [property, part of the reason].
const REFUSED: [string, unknown, [string, RegExp][]][] = [
  ["a string", "yes", [["proxy.tls", /must be \{\} \(a CA made for the proxy\), \{ca:/]]],
  ["true", true, [["proxy.tls", /must be \{\}/]]],
  ["a list", [], [["proxy.tls", /must be \{\}/]]],
  ["an unknown field", { keyPair: {} }, [["proxy.tls.keyPair", /unknown property \(known: ca, certificate/]]],
  [
    "a CA and a certificate together",
    { ...ca(CA.certificatePem, CA.privateKeyPem), certificate: LEAF.certificatePem },
    [["proxy.tls.ca", /either ca .* or certificate and privateKey, not both/]],
  ],
  [
    "a CA and a key together",
    { ...ca(CA.certificatePem, CA.privateKeyPem), privateKey: LEAF.privateKeyPem },
    [["proxy.tls.ca", /not both/]],
  ],
  [
    "a certificate without its key",
    { certificate: LEAF.certificatePem },
    [["proxy.tls.privateKey (secret)", /is required/]],
  ],
  [
    "a key without its certificate",
    { privateKey: LEAF.privateKeyPem },
    [["proxy.tls.certificate", /is required/]],
  ],
  [
    "a CA that is no object",
    { ca: CA.certificatePem },
    [["proxy.tls.ca", /must be \{certificate, privateKey\}/]],
  ],
  [
    "a CA without its key",
    { ca: { certificate: CA.certificatePem } },
    [["proxy.tls.ca.privateKey (secret)", /is required/]],
  ],
  [
    "a CA key without its certificate",
    { ca: { privateKey: CA.privateKeyPem } },
    [["proxy.tls.ca.certificate", /is required/]],
  ],
  [
    "an unknown field of the CA",
    { ca: { ...ca(CA.certificatePem, CA.privateKeyPem).ca, chain: "x" } },
    [["proxy.tls.ca.chain", /unknown property/]],
  ],
  [
    "a certificate that is no text",
    served(7 as never, LEAF.privateKeyPem),
    [["proxy.tls.certificate", /PEM text/]],
  ],
  [
    "a key that is no text",
    served(LEAF.certificatePem, { pem: "x" } as never),
    [["proxy.tls.privateKey (secret)", /PEM text/]],
  ],
  [
    "a certificate that is no PEM",
    served(NOT_PEM, LEAF.privateKeyPem),
    [["proxy.tls.certificate", /holds no certificate that parses/]],
  ],
  [
    "PEM armour around no certificate",
    served(ARMOURED_GARBAGE, LEAF.privateKeyPem),
    [["proxy.tls.certificate", /holds no certificate that parses/]],
  ],
  [
    "a key that is no key",
    served(LEAF.certificatePem, NOT_A_KEY),
    [["proxy.tls.privateKey (secret)", /is no private key that parses/]],
  ],
  [
    "a public key for the private one",
    served(LEAF.certificatePem, PUBLIC_KEY),
    [["proxy.tls.privateKey (secret)", /is no private key that parses/]],
  ],
  [
    "a key that is not the certificate's (another EC key)",
    served(LEAF.certificatePem, CA.privateKeyPem),
    [["proxy.tls.privateKey (secret)", /is not the key of proxy\.tls\.certificate/]],
  ],
  [
    "a key that is not the certificate's (an RSA key)",
    served(LEAF.certificatePem, RSA_KEY),
    [["proxy.tls.privateKey (secret)", /is not the key of proxy\.tls\.certificate/]],
  ],
  [
    "a chain with the CA first, the proxy's key",
    served(CA.certificatePem + LEAF.certificatePem, LEAF.privateKeyPem),
    [["proxy.tls.privateKey (secret)", /is not the key of proxy\.tls\.certificate \(the first certificate/]],
  ],
  [
    "an expired certificate",
    served(EXPIRED_LEAF.certificatePem, EXPIRED_LEAF.privateKeyPem),
    [["proxy.tls.certificate", /^expired at .* GMT$/]],
  ],
  [
    "a CA that is no CA (a leaf)",
    ca(LEAF.certificatePem, LEAF.privateKeyPem),
    [["proxy.tls.ca.certificate", /is not a CA \(basicConstraints CA:TRUE\)/]],
  ],
  [
    "a CA with another CA's key",
    ca(CA.certificatePem, OTHER_CA.privateKeyPem),
    [["proxy.tls.ca.privateKey (secret)", /is not the key of proxy\.tls\.ca\.certificate/]],
  ],
  [
    "an expired CA",
    ca(EXPIRED_CA.certificatePem, EXPIRED_CA.privateKeyPem),
    [["proxy.tls.ca.certificate", /^expired at/]],
  ],
  ...(
    [
      ["RSA", RSA_CA],
      ["ECDSA P-384", P384_CA],
      ["ECDSA brainpoolP256r1", BRAINPOOL_CA],
      ["DSA", DSA_CA],
    ] as const
  ).map(([kind, pair]): [string, unknown, [string, RegExp][]] => [
    `a CA whose key is ${kind}`,
    ca(pair.certificate, pair.privateKey),
    [["proxy.tls.ca.privateKey (secret)", /must be an ECDSA P-256 key/]],
  ]),
];

describe("readProxyTls refuses, naming the property", () => {
  it.each(REFUSED)("%s", (_what, v, want) => {
    const { failures } = read(v);
    expect(failures.map((f) => f.property)).toEqual(want.map(([p]) => p));
    for (const [i, [, reason]] of want.entries()) expect(failures[i]?.reason).toMatch(reason);
  });

  it("quotes no line of any certificate or key it was given, nor text given in their place", () => {
    const given = REFUSED.flatMap(([, v]) => pemTexts(v));
    const lines = new Set(
      given.flatMap((t) => t.split("\n")).filter((l) => l.length >= 16 && !l.startsWith("-----")),
    );
    expect(lines.size).toBeGreaterThan(50);
    const said = JSON.stringify(REFUSED.flatMap(([, v]) => read(v).failures));
    expect([...lines].filter((l) => said.includes(l))).toEqual([]);
    expect(said).not.toContain("s3cr3tMarker");
  });
});

/** Every string inside `v`. */
function pemTexts(v: unknown): string[] {
  if (typeof v === "string") return [v];
  if (typeof v !== "object" || v === null) return [];
  return Object.values(v).flatMap(pemTexts);
}

describe("servedTls", () => {
  it("has the CA issue a certificate for the addresses now, with a key of its own", () => {
    const tls = servedTls(ca(CA.certificatePem, CA.privateKeyPem), [IP, "2001:db8::7"], NOW);
    const cert = new X509Certificate(tls.certificate);
    const caCert = new X509Certificate(CA.certificatePem);
    expect(cert.checkIssued(caCert) && cert.verify(caCert.publicKey)).toBe(true);
    expect(cert.subjectAltName).toBe(`IP Address:${IP}, IP Address:2001:DB8:0:0:0:0:0:7`);
    expect(cert.checkPrivateKey(createPrivateKey(tls.privateKey))).toBe(true);
    expect(tls.privateKey).not.toBe(CA.privateKeyPem);
    expect(new Date(cert.validFrom).getTime()).toBeLessThanOrEqual(NOW.getTime());
    expect(new Date(cert.validFrom).getTime()).toBeGreaterThan(NOW.getTime() - 2 * 60 * 60 * 1000);
  });

  it("makes a new key at each issue", () => {
    const given = ca(CA.certificatePem, CA.privateKeyPem);
    expect(servedTls(given, [IP], NOW).privateKey).not.toBe(servedTls(given, [IP], NOW).privateKey);
  });

  it("serves a certificate given as it is", () => {
    const given = served(LEAF.certificatePem + CA.certificatePem, LEAF.privateKeyPem);
    expect(servedTls(given, ["198.51.100.1"], NOW)).toBe(given);
  });
});

describe("tlsPublic and issuedAtCreate", () => {
  it.each<[string, ProxyTls, object, boolean]>([
    [
      "a made CA: its certificate only",
      { ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem, made: true } },
      { ca: { certificate: CA.certificatePem } },
      true,
    ],
    [
      "a user's CA: its certificate only",
      ca(CA.certificatePem, CA.privateKeyPem),
      { ca: { certificate: CA.certificatePem } },
      true,
    ],
    [
      "a certificate given: the certificate only",
      served(LEAF.certificatePem, LEAF.privateKeyPem),
      { certificate: LEAF.certificatePem },
      false,
    ],
  ])("%s", (_what, tls, pub, atCreate) => {
    expect(tlsPublic(tls)).toEqual(pub);
    expect(JSON.stringify(tlsPublic(tls))).not.toContain("PRIVATE KEY");
    // The public part is its own public part (the outputs' tls read back).
    expect(tlsPublic(tlsPublic(tls) as never)).toEqual(pub);
    expect(issuedAtCreate(tls)).toBe(atCreate);
  });
});

describe("peerProblem: the certificate a proxy at an address presented", () => {
  const expectCa = { ca: { certificate: CA.certificatePem } };
  const der = (pem: string) => new X509Certificate(pem).raw;
  /** LEAF with one byte of its signature flipped: its issuer's name and key identifier still match. */
  const tampered = (() => {
    const raw = Buffer.from(der(LEAF.certificatePem));
    raw[raw.length - 5] = (raw[raw.length - 5] as number) ^ 0x01;
    return raw;
  })();
  const otherIp = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.8"], now: NOW });
  const fromOther = issueLeaf({ ca: OTHER_CA, ipAddresses: [IP], now: NOW });

  it.each<[string, Buffer, object, Date, RegExp | undefined]>([
    [
      "issued by the CA for the address, valid now: passes",
      der(LEAF.certificatePem),
      expectCa,
      NOW,
      undefined,
    ],
    [
      "issued by another CA",
      der(fromOther.certificatePem),
      expectCa,
      NOW,
      /^the proxy's certificate is not issued by its CA \(proxyCaCertificate\)$/,
    ],
    [
      "the CA's own certificate",
      der(CA.certificatePem),
      expectCa,
      NOW,
      /^the proxy's certificate does not name 203\.0\.113\.7$/,
    ],
    ["signed by no one (a flipped signature)", tampered, expectCa, NOW, /is not issued by its CA/],
    [
      "for another address",
      der(otherIp.certificatePem),
      expectCa,
      NOW,
      /^the proxy's certificate does not name 203\.0\.113\.7$/,
    ],
    [
      "expired",
      der(EXPIRED_LEAF.certificatePem),
      expectCa,
      NOW,
      /^the proxy's certificate is not valid now \(.* GMT to .* GMT\)$/,
    ],
    [
      "not valid yet",
      der(LEAF.certificatePem),
      expectCa,
      new Date(NOW.getTime() - 2 * 60 * 60 * 1000),
      /is not valid now/,
    ],
    ["no certificate at all", Buffer.from("not DER"), expectCa, NOW, /presented no certificate that parses/],
    [
      "the certificate given: passes",
      der(LEAF.certificatePem),
      { certificate: LEAF.certificatePem + CA.certificatePem },
      NOW,
      undefined,
    ],
    [
      "another certificate than the one given, though issued by the same CA for the address",
      der(issueLeaf({ ca: CA, ipAddresses: [IP], now: NOW }).certificatePem),
      { certificate: LEAF.certificatePem },
      NOW,
      /^the proxy presented another certificate than proxy\.tls\.certificate$/,
    ],
    [
      "the CA of a chain given, not its first certificate",
      der(CA.certificatePem),
      { certificate: LEAF.certificatePem + CA.certificatePem },
      NOW,
      /another certificate/,
    ],
  ])("%s", (_what, peer, expectTls, now, want) => {
    const problem = peerProblem(peer, expectTls as never, IP, now);
    if (want === undefined) expect(problem).toBeUndefined();
    else expect(problem).toMatch(want);
  });
});
