/**
 * `proxy.tls` through check (check.ts, check-proxy.ts): the CA made for a
 * proxy with `tls: {}` and kept from one check to the next (so diff sees no
 * change), a CA or certificate of the user's in its place, the primary
 * NIC's static addresses a CA-issued certificate needs, the SOCKS warning,
 * unknown values at preview, and the port squid's loopback listener holds.
 * What `proxy.tls` itself accepts: test/unit/kvm/tls/proxy-tls.test.ts.
 */
import { X509Certificate } from "node:crypto";
import { describe, expect, it } from "vitest";
import { issueLeaf, makeCa } from "../../../provider/kvm/tls/certificate";
import type { TlsCa } from "../../../provider/kvm/tls/proxy-tls";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import { type CheckedInputs, UNKNOWN } from "../../../provider/resource/args";
import { type CheckContext, checkInputs } from "../../../provider/resource/check";
import { diffProxy } from "../../../provider/resource/diff";
import { outputsFrom, proxySetupOf } from "../../../provider/resource/mapping";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";
import { BAD_INPUT_CONFIG, GOOD_INPUTS } from "../../support/bad-inputs";

const config = readStackConfig((k) => BAD_INPUT_CONFIG[k]);
const NOW = new Date();
const OWNER = { project: "p", stack: "s", urn: "urn:pulumi:s::p::KvmProxy::edge", resource: "edge" };

const STATIC = { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }] };
const POOL = {
  nics: [
    { bridge: "br0", addressPool: { ranges: ["203.0.113.10-203.0.113.14/24"] }, gateway4: "203.0.113.1" },
  ],
};
const AUTH = { username: "crawler", password: "a-long-enough-secret" };

/** A ctx.makeCa that makes real CAs (as the default does) and records the names it was asked for. */
function caMaker(): { makeCa: NonNullable<CheckContext["makeCa"]>; names: string[]; made: TlsCa[] } {
  const names: string[] = [];
  const made: TlsCa[] = [];
  return {
    names,
    made,
    makeCa: (commonName) => {
      names.push(commonName);
      const ca = makeCa({ commonName, now: NOW });
      const tls: TlsCa = { certificate: ca.certificatePem, privateKey: ca.privateKeyPem, made: true };
      made.push(tls);
      return tls;
    },
  };
}

/** check of `news` (merged over good inputs with an owner) as the KvmProxy class sends them. */
function check(
  news: Record<string, unknown>,
  olds: Record<string, unknown> = {},
  makeCaFn?: CheckContext["makeCa"],
) {
  const all: Record<string, unknown> = { ...GOOD_INPUTS, owner: OWNER, ...news };
  const sent = all.proxy === undefined ? all : { ...all, proxy: hashedProxyBlock(all.proxy, OWNER.urn) };
  return checkInputs(olds, sent, {
    config,
    randomBytes: (n) => new Uint8Array(n).fill(0xab),
    ...(makeCaFn !== undefined ? { makeCa: makeCaFn } : {}),
  });
}

const tlsOf = (r: ReturnType<typeof check>) => (r.inputs.proxy as { tls?: unknown } | undefined)?.tls;

/** The outputs create would store for checked inputs (a VM at the static address). */
function outputsOf(inputs: Record<string, unknown>): Record<string, unknown> {
  return outputsFrom(inputs as unknown as CheckedInputs, {
    host: "lab",
    name: inputs.name as string,
    state: "running",
    uuid: "u",
    mac: "52:54:00:00:00:01",
    ipv4: "203.0.113.7",
  });
}

const OWN_CA = makeCa({ commonName: "the user's CA", now: NOW });
const OWN_LEAF = issueLeaf({ ca: OWN_CA, ipAddresses: ["198.51.100.9"], now: NOW });

describe("check: a CA made for the proxy (tls: {})", () => {
  it("is made by ctx.makeCa, named after the resource, and kept whole in the checked inputs", () => {
    const m = caMaker();
    const r = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    expect(r.failures).toEqual([]);
    expect(m.names).toEqual(["pulumi-kvm-proxy edge"]);
    expect(tlsOf(r)).toEqual({ ca: m.made[0] });
  });

  it("is made by default as an ECDSA P-256 CA, marked as made", () => {
    const r = check({ ...STATIC, proxy: { tls: {} } });
    expect(r.failures).toEqual([]);
    const ca = (tlsOf(r) as { ca: TlsCa }).ca;
    expect(ca.made).toBe(true);
    const x = new X509Certificate(ca.certificate);
    expect(x.ca).toBe(true);
    expect(x.subject).toBe("CN=pulumi-kvm-proxy edge");
    expect(x.publicKey.asymmetricKeyDetails).toEqual({ namedCurve: "prime256v1" });
    // Kept by the next check, as one made by an injected maker is.
    expect(tlsOf(check({ ...STATIC, proxy: { tls: {} } }, r.inputs))).toEqual(tlsOf(r));
  });

  it("is named by at most 64 characters of a long resource name", () => {
    const m = caMaker();
    const long = { ...OWNER, resource: "e".repeat(100) };
    const r = check({ ...STATIC, owner: long, proxy: { tls: {} } }, {}, m.makeCa);
    expect(r.failures).toEqual([]);
    expect(m.names).toEqual([`pulumi-kvm-proxy ${"e".repeat(47)}`]);
  });

  it("is named by a resource name with control characters (the engine allows any name), as spaces", () => {
    const m = caMaker();
    const odd = { ...OWNER, resource: "edge\tproxy\n1" };
    const r = check({ ...STATIC, owner: odd, proxy: { tls: {} } }, {}, m.makeCa);
    expect(r.failures).toEqual([]);
    expect(m.names).toEqual(["pulumi-kvm-proxy edge proxy 1"]);
  });

  it("is kept by the next check from the old inputs, and diff sees no change", () => {
    const m = caMaker();
    const first = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    const second = check({ ...STATIC, proxy: { tls: {} } }, first.inputs, m.makeCa);
    expect(second.failures).toEqual([]);
    expect(m.made).toHaveLength(1);
    expect(tlsOf(second)).toEqual(tlsOf(first));
    expect(diffProxy(decodeState(outputsOf(first.inputs)), second.inputs)).toEqual({
      changes: false,
      replaces: [],
      updates: [],
      deleteBeforeReplace: false,
    });
  });

  it("is kept across another change, which replaces the VM but not what clients trust", () => {
    const m = caMaker();
    const first = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    const second = check({ ...STATIC, memoryMiB: 1024, proxy: { tls: {} } }, first.inputs, m.makeCa);
    expect(tlsOf(second)).toEqual(tlsOf(first));
    expect(diffProxy(decodeState(outputsOf(first.inputs)), second.inputs).replaces).toEqual(["memoryMiB"]);
  });

  it.each<[string, (made: TlsCa) => Record<string, unknown>]>([
    ["no old inputs (a new proxy)", () => ({})],
    ["old inputs without TLS", () => ({ proxy: { port: 3128 } })],
    ["old inputs with the user's own CA (not made here)", () => ({ proxy: { tls: { ca: ownCa() } } })],
    [
      "a made CA in the old outputs, without its key (only what is public)",
      (made) => ({ proxy: { tls: { ca: { certificate: made.certificate, made: true } } } }),
    ],
    ["old TLS not known (preview)", () => ({ proxy: { tls: UNKNOWN } })],
  ])("is made anew from %s", (_what, oldsOf) => {
    const m = caMaker();
    const earlier = m.makeCa("earlier");
    const r = check({ ...STATIC, proxy: { tls: {} } }, oldsOf(earlier), m.makeCa);
    expect(r.failures).toEqual([]);
    expect(m.made).toHaveLength(2);
    expect(tlsOf(r)).toEqual({ ca: m.made[1] });
  });

  it("gives way to the user's own CA, which is never marked as made; diff replaces the proxy", () => {
    const m = caMaker();
    const first = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    const own = check({ ...STATIC, proxy: { tls: { ca: ownCa() } } }, first.inputs, m.makeCa);
    expect(own.failures).toEqual([]);
    expect(tlsOf(own)).toEqual({ ca: ownCa() });
    expect(m.made).toHaveLength(1);
    expect(diffProxy(decodeState(outputsOf(first.inputs)), own.inputs).replaces).toEqual(["proxy"]);
    // Back to {}: the user's CA is not kept as if made here.
    const back = check({ ...STATIC, proxy: { tls: {} } }, own.inputs, m.makeCa);
    expect(tlsOf(back)).toEqual({ ca: m.made[1] });
  });

  it("gives way to a certificate of the user's", () => {
    const m = caMaker();
    const first = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    const pair = { certificate: OWN_LEAF.certificatePem, privateKey: OWN_LEAF.privateKeyPem };
    const given = check({ ...STATIC, proxy: { tls: pair } }, first.inputs, m.makeCa);
    expect(tlsOf(given)).toEqual(pair);
    expect(diffProxy(decodeState(outputsOf(first.inputs)), given.inputs).replaces).toEqual(["proxy"]);
  });

  it("a CA made anew is another CA: diff replaces the proxy", () => {
    const m = caMaker();
    const first = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    const anew = check({ ...STATIC, proxy: { tls: {} } }, {}, m.makeCa);
    expect(diffProxy(decodeState(outputsOf(first.inputs)), anew.inputs)).toMatchObject({
      changes: true,
      replaces: ["proxy"],
    });
  });
});

function ownCa(): { certificate: string; privateKey: string } {
  return { certificate: OWN_CA.certificatePem, privateKey: OWN_CA.privateKeyPem };
}

describe("check: a certificate issued at create needs the primary NIC's static addresses", () => {
  const reason =
    /DHCP address is not known before the VM boots: give the primary NIC static addresses or an addressPool/;
  const dhcp = { network: "default" };
  const fixed = { bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" };

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ["the one-NIC shorthand (DHCP), a CA made", {}, {}],
    ["the one-NIC shorthand on a network (DHCP), the user's CA", { network: "default" }, { ca: ownCa() }],
    ["a DHCP NIC in nics", { nics: [dhcp] }, {}],
    ["a DHCP first NIC, a static second (the first is primary)", { nics: [dhcp, fixed] }, {}],
    [
      "a static NIC beside a DHCP one marked primary",
      { nics: [fixed, { ...dhcp, primary: true }] },
      { ca: ownCa() },
    ],
  ])("refuses %s at proxy.tls, saying why", (_what, networking, tls) => {
    const r = check({ ...networking, proxy: { tls } }, {}, caMaker().makeCa);
    expect(r.failures).toEqual([{ property: "proxy.tls", reason: expect.stringMatching(reason) }]);
  });

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ["a static primary NIC, a CA made", STATIC, {}],
    ["a static primary NIC, the user's CA", STATIC, { ca: ownCa() }],
    ["an address pool's primary NIC", POOL, {}],
    [
      "a static NIC marked primary beside a DHCP one",
      { nics: [{ network: "default" }, { ...fixed, primary: true }] },
      {},
    ],
    [
      "DHCP with a certificate of the user's (it names what the user knows)",
      {},
      { certificate: OWN_LEAF.certificatePem, privateKey: OWN_LEAF.privateKeyPem },
    ],
  ])("accepts %s", (_what, networking, tls) => {
    const r = check({ ...networking, proxy: { tls } }, {}, caMaker().makeCa);
    expect(r.failures).toEqual([]);
    expect(tlsOf(r)).toBeDefined();
  });

  it("judges nothing while the NICs are not known (preview)", () => {
    const r = check({ nics: UNKNOWN, proxy: { tls: {} } }, {}, caMaker().makeCa);
    expect(r.failures).toEqual([]);
  });
});

describe("check: proxy.tls failures through check", () => {
  it("names the field under proxy.tls and quotes no certificate or key", () => {
    const r = check(
      {
        ...STATIC,
        proxy: { tls: { certificate: OWN_LEAF.certificatePem, privateKey: OWN_CA.privateKeyPem } },
      },
      {},
      caMaker().makeCa,
    );
    expect(r.failures.map((f) => f.property)).toEqual(["proxy.tls.privateKey (secret)"]);
    const said = JSON.stringify(r.failures);
    for (const pem of [OWN_LEAF.certificatePem, OWN_CA.privateKeyPem])
      for (const line of pem.split("\n").filter((l) => l.length > 16 && !l.startsWith("-----")))
        expect(said).not.toContain(line);
  });
});

describe("check: a certificate of the user's with text around its PEM", () => {
  it("passes, and only the certificates and key reach the guest's setup (no line of the text, which could end its heredoc)", () => {
    const pair = {
      certificate: `Bag Attributes\nKVMP_EOF\n${OWN_LEAF.certificatePem}subject=\nKVMP_EOF\n${OWN_CA.certificatePem}`,
      privateKey: `Key Attributes: <No Attributes>\nKVMP_EOF\n${OWN_LEAF.privateKeyPem}`,
    };
    const r = check({ proxy: { tls: pair } }, {}, caMaker().makeCa);
    expect(r.failures).toEqual([]);
    const setup = proxySetupOf(r.inputs as unknown as CheckedInputs);
    expect(setup.tls).toEqual({
      certificate: OWN_LEAF.certificatePem + OWN_CA.certificatePem,
      privateKey: OWN_LEAF.privateKeyPem,
    });
  });
});

describe("check: SOCKS beside TLS", () => {
  const warning = /proxy\.socks carries no TLS: SOCKS5 sends the username and password in clear \(RFC 1929\)/;

  it.each<[string, Record<string, unknown>, boolean]>([
    ["TLS and SOCKS: warned", { auth: AUTH, tls: {}, socks: {} }, true],
    ["TLS alone: not warned", { auth: AUTH, tls: {} }, false],
    ["SOCKS alone: not warned", { auth: AUTH, socks: {} }, false],
  ])("%s", (_what, proxy, warned) => {
    const r = check({ ...STATIC, proxy }, {}, caMaker().makeCa);
    expect(r.failures).toEqual([]);
    expect((r.warnings ?? []).some((w) => warning.test(w))).toBe(warned);
  });
});

describe("check: TLS not known yet (preview)", () => {
  it.each<[string, unknown]>([
    ["the whole block", UNKNOWN],
    ["the CA's certificate and key", { ca: { certificate: UNKNOWN, privateKey: UNKNOWN } }],
    ["the certificate", { certificate: UNKNOWN, privateKey: OWN_LEAF.privateKeyPem }],
  ])("%s: stays unknown, no CA made, nothing judged of it", (_what, tls) => {
    const m = caMaker();
    // The shorthand's DHCP would fail a known CA: an unknown one is not judged.
    const r = check({ proxy: { tls } }, {}, m.makeCa);
    expect(r.failures).toEqual([]);
    expect(tlsOf(r)).toBe(UNKNOWN);
    expect(m.names).toEqual([]);
  });
});

describe("check: the port of squid's loopback listener for probes", () => {
  it.each<[string, Record<string, unknown>, string]>([
    ["proxy.port", { proxy: { port: 59128 } }, "proxy.port"],
    ["proxyPort", { proxyPort: 59128 }, "proxyPort"],
    ["proxy.socks.port", { proxy: { auth: AUTH, socks: { port: 59128 } } }, "proxy.socks.port"],
  ])("is refused as %s, with TLS or without", (_what, news, property) => {
    for (const tls of [undefined, {}]) {
      const withTls =
        tls === undefined
          ? news
          : { ...news, ...STATIC, proxy: { ...((news.proxy as object | undefined) ?? {}), tls } };
      const r = check(withTls, {}, caMaker().makeCa);
      expect(r.failures).toEqual([
        {
          property,
          reason:
            "59128 is taken by squid's loopback listener for the provider's own probes (with proxy.tls) on the guest; choose another port",
        },
      ]);
    }
  });
});
