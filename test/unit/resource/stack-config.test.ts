/**
 * `configure` and `check` on inputs that once got through: each
 * is refused at preview, naming its property, quoting nothing secret, and a
 * broken entry fails only the resources that use it.
 */
import { createHash, generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { parseKeyedEntries } from "../../../provider/kvm/config/host-config";
import { UNKNOWN } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { readStackConfig } from "../../../provider/resource/stack-config";

const KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ";
const KEY = `-----BEGIN OPENSSH PRIVATE KEY-----\n${KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n`;

/** A real ed25519 public key in known_hosts form. */
function knownHostsLine(host: string): string {
  const der = generateKeyPairSync("ed25519").publicKey.export({ format: "der", type: "spki" });
  const raw = der.subarray(der.length - 32);
  const str = (b: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
  const blob = Buffer.concat([str(Buffer.from("ssh-ed25519")), str(raw)]);
  return `${host} ssh-ed25519 ${blob.toString("base64")}`;
}

function configOf(values: Record<string, unknown>) {
  return readStackConfig((k) => values[k]);
}

function check(config: ReturnType<typeof configOf>, news: Record<string, unknown>) {
  return checkInputs({}, news, { config, randomBytes: (n) => new Uint8Array(n) }).failures;
}

const LAB = { uri: "unix:///run/libvirt/libvirt-sock" };

describe("configure never throws, and a broken entry fails only what uses it", () => {
  it("an image whose file: URL encodes a slash (%2F): that image fails, the other image and the host still serve", () => {
    const config = configOf({
      "kvm:hosts": { lab: LAB },
      "kvm:images": { slash: { url: "file:///srv/a%2Fb.qcow2" }, good: { url: "/srv/good.qcow2" } },
    });
    expect(config.imageFailures.slash).toEqual([
      { property: "kvm:images.slash.url", reason: expect.stringContaining("must not encode '/'") },
    ]);
    expect(Object.keys(config.images)).toEqual(["good"]);
    expect(check(config, { host: "lab", image: "good" })).toEqual([]);
    expect(check(config, { host: "lab", image: "slash" })).toEqual([
      { property: "image", reason: expect.stringContaining("kvm:images.slash.url") },
    ]);
    // Given inline, the same URL is a failure at image, not a TypeError.
    expect(check(config, { host: "lab", image: "file:///srv/a%2Fb.qcow2" })).toEqual([
      { property: "image", reason: expect.stringContaining("must not encode '/'") },
    ]);
  });

  it("a malformed percent-encoding in a host URI (decodeURIComponent threw)", () => {
    const config = configOf({
      "kvm:hosts": { a: { uri: "ssh://%ff@h", agentSocket: "/s" }, b: { uri: "unix:///%ff" }, lab: LAB },
    });
    expect(config.hostFailures.a?.[0]?.property).toBe("kvm:hosts.a.uri");
    expect(config.hostFailures.b?.[0]?.property).toBe("kvm:hosts.b.uri");
    expect(Object.keys(config.hosts)).toEqual(["lab"]);
  });

  it("an entry whose parser throws or records nothing fails on its own; the others still parse", () => {
    const e = parseKeyedEntries({ a: 1, b: 2, c: 3 }, "kvm:hosts", (key, _v, f) => {
      if (key === "a") throw new RangeError("s3cr3t");
      if (key === "c") f.fail("uri", "is bad");
      return key === "b" ? undefined : key;
    });
    expect(e.values).toEqual({});
    expect(e.failures).toEqual({
      a: [{ property: "kvm:hosts.a", reason: expect.stringContaining("internal error: RangeError") }],
      b: [{ property: "kvm:hosts.b", reason: "could not be read" }],
      c: [{ property: "kvm:hosts.c.uri", reason: "is bad" }],
    });
    expect(JSON.stringify(e)).not.toContain("s3cr3t");
  });

  it("a get that throws is a failure of that key", () => {
    const config = readStackConfig((k) => {
      if (k === "kvm:images") throw new Error("boom s3cr3t");
      return k === "kvm:hosts" ? { lab: LAB } : undefined;
    });
    expect(config.general).toEqual([
      { property: "kvm:images", reason: expect.stringContaining("could not be read") },
    ]);
    expect(JSON.stringify(config.general)).not.toContain("s3cr3t");
    expect(Object.keys(config.hosts)).toEqual(["lab"]);
  });

  it('a "__proto__" key is reported as a bad key, never dropped or made a prototype', () => {
    const config = configOf({
      "kvm:hosts": JSON.parse('{"__proto__": {"uri": "unix:///s"}, "lab": {"uri": "unix:///s"}}'),
    });
    expect(Object.keys(config.hostFailures)).toEqual(["__proto__"]);
    expect(Object.entries(config.hostFailures)[0]?.[1][0]?.property).toBe("kvm:hosts.__proto__");
    expect(Object.getPrototypeOf(config.hostFailures)).toBe(Object.prototype);
  });

  it("a broken kvm:images map fails the resources that name an image by key, not those with an inline image", () => {
    const config = configOf({ "kvm:hosts": { lab: LAB }, "kvm:images": "[1]" });
    expect(check(config, { host: "lab", image: "debian" }).map((f) => f.property)).toContain("image");
    expect(check(config, { host: "lab", image: "https://example.com/x.qcow2" })).toEqual([]);
  });
});

describe("SSH material in the wrong field is refused at configure, quoting none of it", () => {
  it("a private key pasted into privateKeyPath", () => {
    const config = configOf({
      "kvm:hosts": { edge: { uri: "ssh://h", knownHostsPath: "/k", privateKeyPath: KEY } },
    });
    expect(config.hostFailures.edge).toEqual([
      {
        property: "kvm:hosts.edge.privateKeyPath",
        reason: expect.stringContaining("holds key material, not a path"),
      },
    ]);
    const failures = check(config, { host: "edge", image: "https://example.com/x.qcow2" });
    expect(failures.map((f) => f.property)).toEqual(["host"]);
    expect(JSON.stringify([config.hostFailures, failures])).not.toContain(KEY_BODY);
  });

  it("known_hosts content is parsed by the transport's parser: a line without a key is refused by number, without its text", () => {
    const good = knownHostsLine("h");
    const content = `# comment\n${good}\nh.example.com ssh-ed25519\nh ssh-ed25519 QUFBQQ==\n@marker h ssh-rsa AAAA\n`;
    const config = configOf({
      "kvm:hosts": { edge: { uri: "ssh://h", privateKey: KEY, knownHosts: content } },
    });
    const reasons = (config.hostFailures.edge ?? []).map((f) => `${f.property}: ${f.reason}`);
    expect(reasons).toEqual([
      expect.stringMatching(/^kvm:hosts\.edge\.knownHosts: line 3: expected/),
      expect.stringMatching(/^kvm:hosts\.edge\.knownHosts: line 4: the key data is not a valid public key/),
      expect.stringMatching(/^kvm:hosts\.edge\.knownHosts: line 5: unknown marker/),
    ]);
    expect(reasons.join("\n")).not.toMatch(/h\.example\.com|QUFBQQ|@marker/);
    // The good line alone passes, and so does a comment beside it.
    const ok = configOf({
      "kvm:hosts": { edge: { uri: "ssh://h", privateKey: KEY, knownHosts: `# c\n${good}\n` } },
    });
    expect(ok.hostFailures).toEqual({});
    expect(ok.hosts.edge?.ssh?.knownHosts).toBe(`# c\n${good}\n`);
  });

  it("known_hosts content with no key line at all", () => {
    const config = configOf({
      "kvm:hosts": { edge: { uri: "ssh://h", privateKey: KEY, knownHosts: "# only\n# comments\n" } },
    });
    expect(config.hostFailures.edge).toEqual([
      { property: "kvm:hosts.edge.knownHosts", reason: "holds no host key line (host, key type, key)" },
    ]);
  });

  it("a driverUri no host can open for this provider", () => {
    const config = configOf({
      "kvm:hosts": {
        a: { ...LAB, driverUri: "qemu+ssh://h/system" },
        b: { ...LAB, driverUri: "test:///default" },
      },
    });
    expect(config.hostFailures.a?.[0]).toEqual({
      property: "kvm:hosts.a.driverUri",
      reason: expect.stringContaining("a transport such as qemu+ssh goes in uri"),
    });
    expect(config.hosts.b?.driverUri).toBe("test:///default");
  });
});

describe("check", () => {
  const config = configOf({ "kvm:hosts": { lab: LAB } });

  it("reports an image URL's credentials under a name the engine does not echo, and never quotes them", () => {
    for (const image of [
      "https://user:tok3n@example.com/x",
      "https:tok3n@example.com/x",
      "user:tok3n@host/x",
    ]) {
      const failures = check(config, { host: "lab", image });
      expect(failures.map((f) => f.property)).toEqual(["image (secret)"]);
      expect(JSON.stringify(failures)).not.toContain("tok3n");
    }
  });

  it("refuses a relative file: URL instead of reading it from the root", () => {
    expect(check(config, { host: "lab", image: "file:relative/x.qcow2" })).toEqual([
      { property: "image", reason: expect.stringContaining("absolute path") },
    ]);
    expect(check(config, { host: "lab", image: "file:/srv/x.qcow2" })).toEqual([]);
  });

  it("holds deadlines to a floor of 1 s (a 1 ms create deadline fails at preview, not at up)", () => {
    expect(check(config, { host: "lab", image: "/x", timeouts: { create: 0.001 } })).toEqual([
      { property: "timeouts.create", reason: expect.stringContaining("at least 1 s") },
    ]);
    expect(check(config, { host: "lab", image: "/x", timeouts: { create: 1, delete: "1s" } })).toEqual([]);
    const hosts = configOf({ "kvm:hosts": { lab: { ...LAB, callTimeout: 0.5 } } });
    expect(hosts.hostFailures.lab?.[0]?.property).toBe("kvm:hosts.lab.callTimeout");
  });

  it("takes bridge: null next to network as no bridge", () => {
    expect(check(config, { host: "lab", image: "/x", network: "lan", bridge: null })).toEqual([]);
    expect(check(config, { host: "lab", image: "/x", network: null, bridge: "br0" })).toEqual([]);
  });

  it("checks a tag's key even while its value is unknown", () => {
    expect(check(config, { host: "lab", image: "/x", tags: { __proto__x: UNKNOWN, ok: UNKNOWN } })).toEqual([
      { property: "tags.__proto__x", reason: expect.stringContaining("key must be") },
    ]);
  });

  it("turns a bug in a property's check into a failure at that property (the safety net), quoting nothing", () => {
    const broken = configOf({ "kvm:hosts": { lab: LAB } });
    broken.hostFailures = new Proxy(
      {},
      {
        getOwnPropertyDescriptor: () => {
          throw new TypeError("s3cr3t");
        },
      },
    );
    const failures = check(broken, { host: "lab", image: "/x" });
    expect(failures).toEqual([
      { property: "host (secret)", reason: expect.stringContaining("internal error: TypeError") },
    ]);
    expect(JSON.stringify(failures)).not.toContain("s3cr3t");
  });

  it("survives nesting deeper than the stack", () => {
    let deep: unknown = UNKNOWN;
    let deepKnown: unknown = 0;
    for (let i = 0; i < 100_000; i++) {
      deep = [deep];
      deepKnown = [deepKnown];
    }
    expect(check(config, { host: "lab", image: deep })).toEqual([]);
    expect(
      check(config, { host: "lab", image: { url: "/x", format: deepKnown } }).map((f) => f.property),
    ).toEqual(["image.format"]);
  });
});

describe("a bake's user-data is named by a digest keyed with kvm:stateKey", () => {
  const USER_DATA = "#cloud-config\napt:\n  http_proxy: http://u:s3cr3t@mirror:3142\n";
  const images = {
    debian: { url: "/x.qcow2", bake: { packages: ["jq"], userData: USER_DATA } },
    plain: { url: "/y" },
  };
  const STATE_KEY = "s".repeat(32);

  it("with the key: the recipe holds the HMAC, not the plain SHA-256, and another key gives another", () => {
    const recipe = configOf({ "kvm:images": images, "kvm:stateKey": STATE_KEY }).images.debian?.bake;
    expect(recipe).toEqual({ packages: ["jq"], userDataMac: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(recipe?.userDataMac).not.toBe(createHash("sha256").update(USER_DATA, "utf8").digest("hex"));
    const other = configOf({ "kvm:images": images, "kvm:stateKey": "t".repeat(32) }).images.debian?.bake;
    expect(other?.userDataMac).not.toBe(recipe?.userDataMac);
  });

  it.each([
    ["no key", {}, /needs the stack config secret kvm:stateKey/],
    ["a key too short", { "kvm:stateKey": "short" }, /needs kvm:stateKey, which must be at least 32/],
  ])(
    "with %s: that image fails at its user-data, quoting none of it; the others serve",
    (_, extra, reason) => {
      const config = configOf({ "kvm:images": images, ...extra });
      expect(config.images.debian).toBeUndefined();
      expect(config.images.plain).toBeDefined();
      expect(config.imageFailures.debian).toEqual([
        { property: "kvm:images.debian.bake.userData", reason: expect.stringMatching(reason) },
      ]);
      expect(JSON.stringify(config.imageFailures)).not.toContain("s3cr3t");
    },
  );
});
