import { describe, expect, it } from "vitest";
import {
  configKeyProblem,
  DEFAULT_KNOWN_HOSTS_PATH,
  DEFAULT_REMOTE_SOCKET,
  type HostConfig,
  parseConfig,
  parseHostUri,
  validateConfig,
} from "../../../../provider/kvm/config/host-config";
import {
  imageSourceOf,
  MAX_PACKAGE_NAME,
  packageNameProblem,
  parseImage,
  resolveImage,
} from "../../../../provider/kvm/config/image";
import { Failures, ValidationError } from "../../../../provider/kvm/validation";

const KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n";
const SHA = "0123456789abcdef".repeat(4);

function host(input: Record<string, unknown>): HostConfig {
  return parseConfig({ hosts: { edge: input } }).hosts.edge as HostConfig;
}

function failures(input: unknown) {
  const result = validateConfig(input);
  if (result.ok) throw new Error("expected failures");
  return result.failures;
}

/** A known_hosts line the transport's parser takes (a real ed25519 key). */
const KNOWN = "h ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

describe("host configuration", () => {
  it("applies every default to a minimal ssh host", () => {
    expect(host({ uri: "ssh://box.example.com", privateKeyPath: "/k" })).toEqual({
      key: "edge",
      uri: "ssh://box.example.com",
      endpoint: {
        kind: "ssh",
        user: "root",
        host: "box.example.com",
        port: 22,
        socketPath: DEFAULT_REMOTE_SOCKET,
      },
      driverUri: "qemu:///system",
      domainType: "kvm",
      pool: "default",
      nic: { kind: "network", network: "default" },
      ssh: { privateKeyPath: "/k", knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH },
      reach: { transport: "ssh2", jump: [] },
      capacity: { concurrentCreates: 4 },
      addressPools: {},
    });
  });

  it("takes a capacity (limits for placement, creates in flight) and refuses one that is not positive integers", () => {
    expect(
      host({ uri: "unix:///s", capacity: { memoryMiB: 8192, proxies: 6, concurrentCreates: 2 } }).capacity,
    ).toEqual({
      memoryMiB: 8192,
      proxies: 6,
      concurrentCreates: 2,
    });
    expect(
      failures({ hosts: { edge: { uri: "unix:///s", capacity: { proxies: 0, vcpus: 1.5, disks: 3 } } } })
        .map((x) => x.property)
        .sort(),
    ).toEqual(["hosts.edge.capacity.disks", "hosts.edge.capacity.proxies", "hosts.edge.capacity.vcpus"]);
  });

  it.each([
    [
      "ssh://admin@h:2222",
      { kind: "ssh", user: "admin", host: "h", port: 2222, socketPath: DEFAULT_REMOTE_SOCKET },
    ],
    ["ssh://h:22/", { kind: "ssh", user: "root", host: "h", port: 22, socketPath: DEFAULT_REMOTE_SOCKET }],
    [
      "ssh://root@10.0.0.5",
      { kind: "ssh", user: "root", host: "10.0.0.5", port: 22, socketPath: DEFAULT_REMOTE_SOCKET },
    ],
    [
      "ssh://root@[fd00::1]:2200",
      { kind: "ssh", user: "root", host: "fd00::1", port: 2200, socketPath: DEFAULT_REMOTE_SOCKET },
    ],
    [
      "ssh://h?socket=/run/libvirt/virtqemud-sock",
      { kind: "ssh", user: "root", host: "h", port: 22, socketPath: "/run/libvirt/virtqemud-sock" },
    ],
  ])("parses the ssh URI %s", (uri, endpoint) => {
    expect(host({ uri, agentSocket: "/run/agent" }).endpoint).toEqual(endpoint);
  });

  it.each([
    ["30s", 30_000],
    [90, 90_000],
    ["1m30s", 90_000],
  ])(
    "takes callTimeout %j as the per-call deadline (%i ms); absent, the connection's default applies",
    (v, ms) => {
      expect(host({ uri: "unix:///s", callTimeout: v }).callTimeoutMs).toBe(ms);
      expect(host({ uri: "unix:///s" }).callTimeoutMs).toBeUndefined();
    },
  );

  it("parses a unix socket URI and needs no SSH material", () => {
    const h = host({ uri: "unix:///var/run/libvirt/libvirt-sock" });
    expect(h.endpoint).toEqual({ kind: "unix", socketPath: "/var/run/libvirt/libvirt-sock" });
    expect(h.ssh).toBeUndefined();
  });

  it.each([
    ["missing", undefined, "is required"],
    ["not a URL", "box.example.com", "ssh://"],
    ["a libvirt URI", "qemu+ssh://root@h/system", "driverUri"],
    ["another scheme", "tcp://h:16509", "not supported"],
    ["a password", "ssh://root:secret@h", "password"],
    ["a path on an ssh URI", "ssh://h/system", "path"],
    ["an unknown query parameter", "ssh://h?keyfile=/k", "keyfile"],
    ["a relative socket", "ssh://h?socket=sock", "absolute"],
    ["port 0", "ssh://h:0", "port"],
    ["port out of range", "ssh://h:70000", "ssh://"],
    ["a bad user", "ssh://bad%20user@h", "user"],
    ["a unix URI with a host", "unix://h/var/run/sock", "empty host"],
    ["a unix URI without a path", "unix:///", "absolute path"],
    ["a fragment", "ssh://h#x", "fragment"],
  ])("rejects a uri with %s, naming hosts.edge.uri", (_, uri, reason) => {
    const f = failures({ hosts: { edge: { uri, agentSocket: "/a" } } });
    expect(f).toContainEqual({ property: "hosts.edge.uri", reason: expect.stringContaining(reason) });
  });

  it.each([
    ["kvm", "kvm"],
    ["qemu", "qemu"],
  ])("takes domainType %s per host (the TCG-only test host needs qemu)", (domainType, expected) => {
    expect(host({ uri: "unix:///s", domainType }).domainType).toBe(expected);
  });

  it("rejects an unknown domainType", () => {
    expect(failures({ hosts: { edge: { uri: "unix:///s", domainType: "xen" } } })).toEqual([
      { property: "hosts.edge.domainType", reason: expect.stringContaining('"kvm", "qemu"') },
    ]);
  });

  it("attaches NICs to a bridge when one is given", () => {
    expect(host({ uri: "unix:///s", bridge: "br0" }).nic).toEqual({ kind: "bridge", bridge: "br0" });
  });

  it("attaches NICs to a named network", () => {
    expect(host({ uri: "unix:///s", network: "lan" }).nic).toEqual({ kind: "network", network: "lan" });
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["both network and bridge", { network: "n", bridge: "br0" }, "hosts.edge.bridge"],
    ["a bridge name over 15 characters", { bridge: "a-very-long-bridge" }, "hosts.edge.bridge"],
    ["a pool with a slash", { pool: "a/b" }, "hosts.edge.pool"],
    ["an empty pool", { pool: "" }, "hosts.edge.pool"],
    ["a non-string network", { network: 5 }, "hosts.edge.network"],
    ["a driverUri that is not a URI", { driverUri: "system" }, "hosts.edge.driverUri"],
    ["a driverUri with a transport", { driverUri: "qemu+ssh://h/system" }, "hosts.edge.driverUri"],
    ["a driverUri naming a host", { driverUri: "qemu://h/system" }, "hosts.edge.driverUri"],
    ["a driverUri of another hypervisor", { driverUri: "xen:///system" }, "hosts.edge.driverUri"],
    ["a driverUri the daemon cannot open", { driverUri: "qemu:///embed" }, "hosts.edge.driverUri"],
    ["a null uri", { uri: null }, "hosts.edge.uri"],
    ["an unknown property", { privatekey: KEY }, "hosts.edge.privatekey"],
    ["a callTimeout of zero", { callTimeout: "0s" }, "hosts.edge.callTimeout"],
    ["a callTimeout over an hour", { callTimeout: "2h" }, "hosts.edge.callTimeout"],
    ["a callTimeout that is no duration", { callTimeout: "soon" }, "hosts.edge.callTimeout"],
  ])("rejects %s", (_, extra, property) => {
    const f = failures({ hosts: { edge: { uri: "unix:///s", ...extra } } });
    expect(f.map((x) => x.property)).toContain(property);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["no key, key file or agent", {}, "hosts.edge.privateKey"],
    [
      "both privateKey and privateKeyPath",
      { privateKey: KEY, privateKeyPath: "/k" },
      "hosts.edge.privateKeyPath",
    ],
    ["a path given as privateKey", { privateKey: "~/.ssh/id_ed25519" }, "hosts.edge.privateKey"],
    [
      "both knownHosts and knownHostsPath",
      { agentSocket: "/a", knownHosts: "h ssh-ed25519 AAAA", knownHostsPath: "/kh" },
      "hosts.edge.knownHostsPath",
    ],
    [
      "a path given as knownHosts",
      { agentSocket: "/a", knownHosts: "/root/.ssh/known_hosts" },
      "hosts.edge.knownHosts",
    ],
    ["a passphrase without a key", { agentSocket: "/a", passphrase: "x" }, "hosts.edge.passphrase"],
    ["a key pasted into privateKeyPath", { privateKeyPath: KEY }, "hosts.edge.privateKeyPath"],
    ["a privateKeyPath with a line break", { privateKeyPath: "/k\n/l" }, "hosts.edge.privateKeyPath"],
    ["a key pasted into agentSocket", { agentSocket: KEY }, "hosts.edge.agentSocket"],
    [
      "known_hosts lines given as knownHostsPath",
      { agentSocket: "/a", knownHostsPath: "h ssh-ed25519 AAAAC3Nz" },
      "hosts.edge.knownHostsPath",
    ],
    ["a user name that is no percent-encoding", { uri: "ssh://%ff@h", agentSocket: "/a" }, "hosts.edge.uri"],
  ])("rejects an ssh host with %s", (_, extra, property) => {
    const f = failures({ hosts: { edge: { uri: "ssh://h", ...extra } } });
    expect(f.map((x) => x.property)).toContain(property);
    // A key in the wrong field is refused without quoting it.
    for (const x of f) expect(x.reason).not.toContain("-----BEGIN OPENSSH PRIVATE KEY-----");
  });

  it.each(["qemu:///system", "qemu:///session", "test:///default"])("takes the driverUri %s", (driverUri) => {
    expect(host({ uri: "unix:///s", driverUri }).driverUri).toBe(driverUri);
  });

  it("treats null as an absent field, as the resource inputs do (no 'not both' for a null)", () => {
    const h = host({
      uri: "ssh://h",
      privateKey: KEY,
      privateKeyPath: null,
      knownHostsPath: null,
      network: "n",
      bridge: null,
      callTimeout: null,
    });
    expect(h.ssh).toEqual({ privateKey: KEY, knownHostsPath: DEFAULT_KNOWN_HOSTS_PATH });
    expect(h.nic).toEqual({ kind: "network", network: "n" });
    expect(h.callTimeoutMs).toBeUndefined();
    expect(
      failures({ hosts: { edge: { uri: "ssh://h", privateKey: null } } }).map((x) => x.property),
    ).toContain("hosts.edge.privateKey");
  });

  it("rejects SSH material on a unix host", () => {
    const f = failures({
      hosts: { edge: { uri: "unix:///s", privateKeyPath: "/k", knownHostsPath: "/kh" } },
    });
    expect(f.map((x) => x.property).sort()).toEqual([
      "hosts.edge.knownHostsPath",
      "hosts.edge.privateKeyPath",
    ]);
  });

  it("keeps known_hosts content and key content as given", () => {
    const h = host({ uri: "ssh://h", privateKey: KEY, passphrase: "pw", knownHosts: KNOWN });
    expect(h.ssh).toEqual({ privateKey: KEY, passphrase: "pw", knownHosts: KNOWN });
  });

  // History: a missing kvm-ssh Secret aborted the whole provider set at
  // startup because keys were read eagerly. Config validation never touches
  // the files, so a key created later heals on the next connection.
  it("does not read key or known_hosts files while validating", () => {
    const h = host({ uri: "ssh://h", privateKeyPath: "/nonexistent/id", knownHostsPath: "/nonexistent/kh" });
    expect(h.ssh).toEqual({ privateKeyPath: "/nonexistent/id", knownHostsPath: "/nonexistent/kh" });
  });
});

describe("image configuration", () => {
  it("defaults to qcow2 and UEFI (Debian 13 hangs after GRUB under SeaBIOS)", () => {
    const image = parseConfig({ images: { debian: { url: "https://example.com/d.qcow2" } } }).images.debian;
    expect(image).toEqual({
      key: "debian",
      url: "https://example.com/d.qcow2",
      format: "qcow2",
      firmware: "uefi",
    });
  });

  it("takes format raw, firmware bios and a pinned checksum (lower-cased)", () => {
    const image = parseConfig({
      images: {
        old: { url: "http://example.com/o.img", format: "raw", firmware: "bios", sha256: SHA.toUpperCase() },
      },
    }).images.old;
    expect(image).toMatchObject({ format: "raw", firmware: "bios", sha256: SHA });
  });

  it.each([
    [
      "https://example.com/a b.qcow2",
      "https://example.com/a%20b.qcow2",
      { kind: "http", url: "https://example.com/a%20b.qcow2" },
    ],
    ["HTTPS://Example.COM/x", "https://example.com/x", { kind: "http", url: "https://example.com/x" }],
    ["/srv/images/d.qcow2", "file:///srv/images/d.qcow2", { kind: "file", path: "/srv/images/d.qcow2" }],
    [
      "file:///srv/images/d.qcow2",
      "file:///srv/images/d.qcow2",
      { kind: "file", path: "/srv/images/d.qcow2" },
    ],
    ["file://localhost/srv/d.qcow2", "file:///srv/d.qcow2", { kind: "file", path: "/srv/d.qcow2" }],
    ["file:/srv/d.qcow2", "file:///srv/d.qcow2", { kind: "file", path: "/srv/d.qcow2" }],
  ])("canonicalises %s", (url, canonical, source) => {
    const image = parseConfig({ images: { i: { url } } }).images.i;
    expect(image?.url).toBe(canonical);
    expect(imageSourceOf(image?.url as string)).toEqual(source);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["a missing url", {}, "images.debian.url"],
    ["an ftp url", { url: "ftp://example.com/x" }, "images.debian.url"],
    ["a relative path", { url: "images/x.qcow2" }, "images.debian.url"],
    ["credentials in the url", { url: "https://u:p@example.com/x" }, "images.debian.url (secret)"],
    ["a token as the url's user", { url: "https:token@example.com/x" }, "images.debian.url (secret)"],
    ["credentials in a url that does not parse", { url: "file://u:p@nas/x" }, "images.debian.url (secret)"],
    ["credentials after an unknown scheme", { url: "user:token@host/x" }, "images.debian.url (secret)"],
    ["a file URL on another host", { url: "file://nas/x" }, "images.debian.url"],
    ["a relative file: URL", { url: "file:relative/x.qcow2" }, "images.debian.url"],
    ["a file: URL with an encoded slash", { url: "file:///srv/a%2Fb.qcow2" }, "images.debian.url"],
    ["a file: URL with a query", { url: "file:///srv/x.qcow2?v=1" }, "images.debian.url"],
    ["a directory", { url: "/srv/images/" }, "images.debian.url"],
    ["a null url", { url: null }, "images.debian.url"],
    ["format vmdk", { url: "/x", format: "vmdk" }, "images.debian.format"],
    ["firmware efi (the value is uefi)", { url: "/x", firmware: "efi" }, "images.debian.firmware"],
    ["a short sha256", { url: "/x", sha256: "abc" }, "images.debian.sha256"],
    ["a non-hex sha256", { url: "/x", sha256: "g".repeat(64) }, "images.debian.sha256"],
    ["an unknown property", { url: "/x", checksum: SHA }, "images.debian.checksum"],
    ["bake as a string", { url: "/x", bake: "yes" }, "images.debian.bake"],
    ["bake packages as a string", { url: "/x", bake: { packages: "htop" } }, "images.debian.bake.packages"],
    [
      "65 bake packages",
      { url: "/x", bake: { packages: Array.from({ length: 65 }, (_, i) => `p${i}`) } },
      "images.debian.bake.packages",
    ],
    [
      "a bake userData that is not text",
      { url: "/x", bake: { userData: { a: 1 } } },
      "images.debian.bake.userData",
    ],
    ["an unknown bake property", { url: "/x", bake: { script: "x" } }, "images.debian.bake.script"],
  ])("rejects %s", (_, input, property) => {
    expect(failures({ images: { debian: input } }).map((x) => x.property)).toContain(property);
  });

  it.each<[string, unknown, unknown]>([
    ["true", true, { packages: [] }],
    ["false", false, undefined],
    ["packages, sorted and unique", { packages: ["jq", "htop", "jq"] }, { packages: ["htop", "jq"] }],
    // Its keyed digest is the stack config's to add (stack-config.test.ts).
    ["a user-data, never in the recipe", { userData: "#cloud-config\n" }, { packages: [] }],
  ])("reads bake %s as the recipe %j", (_, bake, recipe) => {
    const image = parseConfig({ images: { d: { url: "/x", bake } } }).images.d;
    expect(image?.bake).toEqual(recipe);
  });

  it("keeps a bake's user-data beside the recipe, never in it, and never quotes it in a failure", () => {
    const userData = "#cloud-config\napt:\n  http_proxy: http://u:s3cr3t@mirror:3142\n";
    const image = parseConfig({ images: { d: { url: "/x", bake: { userData } } } }).images.d;
    expect(image?.bakeUserData).toBe(userData);
    expect(JSON.stringify(image?.bake)).not.toContain("s3cr3t");
    const bad = failures({ images: { d: { url: "/x", bake: { userData, packages: ["a b"] } } } });
    expect(JSON.stringify(bad)).not.toContain("s3cr3t");
  });

  it("reads bake only in a kvm:images entry: an inline image (a resource input, kept in the state) is refused", () => {
    const f = new Failures();
    expect(parseImage(undefined, { url: "/x", bake: true }, f.at("image"))).toBeUndefined();
    expect(f.list.map((x) => x.property)).toEqual(["image.bake"]);
  });
});

describe("bake package names: Debian policy's, never an apt action, option or pattern", () => {
  const NOT_OURS = "may hold only lower-case letters, digits, '+', '-' and '.' (Debian policy): ";

  it.each<[string, unknown, string]>([
    [
      "a trailing '-' (apt-get removes the package)",
      "openssh-server-",
      `must not end in '-': apt-get reads a trailing '-' as "remove this package"`,
    ],
    ["an option", "-o", "must not start with '-': apt-get, dnf, yum and zypper read it as an option"],
    [
      "a long option",
      "--purge",
      "must not start with '-': apt-get, dnf, yum and zypper read it as an option",
    ],
    ["a glob", "exim4.*", `${NOT_OURS}apt-get reads '*' as a glob`],
    ["a glob with '?'", "exim?", `${NOT_OURS}apt-get reads '?' as a glob`],
    ["a bracket glob", "exim[4]", `${NOT_OURS}apt-get reads '[' as a glob`],
    ["a version", "squid=5.7", `${NOT_OURS}apt-get reads '=' as a version`],
    ["an architecture", "curl:i386", `${NOT_OURS}apt-get reads ':' as an architecture`],
    ["a release", "curl/bookworm-backports", `${NOT_OURS}apt-get reads '/' as a release`],
    ["a task", "mail-server^", `${NOT_OURS}"^" is none of them`],
    [
      "an apt pattern",
      "?exact-name(exim4)",
      "must start with a lower-case letter or a digit (Debian policy)",
    ],
    ["a short apt pattern", "~nexim4", "must start with a lower-case letter or a digit (Debian policy)"],
    ["a local package file", "./exim4.deb", "must start with a lower-case letter or a digit (Debian policy)"],
    ["capitals at the start", "Htop", "must start with a lower-case letter or a digit (Debian policy)"],
    ["a capital inside", "hTop", `${NOT_OURS}package names are lower case`],
    ["an underscore (RPM only)", "mod_ssl", `${NOT_OURS}"_" is none of them`],
    ["a space", "htop jq", `${NOT_OURS}" " is none of them`],
    ["a tab", "htop\tjq", `${NOT_OURS}"\\t" is none of them`],
    ["a line break", "htop\n", `${NOT_OURS}"\\n" is none of them`],
    ["a shell list", "htop;id", `${NOT_OURS}";" is none of them`],
    ["a command substitution", "htop$(id)", `${NOT_OURS}"$" is none of them`],
    ["backquotes", "`id`", "must start with a lower-case letter or a digit (Debian policy)"],
    ["a redirection", "htop>x", `${NOT_OURS}">" is none of them`],
    ["a quote", "htop'", `${NOT_OURS}"'" is none of them`],
    ["an empty name", "", "must be at least two characters long (Debian policy)"],
    ["one character", "x", "must be at least two characters long (Debian policy)"],
    ["129 characters", "x".repeat(MAX_PACKAGE_NAME + 1), "must be at most 128 characters long"],
    ["a number", 7, "must be a package name (a string)"],
    ["null", null, "must be a package name (a string)"],
  ])("refuses %s at check, naming the field and why", (_, name, reason) => {
    expect(packageNameProblem(name)).toBe(reason);
    expect(failures({ images: { d: { url: "/x", bake: { packages: ["htop", name] } } } })).toEqual([
      { property: "images.d.bake.packages[1]", reason },
    ]);
  });

  // What apt makes of a policy name no package has (a regular expression, an
  // action on another name) only the apt sources in the image can tell: the
  // builder's script refuses those (test/libvirtd/guest/apt-installs.test.ts).
  it.each<[string, string]>([
    ["a plain name", "htop"],
    ["a trailing '+' that is the package's own", "g++"],
    ["'.' and '+' inside", "libdb5.3++"],
    ["a digit first", "0ad"],
    ["two characters", "jq"],
    ["128 characters", "x".repeat(MAX_PACKAGE_NAME)],
    ["a regular expression over another package's name, left to the script", "exim4-daemon-l.ght"],
    ["another package's name with a trailing '+', left to the script", "curl+"],
  ])("takes %s", (_, name) => {
    expect(packageNameProblem(name)).toBeUndefined();
    expect(parseConfig({ images: { d: { url: "/x", bake: { packages: [name] } } } }).images.d?.bake).toEqual({
      packages: [name],
    });
  });
});

describe("configuration as a whole", () => {
  it("accepts an empty configuration", () => {
    expect(parseConfig(undefined)).toEqual({ hosts: {}, images: {} });
  });

  it("collects every failure instead of stopping at the first", () => {
    const f = failures({
      hosts: { a: { uri: "tcp://x" }, b: { uri: "unix:///s", domainType: "xen" } },
      images: { c: { url: "ftp://x", sha256: "no" } },
    });
    expect(f.map((x) => x.property).sort()).toEqual([
      "hosts.a.uri",
      "hosts.b.domainType",
      "images.c.sha256",
      "images.c.url",
    ]);
  });

  it("throws a permanent ValidationError carrying the failures", () => {
    try {
      parseConfig({ hosts: { a: {} } });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).kind).toBe("permanent");
      expect((err as ValidationError).failures).toEqual([{ property: "hosts.a.uri", reason: "is required" }]);
      expect((err as ValidationError).message).toContain("hosts.a.uri: is required");
    }
  });

  it.each([
    [[], ""],
    ["x", ""],
    [{ hosts: [] }, "hosts"],
    [{ hosts: { a: "unix:///s" } }, "hosts.a"],
    [{ hostz: {} }, "hostz"],
  ])("rejects the shape %j at %j", (input, property) => {
    expect(failures(input).map((x) => x.property)).toContain(property);
  });

  it.each(["Edge", "edge.1", "-edge", "edge-", "ed ge", "é", "a".repeat(64), "x/y", ""])(
    "rejects the host key %j (host keys go into provider IDs)",
    (key) => {
      expect(configKeyProblem(key)).toBeDefined();
      // The empty key too is an entry of its own: `hosts.` (its failure never lands on the whole map).
      const property = `hosts.${key}`;
      expect(failures({ hosts: { [key]: { uri: "unix:///s" } } })[0]?.property).toBe(property);
    },
  );

  it.each(["edge", "e", "edge-1", "lab_2", "0", "a".repeat(63)])("accepts the key %j", (key) => {
    expect(configKeyProblem(key)).toBeUndefined();
  });
});

describe("resolveImage", () => {
  const images = parseConfig({
    images: { debian: { url: "https://example.com/d.qcow2", sha256: SHA, firmware: "bios" } },
  }).images;

  it("returns the configured image for a key", () => {
    expect(resolveImage("debian", images)).toMatchObject({ key: "debian", sha256: SHA, firmware: "bios" });
  });

  it.each([
    ["https://example.com/x.qcow2", "https://example.com/x.qcow2"],
    ["http://example.com/x.qcow2", "http://example.com/x.qcow2"],
    ["file:///srv/x.qcow2", "file:///srv/x.qcow2"],
    ["/srv/x.qcow2", "file:///srv/x.qcow2"],
  ])("takes the direct location %s with the image defaults (UEFI too)", (ref, url) => {
    expect(resolveImage(ref, images)).toEqual(
      expect.objectContaining({ url, format: "qcow2", firmware: "uefi" }),
    );
    expect(resolveImage(ref, images).key).toBeUndefined();
  });

  it.each([
    ["an unknown key", "ubuntu", "unknown image key"],
    ["an unsupported scheme", "ftp://example.com/x", "not supported"],
    ["an empty reference", "", "image key or an image URL"],
    ["an inherited property name", "constructor", "unknown image key"],
  ])("rejects %s at the image property", (_, ref, reason) => {
    try {
      resolveImage(ref, images);
      expect.unreachable();
    } catch (err) {
      expect((err as ValidationError).failures).toEqual([
        { property: "image", reason: expect.stringContaining(reason) },
      ]);
    }
  });

  it("reports under a caller-chosen property", () => {
    expect(() => resolveImage("nope", images, "spec.image")).toThrow(/spec\.image/);
  });
});

describe("parseHostUri (the one parser of host URIs)", () => {
  it.each([
    ["ssh://root@169.254.213.2:2222", { host: "169.254.213.2", port: 2222, user: "root" }],
    ["ssh://kvm1.example.com", { host: "kvm1.example.com", port: 22, user: "root" }],
    ["ssh://virt%5Fadmin@[2001:db8::1]:2200", { host: "2001:db8::1", port: 2200, user: "virt_admin" }],
  ])("%s reaches user, host and port with the defaults filled in", (uri, target) => {
    const f = new Failures();
    expect(parseHostUri(uri, f)).toMatchObject({ kind: "ssh", ...target });
    expect(f.list).toEqual([]);
  });

  it.each(["qemu+ssh://h/system", "ssh://", "not a uri", "ssh://u:secret@h"])(
    "%s is refused at uri",
    (uri) => {
      const f = new Failures();
      expect(parseHostUri(uri, f)).toBeUndefined();
      expect(f.list.map((x) => x.property)).toEqual(["uri"]);
      expect(f.list[0]?.reason).not.toContain("secret");
    },
  );
});
