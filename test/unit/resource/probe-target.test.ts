/**
 * The health check's target: refresh, which has only the state's outputs,
 * probes for the same squid (address, port, name) that create probed from
 * the checked inputs; a proxy with auth is asked for its URL inside the
 * guest (the provider has no credentials), on squid's plain loopback port
 * when the proxy port speaks TLS; a proxy with TLS is probed expecting its
 * certificate.
 */
import { describe, expect, it } from "vitest";
import { LOOPBACK_PROBE_PORT, squidName } from "../../../provider/kvm/proxy/setup";
import { issueLeaf, makeCa } from "../../../provider/kvm/tls/certificate";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { outputsFrom, proxySetupOf } from "../../../provider/resource/mapping";
import {
  guestProbeOf,
  guestProbePort,
  probeInputsOf,
  probeTargetOf,
  probeVia,
} from "../../../provider/resource/probe-target";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);
const IP = "192.0.2.10";
const NOW = new Date();
const CA = makeCa({ commonName: "the user's CA", now: NOW });
const LEAF = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.7"], now: NOW });
const STATIC = { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }] };
const AUTH = { username: "crawler", password: "s3cret:Pa55-long" };

function checked(news: Record<string, unknown>): CheckedInputs {
  const r = checkInputs(
    {},
    { host: "lab", image: "debian", ...news, proxy: hashedProxyBlock(news.proxy, "urn:edge") },
    { config, randomBytes: (n) => new Uint8Array(n) },
  );
  expect(r.failures).toEqual([]);
  return r.inputs as unknown as CheckedInputs;
}

describe("the probe target", () => {
  it.each<[string, Record<string, unknown>]>([
    ["no proxy block", {}],
    ["the proxyPort shorthand", { proxyPort: 8080 }],
    ["a proxy block without auth", { proxy: { allowedClients: ["10.10.0.0/16"] } }],
    [
      "static NICs and opened destinations",
      {
        nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }],
        proxy: { allowedDestinations: ["192.168.10.0/24"] },
      },
    ],
    [
      "auth, clients, an outgoing address and a target URL",
      {
        proxy: {
          port: 3129,
          auth: { username: "crawler", password: "s3cret:Pa55-long" },
          allowedClients: ["203.0.113.0/24", "2001:db8::/32"],
          outgoingAddress: IP,
        },
        healthCheck: { url: "http://example.com/", expectStatus: 204 },
      },
    ],
    ["TLS with a CA made for it", { ...STATIC, proxy: { tls: {} } }],
    ["TLS with the user's CA and auth", { ...STATIC, proxy: { auth: AUTH, tls: { ca: caPair() } } }],
    [
      "TLS with a certificate given",
      { proxy: { tls: { certificate: LEAF.certificatePem, privateKey: LEAF.privateKeyPem } } },
    ],
  ])("from the outputs equals the one from the inputs: %s", (_what, news) => {
    const c = checked(news);
    const outputs = outputsFrom(c, {
      host: "lab",
      name: c.name,
      state: "running",
      uuid: "u",
      mac: "52:54:00:00:00:01",
      ipv4: IP,
    });
    const fromInputs = probeTargetOf(c, IP);
    expect(fromInputs?.squidName).toBe(squidName(proxySetupOf(c)));
    expect(probeTargetOf(probeInputsOf(decodeState(outputs)), IP)).toEqual(fromInputs);
  });

  it("asks for the URL from here without auth, and inside the guest with auth", () => {
    const healthCheck = { url: "http://example.com/", expectStatus: 204 };
    const open = checked({ healthCheck });
    expect(probeTargetOf(open, IP)).toMatchObject(healthCheck);
    expect(guestProbeOf(open)).toBeUndefined();
    const authed = checked({ healthCheck, proxy: { auth: { username: "u", password: "a long password" } } });
    expect(probeTargetOf(authed, IP)?.url).toBeUndefined();
    expect(guestProbeOf(authed)).toEqual(healthCheck);
  });

  it("is none when the health check is off", () => {
    expect(probeTargetOf(checked({ healthCheck: false }), IP)).toBeUndefined();
  });
});

function caPair() {
  return { certificate: CA.certificatePem, privateKey: CA.privateKeyPem };
}

describe("the probe of a proxy with TLS", () => {
  it.each<[string, Record<string, unknown>, object]>([
    [
      "with a CA: the CA's certificate",
      { ...STATIC, proxy: { tls: { ca: caPair() } } },
      { ca: { certificate: CA.certificatePem } },
    ],
    [
      "with a certificate given: that certificate",
      { proxy: { tls: { certificate: LEAF.certificatePem, privateKey: LEAF.privateKeyPem } } },
      { certificate: LEAF.certificatePem },
    ],
  ])("expects %s, never a key", (_what, news, want) => {
    const target = probeTargetOf(checked(news), IP);
    expect(target?.tls).toEqual(want);
    expect(JSON.stringify(target)).not.toContain("PRIVATE KEY");
  });

  it("expects no TLS of a proxy without it", () => {
    expect(probeTargetOf(checked({}), IP)).not.toHaveProperty("tls");
  });

  it.each<[string, Record<string, unknown>, number]>([
    ["without TLS: the proxy port", { proxy: { port: 3129, auth: AUTH } }, 3129],
    [
      "with TLS: squid's plain loopback listener",
      { ...STATIC, proxy: { port: 3129, auth: AUTH, tls: {} } },
      LOOPBACK_PROBE_PORT,
    ],
  ])("asks squid inside the guest on its port %s", (_what, news, port) => {
    const c = checked(news);
    expect(guestProbePort(c)).toBe(port);
    const outputs = outputsFrom(c, {
      host: "lab",
      name: c.name,
      state: "running",
      uuid: "u",
      mac: "52:54:00:00:00:01",
      ipv4: IP,
    });
    expect(guestProbePort(probeInputsOf(decodeState(outputs)))).toBe(port);
  });
});

describe("where the probe goes from (healthCheck.via)", () => {
  const hosts = readStackConfig(
    (k) =>
      ({
        "kvm:hosts": {
          local: { uri: "unix:///s" },
          remote: { uri: "ssh://root@lab.example.com:22", knownHostsPath: "/k", privateKeyPath: "/id" },
          bridged: {
            uri: "ssh://root@lab.example.com:22",
            knownHostsPath: "/k",
            privateKeyPath: "/id",
            bridge: "br0",
          },
        },
      })[k],
  ).hosts;
  it.each<[string, string, Record<string, unknown>, "local" | "host"]>([
    ["an ssh host's NAT-like network: through the host", "remote", {}, "host"],
    ["an ssh host, a bridge: from here", "bridged", {}, "local"],
    [
      "an ssh host, static addresses: from here",
      "remote",
      { nics: [{ network: "n", addresses: ["203.0.113.7/24"] }] },
      "local",
    ],
    ["a local host: from here", "local", {}, "local"],
    ["via given: as given", "remote", { healthCheck: { via: "local" } }, "local"],
    ["via host given on a bridge", "bridged", { healthCheck: { via: "host" } }, "host"],
  ])("%s", (_, key, news, want) => {
    const c = checked(news);
    expect(probeVia(c, hosts[key] as never)).toBe(want);
    expect(
      probeVia(
        probeInputsOf(decodeState(outputsFrom(c, { host: key, name: c.name, state: "running" }))),
        hosts[key] as never,
      ),
    ).toBe(want);
  });

  it("reads a refreshed state's NICs as they are: one that breaks a rule tightened since still has a route", () => {
    const c = checked({ nics: [{ network: "n" }] });
    const state = outputsFrom(c, { host: "remote", name: c.name, state: "running" }) as Record<
      string,
      unknown
    >;
    // A gateway outside the NIC's subnet: refused by today's rules, recorded by an older version.
    const nics = [{ network: "n", addresses: [], nameservers: [], gateway4: "198.51.100.1", primary: true }];
    expect(probeVia(probeInputsOf(decodeState({ ...state, nics })), hosts.remote as never)).toBe("host");
  });
});
