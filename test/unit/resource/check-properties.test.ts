/**
 * Property-based test of `configure` and `check`: arbitrary JSON,
 * and values built to be hostile, for every stack config field and every
 * resource input, driven through `readStackConfig` (with a fake `get`, as the
 * engine's config) and `checkInputs`, as the engine calls them. For every
 * case:
 *
 * - neither throws;
 * - every failure names a real property path: a known config path or a key
 *   of the config as given (configure), a key or nested path of the inputs
 *   or a known input path (check), optionally with " (secret)";
 * - no secret (key material, passphrases, URL userinfo, user-data and
 *   vendor-data, proxy passwords) appears in any failure's property or reason;
 * - a failure never names a top-level input whose value holds a secret (the
 *   engine prints that value beside the failure), and the failures of the
 *   secret inputs are all named `<input> (secret)`;
 * - no reason is longer than 1000 characters, and none is an internal error.
 *
 * And for address pools, with ranges, gateways and nameservers drawn close
 * together so they meet: a pool check accepts never hands out (as create
 * allocates) its NIC's gateway, a nameserver, its subnet's network or IPv4
 * broadcast address, or a special address, and all it hands out shares the
 * gateway's subnet.
 *
 * Secrets are recognisable: each holds a token `s3cr3t` + 10 characters, and
 * tokens appear nowhere else. Two seeds run: a fixed one, and a random one
 * printed for replay (`KVMP_PROPERTY_SEED=<seed>` replays it instead).
 */
import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { describe, it } from "vitest";
import { type AddressPool, allocate } from "../../../provider/kvm/network/address-pool";
import { bare as bareAddress, canonicalIp } from "../../../provider/kvm/network/ip";
import type { ValidationFailure } from "../../../provider/kvm/validation";
import { UNKNOWN } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { INPUT_PROPERTIES } from "../../../provider/resource/kvm-proxy-properties";
import { decodeConfigValue, readStackConfig } from "../../../provider/resource/stack-config";
import { BAD_INPUT_CONFIG } from "../../support/bad-inputs";

const FIXED_SEED = 160_016;
const SEED_ENV = "KVMP_PROPERTY_SEED";
const RUNS_PER_SEED = Number(process.env.KVMP_PROPERTY_RUNS ?? 10_000);
const replay = process.env[SEED_ENV];
const randomSeed = replay !== undefined ? Number(replay) : Math.floor(Math.random() * 2 ** 31);

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

const TOKEN_RE = /s3cr3t[a-z0-9]{10}/g;
const token = fc.stringMatching(/^[a-z0-9]{10}$/).map((t) => `s3cr3t${t}`);

const SPECIAL = [
  ...["", " ", "\0", "\n", "\r\n", "\t", "\u2028", "\ud800", "é", "😀", "\\", "@", ":", "..", "/", "//"],
  ...["%2F", "%2f", "%00", "%ff", "%", "?", "#", "{", "[", "{}", "[]", "null", "NaN", "-1", "1e309"],
  ...["file:", "file:rel", "file:///a%2Fb", "file://", "https://", "http://x/", "ssh://", "unix:///"],
  ...["qemu:///system", "qemu+ssh://h/system", "test:///default", "-----BEGIN", "-----BEGIN x-----"],
  ...["__proto__", "constructor", "prototype", "toString", UNKNOWN, "0s", "1h30m", "25h", "0.001"],
];
const HUGE = "x".repeat(1 << 20);
const OVER_SEED_LIMIT = "x".repeat(16 * 1024 * 1024 + 1);

const hostileString = fc.oneof(
  { weight: 12, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 12, arbitrary: fc.constantFrom(...SPECIAL) },
  {
    weight: 9,
    arbitrary: fc
      .array(fc.constantFrom(...SPECIAL, "a", "x.qcow2", "/srv", " "), { maxLength: 6 })
      .map((a) => a.join("")),
  },
  { weight: 1, arbitrary: fc.constant(HUGE) },
);

const number = fc.oneof(
  fc.integer(),
  fc.double(), // NaN, ±Infinity and -0 included: JSON cannot carry them, the engine might send them.
  fc.constantFrom(0, -1, 1, 22, 53, 128, 512, 3128, 65535, 65536, 2 ** 53, 0.001, 0.5, 86401),
);

const KEYS = [
  ...["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "", " ", "a.b", "x"],
  ...["url", "uri", "port", "auth", "password", "create", "format", "username", "0"],
];
const key = fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom(...KEYS));

/** An object built with own properties only: "__proto__" stays a key (as JSON.parse makes it). */
function dict<T>(values: fc.Arbitrary<T>, keys: fc.Arbitrary<string> = key): fc.Arbitrary<Record<string, T>> {
  return fc.array(fc.tuple(keys, values), { maxLength: 4 }).map((e) => Object.fromEntries(e));
}

const leaf = fc.oneof(
  { weight: 5, arbitrary: hostileString },
  { weight: 3, arbitrary: number },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 1, arbitrary: fc.constantFrom(null, undefined, UNKNOWN) },
);

/** Arbitrary JSON (and more: undefined, NaN, unknowns), nested a few levels. */
const anyValue: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: "small", maxDepth: 3 },
    { weight: 6, arbitrary: leaf },
    { weight: 1, arbitrary: fc.array(tie("v"), { maxLength: 4 }) },
    { weight: 1, arbitrary: dict(tie("v")) },
  ),
})).v;

/** A field's value: usually one built for it, sometimes anything at all. */
const field = <T>(typed: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 3, arbitrary: typed }, { weight: 2, arbitrary: anyValue });

/** An object of the known fields (each optional) plus a few arbitrary extra keys. */
function shape(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .tuple(dict(anyValue), fc.record(fields, { requiredKeys: [] }))
    .map(([extra, known]) => ({ ...extra, ...known }));
}

// Secrets: each holds a token.
const secretText = fc
  .tuple(fc.constantFrom("", "#cloud-config\n", "MIME-Version: 1.0\n", "#!/bin/sh\n"), token, hostileString)
  .map((p) => p.join(""));
const secretBase64 = fc.oneof(
  secretText.map((t) => Buffer.from(t).toString("base64")),
  token.map((t) => gzipSync(t).toString("base64")),
  token.map((t) => Buffer.concat([Buffer.from([0x1f, 0x8b]), Buffer.from(t)]).toString("base64")),
  token.map((t) => `${t}!`),
);
const privateKey = fc
  .tuple(fc.constantFrom("OPENSSH ", "RSA ", ""), token)
  .map(([kind, t]) => `-----BEGIN ${kind}PRIVATE KEY-----\n${t}\n-----END ${kind}PRIVATE KEY-----\n`);
const userinfo = fc.oneof(
  { weight: 2, arbitrary: fc.constant("") },
  { weight: 1, arbitrary: token.map((t) => `${t}@`) },
  { weight: 1, arbitrary: token.map((t) => `user:${t}@`) },
);
const url = fc
  .tuple(
    fc.constantFrom(
      "https://",
      "http://",
      "HTTPS://",
      "https:",
      "https:\\\\",
      "file://",
      "file:///",
      "file:",
    ),
    userinfo,
    fc.constantFrom("example.com", "localhost", "", "[::1]", "nas", "ex ample"),
    fc.constantFrom("/x.qcow2", "/a%2Fb", "relative/x", "/dir/", "/x?q", "/x#f", "/x%00y", "%ff", ""),
  )
  .map((p) => p.join(""))
  .chain((u) => fc.constantFrom(u, u.replace(/^[a-zA-Z]+:\/*/, ""), `ftp://${u.replace(/^.*?:\/*/, "")}`));
const duration = fc.oneof(
  number,
  fc.constantFrom("90s", "10m", "1h30m", "0s", "25h", "0.001", "1 minute", "1ms"),
);

// ---------------------------------------------------------------------------
// Stack config and inputs
// ---------------------------------------------------------------------------

const HOST_KEYS = ["lab", "edge", "a", "constructor", "__proto__", "Bad Key", "toString"];
const IMAGE_KEYS = ["debian", "img", "constructor", "__proto__", "x.y"];
const HOST_FIELDS = [
  ...["uri", "driverUri", "domainType", "pool", "network", "bridge", "knownHosts", "knownHostsPath"],
  ...["privateKey", "privateKeyPath", "agentSocket", "passphrase", "callTimeout"],
];
const IMAGE_FIELDS = ["url", "format", "firmware", "sha256"];

const hostEntry = shape({
  uri: field(
    fc.oneof(
      fc.constantFrom(
        "ssh://root@h:22",
        "unix:///run/libvirt/libvirt-sock",
        "ssh://%ff@h",
        "unix:///%ff",
        "ssh://h?socket=rel",
      ),
      token.map((t) => `ssh://root:${t}@h`),
    ),
  ),
  driverUri: field(
    fc.constantFrom("qemu:///system", "qemu:///session", "test:///default", "qemu+ssh://h/system", "xen:///"),
  ),
  domainType: field(fc.constantFrom("kvm", "qemu")),
  pool: field(fc.constantFrom("default", "a/b")),
  network: field(fc.constantFrom("default", "n")),
  bridge: field(fc.constantFrom("br0", null)),
  knownHosts: field(
    fc.oneof(
      token.map((t) => `h ssh-ed25519 ${t}\n`),
      token.map((t) => `h ${t}\n@weird h ssh-rsa ${t}\n`),
      fc.constantFrom("h ssh-ed25519\n", "# only a comment\n", "@cert-authority * ssh-ed25519 AAAA\n"),
    ),
  ),
  knownHostsPath: field(fc.constantFrom("/k", "~/.ssh/known_hosts", "h ssh-ed25519 AAAA", "/a\nb")),
  privateKey: field(privateKey),
  privateKeyPath: field(fc.oneof(fc.constantFrom("/k", "~/.ssh/id"), privateKey)),
  agentSocket: field(fc.oneof(fc.constant("/run/agent"), privateKey)),
  passphrase: field(token),
  callTimeout: field(duration),
});
const imageEntry = shape({
  url: field(url),
  format: field(fc.constantFrom("qcow2", "raw", "vmdk")),
  firmware: field(fc.constantFrom("uefi", "bios")),
  sha256: field(fc.constantFrom("a".repeat(64), "A".repeat(64), "xyz")),
});
/** A `kvm:*` map: an object of entries (keys from a pool, some invalid), sometimes as JSON text, sometimes anything. */
const entries = (keys: string[], entry: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 4, arbitrary: dict(entry, fc.constantFrom(...keys)) },
    { weight: 2, arbitrary: dict(entry, fc.constantFrom(...keys)).map((o) => JSON.stringify(o)) },
    { weight: 1, arbitrary: anyValue },
  );
const stackConfig = fc.record(
  {
    "kvm:hosts": entries(HOST_KEYS, hostEntry),
    "kvm:images": entries(IMAGE_KEYS, imageEntry),
    "kvm:sshPrivateKey": field(privateKey),
  },
  { requiredKeys: [] },
);

const inputs = shape({
  host: field(fc.constantFrom(...HOST_KEYS, "")),
  image: field(
    fc.oneof(
      fc.constantFrom(...IMAGE_KEYS),
      url,
      shape({
        url: field(url),
        format: field(fc.constantFrom("raw")),
        sha256: field(fc.constant("b".repeat(64))),
      }),
    ),
  ),
  userData: field(
    fc.oneof({ weight: 19, arbitrary: secretText }, { weight: 1, arbitrary: fc.constant(OVER_SEED_LIMIT) }),
  ),
  userDataBase64: field(secretBase64),
  vendorData: field(secretText),
  vendorDataBase64: field(secretBase64),
  installGuestAgent: field(fc.boolean()),
  memoryMiB: field(number),
  vcpus: field(number),
  diskGiB: field(number),
  network: field(fc.constantFrom("default", "../etc", null)),
  bridge: field(fc.constantFrom("br0", null)),
  macAddress: field(fc.constantFrom("52:54:00:aa:bb:cc", "01:00:5e:00:00:01")),
  name: field(fc.constantFrom("edge-1", "my_proxy", "a".repeat(64))),
  proxy: field(
    shape({
      port: field(number),
      auth: field(
        shape({ username: field(fc.constantFrom("u", "a:b")), password: field(fc.oneof(secretText, token)) }),
      ),
      allowedClients: field(
        fc.array(field(fc.constantFrom("10.0.0.0/8", "::/0", "10.0.0.0/33")), { maxLength: 3 }),
      ),
      outgoingAddress: field(fc.constantFrom("10.0.0.1", "eth0")),
    }),
  ),
  proxyPort: field(number),
  healthCheck: field(fc.oneof(fc.constant(false), shape({ url: field(url), expectStatus: field(number) }))),
  egressCheck: field(shape({ url: field(url) })),
  waitForIp: field(fc.oneof(fc.boolean(), fc.constantFrom("ipv4", "ipv6", "any", "both"))),
  nics: field(
    fc.array(
      field(
        shape({
          network: field(fc.constantFrom("default", "../etc")),
          bridge: field(fc.constantFrom("br0", "a-name-longer-than-15")),
          direct: field(
            shape({ dev: field(fc.constantFrom("eth0", "")), mode: field(fc.constantFrom("bridge", "nat")) }),
          ),
          macAddress: field(fc.constantFrom("52:54:00:aa:bb:01", "01:00:5e:00:00:01")),
          addresses: field(
            fc.array(field(fc.constantFrom("203.0.113.7/24", "2001:db8::7/64", "10.0.0.1/33", "::1/128")), {
              maxLength: 3,
            }),
          ),
          addressPool: field(
            shape({
              ranges: field(
                fc.array(
                  field(
                    fc.constantFrom(
                      "203.0.113.10-203.0.113.20/24",
                      "203.0.113.1-203.0.113.9/24",
                      "2001:db8::10-2001:db8::20/64",
                      "::ffff:192.0.2.1-::ffff:192.0.2.9/120",
                      "203.0.113.10/0",
                      "203.0.113.20-203.0.113.10/24",
                    ),
                  ),
                  { maxLength: 3 },
                ),
              ),
            }),
          ),
          gateway4: field(fc.constantFrom("203.0.113.1", "198.51.100.1", "2001:db8::1")),
          gateway6: field(fc.constantFrom("2001:db8::1", "203.0.113.1")),
          nameservers: field(
            fc.array(field(fc.constantFrom("1.1.1.1", "2001:4860:4860::8888", "dns")), { maxLength: 2 }),
          ),
          bandwidth: field(shape({ inboundKbps: field(number), outboundKbps: field(number) })),
          filter: field(fc.constantFrom("clean-traffic", "bad name")),
          primary: field(fc.boolean()),
        }),
      ),
      { maxLength: 3 },
    ),
  ),
  networkConfig: field(fc.constantFrom("version: 2\n", "")),
  timeouts: field(shape({ create: field(duration), delete: field(duration) })),
  tags: field(dict(field(fc.constantFrom("v", "a\u0001b")))),
  owner: field(
    shape({ project: field(fc.constant("p")), stack: field(fc.constant("s")), resource: anyValue }),
  ),
});
const olds = shape({ autoname: field(fc.boolean()), name: anyValue });

// ---------------------------------------------------------------------------
// What must hold
// ---------------------------------------------------------------------------

const SECRET_INPUTS = ["userData", "userDataBase64", "vendorData", "vendorDataBase64", "proxy.auth.password"];
const KNOWN_NESTED = [
  ...["image.url", "image.format", "image.firmware", "image.sha256", "proxy.port", "proxy.auth"],
  ...["proxy.auth.username", "proxy.auth.password", "proxy.allowedClients", "proxy.outgoingAddress"],
  ...["healthCheck.url", "healthCheck.expectStatus", "egressCheck.url", "timeouts.create", "timeouts.delete"],
  // The one-NIC shorthand is named when it meets nics.
  ...["network", "bridge", "macAddress"],
];

/** A field of a host given in full that is named though absent (required ones). */
const HOST_FIELD = /^host(\.pool\[\d+\])?\.(key|uri|privateKey)$/;

/** A field of a NIC that may be missing (a required one is named though absent). */
const NIC_FIELD =
  /^nics\[\d+\](\.(network|bridge|direct|direct\.dev|direct\.mode|macAddress|addresses|addressPool|addressPool\.ranges|gateway4|gateway6|nameservers|bandwidth|filter|primary))?$/;

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

/** The secrets inside `v`: its tokens, and whole base64 strings of secret inputs. */
function secretsIn(v: unknown, out: Set<string> = new Set()): Set<string> {
  if (typeof v === "string") for (const m of v.matchAll(TOKEN_RE)) out.add(m[0]);
  else if (isObj(v)) for (const x of Object.values(v)) secretsIn(x, out);
  return out;
}

/** Every path of `v` as failures spell them: `a`, `a.b`, `a[0]`. */
function pathsOf(v: unknown, prefix = "", out: Set<string> = new Set()): Set<string> {
  if (!isObj(v)) return out;
  for (const [k, x] of Object.entries(v)) {
    const p = Array.isArray(v) ? `${prefix}[${k}]` : prefix === "" ? k : `${prefix}.${k}`;
    out.add(p);
    pathsOf(x, p, out);
  }
  return out;
}

/** The config paths a configure failure may name, for `cfg` as given. */
function configPaths(cfg: Record<string, unknown>): Set<string> {
  const out = new Set(["kvm:hosts", "kvm:images", "kvm:sshPrivateKey"]);
  for (const [name, fields] of [
    ["kvm:hosts", HOST_FIELDS],
    ["kvm:images", IMAGE_FIELDS],
  ] as const) {
    const map = decodeConfigValue(cfg[name]);
    if (!isObj(map) || Array.isArray(map)) continue;
    for (const [k, entry] of Object.entries(map)) {
      out.add(`${name}.${k}`);
      for (const f of [...fields, ...(isObj(entry) ? Object.keys(entry) : [])]) out.add(`${name}.${k}.${f}`);
    }
  }
  return out;
}

const bare = (property: string) => property.replace(/ \(secret\)$/, "");

/** Plain checks in the loop (vitest's expect costs more than the code under test); fast-check reports the case. */
function must(ok: boolean, what: string): void {
  if (!ok) throw new Error(what.length > 600 ? `${what.slice(0, 600)}…` : what);
}

function expectClean(failures: readonly ValidationFailure[], secrets: Set<string>, what: string): void {
  for (const f of failures) {
    const text = `${f.property}: ${f.reason}`;
    for (const s of secrets) must(!text.includes(s), `${what} quotes a secret: ${text}`);
    must(f.reason.length <= 1000, `${what}: a reason of ${f.reason.length} characters at ${f.property}`);
    must(!/internal error/.test(f.reason), `${what} hit a bug: ${text}`);
  }
}

function checkCase(
  cfg: Record<string, unknown>,
  news: Record<string, unknown>,
  previous: Record<string, unknown>,
): void {
  const config = readStackConfig((k) => cfg[k]);
  const configFailures = [
    ...config.general,
    ...Object.values(config.hostFailures).flat(),
    ...Object.values(config.imageFailures).flat(),
  ];
  const secrets = secretsIn(cfg);
  expectClean(configFailures, secrets, "configure");
  if (configFailures.length > 0) {
    const allowedConfig = configPaths(cfg);
    for (const f of configFailures)
      must(allowedConfig.has(bare(f.property)), `configure names ${f.property}`);
  }

  const r = checkInputs(previous, news, { config, randomBytes: (n) => new Uint8Array(n).fill(7) });
  for (const s of secretsIn(news)) secrets.add(s);
  for (const k of ["userDataBase64", "vendorDataBase64"]) {
    const v = news[k];
    if (
      typeof v === "string" &&
      v.length >= 8 &&
      secretsIn(Buffer.from(v, "base64").toString("latin1")).size
    ) {
      secrets.add(v);
    }
  }
  expectClean(r.failures, secrets, "check");
  const allowed = new Set([...pathsOf(news), ...INPUT_PROPERTIES, ...KNOWN_NESTED]);
  for (const f of r.failures) {
    must(
      allowed.has(bare(f.property)) || NIC_FIELD.test(bare(f.property)) || HOST_FIELD.test(bare(f.property)),
      `check names ${f.property}`,
    );
    // The engine prints the value of a failing top-level input beside the failure.
    if (Object.hasOwn(news, f.property)) {
      must(secretsIn(news[f.property]).size === 0, `${f.property} is echoed with a secret: ${f.reason}`);
    }
    // A relayed config failure names the key (host, image) it came through, never a secret.
    const relayed = f.reason.startsWith("stack config ");
    if (SECRET_INPUTS.includes(bare(f.property)) || (!relayed && /credentials/.test(f.reason))) {
      must(f.property.endsWith(" (secret)"), `a secret's failure is named ${f.property}: ${f.reason}`);
    }
  }
}

describe("configure and check, property-based", () => {
  console.info(
    `check-properties: seeds ${FIXED_SEED} (fixed) and ${randomSeed} (${replay !== undefined ? "replayed" : "random"}); ` +
      `replay the random one with ${SEED_ENV}=${randomSeed} npx vitest run --project unit test/unit/resource/check-properties.test.ts`,
  );

  it.each([
    ["fixed", FIXED_SEED],
    [replay !== undefined ? "replayed" : "random", randomSeed],
  ])(
    "never throw, name real paths, quote no secret and name secret failures so the engine cannot echo them (%s seed %i)",
    (_kind, seed) => {
      const started = Date.now();
      fc.assert(
        fc.property(stackConfig, inputs, olds, (cfg, news, previous) => checkCase(cfg, news, previous)),
        { seed, numRuns: RUNS_PER_SEED },
      );
      console.info(`check-properties: seed ${seed}: ${RUNS_PER_SEED} cases in ${Date.now() - started} ms`);
    },
    // A correctness test: generous, so a loaded machine does not fail it.
    240_000,
  );
});

// ---------------------------------------------------------------------------
// Address pools: what an accepted pool hands out
// ---------------------------------------------------------------------------

/**
 * Sixteen addresses each (the last group or number 0-15), so a NIC's ranges,
 * gateway and nameservers meet often; `special`: every address of it is one
 * no VM takes (of `::`, only `::` and `::1` are).
 */
const NEIGHBOURHOODS = [
  { fam: 4, base: "192.0.2.", special: false },
  { fam: 4, base: "127.0.0.", special: true },
  { fam: 4, base: "169.254.0.", special: true },
  { fam: 6, base: "2001:db8::", special: false },
  { fam: 6, base: "::", special: false },
  { fam: 6, base: "fe80::", special: true },
] as const;
type Neighbourhood = (typeof NEIGHBOURHOODS)[number];

const addressAt = (h: Neighbourhood, k: number) =>
  canonicalIp(h.fam === 4 ? `${h.base}${k}` : `${h.base}${k.toString(16)}`) as string;
/** The number (0-15) of an address of `h` (its last group or number). */
const indexIn = (h: Neighbourhood, address: string) =>
  h.fam === 4 ? Number(address.split(".").pop()) : Number.parseInt(address.split(":").pop() || "0", 16);

/**
 * A pool NIC whose ranges, gateway and nameservers all lie in one
 * neighbourhood (mostly an ordinary one, so that some pools pass), and that
 * neighbourhood.
 */
const poolNic = fc
  .oneof(
    { weight: 4, arbitrary: fc.constantFrom(...NEIGHBOURHOODS.filter((h) => !h.special)) },
    { weight: 1, arbitrary: fc.constantFrom(...NEIGHBOURHOODS.filter((h) => h.special)) },
  )
  .chain((h) => {
    const k = fc.integer({ min: 0, max: 15 });
    const prefix = fc.oneof(
      { weight: 2, arbitrary: fc.constant(h.fam === 4 ? 24 : 64) },
      {
        weight: 3,
        arbitrary: fc.constantFrom(...(h.fam === 4 ? [28, 29, 30, 31, 32] : [124, 125, 126, 127, 128])),
      },
    );
    const range = fc.tuple(k, k, prefix).map(([a, b, p]) => {
      const [lo, hi] = a <= b ? [a, b] : [b, a];
      return `${addressAt(h, lo)}${lo === hi ? "" : `-${addressAt(h, hi)}`}/${p}`;
    });
    const nic = fc.record(
      {
        bridge: fc.constant("br0"),
        addressPool: fc.record({ ranges: fc.array(range, { minLength: 1, maxLength: 2 }) }),
        [`gateway${h.fam}`]: k.map((x) => addressAt(h, x)),
        nameservers: fc.array(
          k.map((x) => addressAt(h, x)),
          { maxLength: 1 },
        ),
      },
      { requiredKeys: ["bridge", "addressPool"] },
    );
    return nic.map((n) => ({ h, nic: n as Record<string, unknown> }));
  });

/** Every address `pool` hands out, as create takes them one VM after another until it is full. */
function handedOut(pool: AddressPool): string[] {
  const taken = new Set<string>();
  const out: string[] = [];
  for (let got = allocate(pool, taken); "addresses" in got; got = allocate(pool, taken)) {
    for (const cidr of got.addresses) {
      out.push(cidr);
      taken.add(bareAddress(cidr));
    }
  }
  return out;
}

/** Why `cidr`, handed out by a NIC of `h` with `nic`'s gateway and nameservers, must never be a VM's; or undefined. */
function wrongToHandOut(h: Neighbourhood, nic: Record<string, unknown>, cidr: string): string | undefined {
  const address = bareAddress(cidr);
  const prefix = Number(cidr.split("/")[1]);
  const k = BigInt(indexIn(h, address));
  const hostBits = BigInt((h.fam === 4 ? 32 : 128) - prefix);
  const mask = (1n << hostBits) - 1n;
  const gateway = nic[`gateway${h.fam}`] as string | undefined;
  if (gateway === address) return "the gateway";
  if ((nic.nameservers as string[] | undefined)?.includes(address)) return "a nameserver";
  if (h.special || (h.base === "::" && k <= 1n)) return "special";
  if (hostBits >= 2n && (k & mask) === 0n) return "the network address";
  if (h.fam === 4 && hostBits >= 2n && (k & mask) === mask) return "the broadcast address";
  if (gateway !== undefined && (k ^ BigInt(indexIn(h, gateway))) >> hostBits !== 0n) {
    return "outside the gateway's subnet";
  }
  return undefined;
}

describe("address pools, property-based", () => {
  const config = readStackConfig((k) => BAD_INPUT_CONFIG[k]);
  const runs = Math.max(1, Math.round(RUNS_PER_SEED / 5));

  it.each([
    ["fixed", FIXED_SEED],
    [replay !== undefined ? "replayed" : "random", randomSeed],
  ])(
    "an accepted pool never hands out its gateway, a nameserver, or an address no VM may take (%s seed %i)",
    (_kind, seed) => {
      let accepted = 0;
      let refused = 0;
      let handed = 0;
      fc.assert(
        fc.property(
          fc.oneof(
            { weight: 3, arbitrary: fc.tuple(poolNic) },
            { weight: 1, arbitrary: fc.tuple(poolNic, poolNic) },
          ),
          (drawn) => {
            const nics = drawn.map((d) => d.nic);
            const r = checkInputs(
              {},
              { host: "lab", image: "debian", nics },
              { config, randomBytes: (n) => new Uint8Array(n).fill(7) },
            );
            if (r.failures.length > 0) {
              refused++;
              return;
            }
            accepted++;
            for (const { h, nic } of drawn) {
              for (const cidr of handedOut(nic.addressPool as AddressPool)) {
                handed++;
                const wrong = wrongToHandOut(h, nic, cidr);
                must(
                  wrong === undefined,
                  `${JSON.stringify(nic)} was accepted and hands out ${cidr}: ${wrong}`,
                );
              }
            }
          },
        ),
        { seed, numRuns: runs },
      );
      // Neither side is empty: the rule refuses some pools and lets others through.
      must(
        accepted >= runs / 50 && refused >= runs / 50 && handed > 0,
        `${accepted} accepted, ${refused} refused`,
      );
    },
    120_000,
  );
});
