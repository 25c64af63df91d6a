/**
 * kvm:hosts.<key>.transport, .jump and .sshConfig (kvm/config/ssh-reach.ts) through
 * the host parser: defaults taken from the host, failures naming the hop,
 * and no failure quoting a key, a passphrase or a URL's password.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_KNOWN_HOSTS_PATH,
  type HostConfig,
  parseConfig,
  validateConfig,
} from "../../../../provider/kvm/config/host-config";
import { MAX_JUMP_HOPS } from "../../../../provider/kvm/config/ssh-reach";

const KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecretkeymaterial\n-----END OPENSSH PRIVATE KEY-----\n";
const HOP_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nhopsecretmaterial\n-----END OPENSSH PRIVATE KEY-----\n";

function host(input: Record<string, unknown>): HostConfig {
  return parseConfig({ hosts: { edge: input } }).hosts.edge as HostConfig;
}

function failures(input: Record<string, unknown>) {
  const result = validateConfig({ hosts: { edge: input } });
  if (result.ok) throw new Error("expected failures");
  return result.failures;
}

const base = { uri: "ssh://ops@hv1.internal:2200", privateKey: KEY, passphrase: "pw-of-host-key" };

describe("jump hosts", () => {
  it("takes one hop as a string, with the host's user, credentials and known_hosts", () => {
    const h = host({ ...base, jump: "ssh://bastion.example.com" });
    expect(h.reach).toEqual({
      transport: "ssh2",
      jump: [
        {
          uri: "ssh://ops@bastion.example.com:22",
          user: "ops",
          host: "bastion.example.com",
          port: 22,
          ssh: { privateKey: KEY, passphrase: "pw-of-host-key", knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH },
        },
      ],
    });
  });

  it("takes a chain, first hop first, each hop with what it gives and the host's for the rest", () => {
    const h = host({
      ...base,
      knownHosts:
        "hv1.internal ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
      jump: [
        { uri: "ssh://jump@bastion:2222", knownHostsPath: "/etc/kvmp/bastion_known_hosts" },
        { uri: "ssh://[fd00::7]", agentSocket: "/run/agent.sock" },
      ],
    });
    expect(h.reach?.jump).toEqual([
      {
        uri: "ssh://jump@bastion:2222",
        user: "jump",
        host: "bastion",
        port: 2222,
        // Own known_hosts; the host's credentials.
        ssh: {
          privateKey: KEY,
          passphrase: "pw-of-host-key",
          knownHostsPath: "/etc/kvmp/bastion_known_hosts",
        },
      },
      {
        uri: "ssh://ops@[fd00::7]:22",
        user: "ops",
        host: "fd00::7",
        port: 22,
        // Own credentials (the agent alone: the host's key and passphrase go together); the host's known_hosts.
        ssh: {
          agentSocket: "/run/agent.sock",
          knownHosts:
            "hv1.internal ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
        },
      },
    ]);
  });

  it("a hop's own key brings its own passphrase", () => {
    const h = host({ ...base, jump: { uri: "ssh://b", privateKey: HOP_KEY, passphrase: "hop-pw" } });
    expect(h.reach?.jump[0]?.ssh).toEqual({
      privateKey: HOP_KEY,
      passphrase: "hop-pw",
      knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH,
    });
  });

  it.each([
    ["a password in the URI", { jump: "ssh://u:hunter22secret@b" }, "edge.jump", /must not carry a password/],
    ["a query", { jump: ["ssh://b?socket=/x"] }, "edge.jump[0]", /query/],
    ["another scheme", { jump: "https://b" }, "edge.jump", /scheme "https" is not supported/],
    ["a comma-separated chain", { jump: "ssh://a,ssh://b" }, "edge.jump", /give a chain as a list/],
    ["no hop", { jump: [] }, "edge.jump", /at least one hop/],
    ["a number", { jump: [7] }, "edge.jump[0]", /must be ssh:/],
    ["an object without uri", { jump: [{ knownHostsPath: "/k" }] }, "edge.jump[0].uri", /required/],
    ["an unknown field", { jump: { uri: "ssh://b", port: 22 } }, "edge.jump.port", /unknown property/],
    [
      "a lone passphrase",
      { jump: { uri: "ssh://b", passphrase: "hop-pw" } },
      "edge.jump.passphrase",
      /own privateKey/,
    ],
    [
      "key material as a path",
      { jump: { uri: "ssh://b", privateKeyPath: HOP_KEY } },
      "edge.jump.privateKeyPath",
      /key material/,
    ],
    [
      "a key that is not one",
      { jump: { uri: "ssh://b", privateKey: "hop-pw-not-a-key" } },
      "edge.jump.privateKey",
      /must hold the key itself/,
    ],
    [
      "two known_hosts",
      { jump: { uri: "ssh://b", knownHosts: "b ssh-ed25519 AAAA", knownHostsPath: "/k" } },
      "edge.jump.knownHostsPath",
      /not both/,
    ],
  ])("refuses %s, naming the hop and quoting no secret", (_what, extra, property, reason) => {
    const f = failures({ ...base, ...extra });
    expect(f.map((x) => x.property)).toEqual([`hosts.${property}`]);
    expect(f[0]?.reason).toMatch(reason);
    const text = JSON.stringify(f);
    for (const secret of [
      "hunter22secret",
      "hopsecretmaterial",
      "secretkeymaterial",
      "hop-pw",
      "pw-of-host-key",
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  it(`refuses more than ${MAX_JUMP_HOPS} hops`, () => {
    const f = failures({ ...base, jump: Array.from({ length: MAX_JUMP_HOPS + 1 }, (_, i) => `ssh://b${i}`) });
    expect(f.map((x) => x.property)).toEqual(["hosts.edge.jump"]);
  });

  it("refuses jump, transport and sshConfig on a unix:// host", () => {
    const f = failures({ uri: "unix:///run/s", jump: "ssh://b", transport: "openssh", sshConfig: "/c" });
    expect(f.map((x) => x.property).sort()).toEqual([
      "hosts.edge.jump",
      "hosts.edge.sshConfig",
      "hosts.edge.transport",
    ]);
  });
});

describe("transport", () => {
  it("is ssh2 unless openssh is asked for", () => {
    expect(host(base).reach?.transport).toBe("ssh2");
    expect(host({ ...base, transport: "openssh" }).reach?.transport).toBe("openssh");
    expect(failures({ ...base, transport: "libssh" }).map((x) => x.property)).toEqual([
      "hosts.edge.transport",
    ]);
  });

  it("openssh needs no credentials of ours (its own config and agent may hold them); ssh2 does", () => {
    const noAuth = { uri: "ssh://hv1" };
    expect(host({ ...noAuth, transport: "openssh" }).reach).toEqual({ transport: "openssh", jump: [] });
    expect(failures(noAuth).map((x) => x.property)).toEqual(["hosts.edge.privateKey"]);
  });

  it("takes an ssh_config file for openssh only, and refuses key material there", () => {
    expect(host({ ...base, transport: "openssh", sshConfig: "~/.ssh/config-lab" }).reach?.sshConfig).toBe(
      "~/.ssh/config-lab",
    );
    expect(failures({ ...base, sshConfig: "/c" })[0]).toMatchObject({
      property: "hosts.edge.sshConfig",
      reason: expect.stringMatching(/transport "openssh"/),
    });
    const f = failures({ ...base, transport: "openssh", sshConfig: KEY });
    expect(f.map((x) => x.property)).toEqual(["hosts.edge.sshConfig"]);
    expect(JSON.stringify(f)).not.toContain("secretkeymaterial");
  });
});

// biome-ignore lint/suspicious/noTemplateCurlyInString: OpenSSH's environment variable syntax, written as a user would
const HOME = "${HOME}";
const SOCKET_107 = `/run/${"s".repeat(102)}`;

/**
 * Paths the OpenSSH transport cannot hand ssh as themselves (test/unit/transport/openssh-paths.test.ts
 * asks ssh -G), refused with transport "openssh" at their field; `ssh2`: accepted there (it reads them as given).
 */
const OPENSSH_REFUSED: [string, Record<string, unknown>, string, RegExp, boolean][] = [
  [
    "known_hosts of another user's home",
    { knownHostsPath: "~ops/known_hosts" },
    "knownHostsPath",
    /"~name"/,
    true,
  ],
  [
    "known_hosts named none",
    { knownHostsPath: "none" },
    "knownHostsPath",
    /no known_hosts file.*\.\/none/,
    true,
  ],
  ["known_hosts with a quote", { knownHostsPath: '/k/say"hi' }, "knownHostsPath", /ends a value/, true],
  ["known_hosts with \\\\", { knownHostsPath: "/k/a\\\\b" }, "knownHostsPath", /as an escape/, true],
  [
    `known_hosts with ${HOME}`,
    { knownHostsPath: `/k/${HOME}` },
    "knownHostsPath",
    /environment variable/,
    true,
  ],
  [
    "agent SSH_AUTH_SOCK",
    { agentSocket: "SSH_AUTH_SOCK" },
    "agentSocket",
    /agent its environment names/,
    true,
  ],
  [
    "agent $NAME",
    { agentSocket: "$SSH_AUTH_SOCK" },
    "agentSocket",
    /environment variable naming the agent/,
    true,
  ],
  ["agent none", { agentSocket: "none" }, "agentSocket", /no agent/, true],
  ["ssh_config relative", { sshConfig: "config-lab" }, "sshConfig", /relative.*~\/\.ssh/, false],
  ["ssh_config a pattern", { sshConfig: "/etc/ssh/conf.d/*" }, "sshConfig", /pattern of file names/, false],
  ["ssh_config with \\", { sshConfig: "/etc/a\\b" }, "sshConfig", /Include reads as an escape/, false],
  [
    "socket= with ':'",
    { uri: "ssh://ops@hv1.internal:2200?socket=/run/a:b" },
    "uri",
    /^socket= contains ':'/,
    true,
  ],
  [
    "socket= with '%'",
    { uri: "ssh://ops@hv1.internal:2200?socket=/run/%25h" },
    "uri",
    /^socket= .*token/,
    true,
  ],
  [
    "socket= with '\\'",
    { uri: "ssh://ops@hv1.internal:2200?socket=/run/a%5Cb" },
    "uri",
    /^socket= .*escape/,
    true,
  ],
  [
    `socket= with ${HOME}`,
    { uri: "ssh://ops@hv1.internal:2200?socket=/run/$%7BHOME%7D" },
    "uri",
    /^socket= .*environment/,
    true,
  ],
  [
    "a hop's known_hosts of another user's home",
    { jump: [{ uri: "ssh://b", knownHostsPath: "~ops/kh" }] },
    "jump[0].knownHostsPath",
    /"~name"/,
    true,
  ],
  [
    "one hop's known_hosts named none",
    { jump: { uri: "ssh://b", knownHostsPath: "NONE" } },
    "jump.knownHostsPath",
    /no known_hosts file/,
    true,
  ],
];

describe("paths with transport openssh", () => {
  it.each(OPENSSH_REFUSED)("refuses %s at its field, saying what to do", (_what, entry, field, reason) => {
    const f = failures({ ...base, transport: "openssh", ...entry });
    expect(f).toEqual([{ property: `hosts.edge.${field}`, reason: expect.stringMatching(reason) }]);
  });

  it.each(OPENSSH_REFUSED.filter((r) => r[4]))("accepts %s with transport ssh2", (_what, entry) => {
    expect(host({ ...base, ...entry }).reach?.transport).toBe("ssh2");
  });

  it.each<[string, Record<string, unknown>]>([
    ["known_hosts with whitespace, % and a leading -", { knownHostsPath: "-k/known hosts 100%" }],
    ["known_hosts of a file named none", { knownHostsPath: "./none" }],
    ["known_hosts in your home", { knownHostsPath: "~/.ssh/known_hosts_lab" }],
    ["an agent with whitespace", { agentSocket: "/run/user/1000/agent sock" }],
    [
      `an ssh_config with whitespace, % and ${HOME} (an Include reads them as written)`,
      { sshConfig: `~/.ssh/config lab/100%/${HOME}` },
    ],
    ["socket= with whitespace", { uri: "ssh://ops@hv1.internal:2200?socket=/run/libvirt/libvirt%20sock" }],
    ["socket= of 107 bytes", { uri: `ssh://ops@hv1.internal:2200?socket=${SOCKET_107}` }],
  ])("accepts %s", (_what, entry) => {
    expect(host({ ...base, transport: "openssh", ...entry }).reach?.transport).toBe("openssh");
  });

  it.each<[string, Record<string, unknown>, string, RegExp]>([
    [
      "socket= with NUL",
      { uri: "ssh://ops@hv1.internal:2200?socket=/run/a%00b" },
      "uri",
      /socket= must not contain NUL/,
    ],
    [
      "socket= over 107 bytes",
      { uri: `ssh://ops@hv1.internal:2200?socket=${SOCKET_107}x` },
      "uri",
      /socket= must be at most 107 bytes/,
    ],
  ])("refuses %s with either transport", (_what, entry, field, reason) => {
    for (const transport of ["ssh2", "openssh"]) {
      const f = failures({ ...base, transport, ...entry });
      expect(f).toEqual([{ property: `hosts.edge.${field}`, reason: expect.stringMatching(reason) }]);
    }
  });

  it("holds the kernel to its limit: a unix socket path of 108 bytes is too long to connect to, 107 is not", () => {
    const said = execFileSync(
      "python3",
      [
        "-c",
        "import socket, sys\nfor p in sys.argv[1:]:\n    try: socket.socket(socket.AF_UNIX).connect(p)\n    except OSError as e: print(e.strerror or e)",
        SOCKET_107,
        `${SOCKET_107}x`,
      ],
      { encoding: "utf8" },
    );
    expect(said.trim().split("\n")).toEqual(["No such file or directory", "AF_UNIX path too long"]);
  });
});
