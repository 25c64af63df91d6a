/**
 * The plugin's KvmProxy front door where it differs from the dynamic one,
 * over a real KvmProxyRuntime configured with a host key (check and diff
 * reach no host): the password hashed at check and kept beside the hash,
 * secret; a proxy block with TLS secret, its CA kept through the engine's
 * secret olds; the owner from the URN, or kept; the credential URLs; nothing
 * computed from a secret in the outputs, derived from old inputs; the
 * engine's customTimeouts held to the provider's maximum. Diff, create and
 * the rest: test/pulumi/plugin.test.ts, through the real CLI.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { KvmOperations } from "../../../provider/kvm/host/operations";
import { ProvisionError } from "../../../provider/kvm/host/provision";
import { isPasswordHash } from "../../../provider/kvm/proxy/password-hash";
import {
  hashedForCheck,
  KvmProxyPlugin,
  published,
  runtimeOlds,
  withCredentialUrls,
  withoutPassword,
} from "../../../provider/plugin/kvm-proxy-plugin";
import { isSecret, reveal, SECRET_SIG, SECRET_VALUE } from "../../../provider/plugin/property-values";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import { UNKNOWN } from "../../../provider/resource/args";
import { decodeChecked } from "../../../provider/resource/checked-inputs";
import { SECRET_DERIVED_OUTPUTS } from "../../../provider/resource/kvm-proxy-properties";
import { outputsFrom, specHashOf } from "../../../provider/resource/mapping";
import { KvmProxyRuntime, PartialCreateError } from "../../../provider/resource/provider";

const URN = "urn:pulumi:dev::proj::kvmproxy:index:KvmProxy::edge";
const OLD_URN = "urn:pulumi:dev::proj::pulumi-nodejs:dynamic:KvmProxy::edge";
const PASSWORD = "correct-horse-battery-staple";
const wrapped = (value: unknown) => ({ [SECRET_SIG]: SECRET_VALUE, value });

let plugin: KvmProxyPlugin;
/** The warnings the runtime gave through the engine's log: resource URN and text. */
const warnings: [string | undefined, string][] = [];

beforeAll(async () => {
  const runtime = new KvmProxyRuntime();
  runtime.log = {
    status() {},
    info() {},
    warn: (urn, text) => warnings.push([urn, text]),
    flush: async () => {},
    close() {},
  };
  // A host whose socket is not there: every connection fails at once, a transient failure retried.
  const config: Record<string, unknown> = {
    "kvm:hosts": { lab: { uri: "unix:///nonexistent/libvirt-sock" } },
    "kvm:images": { tiny: { url: "/nonexistent/tiny.qcow2", firmware: "bios" } },
  };
  await runtime.configure({ config: { get: (k) => config[k] } });
  plugin = new KvmProxyPlugin(runtime);
});

const news = (proxy?: unknown) => ({
  host: "lab",
  image: "tiny",
  name: "edge-plugin",
  ...(proxy !== undefined ? { proxy } : {}),
});

describe("check", () => {
  it("hashes the password under the URN, keeps it beside the hash, and keeps the proxy block secret", async () => {
    const r = await plugin.check(
      URN,
      {},
      news({ auth: { username: "crawler", password: wrapped(PASSWORD) } }),
    );
    expect(r.failures).toEqual([]);
    expect(isSecret(r.inputs.proxy)).toBe(true);
    const proxy = reveal(r.inputs).props.proxy as { auth: Record<string, unknown> };
    expect(proxy.auth.password).toBe(PASSWORD);
    expect(isPasswordHash(proxy.auth.passwordHash)).toBe(true);
    const expected = hashedProxyBlock({ auth: { username: "crawler", password: PASSWORD } }, URN) as {
      auth: { passwordHash: string };
    };
    expect(proxy.auth.passwordHash).toBe(expected.auth.passwordHash);
    expect(reveal(r.inputs).props.owner).toEqual({
      project: "proj",
      stack: "dev",
      urn: URN,
      resource: "edge",
    });
  });

  it("keeps the owner of the old inputs and salts with its URN (a move by alias changes no hash)", async () => {
    const owner = { project: "proj", stack: "dev", urn: OLD_URN, resource: "edge" };
    const r = await plugin.check(URN, { owner }, news({ auth: { username: "crawler", password: PASSWORD } }));
    const props = reveal(r.inputs).props as { owner: unknown; proxy: { auth: { passwordHash: string } } };
    expect(props.owner).toEqual(owner);
    const expected = hashedProxyBlock({ auth: { username: "crawler", password: PASSWORD } }, OLD_URN) as {
      auth: { passwordHash: string };
    };
    expect(props.proxy.auth.passwordHash).toBe(expected.auth.passwordHash);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["too short", { auth: { username: "crawler", password: "short" } }, "short"],
    [
      "over SOCKS5's 255 bytes, with proxy.socks",
      { socks: {}, auth: { username: "crawler", password: wrapped("ü".repeat(128)) } },
      "üü",
    ],
  ])("names a bad password without quoting it: %s", async (_what, proxy, quoted) => {
    const r = await plugin.check(URN, {}, news(proxy));
    expect(r.failures.map((f) => f.property)).toEqual(["proxy.auth.password (secret)"]);
    expect(JSON.stringify(r.failures)).not.toContain(quoted);
  });

  it("passes a password over 255 bytes without SOCKS, and keeps a secret input secret", async () => {
    const long = await plugin.check(
      URN,
      {},
      news({ auth: { username: "crawler", password: "ü".repeat(128) } }),
    );
    expect(long.failures).toEqual([]);
    const ok = await plugin.check(URN, {}, { ...news(), tags: wrapped({ team: "crawl" }) });
    expect(ok.failures).toEqual([]);
    expect(isSecret(ok.inputs.tags)).toBe(true);
    expect(isSecret(ok.inputs.image)).toBe(false);
  });

  it("passes an unknown password at preview as an unknown hash", () => {
    const r = hashedForCheck({ auth: { username: "u", password: UNKNOWN } }, URN);
    expect(r.proxy).toEqual({ auth: { username: "u", passwordHash: UNKNOWN } });
  });

  it("keeps a proxy block with TLS secret, and the CA made for it from one check to the next through the engine's secret olds", async () => {
    const withTls = {
      ...news({ tls: {} }),
      nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }],
    };
    const first = await plugin.check(URN, {}, withTls);
    expect(first.failures).toEqual([]);
    expect(isSecret(first.inputs.proxy)).toBe(true);
    const tls = (reveal(first.inputs).props.proxy as { tls: { ca: { privateKey: string; made: true } } }).tls;
    expect(tls.ca.made).toBe(true);
    expect(tls.ca.privateKey).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    // The engine sends the old inputs back as it keeps them: the proxy block wrapped as a secret.
    const second = await plugin.check(URN, first.inputs, withTls);
    expect(second.failures).toEqual([]);
    expect(isSecret(second.inputs.proxy)).toBe(true);
    expect((reveal(second.inputs).props.proxy as { tls: unknown }).tls).toEqual(tls);
  });

  it("fails an unknown host by its key, at check", async () => {
    const r = await plugin.check(URN, {}, { ...news(), host: "elsewhere" });
    expect(r.failures.map((f) => f.property)).toEqual(["host"]);
  });
});

describe("the password's way through", () => {
  it("is taken out of the inputs the runtime gets", () => {
    const r = withoutPassword({
      proxy: { port: 3128, auth: { username: "u", passwordHash: "h", password: "p" } },
    });
    expect(r).toEqual({
      inputs: { proxy: { port: 3128, auth: { username: "u", passwordHash: "h" } } },
      password: "p",
    });
    expect(withoutPassword({ proxy: { port: 1 } })).toEqual({
      inputs: { proxy: { port: 1 } },
      password: undefined,
    });
  });

  it.each([
    [
      "http and socks",
      { proxyUrl: "http://10.0.0.5:3128", socksUrl: "socks5://10.0.0.5:1080" },
      "p@ss/word",
      {
        proxyUrlWithCredentials: "http://u:p%40ss%2Fword@10.0.0.5:3128",
        socksUrlWithCredentials: "socks5://u:p%40ss%2Fword@10.0.0.5:1080",
      },
    ],
    [
      "https (TLS)",
      { proxyUrl: "https://10.0.0.5:3128" },
      "p@ss/word",
      { proxyUrlWithCredentials: "https://u:p%40ss%2Fword@10.0.0.5:3128" },
    ],
    ["no address yet", {}, "p", {}],
    ["no password", { proxyUrl: "http://10.0.0.5:3128" }, undefined, {}],
  ])("builds the URLs with credentials: %s", (_what, urls, password, expected) => {
    const outs = withCredentialUrls(
      { ...urls, proxy: { auth: { username: "u" } }, proxyUrlWithCredentials: "stale" },
      password,
    );
    expect({
      proxyUrlWithCredentials: outs.proxyUrlWithCredentials,
      socksUrlWithCredentials: outs.socksUrlWithCredentials,
    }).toEqual({ proxyUrlWithCredentials: undefined, socksUrlWithCredentials: undefined, ...expected });
  });
});

describe("what is computed from a secret stays out of the outputs", () => {
  /** Checked inputs (wrapped as the engine stores them) and the outputs the plugin returned for them. */
  async function built(password: string) {
    const r = await plugin.check(
      URN,
      {},
      news({ auth: { username: "crawler", password: wrapped(password) } }),
    );
    expect(r.failures).toEqual([]);
    const plain = withoutPassword(reveal(r.inputs).props).inputs;
    const status = { host: "lab", name: "edge-plugin", state: "running" as const, uuid: "u-1" };
    const all = outputsFrom(decodeChecked(plain), status);
    return { inputs: r.inputs, all, outputs: published(all) };
  }

  it("returns none of the hash, the digests or a host's connection", async () => {
    const { all, outputs } = await built(PASSWORD);
    // They are what the runtime computes...
    expect(all).toMatchObject({ proxyPasswordHash: expect.any(String), userDataSha256: expect.any(String) });
    // ...and what a program receives holds none of them.
    for (const k of SECRET_DERIVED_OUTPUTS) expect(outputs).not.toHaveProperty(k);
  });

  it("derives them again from the old inputs, as the runtime computed them", async () => {
    const { inputs, all, outputs } = await built(PASSWORD);
    const olds = runtimeOlds(outputs, withoutPassword(reveal(inputs).props).inputs);
    expect(olds).toEqual(all);
  });

  it.each([
    ["the same password", PASSWORD, false],
    ["another password", "another-horse-battery", true],
  ])("so diff tells a changed password from old inputs: %s", async (_what, next, replaces) => {
    const { inputs, outputs } = await built(PASSWORD);
    const checked = await plugin.check(
      URN,
      inputs,
      news({ auth: { username: "crawler", password: wrapped(next) } }),
    );
    const d = await plugin.diff("lab/edge-plugin", outputs, checked.inputs, inputs);
    expect(d.replaces.includes("proxy")).toBe(replaces);
  });

  it("keeps an import's spec hash in its inputs; the digests of inputs read back from a VM count only when they build its spec", async () => {
    const { inputs, all } = await built(PASSWORD);
    const plain = withoutPassword(reveal(inputs).props).inputs;
    const spec = specHashOf(decodeChecked(plain));
    const imported = await plugin.check(URN, {}, { ...news(), adoptedSpecHash: spec });
    expect(reveal(imported.inputs).props.adoptedSpecHash).toBe(spec);
    expect(runtimeOlds({ host: "lab" }, { ...plain, adoptedSpecHash: spec })).toMatchObject({
      adoptedSpecHash: spec,
      userDataSha256: all.userDataSha256,
    });
    const other = runtimeOlds({ host: "lab" }, { ...plain, adoptedSpecHash: "0".repeat(64) });
    expect(other.adoptedSpecHash).toBe("0".repeat(64));
    expect(other).not.toHaveProperty("userDataSha256");
  });

  it("derives the old outputs from old inputs that today's rules refuse: a refresh or a delete never fails on them", async () => {
    const { inputs, all } = await built(PASSWORD);
    const plain = withoutPassword(reveal(inputs).props).inputs;
    const recorded = {
      ...plain,
      memoryMiB: 511.5,
      nics: [{ network: "n", addresses: [], nameservers: [], gateway4: "198.51.100.1", primary: true }],
    };
    expect(runtimeOlds({ host: "lab" }, recorded)).toMatchObject({ userDataSha256: all.userDataSha256 });
  });
});

describe("the engine's customTimeouts", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("of 30 days do not end a create at once: capped to 24 h with a warning, the create works until its host's failure ends it", async () => {
    const checked = await plugin.check(URN, {}, news());
    warnings.length = 0;
    // Node (and these fake timers) fire a timer set past 2^31-1 ms after 1 ms.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
    let outcome: unknown;
    plugin.create(checked.inputs, 30 * 86_400).then(
      () => {
        outcome = "created";
      },
      (err: unknown) => {
        outcome = err;
      },
    );
    // Each turn: the waits due in 10 s of fake time end, then the host's failures (real I/O) arrive.
    for (let turn = 0; turn < 200 && outcome === undefined; turn++) {
      await vi.advanceTimersByTimeAsync(10_000);
      await new Promise((r) => setImmediate(r));
    }
    const failure = String(outcome);
    // Every attempt its retry policy allows, not cut short by its deadline.
    expect(failure).toContain(
      "create of domain edge-plugin on host lab failed after 6 attempts: cannot connect to libvirtd socket",
    );
    expect(failure).not.toContain("customTimeouts");
    expect(warnings).toEqual([
      [
        URN,
        "customTimeouts.create of 30 d is above the provider's maximum of 1 d (24h): the provider waits 24h",
      ],
    ]);
  });
});

describe("a create whose VM is recorded after all (kept by keepOnFailure)", () => {
  it("records the outputs a create would return: nothing computed from a secret, the mark kept", async () => {
    const runtime = new KvmProxyRuntime();
    runtime.log = { status() {}, info() {}, warn() {}, flush: async () => {}, close() {} };
    const config: Record<string, unknown> = {
      "kvm:hosts": { lab: { uri: "unix:///nonexistent/libvirt-sock" } },
      "kvm:images": { tiny: { url: "/nonexistent/tiny.qcow2", firmware: "bios" } },
    };
    await runtime.configure({ config: { get: (k) => config[k] } });
    const real = runtime.ops();
    const failing = Object.assign(Object.create(real) as KvmOperations, {
      provision: async (spec: { name: string }) => {
        const status = { host: "lab", name: spec.name, state: "running" as const, uuid: "u-1" };
        throw new ProvisionError(
          `kvm://lab/${spec.name}`,
          new Error("health check timed out"),
          { kept: true },
          status,
        );
      },
    });
    runtime.ops = () => failing;
    const kept = new KvmProxyPlugin(runtime);
    const checked = await kept.check(
      URN,
      {},
      {
        ...news({ auth: { username: "crawler", password: wrapped(PASSWORD) } }),
        keepOnFailure: true,
      },
    );
    expect(checked.failures).toEqual([]);
    const err = await kept.create(checked.inputs).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PartialCreateError);
    const recorded = reveal((err as PartialCreateError).properties).props;
    expect(recorded).toMatchObject({ keptAfterFailure: { reason: "health check timed out" }, uuid: "u-1" });
    for (const k of SECRET_DERIVED_OUTPUTS) expect(recorded, k).not.toHaveProperty(k);
    expect(JSON.stringify((err as PartialCreateError).properties)).not.toContain(PASSWORD);
  });
});
