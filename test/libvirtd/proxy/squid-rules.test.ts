/**
 * The proxy's access rules as the real squid reads them: the
 * squid.conf the provider writes, run by this machine's squid 5.7 (the
 * guests' own version) inside a network namespace this test makes, with
 * only a loopback interface carrying the client and target addresses. Real
 * requests (plain HTTP and CONNECT) from several client addresses to
 * destinations of every class: what squid refuses answers 403; what it lets
 * through is tried (a server on the namespace's loopback answers 204, any
 * other address fails at once with 502/503, since the namespace has no
 * route anywhere: nothing leaves it). With auth, the password file holds the
 * SHA-512-crypt hash the program makes, checked by squid's basic_ncsa_auth.
 *
 * What the booted guests add (test/guest/networking.test.ts): the guest's
 * own script writing the on-link files, and real NICs.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { guestProbeArgs, parseGuestProbe } from "../../../provider/kvm/guest/guest-probe";
import { parseSquidRequests, squidRequestsArgs } from "../../../provider/kvm/guest/squid-requests";
import { squidPasswordHash } from "../../../provider/kvm/proxy/password-hash";
import {
  buildSquidConf,
  LOOPBACK_PROBE_PORT,
  type ProxySetup,
  passwordFileLine,
  squidName,
} from "../../../provider/kvm/proxy/setup";
import { makeCa } from "../../../provider/kvm/tls/certificate";
import { servedTls } from "../../../provider/kvm/tls/proxy-tls";
import { ECHO_BODY_LIMIT, egressMismatch, readEchoReply } from "../../../provider/probes/egress";
import { GATE_PROBE_MS, judgeStatus } from "../../../provider/probes/health-check";
import { memberPassword, memberProxyBlock } from "../../../provider/program/proxy-auth";
import { startServer, stopServer } from "../../support/netns-http";
import { testHost } from "../../support/test-host";

/** Addresses on the namespace's loopback: clients, and targets of each class. */
const A = {
  privateClient: "10.9.0.1",
  publicClient: "198.51.100.9",
  privateClient6: "fd00:9::1",
  /** A static address of "the VM" (ownAddresses), and one its first boot found (the own file). */
  own: "192.0.2.10",
  ownFromFile: "192.168.50.10",
  /** The static NIC's gateway, and an address of its subnet. */
  gateway: "192.0.2.1",
  onLink: "192.0.2.77",
  /** An address of the subnet its first boot found (the on-link file), which the plain squid opens. */
  onLinkFromFile: "192.168.50.77",
  outward: "203.0.113.80",
  outward6: "2001:db8:80::80",
  inward: "10.213.0.80",
  inward6: "fd00:213::80",
  cgnat: "100.64.1.1",
  opened: "172.16.5.5",
  metadata: "169.254.169.254",
  /** The outgoing address of the egress squid (an address of "the VM", outward). */
  egress: "203.0.113.44",
};
const USER = "crawler";
/** The in-guest probe's bounds as readiness gives them: the health check reads no body, the egress check an echo's. */
const HEALTH_BOUNDS = { deadlineMs: GATE_PROBE_MS, bodyBytes: 0 };
const ECHO_BOUNDS = { deadlineMs: 5_000, bodyBytes: ECHO_BODY_LIMIT };
const PASSWORD = "squid-reads-$6$-hashes:@#%/";
const URN = "urn:pulumi:test::kvmpt::pulumi-nodejs:dynamic:KvmProxy::edge";

let ns: string;
let dir: string;
const servers: ChildProcess[] = [];
const squids: ChildProcess[] = [];
/** Port of the 204 server on the outward and inward addresses (the same port on all). */
let targetPort = 0;
/** Port of the whoami server (an IP echo: the client's address as plain text) on every address. */
let echoPort = 0;

function inNs(args: string[], input?: string): string {
  return execFileSync("ip", ["netns", "exec", ns, ...args], { encoding: "utf8", input, timeout: 60_000 });
}

/** Starts squid (foreground) with squid.conf of `setup`, on `port`, its files in a folder of its own. */
async function startSquid(setup: ProxySetup, port: number): Promise<void> {
  const own = path.join(dir, `squid-${port}`);
  execFileSync("mkdir", ["-p", own]);
  const conf = buildSquidConf({ ...setup, port })
    .replaceAll("/etc/squid/", `${own}/`)
    .replace("@KVMP_AUTH_HELPER@", "/usr/lib/squid/basic_ncsa_auth");
  writeFileSync(path.join(own, "kvm-proxy-own.acl"), `# first boot\n${A.ownFromFile}\n`);
  writeFileSync(path.join(own, "kvm-proxy-onlink.acl"), "# first boot\n192.168.50.0/24\n");
  if (setup.auth !== undefined)
    writeFileSync(path.join(own, "kvm-proxy.passwd"), passwordFileLine(setup.auth));
  const tls = setup.tls;
  if (tls !== undefined && !("ca" in tls)) {
    execFileSync("mkdir", ["-p", path.join(own, "kvm-proxy-tls")]);
    writeFileSync(path.join(own, "kvm-proxy-tls/cert.pem"), tls.certificate);
    writeFileSync(path.join(own, "kvm-proxy-tls/key.pem"), tls.privateKey, { mode: 0o600 });
  }
  const extra = [
    `pid_filename ${own}/squid.pid`,
    `cache_log ${own}/cache.log`,
    `access_log ${own}/access.log`,
    "cache_store_log none",
    `coredump_dir ${own}`,
  ];
  writeFileSync(path.join(own, "squid.conf"), `${conf}${extra.join("\n")}\n`);
  execFileSync("chown", ["-R", "proxy:proxy", own]);
  const child = spawn("ip", ["netns", "exec", ns, "squid", "-N", "-f", path.join(own, "squid.conf")], {
    stdio: "ignore",
  });
  squids.push(child);
  for (let i = 0; i < 100; i++) {
    try {
      const log = readFileSync(path.join(own, "cache.log"), "utf8");
      if (new RegExp(`Accepting HTTPS? Socket connections at.*:${port}\\b`).test(log)) return;
      if (/FATAL/.test(log)) throw new Error(`squid failed: ${log}`);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`squid on ${port} did not start`);
}

/** A request through the squid on `port` from `from`: the HTTP status (CONNECT: squid's answer to it). */
function request(
  port: number,
  from: string,
  url: string,
  o: { connect?: boolean; credentials?: string; tls?: { ca?: string } } = {},
): string {
  // Clients reach squid on their own family's loopback, from their own source address.
  const scheme = o.tls !== undefined ? "https" : "http";
  const proxy = from.includes(":") ? `${scheme}://[::1]:${port}` : `${scheme}://127.0.0.1:${port}`;
  const args = ["curl", "-s", "-o", "/dev/null", "--max-time", "10", "--interface", from, "-x", proxy];
  if (o.tls?.ca !== undefined) args.push("--proxy-cacert", o.tls.ca);
  if (o.credentials !== undefined) args.push("--proxy-user", o.credentials);
  // -p: a CONNECT tunnel for the URL's host and port, whatever its scheme.
  args.push(...(o.connect ? ["-p", "-w", "%{http_connect}"] : ["-w", "%{http_code}"]), url);
  try {
    return inNs(args);
  } catch (err) {
    return (err as { stdout?: string }).stdout || "000";
  }
}

const http = (addr: string, p = targetPort) => `http://${addr.includes(":") ? `[${addr}]` : addr}:${p}/`;
/** The URL a CONNECT to port 443 of `addr` is made for (the server there speaks plain HTTP). */
const https = (addr: string) => http(addr, 443);

const NO_AUTH: ProxySetup = {
  port: 0,
  allowedClients: ["10.0.0.0/8", "fc00::/7"],
  // The subnet found at first boot is opened: the VM's own address in it must stay refused.
  allowedDestinations: ["172.16.0.0/12", "192.168.50.0/24"],
  ownAddresses: [A.own],
  onLink: ["192.0.2.0/24", A.gateway],
};
const WITH_AUTH: ProxySetup = {
  ...NO_AUTH,
  allowedClients: ["10.0.0.0/8", "198.51.100.0/24"],
  auth: { username: USER, passwordHash: squidPasswordHash(PASSWORD, USER, URN) },
};
/** With auth and an outgoing address: what the egress check reads. */
const EGRESS: ProxySetup = { ...WITH_AUTH, outgoingAddress: A.egress };
/** Two members of a fleet with memberPasswords: each squid set up with its member's hash, as the program makes it. */
const FLEET_SECRET = "one secret for the fleet's members";
const memberUrn = (m: string) =>
  `urn:pulumi:test::kvmpt::kvmproxy:index:ProxyFleet$pulumi-nodejs:dynamic:KvmProxy::${m}`;
function memberSetup(member: string): ProxySetup {
  const r = memberProxyBlock({ auth: { username: USER } }, FLEET_SECRET, member);
  if (!("block" in r)) throw new Error(r.problem);
  const password = (r.block.auth as { password: string }).password;
  return {
    ...NO_AUTH,
    allowedClients: WITH_AUTH.allowedClients,
    auth: { username: USER, passwordHash: squidPasswordHash(password, USER, memberUrn(member)) },
  };
}
const MEMBER_PORTS = { "edge-0": 3131, "edge-1": 3132 } as const;
/** With auth and TLS: the certificate a CA made as for a proxy issued for the loopback, as create issues it. */
const TLS_CA = makeCa({ commonName: "pulumi-kvm-proxy squid-rules", now: new Date() });
const TLS_AUTH: ProxySetup = {
  ...WITH_AUTH,
  tls: servedTls(
    { ca: { certificate: TLS_CA.certificatePem, privateKey: TLS_CA.privateKeyPem } },
    ["127.0.0.1", "::1"],
    new Date(),
  ),
};
const TLS_PORT = 3133;
const PLAIN_PORT = 3128;
const AUTH_PORT = 3129;
const EGRESS_PORT = 3130;
/** A squid of its own for the request counts: only the requests the count's test sends are in its log. */
const COUNT_PORT = 3134;

beforeAll(async () => {
  ns = `${testHost().netns}-sq`;
  // One left by a run that was cut short goes first.
  spawnSync("ip", ["netns", "del", ns], { stdio: "ignore" });
  execFileSync("ip", ["netns", "add", ns]);
  inNs(["ip", "link", "set", "lo", "up"]);
  for (const a of Object.values(A)) {
    const cidr = a.includes(":") ? `${a}/128` : `${a}/32`;
    inNs(["ip", "addr", "replace", cidr, "dev", "lo", ...(a.includes(":") ? ["nodad"] : [])]);
  }
  dir = mkdtempSync("/tmp/kvmp-squid-rules-");
  chmodSync(dir, 0o755);
  targetPort = await startServer(servers, ns, ["204", "::"]);
  await startServer(servers, ns, ["204", "::", "443"]);
  echoPort = await startServer(servers, ns, ["whoami", "::"]);
  await startSquid(NO_AUTH, PLAIN_PORT);
  await startSquid(WITH_AUTH, AUTH_PORT);
  await startSquid(EGRESS, EGRESS_PORT);
  for (const [member, port] of Object.entries(MEMBER_PORTS)) await startSquid(memberSetup(member), port);
  await startSquid(TLS_AUTH, TLS_PORT);
  await startSquid(WITH_AUTH, COUNT_PORT);
  writeFileSync(path.join(dir, "ca.pem"), TLS_CA.certificatePem);
}, 60_000);

afterAll(async () => {
  for (const s of squids) s.kill("SIGKILL");
  await Promise.all(servers.map((s) => stopServer(s)));
  if (ns !== undefined) execFileSync("ip", ["netns", "del", ns], { stdio: "ignore" });
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("the squid.conf the provider writes, read by squid 5.7", () => {
  it("positive control: every target address answers from inside the namespace, without the proxy", () => {
    for (const a of [A.outward, A.inward, A.own, A.gateway, A.opened, A.inward6]) {
      expect(
        inNs(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", http(a)]),
        a,
      ).toBe("204");
    }
  });

  // Destinations, from an admitted client without auth: what is refused (403), what passes (204 from the target).
  it.each<[string, string, "403" | "204"]>([
    ["an outward address (the internet)", A.outward, "204"],
    ["an outward IPv6 address", A.outward6, "204"],
    ["a private address", A.inward, "403"],
    ["a ULA address", A.inward6, "403"],
    ["a CGNAT address", A.cgnat, "403"],
    ["the VM's own static address", A.own, "403"],
    ["the VM's own address found at first boot, in an opened subnet", A.ownFromFile, "403"],
    ["its gateway", A.gateway, "403"],
    ["an address of its static subnet (public)", A.onLink, "403"],
    ["an address of the subnet found at first boot (opened)", A.onLinkFromFile, "204"],
    ["the metadata service", A.metadata, "403"],
    ["its loopback", "127.0.0.1", "403"],
    ["a range allowedDestinations opens", A.opened, "204"],
  ])("plain HTTP to %s: %s", (_what, address, want) => {
    expect(request(PLAIN_PORT, A.privateClient, http(address))).toBe(want);
  });

  it.each<[string, string, "403" | "200"]>([
    ["an outward address", A.outward, "200"],
    ["a private address", A.inward, "403"],
    ["a ULA address", A.inward6, "403"],
    ["the VM's own address", A.own, "403"],
    ["its gateway", A.gateway, "403"],
    ["the metadata service", A.metadata, "403"],
    ["an opened range", A.opened, "200"],
  ])("CONNECT to %s:443: %s", (_what, address, want) => {
    expect(request(PLAIN_PORT, A.privateClient, https(address), { connect: true })).toBe(want);
  });

  it("refuses CONNECT to a port other than 443, even outward", () => {
    expect(request(PLAIN_PORT, A.privateClient, http(A.outward), { connect: true })).toBe("403");
  });

  it("refuses a client outside allowedClients (403), admits an IPv6 one inside", () => {
    expect(request(PLAIN_PORT, A.publicClient, http(A.outward))).toBe("403");
    expect(request(PLAIN_PORT, A.privateClient6, http(A.outward))).toBe("204");
  });

  it("with auth: 407 without or with wrong credentials, 204 with the password squid's helper checks against the $6$ hash", () => {
    const outward = http(A.outward);
    expect(request(AUTH_PORT, A.publicClient, outward)).toBe("407");
    expect(request(AUTH_PORT, A.publicClient, outward, { credentials: `${USER}:wrong-password` })).toBe(
      "407",
    );
    expect(request(AUTH_PORT, A.publicClient, outward, { credentials: `${USER}:${PASSWORD}` })).toBe("204");
  });

  it("with auth, a client outside allowedClients gets 403 before any challenge, with or without credentials", () => {
    expect(request(AUTH_PORT, A.privateClient6, http(A.outward))).toBe("403");
    expect(
      request(AUTH_PORT, A.privateClient6, http(A.outward), { credentials: `${USER}:${PASSWORD}` }),
    ).toBe("403");
  });

  it("with auth and valid credentials, inward destinations stay refused", () => {
    const credentials = `${USER}:${PASSWORD}`;
    for (const a of [A.inward, A.own, A.gateway, A.metadata]) {
      expect(request(AUTH_PORT, A.publicClient, http(a), { credentials }), a).toBe("403");
    }
    expect(request(AUTH_PORT, A.publicClient, https(A.inward), { connect: true, credentials })).toBe("403");
  });

  it("admits the VM's own processes (loopback) without credentials: the in-guest health probe", () => {
    expect(request(AUTH_PORT, "127.0.0.1", http(A.outward))).toBe("204");
    expect(request(AUTH_PORT, "127.0.0.1", http(A.inward))).toBe("403");
  });

  it("the in-guest health probe's own program gets the target's 204 through it, named by this squid", () => {
    const out = inNs(["python3", ...guestProbeArgs(AUTH_PORT, http(A.outward), HEALTH_BOUNDS)]);
    const reply = parseGuestProbe(out, 0);
    expect(reply).toMatchObject({ status: 204 });
    const name = squidName({ ...WITH_AUTH, port: AUTH_PORT });
    expect(
      judgeStatus(
        204,
        { via: (reply as { via: string }).via },
        { ip: "127.0.0.1", proxyPort: AUTH_PORT, squidName: name, url: http(A.outward), expectStatus: 204 },
      ),
    ).toEqual({ ok: true, status: 204 });
    expect(
      parseGuestProbe(inNs(["python3", ...guestProbeArgs(AUTH_PORT, http(A.inward), HEALTH_BOUNDS)]), 0),
    ).toMatchObject({ status: 403 });
  });
  it("a fleet's member passwords: each member's password opens its own member only", () => {
    const outward = http(A.outward);
    const credentials = (m: string) => `${USER}:${memberPassword(FLEET_SECRET, m)}`;
    expect(memberPassword(FLEET_SECRET, "edge-0")).not.toBe(memberPassword(FLEET_SECRET, "edge-1"));
    expect(
      request(MEMBER_PORTS["edge-0"], A.publicClient, outward, { credentials: credentials("edge-0") }),
    ).toBe("204");
    expect(
      request(MEMBER_PORTS["edge-1"], A.publicClient, outward, { credentials: credentials("edge-1") }),
    ).toBe("204");
    expect(
      request(MEMBER_PORTS["edge-1"], A.publicClient, outward, { credentials: credentials("edge-0") }),
    ).toBe("407");
    expect(
      request(MEMBER_PORTS["edge-0"], A.publicClient, outward, { credentials: credentials("edge-1") }),
    ).toBe("407");
  });

  describe("with TLS (https_port, the certificate its CA issued for the proxy's addresses)", () => {
    const ca = () => ({ ca: path.join(dir, "ca.pem") });

    it("a client trusting the CA: 407 without credentials, the target's 204 with them, a CONNECT tunnel with them; over IPv4 and IPv6", () => {
      for (const from of [A.publicClient, A.privateClient]) {
        expect(request(TLS_PORT, from, http(A.outward), { tls: ca() })).toBe("407");
        expect(
          request(TLS_PORT, from, http(A.outward), { tls: ca(), credentials: `${USER}:${PASSWORD}` }),
        ).toBe("204");
      }
      expect(
        request(TLS_PORT, A.publicClient, https(A.outward), {
          tls: ca(),
          connect: true,
          credentials: `${USER}:${PASSWORD}`,
        }),
      ).toBe("200");
      expect(request(TLS_PORT, A.privateClient6, http(A.outward6), { tls: ca() })).toBe("403");
    });

    it("a client that does not trust the CA, and a plain-HTTP request to the TLS port, get no answer", () => {
      expect(
        request(TLS_PORT, A.publicClient, http(A.outward), { tls: {}, credentials: `${USER}:${PASSWORD}` }),
      ).toBe("000");
      expect(request(TLS_PORT, A.publicClient, http(A.outward), { credentials: `${USER}:${PASSWORD}` })).toBe(
        "000",
      );
    });

    it("the in-guest probe's program reaches it through squid's plain loopback listener", () => {
      const reply = parseGuestProbe(
        inNs(["python3", ...guestProbeArgs(LOOPBACK_PROBE_PORT, http(A.outward), HEALTH_BOUNDS)]),
        0,
      );
      expect(reply).toMatchObject({ status: 204 });
    });
  });

  describe("the egress check, through the in-guest probe's program", () => {
    /** What the echo behind the squid on `port` saw, as the egress check reads it. */
    const egressThrough = (port: number) => {
      const reply = parseGuestProbe(
        inNs(["python3", ...guestProbeArgs(port, http(A.outward, echoPort), ECHO_BOUNDS)]),
        0,
      );
      expect(reply).toMatchObject({ status: 200 });
      return readEchoReply((reply as { body: string }).body);
    };

    it("reads squid's tcp_outgoing_address from the echo's reply (a dual-stack echo's IPv4-mapped form read as IPv4)", () => {
      const raw = inNs(["python3", ...guestProbeArgs(EGRESS_PORT, http(A.outward, echoPort), ECHO_BOUNDS)]);
      expect(raw).toContain(`body "::ffff:${A.egress}"`);
      expect(egressThrough(EGRESS_PORT)).toEqual({ address: A.egress });
      expect(
        egressMismatch(A.egress, { outgoingAddress: A.egress, staticAddresses: [`${A.own}/24`] }, "echo"),
      ).toBeUndefined();
    });

    it("warns when a squid without that outgoing address egresses from another one than the VM's static address", () => {
      const read = egressThrough(AUTH_PORT);
      expect(read).not.toEqual({ address: A.egress });
      const address = (read as { address: string }).address;
      expect(egressMismatch(address, { staticAddresses: [`${A.own}/24`] }, "echo")).toMatch(
        new RegExp(
          `come from ${address.replaceAll(".", "\\.")}, none of the VM's static IPv4 addresses \\(${A.own.replaceAll(".", "\\.")}\\)`,
        ),
      );
    });
  });

  describe("the requests `status` counts by status class, read from squid's access log by the guest's program", () => {
    const credentials = `${USER}:${PASSWORD}`;
    const log = () => path.join(dir, `squid-${COUNT_PORT}`, "access.log");
    const lines = () =>
      readFileSync(log(), "utf8")
        .split("\n")
        .filter((l) => l !== "").length;
    const count = (file: string) =>
      parseSquidRequests(inNs(["python3", ...squidRequestsArgs(10_000, file)]), 0);

    beforeAll(async () => {
      const outward = http(A.outward);
      for (let i = 0; i < 5; i++)
        expect(request(COUNT_PORT, A.publicClient, outward, { credentials })).toBe("204");
      expect(request(COUNT_PORT, A.publicClient, https(A.outward), { connect: true, credentials })).toBe(
        "200",
      );
      for (let i = 0; i < 3; i++) expect(request(COUNT_PORT, A.publicClient, outward)).toBe("407");
      for (let i = 0; i < 2; i++)
        expect(request(COUNT_PORT, A.publicClient, http(A.inward), { credentials })).toBe("403");
      // An outward address the namespace has no route to: squid answers for the target it could not reach.
      for (let i = 0; i < 2; i++)
        expect(request(COUNT_PORT, A.publicClient, http("203.0.113.99"), { credentials })).toMatch(
          /^50[23]$/,
        );
      // The health check's request (GET / to the proxy port as to a web server), and the in-guest probe's.
      const asServer = inNs([
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
        "--interface",
        A.publicClient,
        `http://127.0.0.1:${COUNT_PORT}/`,
      ]);
      expect(asServer).toBe("400");
      expect(
        parseGuestProbe(inNs(["python3", ...guestProbeArgs(COUNT_PORT, http(A.outward), HEALTH_BOUNDS)]), 0),
      ).toMatchObject({ status: 204 });
      // squid logs a transaction when it ends: every one of the 15 is written.
      for (let i = 0; i < 100 && lines() < 15; i++) await new Promise((r) => setTimeout(r, 100));
      expect(lines()).toBe(15);
    });

    it("counts each client request once by its class, not the health check's own request or the VM's", () => {
      expect(count(log())).toEqual({
        ok: true,
        requests: { byClass: { "1xx": 0, "2xx": 6, "3xx": 0, "4xx": 5, "5xx": 2, other: 0 }, unreadable: 0 },
      });
    });

    it("adds the copies logrotate keeps (plain and gzip) written since the boot, skips lines from before it, and names what it cannot read", () => {
      const rotated = mkdtempSync(path.join(dir, "rotated-"));
      const file = path.join(rotated, "access.log");
      copyFileSync(log(), file);
      writeFileSync(`${file}.2.gz`, gzipSync(readFileSync(log())));
      // A line stamped at 1970's first second, and one of another logformat.
      const before =
        readFileSync(log(), "utf8")
          .split("\n")[0]
          ?.replace(/^[0-9]+\.[0-9]+/, "1.000") ?? "";
      writeFileSync(
        `${file}.1`,
        `${before}\n203.0.113.9 - - [07/Dec/2026:10:00:00 +0000] "GET http://x/ HTTP/1.1" 200 5\n`,
      );
      // A copy last written before the boot is not read at all, whatever it holds.
      writeFileSync(`${file}.3`, readFileSync(log()));
      utimesSync(`${file}.3`, new Date(1000), new Date(1000));
      // Not a copy logrotate makes: left alone.
      writeFileSync(`${file}.old`, readFileSync(log()));
      expect(count(file)).toEqual({
        ok: true,
        requests: {
          byClass: { "1xx": 0, "2xx": 12, "3xx": 0, "4xx": 10, "5xx": 4, other: 0 },
          unreadable: 1,
        },
      });
    });

    it("without a log: the reason, not zeros", () => {
      expect(count(path.join(dir, "no-such-access.log"))).toEqual({
        ok: false,
        reason: `no access log at ${path.join(dir, "no-such-access.log")}`,
      });
    });
  });
});
