/**
 * The hostile and wrong inputs, shared by the unit test of
 * `check` and the Pulumi test that feeds them through a real preview: each
 * row is a change merged over {@link GOOD_INPUTS}, the property the failure
 * must name, and part of its reason.
 */

export const KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
/** What a leak of the rows' key material would show: no output of a preview may hold it. */
export const KEY_MARKER = "kvmpHostileKeyMarkerQz7";
const MARKED_KEY = `-----BEGIN OPENSSH PRIVATE KEY-----\n${KEY_MARKER}\n-----END OPENSSH PRIVATE KEY-----\n`;

/** The stack config the rows are checked against (`kvm:*` keys as a user would write them). */
export const BAD_INPUT_CONFIG: Record<string, unknown> = {
  "kvm:hosts": {
    lab: { uri: "unix:///run/libvirt/libvirt-sock" },
    remote: { uri: "ssh://root@lab.example.com:22", knownHostsPath: "/k" },
    broken: { uri: "ftp://x" },
    // Refused at configure, failing only the resources that use them.
    pastedkey: { uri: "ssh://root@lab.example.com:22", knownHostsPath: "/k", privateKeyPath: KEY },
    wrongdriver: { uri: "unix:///run/libvirt/libvirt-sock", driverUri: "qemu+ssh://lab.example.com/system" },
    keyless: { uri: "ssh://root@lab.example.com:22", knownHosts: "lab.example.com ssh-ed25519\n" },
    // What OpenSSH and ssh2 would read otherwise than preview showed.
    commahop: {
      uri: "ssh://root@10.0.5.21:22",
      knownHostsPath: "/k",
      jump: { uri: "ssh://ops@bastion,evil:22" },
    },
    pubkey: {
      uri: "ssh://root@lab.example.com:22",
      knownHostsPath: "/k",
      privateKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0kvmp user@host",
    },
    // An Include reads a pattern: OpenSSH would read other files than the one named.
    globconfig: {
      uri: "ssh://root@lab.example.com:22",
      knownHostsPath: "/k",
      transport: "openssh",
      sshConfig: "/etc/ssh/conf.d/*",
    },
  },
  "kvm:images": JSON.stringify({
    debian: { url: "https://example.com/debian.qcow2", sha256: "A".repeat(64) },
    bad: { url: "https://example.com/x.qcow2", firmware: "coreboot" },
    slash: { url: "file:///srv/images/a%2Fb.qcow2" },
    token: { url: "https://user:tok3n-in-config@example.com/x.qcow2" },
  }),
  "kvm:sshPrivateKey": KEY,
};

export const GOOD_INPUTS = { host: "lab", image: "debian" };

/** Rows too large to send through a Pulumi program's config (checked by the unit test only). */
export const UNIT_ONLY = new Set(["userData over the seed limit"]);

// Each row: inputs (merged over a good proxy) → the property the failure must name, and part of its reason.
export const BAD: [string, Record<string, unknown>, string, RegExp][] = [
  ["missing host", { host: undefined }, "host", /is required/],
  ["host not a string", { host: 7 }, "host (secret)", /must be a key of the stack config kvm:hosts/],
  ["unknown host key", { host: "nowhere" }, "host", /unknown host "nowhere".*configured: lab, remote/],
  ["host whose config is broken", { host: "broken" }, "host", /stack config kvm:hosts\.broken\.uri/],
  [
    "host whose privateKeyPath holds a pasted key",
    { host: "pastedkey" },
    "host",
    /kvm:hosts\.pastedkey\.privateKeyPath: holds key material, not a path/,
  ],
  [
    "host whose driverUri carries a transport",
    { host: "wrongdriver" },
    "host",
    /kvm:hosts\.wrongdriver\.driverUri: must be one of qemu:\/\/\/system/,
  ],
  [
    "host whose known_hosts line has no key",
    { host: "keyless" },
    "host",
    /kvm:hosts\.keyless\.knownHosts: line 1: expected/,
  ],
  [
    "host whose jump host has a comma (two -J hops to OpenSSH)",
    { host: "commahop" },
    "host",
    /kvm:hosts\.commahop\.jump\.uri: host "bastion,evil" is not a host name/,
  ],
  [
    "host whose privateKey is a public key",
    { host: "pubkey" },
    "host",
    /kvm:hosts\.pubkey\.privateKey: is a public key/,
  ],
  [
    "host whose ssh_config for OpenSSH is a pattern",
    { host: "globconfig" },
    "host",
    /kvm:hosts\.globconfig\.sshConfig: contains '\*', '\?' or '\[', which OpenSSH's Include reads as a pattern/,
  ],
  [
    "healthCheck.via not local or host",
    { healthCheck: { via: "sideways" } },
    "healthCheck.via",
    /"local".*"host"/,
  ],
  [
    "healthCheck.replaceAfter zero",
    { healthCheck: { replaceAfter: 0 } },
    "healthCheck.replaceAfter",
    /at least 30s/,
  ],
  // A host given in full, by the rules of a kvm:hosts entry.
  ["host in full without a key", { host: { uri: "unix:///run/x" } }, "host.key", /is required/],
  [
    "host in full with a bad key",
    { host: { key: "Edge 1", uri: "unix:///run/x" } },
    "host.key",
    /lower-case/,
  ],
  ["host in full without a uri", { host: { key: "edge" } }, "host.uri", /is required/],
  [
    "host in full whose privateKeyPath holds a pasted key",
    {
      host: { key: "edge", uri: "ssh://root@lab.example.com:22", knownHostsPath: "/k", privateKeyPath: KEY },
    },
    "host.privateKeyPath",
    /holds key material, not a path/,
  ],
  [
    "host in full with an unknown field",
    { host: { key: "edge", uri: "unix:///run/x", colour: "red" } },
    "host.colour",
    /unknown/,
  ],
  // Key material in every shape a user may give it: never printed beside a failure.
  [
    "host in full with a misspelt uri, its key beside it",
    {
      host: {
        key: "edge",
        url: "ssh://root@lab.example.com:22",
        knownHostsPath: "/k",
        privateKey: MARKED_KEY,
      },
    },
    "host.url",
    /unknown property/,
  ],
  [
    "host object naming neither key, uri nor pool, a key inside",
    { host: { url: "ssh://root@lab.example.com:22", privateKey: MARKED_KEY } },
    "host (secret)",
    /names neither key, uri nor pool/,
  ],
  [
    "host in full whose one jump hop has a misspelt key field",
    {
      host: {
        key: "edge",
        uri: "ssh://root@lab.example.com:22",
        knownHostsPath: "/k",
        privateKeyPath: "/id",
        jump: { uri: "ssh://ops@bastion.example.com", privatekey: MARKED_KEY },
      },
    },
    "host.jump.privatekey",
    /unknown property/,
  ],
  [
    "an unknown top-level property holding a key",
    { sshPrivateKey: MARKED_KEY },
    "sshPrivateKey (secret)",
    /unknown property/,
  ],
  [
    "host pool whose host in full has no uri",
    { host: { pool: ["lab", { key: "edge" }] } },
    "host.pool[1].uri",
    /is required/,
  ],
  [
    "host pool naming one host as a key and in full",
    { host: { pool: ["lab", { key: "lab", uri: "unix:///run/libvirt/libvirt-sock" }] } },
    "host.pool[1]",
    /listed twice/,
  ],
  [
    "host in full over OpenSSH whose socket= has a ':' (ssh -L splits there)",
    {
      host: {
        key: "edge",
        uri: "ssh://root@lab.example.com:22?socket=/run/libvirt:sock",
        knownHostsPath: "/k",
        transport: "openssh",
      },
    },
    "host.uri",
    /socket= contains ':', where ssh -L splits its forward/,
  ],
  [
    "host in full over OpenSSH whose known_hosts names another user's home",
    {
      host: {
        key: "edge",
        uri: "ssh://root@lab.example.com:22",
        knownHostsPath: "~ops/k",
        transport: "openssh",
      },
    },
    "host.knownHostsPath",
    /"~name", which OpenSSH reads as that user's home/,
  ],
  [
    "host in full whose socket= is longer than a unix socket path",
    {
      host: {
        key: "edge",
        uri: `ssh://root@lab.example.com:22?socket=/${"s".repeat(107)}`,
        knownHostsPath: "/k",
      },
    },
    "host.uri",
    /socket= must be at most 107 bytes/,
  ],
  [
    "host in full under a key kvm:hosts sets up otherwise",
    { host: { key: "lab", uri: "unix:///run/other-sock" } },
    "host.key",
    /also a key of the stack config kvm:hosts/,
  ],
  // Networking.
  [
    "a NIC with two attachments",
    { nics: [{ network: "default", bridge: "br0" }] },
    "nics[0].bridge",
    /exactly one of network, bridge or direct/,
  ],
  [
    "a gateway outside its NIC's subnets",
    { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "198.51.100.1" }] },
    "nics[0].gateway4",
    /outside this NIC's IPv4 subnets/,
  ],
  [
    "a multicast NIC MAC",
    { nics: [{ bridge: "br0", macAddress: "01:00:5e:00:00:01" }] },
    "nics[0].macAddress",
    /unicast/,
  ],
  [
    "two NICs marked primary",
    {
      nics: [
        { bridge: "br0", primary: true },
        { network: "default", primary: true },
      ],
    },
    "nics[1].primary",
    /only one NIC can be primary/,
  ],
  [
    "a macvtap mode libvirt lacks",
    { nics: [{ direct: { dev: "eth0", mode: "nat" } }] },
    "nics[0].direct.mode",
    /must be one of "bridge"/,
  ],
  [
    "typed addresses beside a raw networkConfig",
    { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }], networkConfig: "version: 2\n" },
    "nics[0].addresses",
    /either networkConfig or typed addresses/,
  ],
  [
    "nics beside the one-NIC shorthand",
    { nics: [{ network: "default" }], macAddress: "52:54:00:00:00:01" },
    "macAddress",
    /one-NIC shorthand/,
  ],
  [
    "a bad CIDR",
    { nics: [{ bridge: "br0", addresses: ["203.0.113.7/33"] }] },
    "nics[0].addresses[0]",
    /prefix length must be a number from 0 to 32/,
  ],
  [
    "a zero rate limit",
    { nics: [{ bridge: "br0", bandwidth: { inboundKbps: 0 } }] },
    "nics[0].bandwidth.inboundKbps",
    /from 1 to 100000000/,
  ],
  [
    "an nwfilter on a macvtap NIC",
    { nics: [{ direct: { dev: "eth0" }, filter: "clean-traffic" }] },
    "nics[0].filter",
    /network and bridge NICs only/,
  ],
  // Pools and rotation.
  ["empty host pool", { host: { pool: [] } }, "host.pool", /non-empty list/],
  [
    "host pool with an unknown key",
    { host: { pool: ["lab", "nowhere"] } },
    "host.pool[1]",
    /unknown host "nowhere"/,
  ],
  ["host pool listing a key twice", { host: { pool: ["lab", "lab"] } }, "host.pool[1]", /listed twice/],
  [
    "host object without a pool",
    { host: { hosts: ["lab"] } },
    "host.hosts",
    /unknown property \(known: pool\)/,
  ],
  [
    "rotation maxAge not a duration",
    { rotation: { maxAge: "soon" } },
    "rotation.maxAge",
    /duration of at least 60s/,
  ],
  ["rotation maxAge under a minute", { rotation: { maxAge: "30s" } }, "rotation.maxAge", /at least 60s/],
  ["rotation batch of zero", { rotation: { maxAge: "7d", batch: 0 } }, "rotation.batch", /positive integer/],
  [
    "rotation with an unknown field",
    { rotation: { maxAge: "7d", every: "1d" } },
    "rotation.every",
    /unknown property/,
  ],
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
  ["image with credentials", { image: "https://u:p@example.com/x.qcow2" }, "image (secret)", /credentials/],
  [
    "inline image with credentials",
    { image: { url: "https://u:tok3n-inline@example.com/x.qcow2" } },
    "image.url (secret)",
    /credentials/,
  ],
  [
    "image with a token after an unknown scheme",
    { image: "user:tok3n-scheme@example.com/x.qcow2" },
    "image (secret)",
    /scheme "user" is not supported/,
  ],
  [
    "image file: URL with an encoded slash",
    { image: "file:///srv/images/a%2Fb.qcow2" },
    "image",
    /must not encode '\/'/,
  ],
  ["relative file: URL", { image: "file:relative/x.qcow2" }, "image", /absolute path/],
  [
    "image key whose config file: URL has an encoded slash",
    { image: "slash" },
    "image",
    /kvm:images\.slash\.url: file: URLs must not encode/,
  ],
  [
    "image key whose config URL carries credentials",
    { image: "token" },
    "image",
    /kvm:images\.token\.url \(secret\): must not carry credentials/,
  ],
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
    // Preview builds the seed create builds, the proxy's setup script included.
    "MIME vendorData without the guest agent (beside the proxy's script)",
    { installGuestAgent: false, vendorData: "MIME-Version: 1.0\nContent-Type: multipart/mixed\n" },
    "vendorData (secret)",
    /multipart/,
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
  ["keepOnFailure not boolean", { keepOnFailure: "yes" }, "keepOnFailure", /true or false/],
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
  ["proxy.port of sshd", { proxy: { port: 22 } }, "proxy.port", /22 is taken by sshd/],
  ["proxy.port and proxyPort together", { proxyPort: 8080, proxy: { port: 8081 } }, "proxy.port", /not both/],
  ["proxy not an object", { proxy: "squid" }, "proxy (secret)", /must be \{port, auth/],
  [
    "proxy given as a URL with credentials",
    { proxy: "http://crawler:s3cret-in-a-url@203.0.113.7:3128" },
    "proxy (secret)",
    /must be \{port, auth/,
  ],
  ["proxy unknown field", { proxy: { cache: true } }, "proxy.cache", /unknown property/],
  [
    "proxy auth without password",
    { proxy: { auth: { username: "u" } } },
    "proxy.auth.password (secret)",
    /is required/,
  ],
  [
    "proxy auth without username",
    { proxy: { auth: { password: "a long enough password" } } },
    "proxy.auth.username",
    /is required/,
  ],
  [
    "proxy username with a colon",
    { proxy: { auth: { username: "a:b", password: "a long enough password" } } },
    "proxy.auth.username",
    /letters, digits/,
  ],
  [
    "proxy password with a line break",
    { proxy: { auth: { username: "u", password: "a long enough\npassword" } } },
    "proxy.auth.password (secret)",
    /line breaks/,
  ],
  // Secure by default.
  [
    "proxy password too short",
    { proxy: { auth: { username: "u", password: "a" } } },
    "proxy.auth.password (secret)",
    /at least 12 characters/,
  ],
  [
    "an open proxy: everyone without auth",
    { proxy: { allowedClients: ["0.0.0.0/0", "::/0"] } },
    "proxy.allowedClients[0]",
    /public addresses, and the proxy has no auth/,
  ],
  [
    "an open proxy: 0.0.0.0/0 alone (squid reads it as all)",
    { proxy: { auth: { username: "u", password: "a long enough password" }, allowedClients: ["0.0.0.0/0"] } },
    "proxy.allowedClients[0]",
    /IPv6 clients too: list ::\/0 beside it/,
  ],
  [
    "an open proxy: the two halves of IPv4",
    { proxy: { allowedClients: ["0.0.0.0/1", "128.0.0.0/1"] } },
    "proxy.allowedClients[1]",
    /public addresses/,
  ],
  [
    "an open proxy: IPv4-mapped everyone",
    { proxy: { allowedClients: ["::ffff:0.0.0.0/96"] } },
    "proxy.allowedClients[0]",
    /IPv4-mapped/,
  ],
  [
    "an open proxy: the IPv6 internet",
    { proxy: { allowedClients: ["2000::/3"] } },
    "proxy.allowedClients[0]",
    /public addresses/,
  ],
  [
    "an open proxy: a public range without auth",
    { proxy: { allowedClients: ["203.0.113.0/24"] } },
    "proxy.allowedClients[0]",
    /publicClientsWithoutAuth/,
  ],
  [
    "an open proxy: the opt-out with a wide range",
    { proxy: { allowedClients: ["198.0.0.0/8"], publicClientsWithoutAuth: true } },
    "proxy.allowedClients[0]",
    /too wide to admit without auth/,
  ],
  [
    "allowedClients with an IPv6 zone (squid reads it as ::/0)",
    { proxy: { allowedClients: ["2001:db8::1%1/128"] } },
    "proxy.allowedClients[0]",
    /zone/,
  ],
  [
    "allowedClients with host bits",
    { proxy: { allowedClients: ["10.1.2.3/8"] } },
    "proxy.allowedClients[0]",
    /host bits set: the range is 10\.0\.0\.0\/8/,
  ],
  [
    "allowedClients not in canonical form",
    { proxy: { allowedClients: ["FD00::/8"] } },
    "proxy.allowedClients[0]",
    /write it as fd00::\/8/,
  ],
  [
    "allowedDestinations with the metadata address",
    { proxy: { allowedDestinations: ["169.254.169.254"] } },
    "proxy.allowedDestinations[0]",
    /metadata services, which the proxy never opens/,
  ],
  [
    "allowedDestinations with the VM's loopback",
    { proxy: { allowedDestinations: ["127.0.0.0/8"] } },
    "proxy.allowedDestinations[0]",
    /the VM itself/,
  ],
  [
    "allowedDestinations not a list",
    { proxy: { allowedDestinations: "10.0.0.0/8" } },
    "proxy.allowedDestinations",
    /a list of address ranges/,
  ],
  [
    "outgoingAddress on loopback",
    { proxy: { outgoingAddress: "127.0.0.1" } },
    "proxy.outgoingAddress",
    /loopback/,
  ],
  [
    "outgoingAddress IPv4-mapped",
    { proxy: { outgoingAddress: "::ffff:203.0.113.7" } },
    "proxy.outgoingAddress",
    /IPv4-mapped/,
  ],
  [
    "a NIC address not in canonical form",
    { nics: [{ bridge: "br0", addresses: ["2001:DB8::7/64"] }] },
    "nics[0].addresses[0]",
    /write it as 2001:db8::7\/64/,
  ],
  ["allowedClients empty", { proxy: { allowedClients: [] } }, "proxy.allowedClients", /non-empty list/],
  [
    "allowedClients not a CIDR",
    { proxy: { allowedClients: ["10.0.0.0/8", "ten/8"] } },
    "proxy.allowedClients[1]",
    /must be an address range/,
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
  [
    "outgoingAddress not among the VM's static addresses",
    { nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"] }], proxy: { outgoingAddress: "203.0.113.8" } },
    "proxy.outgoingAddress",
    /one of the VM's IPv4 addresses, which are all static here \(203\.0\.113\.7\)/,
  ],
  ["health check not an object", { healthCheck: "yes" }, "healthCheck", /false or/],
  ["health check bad URL", { healthCheck: { url: "not a url" } }, "healthCheck.url", /http/],
  ["health check ftp URL", { healthCheck: { url: "ftp://x/" } }, "healthCheck.url", /scheme "ftp"/],
  [
    "health check URL with credentials",
    { healthCheck: { url: "http://u:tok3n-health@x/" } },
    "healthCheck.url (secret)",
    /credentials/,
  ],
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
    "waitForIp",
    /healthCheck needs the guest's IP/,
  ],
  ["socks not an object", { proxy: { socks: 1080 } }, "proxy.socks", /must be \{\} or \{port\}/],
  ["socks on sshd's port", { proxy: { socks: { port: 22 } } }, "proxy.socks.port", /taken by sshd/],
  [
    "socks on the HTTP port",
    { proxy: { port: 8080, socks: { port: 8080 } } },
    "proxy.socks.port",
    /HTTP proxy's port/,
  ],
  ["socks unknown field", { proxy: { socks: { udp: true } } }, "proxy.socks.udp", /unknown property/],
  [
    "socks with a username no system account can have",
    { proxy: { socks: {}, auth: { username: "Crawler.1", password: "a-long-enough-secret" } } },
    "proxy.auth.username",
    /with proxy\.socks, must be 1-32 lower-case letters/,
  ],
  [
    "socks with a system account's username",
    { proxy: { socks: {}, auth: { username: "root", password: "a-long-enough-secret" } } },
    "proxy.auth.username",
    /root would be a system or image account of the VM/,
  ],
  [
    "socks with a password over 255 bytes of UTF-8 (128 characters)",
    { proxy: { socks: {}, auth: { username: "crawler", password: "ü".repeat(128) } } },
    "proxy.auth.password (secret)",
    /with proxy\.socks, must be at most 255 bytes in UTF-8/,
  ],
  [
    "a NIC with addresses and an addressPool",
    {
      nics: [
        {
          bridge: "br0",
          addresses: ["203.0.113.10/24"],
          addressPool: { ranges: ["203.0.113.10-203.0.113.20/24"] },
        },
      ],
    },
    "nics[0].addresses",
    /give addresses or addressPool, not both/,
  ],
  [
    "an address pool that could hand out its gateway",
    {
      nics: [
        { bridge: "br0", addressPool: { ranges: ["203.0.113.1-203.0.113.20/24"] }, gateway4: "203.0.113.1" },
      ],
    },
    "nics[0].addressPool.ranges[0]",
    /starts at the gateway 203\.0\.113\.1 \(gateway4\): make it start after the gateway 203\.0\.113\.1/,
  ],
  [
    "an outgoing address outside the pool NIC's ranges",
    {
      nics: [{ bridge: "br0", addressPool: { ranges: ["203.0.113.10-203.0.113.20/24"] } }],
      proxy: { outgoingAddress: "203.0.113.21" },
    },
    "proxy.outgoingAddress",
    /must be one of the VM's IPv4 addresses, which are static or from an address pool here \(203\.0\.113\.10-203\.0\.113\.20\/24\)/,
  ],
  [
    "an address pool smaller than a rotating fleet needs",
    {
      nics: [{ bridge: "br0", addressPool: { ranges: ["203.0.113.10-203.0.113.12/24"] } }],
      rotation: { maxAge: "7d", batch: 1, group: "f", size: 3 },
    },
    "nics[0].addressPool",
    /holds 3 addresses per family; the fleet needs 4: its size \(3\) and a rotation batch \(1\)/,
  ],
  ["egress check not an object", { egressCheck: "https://echo.example/" }, "egressCheck", /must be \{url\}/],
  ["egress check without a URL", { egressCheck: {} }, "egressCheck.url", /is required: an IP echo/],
  [
    "egress check ftp URL",
    { egressCheck: { url: "ftp://echo.example/" } },
    "egressCheck.url",
    /scheme "ftp"/,
  ],
  [
    "egress check URL with credentials",
    { egressCheck: { url: "https://u:tok3n-egress@echo.example/" } },
    "egressCheck.url (secret)",
    /credentials/,
  ],
  [
    "egress check unknown field",
    { egressCheck: { url: "http://x/", every: "1m" } },
    "egressCheck.every",
    /unknown/,
  ],
  [
    "egress check without IP wait",
    { waitForIp: false, healthCheck: false, egressCheck: { url: "http://x/" } },
    "waitForIp",
    /egressCheck needs the guest's IP/,
  ],
  [
    "waitForIp not boolean or a family",
    { waitForIp: 1 },
    "waitForIp",
    /must be true, false, "ipv4", "ipv6" or "any"/,
  ],
  ["bad duration", { timeouts: { create: "10 minutes" } }, "timeouts.create", /duration/],
  ["zero duration", { timeouts: { delete: 0 } }, "timeouts.delete", /at least 1 s/],
  ["a 1 ms create deadline", { timeouts: { create: 0.001 } }, "timeouts.create", /at least 1 s/],
  ["duration over a day", { timeouts: { create: "25h" } }, "timeouts.create", /at most 1 d \(24h\)/],
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
  ["unknown property", { memory: 512 }, "memory (secret)", /unknown property/],
];
