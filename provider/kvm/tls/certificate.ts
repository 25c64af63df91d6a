/**
 * The certificates of the proxy's TLS port: a small CA per proxy, and a leaf
 * for each VM's IP addresses signed by it. X.509 v3, ECDSA P-256 with
 * SHA-256, written with node:crypto and the DER writer beside this file (no
 * openssl at runtime on users' machines). Pure but for what the caller may
 * inject: new keys and serial numbers ({@link Randomness}); the time of issue
 * is an argument.
 *
 * Why these certificates:
 * - Clients reach the proxy by IP address, so the leaf names only IP
 *   addresses (subjectAltName iPAddress: 4 bytes for IPv4, 16 for IPv6), and
 *   nothing else: its subject is empty, its subjectAltName therefore
 *   critical (RFC 5280 4.2.1.6). A commonName would break GnuTLS clients:
 *   GnuTLS checks the commonName of a serverAuth leaf without a dNSName
 *   against the CA's DNS constraints, whatever it says ("kvm-proxy
 *   192.0.2.1" included), and fails the chain; OpenSSL does the same for a
 *   commonName that looks like a host name ("192.0.2.1").
 * - The CA signs nothing but the proxy's leaves, and its key sits in the
 *   Pulumi state. A client that trusts it (for the proxy alone, as curl's
 *   --proxy-cacert does, or for everything, as Python's `verify=` does) must
 *   not trust it for any DNS-named site should that key leak. So the CA
 *   carries critical name constraints: permitted iPAddress 0.0.0.0/0 and
 *   ::/0 and dNSName `invalid` (RFC 6761's reserved name, which no site
 *   has), and excluded dNSName "" (every DNS name). Checked with the real
 *   readers (test/libvirtd/tls/): OpenSSL 3.0 (the CLI, curl, Python, Node),
 *   GnuTLS 3.7 (certtool, gnutls-cli) and Go 1.26 accept a leaf for IP
 *   addresses and reject one for a DNS name, in its subjectAltName or in its
 *   commonName, with or without an IP address beside it. Either half alone
 *   does that in all three (OpenSSL, Go and GnuTLS read "" as every name);
 *   both are kept so that a reader that leaves one of them aside still
 *   refuses. Only IP addresses of both families in the permitted subtrees
 *   would not do: a name type with no permitted subtree is unconstrained.
 *   The IP addresses cannot be narrowed: the VMs' addresses come later and
 *   change with each replacement, while the CA stays.
 * - Validity: the CA ten years; the leaf ten years too, cut at the CA's own
 *   end. A leaf cannot be renewed without replacing its VM (its key lives
 *   only there), so a short one would make a working proxy fail one day;
 *   what bounds its use is the VM's life and the CA's. notBefore is an hour
 *   before the time of issue, for clients whose clocks run behind.
 * - Serial numbers: 16 random bytes made positive and non-zero (the top bit
 *   cleared, the next one set): 126 random bits, always 16 bytes of DER.
 * - Key identifiers: SHA-1 of the subjectPublicKey bits (RFC 5280 4.2.1.2,
 *   method 1, as OpenSSL makes them); the leaf's authorityKeyIdentifier is
 *   that of the CA's key.
 */
import {
  createHash,
  createPrivateKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
  X509Certificate,
} from "node:crypto";
import { type IpAddress, ipProblem, parseIp } from "../network/ip";
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
} from "./der";

/** Days a CA is valid by default (ten years). */
export const CA_VALIDITY_DAYS = 3652;
/** Days a leaf is valid by default (ten years), cut at its CA's end. */
export const LEAF_VALIDITY_DAYS = 3652;
/** How far notBefore lies before the time of issue. */
export const CLOCK_SKEW_MS = 60 * 60 * 1000;
/** The permitted dNSName that leaves every real DNS name outside the CA's reach (RFC 6761 reserves it). */
export const PERMITTED_DNS_NAME = "invalid";

const OID = {
  ecdsaWithSha256: "1.2.840.10045.4.3.2",
  commonName: "2.5.4.3",
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  nameConstraints: "2.5.29.30",
  authorityKeyIdentifier: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
};

/** KeyUsage bits (RFC 5280 4.2.1.3). */
const KEY_USAGE = { digitalSignature: 0, keyCertSign: 5, cRLSign: 6 };

/** Where new keys and serial numbers come from; tests may inject their own. */
export interface Randomness {
  /** A new ECDSA P-256 key pair. */
  keyPair(): { privateKey: KeyObject; publicKey: KeyObject };
  /** 16 random bytes for a serial number. */
  serialBytes(): Buffer;
}

/** node:crypto's generator and random bytes. */
export const NODE_RANDOMNESS: Randomness = {
  keyPair: () => generateKeyPairSync("ec", { namedCurve: "P-256" }),
  serialBytes: () => randomBytes(16),
};

/** A certificate and its private key (PKCS#8), both PEM. */
export interface CertificateAndKey {
  certificatePem: string;
  privateKeyPem: string;
}

/** When a certificate is made and for how long. */
export interface ValidityInput {
  /** The time of issue: notBefore is {@link CLOCK_SKEW_MS} before it. */
  now: Date;
  /** Days from `now` to notAfter. */
  validityDays?: number;
}

export interface CaInput extends ValidityInput {
  /** The CA's subject commonName (e.g. the proxy's name). */
  commonName: string;
  random?: Randomness;
}

export interface LeafInput extends ValidityInput {
  ca: CertificateAndKey;
  /** The VM's addresses, in canonical text (at least one). */
  ipAddresses: readonly string[];
  random?: Randomness;
}

const MS_PER_DAY = 24 * 60 * 60 * 1000;

function problem(what: string, why: string): never {
  throw new Error(`${what}: ${why}`);
}

/** notBefore and notAfter, in whole seconds. */
function validityOf(what: string, v: ValidityInput, defaultDays: number): [Date, Date] {
  if (!(v.now instanceof Date) || !Number.isFinite(v.now.getTime()))
    problem(what, "now must be a valid Date");
  const days = v.validityDays ?? defaultDays;
  if (!Number.isInteger(days) || days < 1 || days > 36500) {
    problem(what, `validityDays must be a whole number of days from 1 to 36500, not ${days}`);
  }
  const second = (ms: number) => new Date(Math.floor(ms / 1000) * 1000);
  return [second(v.now.getTime() - CLOCK_SKEW_MS), second(v.now.getTime() + days * MS_PER_DAY)];
}

function commonNameProblem(name: unknown): string | undefined {
  if (typeof name !== "string" || name.trim() === "") return "commonName must be a non-empty string";
  if ([...name].length > 64) return "commonName must be at most 64 characters (RFC 5280's upper bound)";
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (/[\0-\x1f\x7f]/.test(name)) return "commonName must not contain control characters";
  return undefined;
}

/** A Name of one RDN: CN=`commonName`, a UTF8String. */
function nameOf(commonName: string): Buffer {
  return sequence(set(sequence(oid(OID.commonName), utf8String(commonName))));
}

/** The uncompressed point of a P-256 public key: what the SPKI's BIT STRING holds. */
function publicPoint(publicKey: KeyObject): Buffer {
  const jwk = publicKey.export({ format: "jwk" });
  if (jwk.kty !== "EC" || jwk.crv !== "P-256" || jwk.x === undefined || jwk.y === undefined) {
    throw new Error("certificate: the key is not an ECDSA P-256 key");
  }
  return Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x, "base64url"), Buffer.from(jwk.y, "base64url")]);
}

function keyIdentifier(publicKey: KeyObject): Buffer {
  return createHash("sha1").update(publicPoint(publicKey)).digest();
}

/** A positive, non-zero 16-byte serial from 16 random bytes. */
function serialOf(random: Randomness): Buffer {
  const bytes = Buffer.from(random.serialBytes());
  if (bytes.length !== 16) throw new Error("certificate: a serial number takes 16 random bytes");
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x40;
  return bytes;
}

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return sequence(oid(id), ...(critical ? [boolean(true)] : []), octetString(value));
}

/** An iPAddress GeneralSubtree: [7] the network's bytes then its mask's. */
function ipSubtree(bytes: number): Buffer {
  return sequence(implicit(7, octetString(Buffer.alloc(bytes * 2))));
}

/** What the CA may sign: IP addresses of either family, no DNS name. */
function nameConstraints(): Buffer {
  const permitted = [ipSubtree(4), ipSubtree(16), sequence(implicit(2, ia5String(PERMITTED_DNS_NAME)))];
  const excluded = [sequence(implicit(2, ia5String("")))];
  return sequence(implicit(0, sequence(...permitted)), implicit(1, sequence(...excluded)));
}

interface TbsInput {
  serial: Buffer;
  issuer: Buffer;
  subject: Buffer;
  notBefore: Date;
  notAfter: Date;
  publicKey: KeyObject;
  extensions: Buffer[];
}

/** A signed certificate, PEM. */
function signed(tbs: TbsInput, signingKey: KeyObject): string {
  const algorithm = sequence(oid(OID.ecdsaWithSha256));
  const spki = tbs.publicKey.export({ type: "spki", format: "der" });
  const body = sequence(
    explicit(0, integer(2)), // v3
    integer(tbs.serial),
    algorithm,
    tbs.issuer,
    sequence(time(tbs.notBefore), time(tbs.notAfter)),
    tbs.subject,
    spki,
    explicit(3, sequence(...tbs.extensions)),
  );
  const signature = sign("sha256", body, { key: signingKey, dsaEncoding: "der" });
  const der = sequence(body, algorithm, bitString(signature));
  const lines = der.toString("base64").match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

function privateKeyPem(key: KeyObject): string {
  return key.export({ type: "pkcs8", format: "pem" }).toString();
}

/** A self-signed CA for one proxy, limited by name constraints to IP addresses. */
export function makeCa(input: CaInput): CertificateAndKey {
  const bad = commonNameProblem(input.commonName);
  if (bad !== undefined) problem("makeCa", bad);
  const [notBefore, notAfter] = validityOf("makeCa", input, CA_VALIDITY_DAYS);
  const { privateKey, publicKey } = (input.random ?? NODE_RANDOMNESS).keyPair();
  const name = nameOf(input.commonName);
  const certificatePem = signed(
    {
      serial: serialOf(input.random ?? NODE_RANDOMNESS),
      issuer: name,
      subject: name,
      notBefore,
      notAfter,
      publicKey,
      extensions: [
        extension(OID.basicConstraints, true, sequence(boolean(true), integer(0))),
        extension(OID.keyUsage, true, namedBits([KEY_USAGE.keyCertSign, KEY_USAGE.cRLSign])),
        extension(OID.subjectKeyIdentifier, false, octetString(keyIdentifier(publicKey))),
        extension(OID.nameConstraints, true, nameConstraints()),
      ],
    },
    privateKey,
  );
  return { certificatePem, privateKeyPem: privateKeyPem(privateKey) };
}

/** The CA's certificate and key, read and checked: a CA, and the key its own. */
function readCa(ca: CertificateAndKey): { cert: X509Certificate; key: KeyObject; subject: Buffer } {
  let cert: X509Certificate;
  let key: KeyObject;
  try {
    cert = new X509Certificate(ca.certificatePem);
  } catch (err) {
    return problem("issueLeaf", `the CA certificate does not parse: ${(err as Error).message}`);
  }
  try {
    key = createPrivateKey(ca.privateKeyPem);
  } catch (err) {
    return problem("issueLeaf", `the CA key does not parse: ${(err as Error).message}`);
  }
  if (!cert.ca) problem("issueLeaf", "the CA certificate is not a CA (basicConstraints CA:FALSE)");
  if (!cert.checkPrivateKey(key)) problem("issueLeaf", "the CA key is not the CA certificate's key");
  // Certificate → tbsCertificate → [version, serial, signature, issuer, validity, subject, ...].
  const tbs = childrenOf(childrenOf(readElement(cert.raw))[0] as ReturnType<typeof readElement>);
  const subject = tbs[5];
  if (tbs[0]?.tag !== 0xa0 || subject?.tag !== 0x30)
    problem("issueLeaf", "the CA certificate is not X.509 v3");
  return { cert, key, subject: Buffer.from(subject.encoded) };
}

/** Why `ipAddresses` cannot be a leaf's names, or undefined. */
export function leafAddressesProblem(ipAddresses: unknown): string | undefined {
  if (!Array.isArray(ipAddresses) || ipAddresses.length === 0) {
    return "ipAddresses must list at least one IP address";
  }
  for (const [i, a] of ipAddresses.entries()) {
    const bad = ipProblem(a);
    if (bad !== undefined) return `ipAddresses[${i}] ${bad}`;
  }
  return undefined;
}

/**
 * A leaf for the proxy at `ipAddresses`, signed by `ca`, with a key of its
 * own (which goes only into the VM).
 */
export function issueLeaf(input: LeafInput): CertificateAndKey {
  const badAddresses = leafAddressesProblem(input.ipAddresses);
  if (badAddresses !== undefined) problem("issueLeaf", badAddresses);
  const addresses = [...new Set(input.ipAddresses)];
  const ca = readCa(input.ca);
  let [notBefore, notAfter] = validityOf("issueLeaf", input, LEAF_VALIDITY_DAYS);
  const caEnd = new Date(ca.cert.validTo);
  if (caEnd < notAfter) notAfter = caEnd;
  if (notAfter <= input.now) problem("issueLeaf", `the CA expired at ${caEnd.toISOString()}`);
  const { privateKey, publicKey } = (input.random ?? NODE_RANDOMNESS).keyPair();
  const altNames = addresses.map((a) =>
    implicit(7, octetString(Buffer.from((parseIp(a) as IpAddress).bytes))),
  );
  const certificatePem = signed(
    {
      serial: serialOf(input.random ?? NODE_RANDOMNESS),
      issuer: ca.subject,
      subject: sequence(), // empty: the names are in the subjectAltName
      notBefore,
      notAfter,
      publicKey,
      extensions: [
        extension(OID.basicConstraints, true, sequence()),
        extension(OID.keyUsage, true, namedBits([KEY_USAGE.digitalSignature])),
        extension(OID.extKeyUsage, false, sequence(oid(OID.serverAuth))),
        extension(OID.subjectAltName, true, sequence(...altNames)),
        extension(OID.subjectKeyIdentifier, false, octetString(keyIdentifier(publicKey))),
        extension(
          OID.authorityKeyIdentifier,
          false,
          sequence(implicit(0, octetString(keyIdentifier(ca.cert.publicKey)))),
        ),
      ],
    },
    ca.key,
  );
  return { certificatePem, privateKeyPem: privateKeyPem(privateKey) };
}

/** A certificate's SHA-256 fingerprint as `openssl x509 -fingerprint -sha256` prints it (AB:CD:...). */
export function certificateFingerprint(certificatePem: string): string {
  return new X509Certificate(certificatePem).fingerprint256;
}

/** The pin of a certificate's public key as curl's --pinnedpubkey and --proxy-pinnedpubkey take it: `sha256//<base64>`. */
export function publicKeyPin(certificatePem: string): string {
  const spki = new X509Certificate(certificatePem).publicKey.export({ type: "spki", format: "der" });
  return `sha256//${createHash("sha256").update(spki).digest("base64")}`;
}
