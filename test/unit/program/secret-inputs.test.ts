/**
 * Which inputs are secret whatever the program passed (secret-inputs.ts,
 * from host-config.ts `mayCarryKeyMaterial`): a host that may carry key
 * material is secret in every shape a user may give it: its own key or
 * passphrase, a jump host's (one hop or a list), a pool's member, a URI
 * with a password, and a field the parser does not know (a misspelt
 * `privatekey` is a key all the same). A proxy block is secret with auth or
 * TLS (a CA's key, made at check or given); the URLs with credentials the
 * program builds keep the scheme, https:// with TLS.
 */
import { describe, expect, it } from "vitest";
import { mayCarryKeyMaterial } from "../../../provider/kvm/config/host-config";
import { urlWithCredentials } from "../../../provider/program/proxy-auth";
import { secretConfigKeysOf, secretKeysOf } from "../../../provider/program/secret-inputs";

const KEY =
  "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
const base = { key: "hv", uri: "ssh://root@hv.example:22" };

const secret: [string, unknown][] = [
  ["its own privateKey", { ...base, privateKey: KEY }],
  ["its own passphrase (with a key file)", { ...base, privateKeyPath: "/k", passphrase: "pw" }],
  [
    "one jump hop given as an object, with a key",
    { ...base, jump: { uri: "ssh://b@bastion", privateKey: KEY } },
  ],
  [
    "one jump hop given as an object, with a passphrase",
    { ...base, jump: { uri: "ssh://b@b", passphrase: "pw" } },
  ],
  ["the second hop of a list", { ...base, jump: ["ssh://a@a", { uri: "ssh://b@b", privateKey: KEY }] }],
  ["a misspelt field of the host", { ...base, privatekey: KEY }],
  ["a misspelt uri, the key beside it", { key: "hv", url: "ssh://root@hv", privateKey: KEY }],
  ["a misspelt field of a hop", { ...base, jump: { uri: "ssh://b@b", private_key: KEY } }],
  ["a host URI with a password", { key: "hv", uri: "ssh://root:hunter2@hv" }],
  ["a hop URI with a password", { ...base, jump: "ssh://b:hunter2@bastion" }],
  ["a pool with one host in full that has a key", { pool: ["lab", { ...base, privateKey: KEY }] }],
  ["a pool whose host has a misspelt field", { pool: [{ ...base, passwd: "x" }] }],
  ["a pool object with a field beside pool", { pool: ["lab"], privateKey: KEY }],
  ["a misspelt field in its capacity", { ...base, capacity: { proxies: 4, privatekey: KEY } }],
  [
    "a misspelt field in one of its address pools",
    { ...base, addressPools: { public: { ranges: ["203.0.113.10-203.0.113.20/24"], privatekey: KEY } } },
  ],
];

const plain: [string, unknown][] = [
  ["a key of kvm:hosts", "lab"],
  ["a host with a key file", { ...base, privateKeyPath: "/root/.ssh/id_ed25519", knownHostsPath: "/kh" }],
  [
    "a host with an agent and known_hosts lines",
    { ...base, agentSocket: "/run/agent", knownHosts: "hv ssh-ed25519 AAAA" },
  ],
  [
    "every public field",
    {
      ...base,
      driverUri: "qemu:///system",
      domainType: "qemu",
      pool: "default",
      network: "default",
      callTimeout: "30s",
      capacity: { proxies: 4, memoryMiB: 4096, vcpus: 8, concurrentCreates: 2 },
      addressPools: {
        public: {
          ranges: ["203.0.113.10-203.0.113.20/24"],
          gateway4: "203.0.113.1",
          nameservers: ["9.9.9.9"],
          bridge: "br0",
        },
      },
      transport: "openssh",
      sshConfig: "/etc/ssh/cfg",
      jump: [{ uri: "ssh://b@b", privateKeyPath: "/k2" }, "ssh://c@c:2222"],
    },
  ],
  ["fields given as null", { ...base, privateKey: null, passphrase: undefined }],
  ["a pool of keys", { pool: ["lab", "edge"] }],
  ["a user@ URI", { key: "hv", uri: "ssh://root@hv:22?socket=/run/libvirt/libvirt-sock" }],
];

describe("a host that may carry key material is secret in every shape", () => {
  it.each(secret)("%s", (_, host) => {
    expect(mayCarryKeyMaterial(host)).toBe(true);
    expect(secretKeysOf({ host })).toContain("host");
  });
});

describe("a host without key material stays plain (its key and address are no secret)", () => {
  it.each(plain)("%s", (_, host) => {
    expect(mayCarryKeyMaterial(host)).toBe(false);
    expect(secretKeysOf({ host })).not.toContain("host");
  });
});

describe("a proxy block is secret with auth or TLS, in the inputs and the outputs", () => {
  const PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const KEY_PEM = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
  it.each<[string, unknown, boolean]>([
    ["auth", { auth: { username: "u", passwordHash: "h" } }, true],
    ["TLS as given: {} (check adds the CA it makes, its key included)", { tls: {} }, true],
    [
      "TLS checked: a CA made for the proxy",
      { tls: { ca: { certificate: PEM, privateKey: KEY_PEM, made: true } } },
      true,
    ],
    ["TLS checked: a certificate given", { tls: { certificate: PEM, privateKey: KEY_PEM } }, true],
    ["TLS in the outputs (public, as the block that holds it)", { tls: { ca: { certificate: PEM } } }, true],
    ["neither", { port: 3128, allowedClients: ["10.0.0.0/8"], socks: { port: 1080 } }, false],
    ["no block", undefined, false],
  ])("%s", (_what, proxy, secret) => {
    expect(secretKeysOf({ proxy }).includes("proxy")).toBe(secret);
  });
});

describe("the URL with credentials", () => {
  const auth = { username: "crawl er", password: "p@ss/word:1" };
  it.each<[string, string | undefined, unknown, string | undefined]>([
    ["http", "http://203.0.113.7:3128", auth, "http://crawl%20er:p%40ss%2Fword%3A1@203.0.113.7:3128"],
    [
      "https (TLS)",
      "https://203.0.113.7:3128",
      auth,
      "https://crawl%20er:p%40ss%2Fword%3A1@203.0.113.7:3128",
    ],
    [
      "https at an IPv6 address",
      "https://[2001:db8::7]:3128",
      auth,
      "https://crawl%20er:p%40ss%2Fword%3A1@[2001:db8::7]:3128",
    ],
    ["socks5", "socks5://203.0.113.7:1080", auth, "socks5://crawl%20er:p%40ss%2Fword%3A1@203.0.113.7:1080"],
    ["no address yet", undefined, auth, undefined],
    ["no auth", "https://203.0.113.7:3128", undefined, undefined],
    ["no password", "https://203.0.113.7:3128", { username: "u" }, undefined],
  ])("%s", (_what, url, a, want) => {
    const made = urlWithCredentials(url, a);
    expect(made).toBe(want);
    // What a client makes of it: the credentials come back whole.
    if (made !== undefined) {
      const u = new URL(made);
      expect([decodeURIComponent(u.username), decodeURIComponent(u.password)]).toEqual([
        auth.username,
        auth.password,
      ]);
      expect(u.protocol).toBe(new URL(url as string).protocol);
    }
  });
});

describe("an explicit provider's configuration keeps key material and a bake's user-data secret", () => {
  it.each<[string, Record<string, unknown>, string[]]>([
    [
      "nothing secret",
      { hosts: { lab: { uri: "unix:///s" } }, images: { d: { url: "https://x/d.qcow2" } } },
      [],
    ],
    ["a host's private key", { hosts: { lab: { uri: "ssh://h", privateKey: "KEY" } } }, ["hosts"]],
    [
      "a jump host's passphrase",
      { hosts: { lab: { uri: "ssh://h", jump: { uri: "ssh://b", passphrase: "p" } } } },
      ["hosts"],
    ],
    ["a URI with a password", { hosts: { lab: { uri: "ssh://u:pw@h" } } }, ["hosts"]],
    ["a misspelt key field", { hosts: { lab: { uri: "ssh://h", privatekey: "KEY" } } }, ["hosts"]],
    [
      "a bake's user-data",
      { images: { d: { url: "https://x/d.qcow2", bake: { userData: "#cloud-config\n" } } } },
      ["images"],
    ],
    [
      "a bake without user-data",
      { images: { d: { url: "https://x/d.qcow2", bake: { packages: ["htop"] } } } },
      [],
    ],
    [
      "the shared key and the state key",
      { sshPrivateKey: "KEY", stateKey: "k".repeat(32) },
      ["sshPrivateKey", "stateKey"],
    ],
  ])("%s", (_, config, keys) => {
    expect(secretConfigKeysOf(config).sort()).toEqual(keys.sort());
  });
});
