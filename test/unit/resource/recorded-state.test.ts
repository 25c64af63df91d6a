import { describe, expect, it } from "vitest";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { KVM_PROXY_OUTPUT_PROPERTIES } from "../../../provider/resource/kvm-proxy-properties";
import { outputsFrom } from "../../../provider/resource/mapping";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" }, lab2: { uri: "unix:///t" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);

const owner = { project: "p", stack: "s", urn: "urn:a", resource: "edge" };

/** The outputs create stores for `args`: checked as the class sends them, then mapped with a VM's status. */
function stored(args: Record<string, unknown>): Record<string, unknown> {
  const sent = args.proxy === undefined ? args : { ...args, proxy: hashedProxyBlock(args.proxy, owner.urn) };
  const r = checkInputs({}, { owner, ...sent }, { config, randomBytes: (n) => new Uint8Array(n).fill(7) });
  expect(r.failures).toEqual([]);
  const c = r.inputs as unknown as CheckedInputs;
  return {
    ...outputsFrom(
      c,
      {
        host: "lab",
        name: c.name,
        state: "running",
        uuid: "u",
        mac: "52:54:00:00:00:01",
        ipv4: "203.0.113.7",
        ipAddresses: [{ mac: "52:54:00:00:00:01", addresses: ["203.0.113.7/24"] }],
        metadata: { createdAt: "2026-12-01T00:00:00.000Z", image: { baked: "baked-debian.qcow2" } } as never,
      },
      { ok: true, checkedAt: "2026-12-01T00:01:00.000Z" },
    ),
    __provider: "the serialized provider",
  };
}

describe("decodeState: a state this provider writes", () => {
  it.each([
    ["the least inputs", { host: "lab", image: "debian" }],
    [
      "a proxy with auth, SOCKS, clients and destinations",
      {
        host: "lab",
        image: "debian",
        proxy: {
          auth: { username: "u", password: "a-password-long-enough" },
          socks: {},
          allowedClients: ["203.0.113.0/24"],
        },
      },
    ],
    [
      "NICs with static addresses and limits, tags, timeouts, rotation and a health check",
      {
        host: { pool: ["lab", "lab2"] },
        image: "debian",
        nics: [
          {
            bridge: "br0",
            addresses: ["203.0.113.7/24"],
            gateway4: "203.0.113.1",
            bandwidth: { inboundKbps: 1000 },
          },
        ],
        tags: { team: "crawl" },
        timeouts: { create: "20m", delete: "5m" },
        rotation: { maxAge: "7d", group: "g" },
        healthCheck: { url: "http://example.com/", expectStatus: 204 },
        waitForIp: "ipv6",
      },
    ],
    [
      "no health check, no guest agent",
      { host: "lab", image: "debian", healthCheck: false, installGuestAgent: false },
    ],
    [
      "TLS made for the proxy at a static address, and an egress check",
      {
        host: "lab",
        image: "debian",
        nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }],
        proxy: { tls: {} },
        egressCheck: { url: "http://192.0.2.1/ip" },
      },
    ],
  ])("%s: decodes to itself, nothing dropped", (_, args) => {
    const state = stored(args);
    expect(decodeState(state)).toEqual(state);
  });

  it("with what later steps add: a kept VM's mark, a sealed host record, an import's spec hash, the egress seen", () => {
    const state = {
      ...stored({ host: "lab", image: "debian" }),
      keptAfterFailure: { failedAt: "2026-12-01T00:05:00.000Z", reason: "cloud-init failed" },
      hostConnection: "kvmp-sealed:v1:an-opaque-ciphertext",
      adoptedSpecHash: "ab".repeat(32),
      egressAddress: "203.0.113.7",
      proxyCaCertificate: "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n",
    };
    expect(decodeState(state)).toEqual(state);
  });
});

describe("decodeState: an output of another shape than its row's type is dropped, as if not recorded", () => {
  it.each([
    ["host", 5],
    ["memoryMiB", "512"],
    ["memoryMiB", 1.5],
    ["installGuestAgent", "yes"],
    ["tags", { team: 1 }],
    ["tags", ["crawl"]],
    ["timeouts", { delete: "5m" }],
    ["hostPool", ["lab", 2]],
    ["nics", { bridge: "br0" }],
    ["ipAddresses", ["203.0.113.7"]],
    ["health", "ok"],
    ["keptAfterFailure", null],
    ["healthCheck", "yes"],
    ["waitForIp", 3],
    ["image", 7],
    ["state", 1],
  ])("%s: %j", (key, value) => {
    const state = decodeState({ host: "lab", [key === "host" ? "name" : "host"]: "x", [key]: value });
    expect(key in state).toBe(false);
  });

  it.each([
    ["waitForIp", "ipv6"],
    ["waitForIp", false],
    ["healthCheck", false],
    ["healthCheck", { url: "http://example.com/" }],
    ["image", { url: "https://example.com/i.qcow2" }],
    ["hostConnection", "sealed:an-opaque-string"],
    ["hostConnection", { key: "lab", uri: "qemu+ssh://h/system" }],
    ["resolvedImage", { anything: ["recorded"] }],
    ["nics", [{ bridge: "br0", a: "field of any shape" }]],
  ])("%s: %j of its row's type is kept", (key, value) => {
    expect(decodeState({ [key]: value })).toEqual({ [key]: value });
  });

  it("keeps what has no row (the serialized provider, an older state's user-data text) and drops what is undefined", () => {
    const older = { __provider: "p", userData: "#cloud-config\n", name: undefined };
    expect(decodeState(older)).toEqual({ __provider: "p", userData: "#cloud-config\n" });
  });

  it("holds every output row to a shape (the table above covers each kind of type the rows use)", () => {
    const kinds = new Set(
      Object.values(KVM_PROXY_OUTPUT_PROPERTIES).map((r) => {
        const t = r.type as Record<string, unknown>;
        return "oneOf" in t ? "oneOf" : "$ref" in t ? "$ref" : String(t.type);
      }),
    );
    expect([...kinds].sort()).toEqual(["$ref", "array", "boolean", "integer", "object", "oneOf", "string"]);
  });
});
