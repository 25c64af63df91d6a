import { describe, expect, it } from "vitest";
import { parseDuration } from "../../../provider/kvm/duration";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import { UNKNOWN } from "../../../provider/resource/args";
import { checkInputs, engineTimeout } from "../../../provider/resource/check";
import { readStackConfig } from "../../../provider/resource/stack-config";
import { BAD, BAD_INPUT_CONFIG, GOOD_INPUTS, KEY } from "../../support/bad-inputs";

const config = readStackConfig((k) => BAD_INPUT_CONFIG[k]);

const fixedRandom = (n: number) => new Uint8Array(n).fill(0xab);

/** check of `news` as the KvmProxy class sends them: the proxy password hashed in the program. */
function check(news: Record<string, unknown>, olds: Record<string, unknown> = {}) {
  const sent = news.proxy === undefined ? news : { ...news, proxy: hashedProxyBlock(news.proxy, "urn:test") };
  return checkInputs(olds, sent, { config, randomBytes: fixedRandom });
}

const good = GOOD_INPUTS;

/** The input a failure's property belongs to: `image.url` → image, `userData (secret)` → userData. */
function topLevel(property: string): string {
  return property.split(/[.( []/, 1)[0] ?? property;
}

describe("stack config", () => {
  it("parses hosts and images per entry, JSON text or objects, and gives ssh hosts the shared key", () => {
    expect(Object.keys(config.hosts).sort()).toEqual(["lab", "remote"]);
    expect(config.hosts.remote?.ssh?.privateKey).toBe(KEY);
    expect(config.images.debian?.sha256).toBe("a".repeat(64));
    expect(config.hostFailures.broken?.[0]?.property).toBe("kvm:hosts.broken.uri");
    expect(config.imageFailures.bad?.[0]?.property).toBe("kvm:images.bad.firmware");
  });

  it("rejects a non-object kvm:hosts and a bad shared key", () => {
    const c = readStackConfig((k) => ({ "kvm:hosts": "[1]", "kvm:sshPrivateKey": "nope" })[k]);
    expect(c.general.map((f) => f.property).sort()).toEqual(["kvm:hosts", "kvm:sshPrivateKey"]);
  });
});

describe("check: a host given in full", () => {
  it.each<[string, Record<string, unknown>]>([
    ["a unix socket host", { key: "edge", uri: "unix:///run/x" }],
    [
      "an ssh host with its key and known_hosts lines",
      {
        key: "edge",
        uri: "ssh://root@lab.example.com:22",
        knownHosts:
          "lab.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0kvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmpkvmp\n",
        privateKey: KEY,
        pool: "images",
        network: "lan",
      },
    ],
    ["a kvm:hosts entry's own key and settings", { key: "lab", uri: "unix:///run/libvirt/libvirt-sock" }],
    ["values not known yet (preview)", { key: "edge", uri: UNKNOWN, privateKey: UNKNOWN }],
    ["a key not known yet", { key: UNKNOWN, uri: UNKNOWN }],
  ])("accepts %s, keeping it as given", (_, host) => {
    const r = check({ ...good, host });
    expect(r.failures).toEqual([]);
    expect(r.inputs.host).toEqual(host);
  });

  it("names the field and quotes no key material", () => {
    const secret = "s3cret-not-a-key-at-all";
    const r = check({ ...good, host: { key: "edge", uri: "ssh://root@h:22", privateKey: secret } });
    expect(r.failures.map((f) => f.property)).toEqual(["host.privateKey"]);
    expect(JSON.stringify(r.failures)).not.toContain(secret);
  });
});

describe("check accepts", () => {
  it("a minimal proxy, applying defaults and an autoname", () => {
    const r = check({ ...good, owner: { project: "p", stack: "s", urn: "urn:x", resource: "Edge Proxy" } });
    expect(r.failures).toEqual([]);
    expect(r.inputs).toMatchObject({
      host: "lab",
      image: "debian",
      resolvedImage: {
        url: "https://example.com/debian.qcow2",
        format: "qcow2",
        firmware: "uefi",
        sha256: "a".repeat(64),
      },
      installGuestAgent: true,
      memoryMiB: 512,
      vcpus: 1,
      diskGiB: 10,
      proxyPort: 3128,
      healthCheck: {},
      waitForIp: true,
      timeouts: { create: 600, delete: 300 },
      tags: {},
      name: "edge-proxy-abababab",
      autoname: true,
    });
    expect(r.inputs.userData).toMatch(/^#cloud-config\n/);
  });

  it("a SOCKS5 listener beside the HTTP one: port 1080 by default, or its own; an egress check", () => {
    const auth = { username: "crawler", password: "a-long-enough-secret" };
    const socks = (block: Record<string, unknown>) => check({ ...good, proxy: { auth, ...block } });
    expect(socks({ socks: {} }).failures).toEqual([]);
    expect(socks({ socks: {} }).inputs.proxy).toMatchObject({ port: 3128, socks: { port: 1080 } });
    expect(socks({ port: 1080, socks: { port: 1081 } }).inputs.proxy).toMatchObject({
      port: 1080,
      socks: { port: 1081 },
    });
    // SOCKS5 carries 255 bytes of password: 255 bytes pass, and so does a longer one without SOCKS.
    const withSocks = (password: string) =>
      check({ ...good, proxy: { auth: { ...auth, password }, socks: {} } });
    expect(withSocks("x".repeat(255)).failures).toEqual([]);
    expect(withSocks("€".repeat(85)).failures).toEqual([]);
    expect(check({ ...good, proxy: { auth: { ...auth, password: "ü".repeat(128) } } }).failures).toEqual([]);
    const egress = check({ ...good, egressCheck: { url: "https://echo.example/ip" } });
    expect(egress.failures).toEqual([]);
    expect(egress.inputs.egressCheck).toEqual({ url: "https://echo.example/ip" });
  });

  it("keeps the old autoname, and makes a new one when the olds are gone (replacement)", () => {
    const olds = { ...good, name: "edge-12345678", autoname: true };
    expect(check(good, olds).inputs.name).toBe("edge-12345678");
    expect(check(good, {}).inputs.name).toBe("proxy-abababab");
    // A name the user fixed earlier is not kept once removed.
    expect(check(good, { ...good, name: "fixed" }).inputs.name).toBe("proxy-abababab");
  });

  it("an inline image, a URL image, and durations", () => {
    const r = check({
      host: "remote",
      image: { url: "/images/x.raw", format: "raw", firmware: "bios" },
      timeouts: { create: "1h30m", delete: 90 },
      macAddress: "52:54:00:AA:BB:CC",
    });
    expect(r.failures).toEqual([]);
    expect(r.inputs.resolvedImage).toEqual({ url: "file:///images/x.raw", format: "raw", firmware: "bios" });
    expect(r.inputs.timeouts).toEqual({ create: 5400, delete: 90 });
    expect(r.inputs.macAddress).toBe("52:54:00:aa:bb:cc");
    expect(check({ host: "lab", image: "https://example.com/y.qcow2" }).failures).toEqual([]);
  });

  it("unknown values during preview, without failures", () => {
    const r = check({
      host: UNKNOWN,
      image: UNKNOWN,
      userData: UNKNOWN,
      memoryMiB: UNKNOWN,
      name: UNKNOWN,
      tags: { a: UNKNOWN },
      healthCheck: { url: UNKNOWN },
      macAddress: UNKNOWN,
    });
    expect(r.failures).toEqual([]);
    expect(r.inputs.memoryMiB).toBe(UNKNOWN);
    expect(r.inputs.resolvedImage).toBe(UNKNOWN);
  });

  it("durations", () => {
    expect(parseDuration("10m")).toBe(600);
    expect(parseDuration("45s")).toBe(45);
    expect(parseDuration("2h")).toBe(7200);
    expect(parseDuration(30)).toBe(30);
    expect(parseDuration("10x")).toBeUndefined();
    expect(parseDuration("")).toBeUndefined();
  });
});

describe("healthCheck.replaceAfter", () => {
  it.each<[unknown, number]>([
    ["15m", 900],
    ["30s", 30],
    [3600, 3600],
    ["1d2h", 93_600],
  ])("%j is kept as %i seconds", (given, seconds) => {
    const r = check({ ...good, healthCheck: { replaceAfter: given } });
    expect(r.failures).toEqual([]);
    expect(r.inputs.healthCheck).toEqual({ replaceAfter: seconds });
  });

  it.each<[unknown]>([[0], [-60], ["-5m"], ["29s"], ["soon"], [true], [Number.POSITIVE_INFINITY]])(
    "%j is refused, naming it",
    (given) => {
      const r = check({ ...good, healthCheck: { replaceAfter: given } });
      expect(r.failures).toEqual([
        {
          property: "healthCheck.replaceAfter",
          reason:
            'must be a duration of at least 30s, such as "15m" (a proxy failing that long is replaced at the next up)',
        },
      ]);
    },
  );

  it("a misspelt field is named with the known ones", () => {
    expect(check({ ...good, healthCheck: { replaceAfer: "15m" } }).failures).toEqual([
      {
        property: "healthCheck.replaceAfer",
        reason: "unknown property (known: url, expectStatus, via, replaceAfter)",
      },
    ]);
  });
});

describe("check rejects, naming the property", () => {
  it.each(BAD)("%s", (_what, change, property, reason) => {
    const news: Record<string, unknown> = { ...good, ...change };
    for (const k of Object.keys(news)) if (news[k] === undefined) delete news[k];
    const r = check(news);
    const hit = r.failures.find((f) => f.property === property);
    expect(hit, JSON.stringify(r.failures)).toBeDefined();
    expect(hit?.reason).toMatch(reason);
  });

  it("reports every failure at once", () => {
    const r = check({ host: "nowhere", image: "ubuntu", memoryMiB: 1, vcpus: 0, name: "a b" });
    expect(r.failures.map((f) => f.property).sort()).toEqual(["host", "image", "memoryMiB", "name", "vcpus"]);
  });

  it("accepts the good inputs every row of the table starts from", () => {
    expect(check(good).failures).toEqual([]);
  });

  it("fails each of the table's (at least 30) rows only on the properties its change touches", () => {
    expect(BAD.length).toBeGreaterThanOrEqual(30);
    const strays = BAD.flatMap(([what, change]) => {
      const news: Record<string, unknown> = { ...good, ...change };
      for (const k of Object.keys(news)) if (news[k] === undefined) delete news[k];
      const touched = new Set(Object.keys(change));
      return check(news)
        .failures.filter((f) => !touched.has(topLevel(f.property)))
        .map((f) => `${what}: ${f.property}: ${f.reason}`);
    });
    expect(strays).toEqual([]);
  });
});

describe("the engine's customTimeouts, which bypass check", () => {
  const warned = (given: string) =>
    `customTimeouts.create of ${given} is above the provider's maximum of 1 d (24h): the provider waits 24h`;

  it.each<[string, number | undefined, { seconds?: number; warning?: string }]>([
    ["none (absent)", undefined, {}],
    ["none (0)", 0, {}],
    ["negative: none", -5, {}],
    ["NaN: none", Number.NaN, {}],
    ["10 minutes", 600, { seconds: 600 }],
    ["24 h, the maximum", 86_400, { seconds: 86_400 }],
    ["24 h and a second", 86_401, { seconds: 86_400, warning: warned("1 d 1 s") }],
    ["25 h", 90_000, { seconds: 86_400, warning: warned("1 d 1 h") }],
    ["30 days", 2_592_000, { seconds: 86_400, warning: warned("30 d") }],
    ["Infinity", Number.POSITIVE_INFINITY, { seconds: 86_400, warning: warned("no limit") }],
  ])("%s: held to check's maximum for timeouts, with a warning past it", (_what, seconds, expected) => {
    expect(engineTimeout(seconds, "customTimeouts.create")).toEqual(expected);
  });
});
