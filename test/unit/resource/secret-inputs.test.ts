/**
 * Which inputs are secret whatever the program passed (secret-inputs.ts,
 * from host-config.ts `mayCarryKeyMaterial`): a host that may carry key
 * material is secret in every shape a user may give it: its own key or
 * passphrase, a jump host's (one hop or a list), a pool's member, a URI
 * with a password, and a field the parser does not know (a misspelt
 * `privatekey` is a key all the same).
 */
import { describe, expect, it } from "vitest";
import { mayCarryKeyMaterial } from "../../../provider/kvm/config/host-config";
import { secretKeysOf } from "../../../provider/resource/secret-inputs";

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
      capacity: { proxies: 4 },
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
