/**
 * The SOCKS5 listener's rules as the real Dante reads them: the
 * danted.conf the provider writes (kvm/proxy/dante.ts), run by this
 * machine's Dante 1.4.2 (the guests' version) inside a network namespace
 * this test makes, with only a loopback carrying the client and target
 * addresses. Real requests by curl (`--socks5` with an address,
 * `--socks5-hostname` with a name Dante resolves), and the provider's own
 * greeting probe.
 *
 * The proxy user is a system account as the setup script makes it (the
 * password's SHA-512-crypt hash, expired since 1970), in a passwd and shadow
 * of the namespace's own: `ip netns exec` binds /etc/netns/<ns>/* over /etc,
 * so the machine's accounts are never touched. The placeholders the script
 * fills on the guest (its interfaces, the addresses and subnets found at
 * first boot) are filled here as the script does; the script itself runs on
 * a booted stock guest (test/guest/first-boot.test.ts).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDantedConf, type SocksInputs } from "../../../provider/kvm/proxy/dante";
import { squidPasswordHash } from "../../../provider/kvm/proxy/password-hash";
import { judgeSocks, type SocksAnswer } from "../../../provider/probes/health-check";
import { startServer, stopServer } from "../../support/netns-http";
import { testHost } from "../../support/test-host";

const A = {
  privateClient: "10.9.0.1",
  publicClient: "198.51.100.9",
  outsider: "192.0.2.200",
  own: "192.0.2.10",
  ownFromBoot: "192.168.50.10",
  gateway: "192.0.2.1",
  onLink: "192.0.2.77",
  onLinkFromBoot: "192.168.50.77",
  outward: "203.0.113.80",
  outward6: "2001:db8:80::80",
  inward: "10.213.0.80",
  opened: "172.16.5.5",
  metadata: "169.254.169.254",
  egress: "203.0.113.44",
};
const USER = "kvmpt-socks";
const PASSWORD = "socks-reads-$6$-hashes:@#%/";
const URN = "urn:pulumi:test::kvmpt::pulumi-nodejs:dynamic:KvmProxy::edge";

let ns: string;
let dir: string;
const servers: ChildProcess[] = [];
const dantes: ChildProcess[] = [];
let targetPort = 0;

function inNs(args: string[]): string {
  return execFileSync("ip", ["netns", "exec", ns, ...args], { encoding: "utf8", timeout: 60_000 });
}

const BASE: Omit<SocksInputs, "port"> = {
  auth: { username: USER, passwordHash: squidPasswordHash(PASSWORD, USER, URN) },
  allowedClients: ["10.0.0.0/8", "198.51.100.0/24"],
  allowedDestinations: ["172.16.0.0/12", "192.168.50.0/24"],
  ownAddresses: [A.own],
  onLink: ["192.0.2.0/24", A.gateway],
};
const PORTS = { auth: 1080, open: 1081, egress: 1082 } as const;
const SETUPS: Record<keyof typeof PORTS, SocksInputs> = {
  auth: { ...BASE, port: PORTS.auth },
  open: { ...BASE, auth: undefined, port: PORTS.open } as SocksInputs,
  egress: { ...BASE, port: PORTS.egress, outgoingAddress: A.egress },
};

/** danted.conf as the setup script leaves it on a guest whose one interface is `lo`. */
function filled(s: SocksInputs): string {
  const block = (r: string) => `socks block {\n\tfrom: 0/0 to: ${r}\n\tlog: error\n}`;
  const external =
    s.outgoingAddress === undefined
      ? "external: lo\nexternal.rotation: route"
      : `external: ${s.outgoingAddress}\nexternal: lo\nexternal.rotation: none`;
  return buildDantedConf(s)
    .replace("@KVMP_SOCKS_EXTERNAL@", external)
    .replace("@KVMP_SOCKS_OWN@", block(`${A.ownFromBoot}/32`))
    .replace("@KVMP_SOCKS_ONLINK@", block("192.168.50.0/24"));
}

async function startDante(s: SocksInputs): Promise<void> {
  const conf = path.join(dir, `danted-${s.port}.conf`);
  writeFileSync(conf, filled(s).replace("logoutput: syslog", `logoutput: ${dir}/danted-${s.port}.log`));
  inNs(["danted", "-V", "-f", conf]);
  const child = spawn(
    "ip",
    ["netns", "exec", ns, "danted", "-f", conf, "-p", path.join(dir, `${s.port}.pid`)],
    {
      stdio: "ignore",
    },
  );
  dantes.push(child);
  for (let i = 0; i < 100; i++) {
    if (greet(s.port, A.privateClient).startsWith("socks ")) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(
    `danted on ${s.port} did not start: ${readFileSync(path.join(dir, `danted-${s.port}.log`), "utf8")}`,
  );
}

/** curl through the SOCKS listener on `port` from `from`: the HTTP status, or "000" when refused. */
function request(
  port: number,
  from: string,
  url: string,
  o: { credentials?: string; byName?: boolean } = {},
): string {
  const creds = o.credentials === undefined ? "" : `${o.credentials}@`;
  const proxy = `${o.byName ? "socks5h" : "socks5"}://${creds}127.0.0.1:${port}`;
  try {
    return inNs([
      "curl",
      "-s",
      "-o",
      "/dev/null",
      "--max-time",
      "10",
      "--interface",
      from,
      "-x",
      proxy,
      "-w",
      "%{http_code}",
      url,
    ]);
  } catch (err) {
    return (err as { stdout?: string }).stdout || "000";
  }
}

/** The provider's greeting from `from` (a socket bound to it), as the probe's program prints it. */
function greet(port: number, from: string): string {
  const program = `import socket, sys
s = socket.socket(socket.AF_INET)
s.settimeout(5)
try:
    s.bind((sys.argv[2], 0))
    s.connect(("127.0.0.1", int(sys.argv[1])))
    s.sendall(bytes([5, 2, 0, 2]))
    r = s.recv(2)
    print("socks " + r.hex() if r else "closed")
except ConnectionResetError:
    print("closed")
except Exception as e:
    print("error " + type(e).__name__)
`;
  try {
    return inNs(["python3", "-c", program, String(port), from]).trim();
  } catch {
    return "error";
  }
}

function answer(printed: string): SocksAnswer {
  if (printed === "closed") return { closed: true };
  if (printed.startsWith("socks ")) return { reply: printed.slice(6) };
  return { error: printed };
}

const http = (addr: string, p = targetPort) => `http://${addr.includes(":") ? `[${addr}]` : addr}:${p}/`;
const CREDS = `${USER}:${encodeURIComponent(PASSWORD)}`;

beforeAll(async () => {
  ns = `${testHost().netns}-sk`;
  spawnSync("ip", ["netns", "del", ns], { stdio: "ignore" });
  rmSync(`/etc/netns/${ns}`, { recursive: true, force: true });
  execFileSync("ip", ["netns", "add", ns]);
  inNs(["ip", "link", "set", "lo", "up"]);
  for (const a of Object.values(A)) {
    const cidr = a.includes(":") ? `${a}/128` : `${a}/32`;
    inNs(["ip", "addr", "replace", cidr, "dev", "lo", ...(a.includes(":") ? ["nodad"] : [])]);
  }
  // The namespace's own accounts and names (ip netns exec binds them over /etc).
  const etc = `/etc/netns/${ns}`;
  mkdirSync(etc, { recursive: true });
  const hash = SETUPS.auth.auth?.passwordHash as string;
  writeFileSync(
    `${etc}/passwd`,
    `${readFileSync("/etc/passwd", "utf8")}${USER}:x:990:990:pulumi-kvm-proxy socks:/nonexistent:/usr/sbin/nologin\n`,
  );
  writeFileSync(`${etc}/shadow`, `${readFileSync("/etc/shadow", "utf8")}${USER}:${hash}:20000:::::1:\n`, {
    mode: 0o640,
  });
  writeFileSync(`${etc}/hosts`, `127.0.0.1 localhost\n${A.outward} outward.test\n${A.inward} inward.test\n`);
  dir = mkdtempSync("/tmp/kvmp-dante-rules-");
  targetPort = await startServer(servers, ns, ["whoami", "::"]);
  for (const s of Object.values(SETUPS)) await startDante(s);
}, 60_000);

afterAll(async () => {
  for (const d of dantes) d.kill("SIGKILL");
  await Promise.all(servers.map((s) => stopServer(s)));
  if (ns !== undefined) {
    spawnSync("ip", ["netns", "del", ns], { stdio: "ignore" });
    rmSync(`/etc/netns/${ns}`, { recursive: true, force: true });
  }
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("the danted.conf the provider writes, read by Dante 1.4.2", () => {
  it("positive control: the targets answer inside the namespace without the proxy", () => {
    for (const a of [A.outward, A.inward, A.own, A.opened]) {
      expect(
        inNs(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", http(a)]),
        a,
      ).toBe("200");
    }
  });

  it.each<[string, string, { byName?: boolean }, "200" | "000"]>([
    ["an outward address", http(A.outward), {}, "200"],
    ["an outward name (resolved by Dante)", `http://outward.test:${0}/`, { byName: true }, "200"],
    ["an outward IPv6 address", http(A.outward6), {}, "200"],
    ["a private address", http(A.inward), {}, "000"],
    ["a name that resolves to a private address", `http://inward.test:${0}/`, { byName: true }, "000"],
    ["the VM's own static address", http(A.own), {}, "000"],
    ["the VM's own address found at first boot, in an opened subnet", http(A.ownFromBoot), {}, "000"],
    ["its gateway", http(A.gateway), {}, "000"],
    ["an address of its static subnet (public)", http(A.onLink), {}, "000"],
    ["an address of the subnet found at first boot (opened)", http(A.onLinkFromBoot), {}, "200"],
    ["the metadata service", http(A.metadata), {}, "000"],
    ["its loopback", http("127.0.0.1"), {}, "000"],
    ["a range allowedDestinations opens", http(A.opened), {}, "200"],
    ["port 25 (mail), even outward", http(A.outward, 25), {}, "000"],
  ])("with the credentials, %s: %s", (_what, url, o, want) => {
    const target = url.replace(":0/", `:${targetPort}/`);
    expect(request(PORTS.auth, A.privateClient, target, { ...o, credentials: CREDS })).toBe(want);
  });

  it("refuses a wrong password and no credentials; admits a public client inside allowedClients with them", () => {
    const outward = http(A.outward);
    expect(request(PORTS.auth, A.privateClient, outward, { credentials: `${USER}:wrong-password` })).toBe(
      "000",
    );
    expect(request(PORTS.auth, A.privateClient, outward)).toBe("000");
    expect(request(PORTS.auth, A.publicClient, outward, { credentials: CREDS })).toBe("200");
  });

  it("closes (resets) a client outside allowedClients before any SOCKS byte: no password is ever asked of it", () => {
    expect(request(PORTS.auth, A.outsider, http(A.outward), { credentials: CREDS })).toBe("000");
    expect(greet(PORTS.auth, A.outsider)).toBe("closed");
  });

  it("answers the provider's greeting as the health check wants: the password method with auth, none without", () => {
    const where = "here";
    expect(
      judgeSocks(answer(greet(PORTS.auth, A.privateClient)), { auth: true, where, closedIsRefusal: false }),
    ).toEqual({
      ok: true,
    });
    expect(
      judgeSocks(answer(greet(PORTS.open, A.privateClient)), { auth: false, where, closedIsRefusal: false }),
    ).toEqual({
      ok: true,
    });
    // The listener without auth, judged as one that should have it: the probe catches an open SOCKS.
    expect(
      judgeSocks(answer(greet(PORTS.open, A.privateClient)), { auth: true, where, closedIsRefusal: false }),
    ).toEqual({
      ok: false,
      reason: "SOCKS5 at here admits clients without a password",
    });
    // Its loopback is a client: the in-guest greeting always gets an answer.
    expect(greet(PORTS.auth, "127.0.0.1")).toBe("socks 0502");
  });

  it("without auth, admits its clients without credentials and keeps the destination rules", () => {
    expect(request(PORTS.open, A.privateClient, http(A.outward))).toBe("200");
    expect(request(PORTS.open, A.privateClient, http(A.inward))).toBe("000");
  });

  it("connects out from outgoingAddress (IPv4), and still reaches IPv6 targets", () => {
    const whoami = (url: string) => {
      try {
        return inNs([
          "curl",
          "-s",
          "--max-time",
          "10",
          "--interface",
          A.privateClient,
          "-x",
          `socks5://${CREDS}@127.0.0.1:${PORTS.egress}`,
          url,
        ]);
      } catch (err) {
        return `failed: ${(err as { stdout?: string }).stdout}`;
      }
    };
    expect(whoami(http(A.outward))).toBe(`::ffff:${A.egress}`);
    expect(whoami(http(A.outward6))).toBe(A.outward6);
  });
});
