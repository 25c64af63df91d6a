/**
 * One key, one host: a host given in full (`host: {key, uri, ...}`, or in a
 * pool) is registered by its key in the runtime's host pool, so two
 * resources of one program giving one key two connections are refused at
 * check (KvmProxyRuntime.check, which both doors run), naming `host.key`
 * and the other resource and quoting no key material; the same host given
 * by many resources (a fleet's members) passes.
 */
import { describe, expect, it } from "vitest";
import { KvmProxyPlugin } from "../../../provider/plugin/kvm-proxy-plugin";
import { KvmProxyRuntime } from "../../../provider/resource/provider";

const KEY_A =
  "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAkey-material-of-a\n-----END OPENSSH PRIVATE KEY-----\n";
const KEY_B =
  "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAkey-material-of-b\n-----END OPENSSH PRIVATE KEY-----\n";
const KNOWN =
  "hv.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0kvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmp\n";
const SSH = { key: "hv1", uri: "ssh://root@hv.example.com:22", knownHosts: KNOWN, privateKey: KEY_A };
const UNIX = { key: "hv1", uri: "unix:///run/libvirt/libvirt-sock" };

async function runtime(): Promise<KvmProxyRuntime> {
  const r = new KvmProxyRuntime();
  r.log = { status() {}, info() {}, warn() {}, flush: async () => {}, close() {} };
  const config: Record<string, unknown> = {
    "kvm:images": { tiny: { url: "/nonexistent/tiny.qcow2", firmware: "bios" } },
    // The dynamic door keeps a host with key material sealed under it (host-connection.ts).
    "kvm:stateKey": "kvmpt-state-key-0123456789abcdefghij",
  };
  await r.configure({ config: { get: (k) => config[k] } });
  return r;
}

const urn = (name: string) => `urn:pulumi:s::p::KvmProxy::${name}`;
const news = (name: string, host: unknown) => ({
  host,
  image: "tiny",
  owner: { project: "p", stack: "s", urn: urn(name), resource: name },
});

/** Each row: what the resources give, in order, and the failure the last one gets (none: every one passes). */
const ROWS: [string, [string, unknown][], { property: string; other: string } | undefined][] = [
  [
    "one host given alike by three resources",
    [
      ["a", SSH],
      ["b", SSH],
      ["c", { ...SSH }],
    ],
    undefined,
  ],
  [
    "one host with its fields in another order",
    [
      ["a", SSH],
      ["b", { privateKey: KEY_A, knownHosts: KNOWN, uri: SSH.uri, key: "hv1" }],
    ],
    undefined,
  ],
  [
    "two keys, two hosts",
    [
      ["a", SSH],
      ["b", { ...SSH, key: "hv2", uri: "ssh://root@hv2.example.com:22" }],
    ],
    undefined,
  ],
  [
    "a fleet's members, one pool of the same hosts",
    [
      ["f-0", { pool: [SSH] }],
      ["f-1", { pool: [SSH] }],
    ],
    undefined,
  ],
  [
    "one resource checked again with a new connection",
    [
      ["a", SSH],
      ["a", { ...SSH, privateKey: KEY_B }],
    ],
    undefined,
  ],
  [
    "another address",
    [
      ["a", SSH],
      ["b", { ...SSH, uri: "ssh://root@hv-other.example.com:22" }],
    ],
    { property: "host.key", other: "a" },
  ],
  [
    "another private key",
    [
      ["a", SSH],
      ["b", { ...SSH, privateKey: KEY_B }],
    ],
    { property: "host.key", other: "a" },
  ],
  [
    "other known_hosts lines",
    [
      ["a", SSH],
      ["b", { ...SSH, knownHosts: KNOWN.replace("hv.", "hv0.") }],
    ],
    { property: "host.key", other: "a" },
  ],
  [
    "another pool",
    [
      ["a", UNIX],
      ["b", { ...UNIX, pool: "other" }],
    ],
    { property: "host.key", other: "a" },
  ],
  [
    "a unix socket and an ssh host",
    [
      ["a", UNIX],
      ["b", SSH],
    ],
    { property: "host.key", other: "a" },
  ],
  [
    "in a pool",
    [
      ["f-0", { pool: [SSH] }],
      ["g-0", { pool: [UNIX, { ...SSH, privateKey: KEY_B, key: "hv3" }] }],
    ],
    { property: "host.pool[0].key", other: "f-0" },
  ],
  [
    "after a resource that gave it alike",
    [
      ["a", SSH],
      ["b", SSH],
      ["c", { ...SSH, privateKey: KEY_B }],
    ],
    { property: "host.key", other: "a" },
  ],
];

describe.each([
  [
    "the runtime's check (the dynamic door)",
    async () => {
      const r = await runtime();
      return (name: string, host: unknown) => r.check({}, news(name, host));
    },
  ],
  [
    "the plugin's check",
    async () => {
      const plugin = new KvmProxyPlugin(await runtime());
      return (name: string, host: unknown) => plugin.check(urn(name), {}, news(name, host));
    },
  ],
])("%s", (_door, door) => {
  it.each(ROWS)("%s", async (_what, given, refused) => {
    const check = await door();
    const results = [];
    for (const [name, host] of given) results.push(await check(name, host));
    const last = results.pop();
    for (const r of results) expect(r?.failures).toEqual([]);
    if (refused === undefined) {
      expect(last?.failures).toEqual([]);
      return;
    }
    expect(last?.failures).toEqual([
      {
        property: refused.property,
        reason: `"hv1" is also given by the resource "${refused.other}" with another connection (uri, key material or settings): one key names one host, so give the same host there or another key`,
      },
    ]);
    const text = JSON.stringify(last?.failures);
    for (const secret of ["key-material-of", KNOWN.trim()]) expect(text).not.toContain(secret);
  });
});
