/**
 * The dynamic provider's sealed record of a host given in full
 * (host-connection.ts), and the runtime's rule around it: a proxy whose host
 * carries key material needs `kvm:stateKey` at preview; the outputs keep the
 * host sealed under it, text that holds no key material in any form, and
 * refresh and destroy open it again.
 */
import { describe, expect, it } from "vitest";
import type { HostEntry } from "../../../provider/resource/args";
import { isSealed, openHostConnection, sealHostConnection } from "../../../provider/resource/host-connection";
import { KvmProxyRuntime } from "../../../provider/resource/provider";
import { stateKeyProblem } from "../../../provider/resource/state-key";

const KEY_TEXT = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ";
const PRIVATE_KEY = `-----BEGIN OPENSSH PRIVATE KEY-----\n${KEY_TEXT}\n-----END OPENSSH PRIVATE KEY-----\n`;
const PASSPHRASE = "correct-horse-battery-staple";
const STATE_KEY = "k".repeat(32);
const entry: HostEntry = {
  key: "hv",
  uri: "ssh://root@hv.example:22",
  knownHosts: "hv.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI",
  privateKey: PRIVATE_KEY,
  passphrase: PASSPHRASE,
  jump: { uri: "ssh://ops@bastion.example", privateKey: PRIVATE_KEY },
};

describe("the sealed record", () => {
  const sealed = sealHostConnection(entry, STATE_KEY);

  it("holds the host's key and no key material in any form", () => {
    expect(isSealed(sealed)).toBe(true);
    expect(sealed.key).toBe("hv");
    const text = JSON.stringify(sealed);
    for (const secret of [KEY_TEXT, PASSPHRASE, Buffer.from(PASSPHRASE).toString("base64"), STATE_KEY])
      expect(text).not.toContain(secret);
  });

  it("opens to the entry with the key it was sealed under", () => {
    expect(openHostConnection(sealed, STATE_KEY)).toEqual({ entry });
  });

  it("is the same text for the same entry (outputs do not change at every update), another for another", () => {
    expect(sealHostConnection({ ...entry }, STATE_KEY)).toEqual(sealed);
    expect(sealHostConnection({ ...entry, passphrase: "other" }, STATE_KEY).sealed).not.toBe(sealed.sealed);
  });

  it.each([
    ["no kvm:stateKey", undefined, sealed, /which is not set/],
    ["another kvm:stateKey", "x".repeat(32), sealed, /does not open it/],
    ["a seal moved to another host's key", STATE_KEY, { ...sealed, key: "other" }, /does not open it/],
    [
      "a damaged seal",
      STATE_KEY,
      { ...sealed, sealed: `${sealed.sealed.slice(0, -4)}AAAA` },
      /does not open it/,
    ],
    [
      "a seal of an unknown version",
      STATE_KEY,
      { ...sealed, sealed: `v9${sealed.sealed.slice(2)}` },
      /cannot read: upgrade pulumi-kvm-proxy .*npm install pulumi-kvm-proxy@latest/,
    ],
    [
      "a seal cut short",
      STATE_KEY,
      { ...sealed, sealed: `${sealed.sealed.split(".")[0]}.AAAA` },
      /cut short/,
    ],
  ])("does not open with %s, and says why without quoting it", (_, key, record, reason) => {
    const r = openHostConnection(record, key);
    expect(r).toEqual({ problem: expect.stringMatching(reason) });
    expect(JSON.stringify(r)).not.toContain(KEY_TEXT);
  });
});

describe("kvm:stateKey", () => {
  it.each([
    [undefined, /must be a string/],
    [42, /must be a string/],
    ["short", /at least 32 characters/],
  ])("refuses %j", (v, reason) => {
    expect(stateKeyProblem(v)).toMatch(reason);
  });

  it("takes 32 characters or more", () => {
    expect(stateKeyProblem(STATE_KEY)).toBeUndefined();
  });
});

/** A runtime configured with `config` (keys as a stack gives them), its engine log silenced. */
async function runtime(config: Record<string, unknown>, seals = true): Promise<KvmProxyRuntime> {
  const r = new KvmProxyRuntime();
  r.hostsInFull.seal = seals;
  r.log = { status() {}, info() {}, warn() {}, flush: async () => {} } as unknown as KvmProxyRuntime["log"];
  await r.configure({ config: { get: (k) => config[k] } });
  return r;
}

const IMAGES = { "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } } };
const inFull = (extra: Record<string, unknown>) => ({
  key: "hv",
  uri: "ssh://root@hv.example:22",
  knownHosts: "hv.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0kvmpm0lWvhvXw8FZ8Bvtf5c8Ak8R5F5XJ2n7t0h7m",
  ...extra,
});

describe("check: a host in full with key material needs kvm:stateKey (the dynamic provider)", () => {
  const rows: [string, unknown][] = [
    ["its own key", inFull({ privateKey: PRIVATE_KEY })],
    ["a passphrase of its key file", inFull({ privateKeyPath: "/id", passphrase: PASSPHRASE })],
    [
      "a jump hop's key (one hop)",
      inFull({ privateKeyPath: "/id", jump: { uri: "ssh://b@b", privateKey: PRIVATE_KEY } }),
    ],
    ["a pool's host in full", { pool: [inFull({ privateKey: PRIVATE_KEY })] }],
  ];

  it.each(rows)("%s: refused without kvm:stateKey, naming it and what to do", async (_, host) => {
    const r = await runtime(IMAGES);
    const { failures } = await r.check({}, { host, image: "debian" });
    expect(failures).toEqual([
      {
        property: "kvm:stateKey",
        reason: expect.stringMatching(/is required.*pulumi config set --secret kvm:stateKey/),
      },
    ]);
  });

  it.each(rows)("%s: accepted with kvm:stateKey set, and by the plugin without it", async (_, host) => {
    expect(
      (await (await runtime({ ...IMAGES, "kvm:stateKey": STATE_KEY })).check({}, { host, image: "debian" }))
        .failures,
    ).toEqual([]);
    expect((await (await runtime(IMAGES, false)).check({}, { host, image: "debian" })).failures).toEqual([]);
  });

  it("a kvm:stateKey too short is refused as such", async () => {
    const r = await runtime({ ...IMAGES, "kvm:stateKey": "short" });
    const { failures } = await r.check({}, { host: rows[0]?.[1], image: "debian" });
    expect(failures).toEqual([{ property: "kvm:stateKey", reason: expect.stringMatching(/at least 32/) }]);
  });

  it("a host reached by a key file, an agent or kvm:hosts needs none", async () => {
    const r = await runtime(IMAGES);
    for (const host of [inFull({ privateKeyPath: "/id" }), inFull({ agentSocket: "/run/agent" })])
      expect((await r.check({}, { host, image: "debian" })).failures).toEqual([]);
  });
});
