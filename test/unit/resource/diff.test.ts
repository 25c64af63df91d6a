import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { issueLeaf, makeCa } from "../../../provider/kvm/tls/certificate";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import type { CheckedInputs } from "../../../provider/resource/args";
import { UNKNOWN } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { legacyDefaultUserData } from "../../../provider/resource/default-user-data";
import { collisions, diffProxy } from "../../../provider/resource/diff";
import { REPLACE_PROPERTIES, UPDATE_PROPERTIES } from "../../../provider/resource/kvm-proxy-properties";
import { outputsFrom, seedDigest } from "../../../provider/resource/mapping";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" }, lab2: { uri: "unix:///t" } },
      "kvm:images": {
        debian: { url: "https://example.com/debian.qcow2" },
        debian2: { url: "https://example.com/debian.qcow2" },
        other: { url: "https://example.com/other.qcow2" },
        baked: { url: "https://example.com/debian.qcow2", bake: true },
        "baked-htop": { url: "https://example.com/debian.qcow2", bake: { packages: ["htop"] } },
      },
    })[k],
);

/** check of `news` as the KvmProxy class sends them (the password hashed in the program). */
function checked(news: Record<string, unknown>, olds: Record<string, unknown> = {}): Record<string, unknown> {
  const urn = (news.owner as { urn?: string } | undefined)?.urn ?? "urn:none";
  const sent = news.proxy === undefined ? news : { ...news, proxy: hashedProxyBlock(news.proxy, urn) };
  const r = checkInputs(olds, sent, { config, randomBytes: (n) => new Uint8Array(n).fill(1) });
  expect(r.failures).toEqual([]);
  return r.inputs;
}

const base = {
  host: "lab",
  image: "debian",
  userData: "#cloud-config\n",
  owner: { project: "p", stack: "s", urn: "urn:a", resource: "edge" },
};

/** Old outputs as create would have stored them. */
function created(news: Record<string, unknown>): Record<string, unknown> {
  const c = checked(news);
  return {
    ...outputsFrom(c as unknown as CheckedInputs, {
      host: "lab",
      name: c.name as string,
      state: "running",
      uuid: "u",
      mac: (c.macAddress as string | undefined) ?? "52:54:00:00:00:01",
      ipv4: "192.168.1.2",
    }),
    __provider: "old provider text",
  };
}

function diff(oldArgs: Record<string, unknown>, newArgs: Record<string, unknown>) {
  const olds = created(oldArgs);
  const news = { ...checked(newArgs, olds), __provider: "new provider text" };
  return diffProxy(decodeState(olds), news);
}

// A proxy with TLS of the user's (a CA made for it is kept by check from the old inputs: check-tls.test.ts).
const STATIC_NIC = { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }] };
const NOW = new Date();
const CA_A = makeCa({ commonName: "CA a", now: NOW });
const CA_B = makeCa({ commonName: "CA b", now: NOW });
const LEAF = issueLeaf({ ca: CA_A, ipAddresses: ["203.0.113.7"], now: NOW });
const tlsCa = (ca: typeof CA_A) => ({ ca: { certificate: ca.certificatePem, privateKey: ca.privateKeyPem } });
const tlsGiven = { certificate: LEAF.certificatePem, privateKey: LEAF.privateKeyPem };

// Each row: a change → replace (with the property) or update.
const ROWS: [string, Record<string, unknown>, Record<string, unknown>, "replace" | "update", string][] = [
  ["host", {}, { host: "lab2" }, "replace", "host"],
  ["image key to another image", {}, { image: "other" }, "replace", "image"],
  ["image as URL", {}, { image: "https://example.com/new.qcow2" }, "replace", "image"],
  ["image baked (same stock image)", {}, { image: "baked" }, "replace", "image"],
  ["image bake recipe", { image: "baked" }, { image: "baked-htop" }, "replace", "image"],
  [
    "image firmware",
    {},
    { image: { url: "https://example.com/debian.qcow2", firmware: "bios" } },
    "replace",
    "image",
  ],
  [
    "image pinned",
    {},
    { image: { url: "https://example.com/debian.qcow2", sha256: "b".repeat(64) } },
    "replace",
    "image",
  ],
  ["userData", {}, { userData: "#cloud-config\nhostname: x\n" }, "replace", "userData"],
  ["vendorData added", {}, { vendorData: "#!/bin/sh\ntrue\n" }, "replace", "vendorData"],
  [
    "userDataBase64 with other bytes",
    {},
    { userData: undefined, userDataBase64: Buffer.from("#cloud-config\nhostname: y\n").toString("base64") },
    "replace",
    "userDataBase64",
  ],
  [
    "vendorDataBase64 added (gzip)",
    {},
    { vendorDataBase64: gzipSync("#cloud-config\nruncmd: [true]\n").toString("base64") },
    "replace",
    "vendorDataBase64",
  ],
  ["installGuestAgent", {}, { installGuestAgent: false }, "replace", "installGuestAgent"],
  ["proxy block added", {}, { proxy: { allowedClients: ["10.10.0.0/16"] } }, "replace", "proxy"],
  [
    "proxy destinations opened",
    { proxy: {} },
    { proxy: { allowedDestinations: ["192.168.10.0/24"] } },
    "replace",
    "proxy",
  ],
  [
    "proxy password",
    { proxy: { auth: { username: "u", password: "the first password" } } },
    { proxy: { auth: { username: "u", password: "the second password" } } },
    "replace",
    "proxy",
  ],
  ["proxy socks added", { proxy: {} }, { proxy: { socks: { port: 1080 } } }, "replace", "proxy"],
  ["proxy TLS added", { ...STATIC_NIC, proxy: {} }, { proxy: { tls: tlsCa(CA_A) } }, "replace", "proxy"],
  [
    "proxy TLS: another CA",
    { ...STATIC_NIC, proxy: { tls: tlsCa(CA_A) } },
    { proxy: { tls: tlsCa(CA_B) } },
    "replace",
    "proxy",
  ],
  [
    "proxy TLS: the certificate given instead of its CA",
    { ...STATIC_NIC, proxy: { tls: tlsCa(CA_A) } },
    { proxy: { tls: tlsGiven } },
    "replace",
    "proxy",
  ],
  ["proxy TLS removed", { ...STATIC_NIC, proxy: { tls: tlsGiven } }, { proxy: {} }, "replace", "proxy"],
  ["memoryMiB", {}, { memoryMiB: 1024 }, "replace", "memoryMiB"],
  ["vcpus", {}, { vcpus: 2 }, "replace", "vcpus"],
  ["diskGiB", {}, { diskGiB: 20 }, "replace", "diskGiB"],
  ["network", {}, { network: "other" }, "replace", "network"],
  ["bridge", {}, { bridge: "br0" }, "replace", "bridge"],
  ["macAddress", {}, { macAddress: "52:54:00:00:00:99" }, "replace", "macAddress"],
  ["name", { name: "fixed-a" }, { name: "fixed-b" }, "replace", "name"],
  ["proxyPort", {}, { proxyPort: 8080, userData: "#cloud-config\n" }, "replace", "proxyPort"],
  ["tags", {}, { tags: { team: "x" } }, "update", "tags"],
  ["healthCheck", {}, { healthCheck: false }, "update", "healthCheck"],
  ["healthCheck url", {}, { healthCheck: { url: "http://example.com/" } }, "update", "healthCheck"],
  ["egressCheck added", {}, { egressCheck: { url: "https://echo.example/" } }, "update", "egressCheck"],
  [
    "egressCheck URL changed",
    { egressCheck: { url: "https://echo.example/" } },
    { egressCheck: { url: "https://other.example/ip" } },
    "update",
    "egressCheck",
  ],
  ["waitForIp", {}, { waitForIp: false, healthCheck: false }, "update", "waitForIp"],
  ["timeouts", {}, { timeouts: { create: "20m" } }, "update", "timeouts"],
  ["rotation", {}, { rotation: { maxAge: "7d", batch: 2 } }, "update", "rotation"],
  ["keepOnFailure set", {}, { keepOnFailure: true }, "update", "keepOnFailure"],
  ["keepOnFailure cleared", { keepOnFailure: true }, { keepOnFailure: false }, "update", "keepOnFailure"],
  ["waitForIp family", {}, { waitForIp: "any" }, "update", "waitForIp"],
  ["nics instead of the host's network", {}, { nics: [{ network: "default" }] }, "replace", "nics"],
  [
    "a NIC's static address",
    { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
    { nics: [{ bridge: "br0", addresses: ["203.0.113.8/24"] }] },
    "replace",
    "nics",
  ],
  [
    "a second NIC",
    { nics: [{ network: "default" }] },
    { nics: [{ network: "default" }, { bridge: "br0" }] },
    "replace",
    "nics",
  ],
  [
    "a NIC's bandwidth (in place)",
    { nics: [{ network: "default" }] },
    { nics: [{ network: "default", bandwidth: { outboundKbps: 8000 } }] },
    "update",
    "nics",
  ],
  ["networkConfig", {}, { networkConfig: "version: 2\nethernets: {}\n" }, "replace", "networkConfig"],
];

describe("diff", () => {
  it.each(ROWS)("%s → %s", (_what, oldChange, newChange, kind, property) => {
    const d = diff({ ...base, ...oldChange }, { ...base, ...oldChange, ...newChange });
    expect(d.changes).toBe(true);
    if (kind === "replace") {
      expect(d.replaces).toContain(property);
    } else {
      expect(d.replaces).toEqual([]);
      expect(d.updates).toContain(property);
    }
  });

  it("creates an autonamed proxy's new NICs before deleting the old (derived MACs change with the name), but deletes first when a NIC's MAC is fixed", () => {
    const derived = diff(
      { ...base, nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
      { ...base, nics: [{ bridge: "br0", addresses: ["203.0.113.8/24"] }] },
    );
    expect(derived.deleteBeforeReplace).toBe(false);
    const fixed = diff(
      { ...base, nics: [{ bridge: "br0", macAddress: "52:54:00:00:00:42", addresses: ["203.0.113.7/24"] }] },
      { ...base, nics: [{ bridge: "br0", macAddress: "52:54:00:00:00:42", addresses: ["203.0.113.8/24"] }] },
    );
    expect(fixed.deleteBeforeReplace).toBe(true);
  });

  it.each<[string, Record<string, unknown>, Record<string, unknown>, boolean]>([
    [
      "a static address kept (the memory grows)",
      { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
      { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }], memoryMiB: 1024 },
      true,
    ],
    [
      "a static IPv6 address kept beside a changed IPv4",
      { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24", "2001:db8::7/64"] }] },
      { nics: [{ bridge: "br0", addresses: ["203.0.113.8/24", "2001:db8::7/64"] }] },
      true,
    ],
    [
      "the static addresses changed",
      { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
      { nics: [{ bridge: "br0", addresses: ["203.0.113.8/24"] }] },
      false,
    ],
    [
      "addresses by DHCP",
      { nics: [{ network: "default" }] },
      { nics: [{ network: "default" }], memoryMiB: 1024 },
      false,
    ],
    [
      "a static address kept, on another host",
      { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
      { host: "lab2", nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] },
      false,
    ],
  ])("an autonamed proxy replaced with %s: deleted first %s", (_what, before, after, first) => {
    const d = diff({ ...base, ...before }, { ...base, ...after });
    expect(d.replaces.length).toBeGreaterThan(0);
    expect(d.deleteBeforeReplace).toBe(first);
  });

  describe("a NIC on an address pool", () => {
    const pool = (ranges: string[], more: Record<string, unknown> = {}) => ({
      ...base,
      nics: [{ bridge: "br0", addressPool: { ranges }, gateway4: "203.0.113.1" }],
      ...more,
    });
    /** Outputs as create stores them: the NIC with the address the pool gave it. */
    const made = (args: Record<string, unknown>, address: string) => {
      const olds = created(args);
      const [nic] = olds.nics as { addresses: string[] }[];
      return { ...olds, nics: [{ ...nic, addresses: [address] }] };
    };
    const diffFrom = (olds: Record<string, unknown>, args: Record<string, unknown>) =>
      diffProxy(decodeState(olds), { ...checked(args, olds), __provider: "new provider text" });

    it("is no change with the address its pool gave it, nor when the pool grows around it", () => {
      const olds = made(pool(["203.0.113.10-203.0.113.14/24"]), "203.0.113.12/24");
      expect(diffFrom(olds, pool(["203.0.113.10-203.0.113.14/24"])).changes).toBe(false);
      expect(diffFrom(olds, pool(["203.0.113.10-203.0.113.40/24"])).changes).toBe(false);
    });

    it("is replaced when the pool no longer holds its address", () => {
      const olds = made(pool(["203.0.113.10-203.0.113.14/24"]), "203.0.113.12/24");
      expect(diffFrom(olds, pool(["203.0.113.20-203.0.113.24/24"])).replaces).toEqual(["nics"]);
    });

    it("is created before its predecessor goes when replaced: it takes another address of the pool", () => {
      const olds = made(pool(["203.0.113.10-203.0.113.14/24"]), "203.0.113.12/24");
      const d = diffFrom(olds, pool(["203.0.113.10-203.0.113.14/24"], { memoryMiB: 1024 }));
      expect(d.replaces).toEqual(["memoryMiB"]);
      expect(d.deleteBeforeReplace).toBe(false);
    });
  });

  it("says what is kept when a replacement must delete first", () => {
    const olds = created({ ...base, nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }] });
    const news = checked(
      { ...base, nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }], memoryMiB: 1024 },
      olds,
    );
    expect(collisions(decodeState(olds), news)).toEqual(["static address 203.0.113.7 kept"]);
  });

  it("covers every replace and update property", () => {
    const covered = new Set(ROWS.map((r) => r[4]));
    for (const p of [...REPLACE_PROPERTIES, ...UPDATE_PROPERTIES]) expect(covered.has(p), p).toBe(true);
  });

  it("reports no change for an unchanged program, whatever the provider text", () => {
    const d = diff(base, base);
    expect(d).toEqual({ changes: false, replaces: [], updates: [], deleteBeforeReplace: false });
    const full = {
      ...base,
      name: "edge-fixed",
      macAddress: "52:54:00:00:00:07",
      tags: { a: "b" },
      timeouts: { create: "10m" },
      healthCheck: { url: "http://example.com/", expectStatus: 204 },
    };
    expect(diff(full, full).changes).toBe(false);
  });

  it.each([
    ["the same CA", tlsCa(CA_A)],
    ["the same certificate given", tlsGiven],
  ])("does not count %s again as a change (the old outputs hold only its certificate)", (_what, tls) => {
    const withTls = { ...base, ...STATIC_NIC, proxy: { tls } };
    expect(diff(withTls, withTls)).toEqual({
      changes: false,
      replaces: [],
      updates: [],
      deleteBeforeReplace: false,
    });
  });

  it("does not count the same proxy password again as a change (the old outputs hold only its hash)", () => {
    const withAuth = {
      ...base,
      proxy: { auth: { username: "u", password: "the same password" }, allowedClients: ["10.0.0.0/8"] },
    };
    const olds = created(withAuth);
    expect(JSON.stringify(olds)).not.toContain("the same password");
    expect(diff(withAuth, withAuth).changes).toBe(false);
  });

  it("replaces a proxy whose recorded hash is an MD5-crypt one (0.1.0), which gave guessers a fast oracle", () => {
    const withAuth = { ...base, proxy: { auth: { username: "u", password: "the same password" } } };
    const olds = { ...created(withAuth), proxyPasswordHash: "$1$abcdefgh$0123456789012345678901" };
    const news = { ...checked(withAuth, olds), __provider: "new provider text" };
    expect(diffProxy(decodeState(olds), news)).toMatchObject({ changes: true, replaces: ["proxy"] });
  });

  it("does not rebuild a proxy built with the default user-data of 0.1.0 when the program still gives none", () => {
    const olds = {
      ...created({ host: "lab", image: "debian" }),
      userDataSha256: seedDigest(legacyDefaultUserData(3128)),
    };
    const news = { ...checked({ host: "lab", image: "debian" }, olds), __provider: "new" };
    expect(diffProxy(decodeState(olds), news).replaces).toEqual([]);
    // A user-data the program gives is compared as always.
    const given = {
      ...checked({ host: "lab", image: "debian", userData: "#cloud-config\n" }, olds),
      __provider: "new",
    };
    expect(diffProxy(decodeState(olds), given).replaces).toEqual(["userData"]);
  });

  it("does not count the same bytes given as base64 instead of text as a change", () => {
    const asBase64 = {
      ...base,
      userData: undefined,
      userDataBase64: Buffer.from(base.userData).toString("base64"),
    };
    expect(diff(base, asBase64)).toEqual({
      changes: false,
      replaces: [],
      updates: [],
      deleteBeforeReplace: false,
    });
    expect(diff(asBase64, base).changes).toBe(false);
  });

  it("does not count an image key switch to the same image, or libvirt's own MAC, as changes", () => {
    expect(diff(base, { ...base, image: "debian2" }).changes).toBe(false);
    expect(diff(base, base).replaces).not.toContain("macAddress");
  });

  it("deletes before replacing only when the name (or MAC) is fixed and stays", () => {
    expect(diff({ ...base, name: "fixed" }, { ...base, name: "fixed", vcpus: 2 }).deleteBeforeReplace).toBe(
      true,
    );
    expect(diff(base, { ...base, vcpus: 2 }).deleteBeforeReplace).toBe(false);
    expect(diff({ ...base, name: "fixed" }, { ...base, name: "other", vcpus: 2 }).deleteBeforeReplace).toBe(
      false,
    );
    expect(
      diff({ ...base, name: "fixed" }, { ...base, name: "fixed", host: "lab2" }).deleteBeforeReplace,
    ).toBe(false);
    const mac = { ...base, macAddress: "52:54:00:00:00:42" };
    expect(diff(mac, { ...mac, vcpus: 2 }).deleteBeforeReplace).toBe(true);
    expect(diff(base, { ...base, tags: { a: "b" } }).deleteBeforeReplace).toBe(false);
  });

  it("treats an unknown replace property as a replacement during preview", () => {
    const olds = created(base);
    const news = { ...checked(base, olds), memoryMiB: UNKNOWN };
    expect(diffProxy(decodeState(olds), news).replaces).toEqual(["memoryMiB"]);
  });

  it.each([
    ["stopped", "the VM stopped (update starts it)"],
    ["failed", "the VM failed (update starts it)"],
    ["degraded", "the proxy failing its probe (update probes again)"],
  ])("asks for an update, never a replacement, when a refresh found it %s: %s", (state) => {
    const olds = { ...created(base), state };
    const d = diffProxy(decodeState(olds), checked(base, olds));
    expect(d).toMatchObject({ changes: true, replaces: [] });
  });

  it("asks for nothing when a refresh found it running", () => {
    const olds = { ...created(base), state: "running" };
    expect(diffProxy(decodeState(olds), checked(base, olds)).changes).toBe(false);
  });

  it("sees drift found by refresh (memory changed behind Pulumi's back) as a replacement", () => {
    const olds = { ...created(base), memoryMiB: 2048 };
    expect(diffProxy(decodeState(olds), checked(base, olds)).replaces).toEqual(["memoryMiB"]);
  });

  it("fills defaults for state written without newer keys, so an upgrade shows no diff", () => {
    const olds = created(base);
    delete olds.timeouts;
    delete olds.waitForIp;
    delete olds.installGuestAgent;
    expect(diffProxy(decodeState(olds), checked(base, olds)).changes).toBe(false);
  });
});

describe("user-data and vendor-data in the state", () => {
  it("the outputs hold their SHA-256, never the texts", () => {
    const olds = created({
      ...base,
      userData: "#cloud-config\npassword: hunter2\n",
      vendorData: "#!/bin/sh\n",
    });
    expect(olds.userData).toBeUndefined();
    expect(olds.vendorData).toBeUndefined();
    expect(olds.userDataSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(olds.vendorDataSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(olds)).not.toContain("hunter2");
  });

  it.each([
    ["the same user-data", {}, {}, []],
    ["changed user-data", {}, { userData: "#cloud-config\nhostname: y\n" }, ["userData"]],
    ["vendor-data added", {}, { vendorData: "#!/bin/sh\n" }, ["vendorData"]],
    ["vendor-data removed", { vendorData: "#!/bin/sh\n" }, { vendorData: undefined }, ["vendorData"]],
    ["the same vendor-data", { vendorData: "#!/bin/sh\n" }, {}, []],
  ])("%s is compared by digest", (_what, oldChange, newChange, replaces) => {
    const d = diff({ ...base, ...oldChange }, { ...base, ...oldChange, ...newChange });
    expect(d.replaces).toEqual(replaces);
  });

  it("state written with the texts in the outputs (older versions) still diffs by content", () => {
    const olds = created(base);
    const legacy: Record<string, unknown> = { ...olds, userData: base.userData };
    delete legacy.userDataSha256;
    expect(diffProxy(decodeState(legacy), checked(base, legacy)).changes).toBe(false);
    expect(
      diffProxy(decodeState(legacy), checked({ ...base, userData: "#cloud-config\nx: 1\n" }, legacy))
        .replaces,
    ).toEqual(["userData"]);
  });

  it("unknown user-data at preview counts as a change", () => {
    const olds = created(base);
    const news = { ...checked(base, olds), userData: UNKNOWN };
    expect(diffProxy(decodeState(olds), news).replaces).toContain("userData");
  });
});

describe("diff: a host given in full", () => {
  /** Old outputs of a proxy created on host `key` from `args`. */
  function on(key: string, args: Record<string, unknown>): Record<string, unknown> {
    const c = checked({ ...base, ...args });
    return outputsFrom(c as unknown as CheckedInputs, {
      host: key,
      name: c.name as string,
      state: "running",
      uuid: "u",
      mac: "52:54:00:00:00:01",
      ipv4: "192.168.1.2",
    });
  }
  const edge = { key: "edge", uri: "unix:///run/edge" };
  const cases: [
    string,
    Record<string, unknown>,
    string,
    unknown,
    { replaces: string[]; updates: string[] },
  ][] = [
    [
      "a kvm:hosts key, then the same host in full: recorded, not replaced",
      { host: "lab" },
      "lab",
      { key: "lab", uri: "unix:///s" },
      { replaces: [], updates: ["host"] },
    ],
    ["the same host in full again: no change", { host: edge }, "edge", edge, { replaces: [], updates: [] }],
    [
      "the host reached at another address: updated in place",
      { host: edge },
      "edge",
      { ...edge, uri: "unix:///run/edge-2" },
      { replaces: [], updates: ["host"] },
    ],
    [
      "another key: replaced",
      { host: edge },
      "edge",
      { ...edge, key: "edge2" },
      { replaces: ["host"], updates: [] },
    ],
    [
      "a key not known yet: replaced (it may be another host)",
      { host: edge },
      "edge",
      { key: UNKNOWN, uri: UNKNOWN },
      { replaces: ["host"], updates: [] },
    ],
    [
      "from in full back to the kvm:hosts key: not replaced",
      { host: { key: "lab", uri: "unix:///s" } },
      "lab",
      "lab",
      { replaces: [], updates: [] },
    ],
  ];
  it.each(cases)("%s", (_, oldArgs, key, host, want) => {
    const olds = on(key, oldArgs);
    const d = diffProxy(decodeState(olds), checked({ ...base, host }, olds));
    expect({ replaces: d.replaces, updates: d.updates }).toEqual(want);
  });

  it.each<[string, unknown, { replaces: string[]; updates: string[] }]>([
    ["its host still in the pool, in full", { pool: ["lab2", edge] }, { replaces: [], updates: [] }],
    [
      "its host in the pool, reached otherwise",
      { pool: [{ ...edge, uri: "unix:///run/edge-2" }] },
      { replaces: [], updates: ["host"] },
    ],
    ["its host gone from the pool", { pool: ["lab2"] }, { replaces: ["host"], updates: [] }],
  ])("a pooled proxy with %s", (_, host, want) => {
    const olds = on("edge", { host: { pool: [edge, "lab"] } });
    const d = diffProxy(decodeState(olds), checked({ ...base, host }, olds));
    expect({ replaces: d.replaces, updates: d.updates }).toEqual(want);
  });

  it("records a pooled proxy's host in full: the one it was placed on", () => {
    expect(on("edge", { host: { pool: ["lab", edge] } }).hostConnection).toEqual(edge);
    expect(on("lab", { host: { pool: ["lab", edge] } }).hostConnection).toBeUndefined();
  });

  it("records the host in full as the secret output delete and refresh reach it by", () => {
    expect(on("edge", { host: edge }).hostConnection).toEqual(edge);
    expect(on("lab", { host: "lab" }).hostConnection).toBeUndefined();
  });
});
