/**
 * TLS on the proxy's port (`proxy.tls`): where its certificate comes from,
 * what squid serves, and how a probe knows the proxy it reached. Basic
 * authentication sends the password in every request's Proxy-Authorization
 * header, readable on the path between a client and a proxy on a public
 * address; with `tls` squid listens with TLS there (`https_port`).
 *
 * - By default a CA is made for the proxy (certificate.ts: ECDSA P-256,
 *   limited by name constraints to IP addresses) when it is first checked,
 *   and kept from one check to the next, its key a secret of the state; or
 *   the user gives a CA. At create, once the VM's static addresses are
 *   known (a pool's taken), the CA issues the proxy's certificate for them,
 *   with a key of its own that goes only into the VM. Clients trust the CA
 *   (`proxyCaCertificate`), which outlives every replacement.
 * - Or the user gives the proxy's certificate (a chain, PEM) and key, served
 *   as given: for names or addresses the user knows and clients trust.
 *
 * Pure apart from the key generation of certificate.ts.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { given, isObject } from "../fields";
import type { Failures } from "../validation";
import { type CertificateAndKey, issueLeaf } from "./certificate";

/** The proxy's TLS as check leaves it: a CA that issues its certificate at create, or the certificate itself. */
export type ProxyTls = { ca: TlsCa } | TlsServed;

/** A CA of the proxy's: made for it (kept across checks), or the user's. */
export interface TlsCa {
  certificate: string;
  /** PKCS#8 or another PEM form node:crypto reads; a secret. */
  privateKey: string;
  /** Made by the provider (kept while the program gives no CA of its own). */
  made?: true;
}

/** What squid serves: the certificate chain (the proxy's first) and its key, PEM. */
export interface TlsServed {
  certificate: string;
  privateKey: string;
}

/** What of the proxy's TLS is no secret: outputs, the spec hash and the probes' expectation. */
export type TlsPublic = { ca: { certificate: string } } | { certificate: string };

const TLS_FIELDS = ["ca", "certificate", "privateKey"];
const CA_FIELDS = ["certificate", "privateKey"];
const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Whether `tls` issues the proxy's certificate at create (a CA), rather than serving one given. */
export function issuedAtCreate(tls: ProxyTls): tls is { ca: TlsCa } {
  return "ca" in tls;
}

/** The public part of `tls` (of a checked block, or the public part itself). */
export function tlsPublic(tls: ProxyTls | TlsPublic): TlsPublic {
  return "ca" in tls ? { ca: { certificate: tls.ca.certificate } } : { certificate: tls.certificate };
}

/** The certificates of a PEM text, in order. */
function certificatesOf(pem: string): X509Certificate[] {
  return (pem.match(PEM_CERTIFICATE) ?? []).map((c) => new X509Certificate(c));
}

/**
 * A certificate (chain) and its key as given, checked, and kept as their
 * PEM blocks alone (the key as PKCS#8); failures at `<at>.certificate` and
 * `<at>.privateKey (secret)`, quoting nothing of either. `ca`: the first certificate must be a CA whose key can sign the
 * proxy's certificate (ECDSA P-256, the algorithm certificate.ts signs with).
 */
function readPair(f: Failures, at: string, v: Record<string, unknown>, ca: boolean): TlsServed | undefined {
  const keyField = `${at}.privateKey (secret)`;
  const { certificate, privateKey } = v;
  if (!given(certificate)) f.fail(`${at}.certificate`, "is required (PEM)");
  if (!given(privateKey)) f.fail(keyField, "is required (PEM, a secret)");
  if (typeof certificate !== "string" || typeof privateKey !== "string") {
    if (given(certificate) && typeof certificate !== "string")
      f.fail(`${at}.certificate`, "must be PEM text");
    if (given(privateKey) && typeof privateKey !== "string") f.fail(keyField, "must be PEM text");
    return undefined;
  }
  let chain: X509Certificate[] = [];
  try {
    chain = certificatesOf(certificate);
  } catch {
    chain = [];
  }
  const first = chain[0];
  if (first === undefined) {
    f.fail(`${at}.certificate`, "holds no certificate that parses (-----BEGIN CERTIFICATE----- PEM)");
    return undefined;
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(privateKey);
  } catch {
    f.fail(keyField, "is no private key that parses (PEM)");
    return undefined;
  }
  if (!first.checkPrivateKey(key)) {
    f.fail(keyField, `is not the key of ${at}.certificate (the first certificate, when a chain)`);
    return undefined;
  }
  if (new Date(first.validTo) <= new Date()) f.fail(`${at}.certificate`, `expired at ${first.validTo}`);
  if (ca) {
    if (!first.ca) f.fail(`${at}.certificate`, "is not a CA (basicConstraints CA:TRUE)");
    // Read from the key's details: a JWK export throws for DSA keys and curves JWK does not name.
    if (key.asymmetricKeyType !== "ec" || key.asymmetricKeyDetails?.namedCurve !== "prime256v1")
      f.fail(
        keyField,
        "must be an ECDSA P-256 key: the proxy's certificate is signed with ECDSA and SHA-256",
      );
  }
  // The certificates and key only, in PEM as node:crypto writes it: no text around them reaches the guest.
  return {
    certificate: chain.map((c) => c.toString()).join(""),
    privateKey: key.export({ type: "pkcs8", format: "pem" }).toString(),
  };
}

/**
 * `proxy.tls` as given: `{}` (a CA made for the proxy: "make"),
 * `{ca: {certificate, privateKey}}` or `{certificate, privateKey}`;
 * undefined when absent or wrong (failures at `proxy.tls...`).
 */
export function readProxyTls(f: Failures, v: unknown): ProxyTls | "make" | undefined {
  if (!given(v)) return undefined;
  if (!isObject(v)) {
    f.fail(
      "proxy.tls",
      "must be {} (a CA made for the proxy), {ca: {certificate, privateKey}} or {certificate, privateKey}",
    );
    return undefined;
  }
  for (const k of Object.keys(v))
    if (!TLS_FIELDS.includes(k))
      f.fail(`proxy.tls.${k}`, `unknown property (known: ${TLS_FIELDS.join(", ")})`);
  const served = given(v.certificate) || given(v.privateKey);
  if (given(v.ca) && served) {
    f.fail(
      "proxy.tls.ca",
      "give either ca (which issues the proxy's certificate) or certificate and privateKey, not both",
    );
    return undefined;
  }
  if (served) return readPair(f, "proxy.tls", v, false);
  if (!given(v.ca)) return "make";
  if (!isObject(v.ca)) {
    f.fail("proxy.tls.ca", "must be {certificate, privateKey} (PEM, the key a secret)");
    return undefined;
  }
  for (const k of Object.keys(v.ca))
    if (!CA_FIELDS.includes(k))
      f.fail(`proxy.tls.ca.${k}`, "unknown property (known: certificate, privateKey)");
  const ca = readPair(f, "proxy.tls.ca", v.ca, true);
  return ca === undefined ? undefined : { ca };
}

/**
 * What squid serves for `tls` at `addresses` (the VM's static addresses,
 * canonical): a certificate the CA issues now, with a key of its own; or
 * the certificate given.
 */
export function servedTls(tls: ProxyTls, addresses: readonly string[], now: Date): TlsServed {
  if (!issuedAtCreate(tls)) return tls;
  const ca: CertificateAndKey = { certificatePem: tls.ca.certificate, privateKeyPem: tls.ca.privateKey };
  const leaf = issueLeaf({ ca, ipAddresses: addresses, now });
  return { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem };
}

/**
 * Why the certificate a proxy at `ip` presented (`peer`, DER) is not the
 * one `expect` describes, or undefined when it is: issued by the CA for
 * `ip` and valid now; or the very certificate given.
 */
export function peerProblem(peer: Buffer, expect: TlsPublic, ip: string, now: Date): string | undefined {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(peer);
  } catch {
    return "the proxy presented no certificate that parses";
  }
  if (!("ca" in expect)) {
    const given = certificatesOf(expect.certificate)[0];
    return given !== undefined && given.fingerprint256 === cert.fingerprint256
      ? undefined
      : "the proxy presented another certificate than proxy.tls.certificate";
  }
  const ca = new X509Certificate(expect.ca.certificate);
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey))
    return "the proxy's certificate is not issued by its CA (proxyCaCertificate)";
  if (cert.checkIP(ip) === undefined) return `the proxy's certificate does not name ${ip}`;
  if (new Date(cert.validFrom) > now || new Date(cert.validTo) <= now)
    return `the proxy's certificate is not valid now (${cert.validFrom} to ${cert.validTo})`;
  return undefined;
}
