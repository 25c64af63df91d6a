/**
 * The hostile and wrong inputs of issue 7 (item 5), shared by the unit test of
 * `check` and the Pulumi test that feeds them through a real preview: each
 * row is a change merged over {@link GOOD_INPUTS}, the property the failure
 * must name, and part of its reason.
 */

export const KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";

/** The stack config the rows are checked against (`kvm:*` keys as a user would write them). */
export const BAD_INPUT_CONFIG: Record<string, unknown> = {
  "kvm:hosts": {
    lab: { uri: "unix:///run/libvirt/libvirt-sock" },
    remote: { uri: "ssh://root@lab.example.com:22", knownHostsPath: "/k" },
    broken: { uri: "ftp://x" },
  },
  "kvm:images": JSON.stringify({
    debian: { url: "https://example.com/debian.qcow2", sha256: "A".repeat(64) },
    bad: { url: "https://example.com/x.qcow2", firmware: "coreboot" },
  }),
  "kvm:sshPrivateKey": KEY,
};

export const GOOD_INPUTS = { host: "lab", image: "debian" };

/** Rows too large to send through a Pulumi program's config (checked by the unit test only). */
export const UNIT_ONLY = new Set(["userData over the seed limit"]);

// Each row: inputs (merged over a good proxy) → the property the failure must name, and part of its reason.
export const BAD: [string, Record<string, unknown>, string, RegExp][] = [
  ["missing host", { host: undefined }, "host", /is required/],
  ["host not a string", { host: 7 }, "host", /must be a string/],
  ["unknown host key", { host: "nowhere" }, "host", /unknown host "nowhere".*configured: lab, remote/],
  ["host whose config is broken", { host: "broken" }, "host", /stack config kvm:hosts\.broken\.uri/],
  ["missing image", { image: undefined }, "image", /is required/],
  ["unknown image key", { image: "ubuntu" }, "image", /unknown image key "ubuntu"/],
  ["image whose config is broken", { image: "bad" }, "image", /kvm:images\.bad\.firmware/],
  ["malformed image URL", { image: "https://" }, "image", /must be an https/],
  [
    "unsupported image scheme",
    { image: "ftp://example.com/x.qcow2" },
    "image",
    /scheme "ftp" is not supported/,
  ],
  ["image with credentials", { image: "https://u:p@example.com/x.qcow2" }, "image", /credentials/],
  ["image not string/object", { image: 5 }, "image", /must be an image key/],
  ["inline image without url", { image: { format: "raw" } }, "image.url", /is required/],
  [
    "inline image bad sha256",
    { image: { url: "/x.qcow2", sha256: "xyz" } },
    "image.sha256",
    /64 hexadecimal/,
  ],
  [
    "inline image bad firmware",
    { image: { url: "/x.qcow2", firmware: "efi" } },
    "image.firmware",
    /"uefi", "bios"/,
  ],
  [
    "inline image bad format",
    { image: { url: "/x.qcow2", format: "vmdk" } },
    "image.format",
    /"qcow2", "raw"/,
  ],
  ["inline image unknown field", { image: { url: "/x.qcow2", size: 3 } }, "image.size", /unknown property/],
  ["userData not a string", { userData: { a: 1 } }, "userData (secret)", /must be a string/],
  [
    "userData over the seed limit",
    { userData: "x".repeat(16 * 1024 * 1024 + 1) },
    "userData (secret)",
    /over the seed limit/,
  ],
  ["vendorData not a string", { vendorData: 3 }, "vendorData (secret)", /must be a string/],
  [
    "MIME vendorData beside the guest agent",
    { vendorData: "MIME-Version: 1.0\nContent-Type: multipart/mixed\n" },
    "vendorData (secret)",
    /MIME multipart/,
  ],
  [
    "userDataBase64 not base64",
    { userDataBase64: "not base64!" },
    "userDataBase64 (secret)",
    /must be base64/,
  ],
  [
    "userData and userDataBase64 together",
    { userData: "#cloud-config\n", userDataBase64: "I2Nsb3VkLWNvbmZpZwo=" },
    "userDataBase64 (secret)",
    /not both/,
  ],
  [
    "vendorDataBase64 with the gzip magic that does not decompress",
    { vendorDataBase64: Buffer.from([0x1f, 0x8b, 1, 2, 3]).toString("base64") },
    "vendorDataBase64 (secret)",
    /does not decompress/,
  ],
  ["installGuestAgent not boolean", { installGuestAgent: "yes" }, "installGuestAgent", /true or false/],
  ["negative memory", { memoryMiB: -1 }, "memoryMiB", /from 128 to/],
  ["absurd memory", { memoryMiB: 1e9 }, "memoryMiB", /from 128 to/],
  ["fractional memory", { memoryMiB: 512.5 }, "memoryMiB", /integer/],
  ["zero vcpus", { vcpus: 0 }, "vcpus", /from 1 to 256/],
  ["too many vcpus", { vcpus: 1000 }, "vcpus", /from 1 to 256/],
  ["zero disk", { diskGiB: 0 }, "diskGiB", /from 1 to 65536/],
  ["absurd disk", { diskGiB: 1e7 }, "diskGiB", /from 1 to 65536/],
  ["disk as text", { diskGiB: "10" }, "diskGiB", /integer/],
  ["network and bridge", { network: "default", bridge: "br0" }, "bridge", /not both/],
  ["bad network name", { network: "../etc" }, "network", /libvirt network name/],
  ["bad bridge name", { bridge: "a-very-long-bridge-name" }, "bridge", /interface name/],
  ["bad MAC", { macAddress: "52:54:00:zz:00:01" }, "macAddress", /six colon-separated/],
  ["multicast MAC", { macAddress: "01:00:5e:00:00:01" }, "macAddress", /unicast/],
  ["all-zero MAC", { macAddress: "00:00:00:00:00:00" }, "macAddress", /all zero/],
  ["name with spaces", { name: "my proxy" }, "name", /may contain only/],
  ["name with XML", { name: "a<b>" }, "name", /may contain only/],
  ["name with a quote and ampersand", { name: "a'&b" }, "name", /may contain only/],
  ["name too long", { name: "a".repeat(64) }, "name", /at most 63/],
  ["name starting with a dash", { name: "-x" }, "name", /start with a letter or digit/],
  ["name that is no hostname", { name: "my_proxy" }, "name", /hostname/],
  ["port zero", { proxyPort: 0 }, "proxyPort", /from 1 to 65535/],
  ["port too high", { proxyPort: 70000 }, "proxyPort", /from 1 to 65535/],
  ["proxy port of sshd", { proxyPort: 22 }, "proxyPort", /22 is taken by sshd/],
  ["proxy.port of the DNS stub", { proxy: { port: 53 } }, "proxy.port", /53 is taken by the DNS stub/],
  ["proxy.port and proxyPort together", { proxyPort: 8080, proxy: { port: 8081 } }, "proxy.port", /not both/],
  ["proxy not an object", { proxy: "squid" }, "proxy", /must be \{port, auth/],
  ["proxy unknown field", { proxy: { cache: true } }, "proxy.cache", /unknown property/],
  [
    "proxy auth without password",
    { proxy: { auth: { username: "u" } } },
    "proxy.auth.password (secret)",
    /is required/,
  ],
  [
    "proxy auth without username",
    { proxy: { auth: { password: "pw" } } },
    "proxy.auth.username",
    /is required/,
  ],
  [
    "proxy username with a colon",
    { proxy: { auth: { username: "a:b", password: "pw" } } },
    "proxy.auth.username",
    /letters, digits/,
  ],
  [
    "proxy password with a line break",
    { proxy: { auth: { username: "u", password: "a\nb" } } },
    "proxy.auth.password (secret)",
    /line breaks/,
  ],
  ["allowedClients empty", { proxy: { allowedClients: [] } }, "proxy.allowedClients", /non-empty list/],
  [
    "allowedClients not a CIDR",
    { proxy: { allowedClients: ["10.0.0.0/8", "ten/8"] } },
    "proxy.allowedClients[1]",
    /not a CIDR/,
  ],
  [
    "allowedClients prefix too long",
    { proxy: { allowedClients: ["10.0.0.0/33"] } },
    "proxy.allowedClients[0]",
    /prefix length/,
  ],
  [
    "outgoingAddress not an address",
    { proxy: { outgoingAddress: "eth0" } },
    "proxy.outgoingAddress",
    /IPv4 or IPv6/,
  ],
  ["health check not an object", { healthCheck: "yes" }, "healthCheck", /false or/],
  ["health check bad URL", { healthCheck: { url: "not a url" } }, "healthCheck.url", /http/],
  ["health check ftp URL", { healthCheck: { url: "ftp://x/" } }, "healthCheck.url", /scheme "ftp"/],
  [
    "health check bad status",
    { healthCheck: { url: "http://x/", expectStatus: 99 } },
    "healthCheck.expectStatus",
    /200 to 599/,
  ],
  [
    "health check status an HTTP client never gets (1xx)",
    { healthCheck: { url: "http://x/", expectStatus: 101 } },
    "healthCheck.expectStatus",
    /200 to 599/,
  ],
  [
    "health check unknown field",
    { healthCheck: { url: "http://x/", method: "POST" } },
    "healthCheck.method",
    /unknown/,
  ],
  [
    "health check without IP wait",
    { waitForIp: false, healthCheck: {} },
    "healthCheck",
    /waitForIp is false/,
  ],
  ["waitForIp not boolean", { waitForIp: 1 }, "waitForIp", /true or false/],
  ["bad duration", { timeouts: { create: "10 minutes" } }, "timeouts.create", /duration/],
  ["zero duration", { timeouts: { delete: 0 } }, "timeouts.delete", /more than 0/],
  ["duration over a day", { timeouts: { create: "25h" } }, "timeouts.create", /at most 86400/],
  ["unknown timeout", { timeouts: { read: "1m" } }, "timeouts.read", /unknown/],
  ["tags not an object", { tags: ["a"] }, "tags", /object/],
  ["tag value not a string", { tags: { team: 3 } }, "tags.team", /must be a string/],
  ["tag key with XML", { tags: { "<x>": "y" } }, "tags.<x>", /key must be/],
  ["tag key with a quote", { tags: { 'a"b': "y" } }, 'tags.a"b', /key must be/],
  ["tag value with a control character", { tags: { team: "a\u0001b" } }, "tags.team", /XML cannot carry/],
  ["tag value too long", { tags: { team: "x".repeat(257) } }, "tags.team", /at most 256/],
  [
    "too many tags",
    { tags: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"])) },
    "tags",
    /at most 64/,
  ],
  ["unknown property", { memory: 512 }, "memory", /unknown property/],
];
