/**
 * The health check's target: refresh, which has only the state's outputs,
 * probes for the same squid (address, port, name) that create probed from
 * the checked inputs; a proxy with auth is asked for its URL inside the
 * guest (the provider has no credentials).
 */
import { describe, expect, it } from "vitest";
import { squidName } from "../../../provider/kvm/squid/setup";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { outputsFrom, proxySetupOf } from "../../../provider/resource/mapping";
import {
  guestProbeOf,
  probeInputsOf,
  probeTargetOf,
  probeVia,
} from "../../../provider/resource/probe-target";
import { hashedProxyBlock } from "../../../provider/resource/proxy-auth";
import { readStackConfig } from "../../../provider/resource/stack-config";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);
const IP = "192.0.2.10";

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
    expect(probeTargetOf(probeInputsOf(outputs), IP)).toEqual(fromInputs);
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
        probeInputsOf(outputsFrom(c, { host: key, name: c.name, state: "running" }) as never),
        hosts[key] as never,
      ),
    ).toBe(want);
  });
});
