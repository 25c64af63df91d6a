/**
 * The guest's proxy setup (provider/kvm/proxy/setup.ts): squid.conf as
 * built from a setup (its access list is access.ts, tested apart),
 * read by the real squid with `squid -k parse`, and the vendor-data script
 * (parsed by dash, the POSIX shell of Debian's /bin/sh).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_ALLOWED_CLIENTS } from "../../../../provider/kvm/proxy/access";
import { squidPasswordHash } from "../../../../provider/kvm/proxy/password-hash";
import {
  buildProxySetupScript,
  buildSquidConf,
  LOOPBACK_PROBE_PORT,
  NO_SOCKS_FUNCTION,
  PASSWORD_FILE,
  type ProxySetup,
  type SquidConfInputs,
  squidName,
  TLS_DIR,
} from "../../../../provider/kvm/proxy/setup";
import { issueLeaf, makeCa } from "../../../../provider/kvm/tls/certificate";

const AUTH: ProxySetup = {
  port: 3128,
  auth: { username: "crawler", passwordHash: squidPasswordHash("s3cret-Pa55-long", "crawler", "urn:edge") },
  allowedClients: ["203.0.113.0/24", "2001:db8::/32"],
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
  outgoingAddress: "198.51.100.7",
};
const NO_AUTH: ProxySetup = {
  port: 3128,
  allowedClients: DEFAULT_ALLOWED_CLIENTS,
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
};

/**
 * What the real squid finds wrong in squid.conf for `p` (`squid -k parse`):
 * its ERROR, WARNING and FATAL lines, and a non-zero exit. The guest's file
 * paths are moved into a scratch folder and the helper placeholder is this
 * machine's basic_ncsa_auth; the text is otherwise the guest's.
 */
function parseProblems(p: ProxySetup): string[] {
  const dir = mkdtempSync(path.join(tmpdir(), "kvmp-squid-parse-"));
  try {
    const conf = buildSquidConf(p)
      .replaceAll("/etc/squid/", `${dir}/`)
      .replace("@KVMP_AUTH_HELPER@", "/usr/lib/squid/basic_ncsa_auth");
    for (const f of ["kvm-proxy-own.acl", "kvm-proxy-onlink.acl"])
      writeFileSync(path.join(dir, f), "192.0.2.99\n");
    writeFileSync(path.join(dir, "kvm-proxy.passwd"), "");
    const file = path.join(dir, "squid.conf");
    writeFileSync(file, conf);
    const r = spawnSync("squid", ["-k", "parse", "-f", file], { encoding: "utf8" });
    if (r.error !== undefined) throw r.error;
    const bad = `${r.stdout}${r.stderr}`
      .split("\n")
      .filter((l) => /ERROR|WARNING|FATAL|Warning|Bungled/.test(l));
    return r.status === 0 ? bad : [...bad, `exit ${r.status}`];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("squid.conf, read by squid -k parse", () => {
  it.each<[string, ProxySetup]>([
    ["with auth", AUTH],
    ["without auth, the default clients", NO_AUTH],
    ["everyone with auth", { ...AUTH, allowedClients: ["0.0.0.0/0", "::/0"] }],
    [
      "static NICs and opened destinations",
      {
        ...AUTH,
        allowedDestinations: ["192.168.10.0/24", "fd12::/16"],
        ownAddresses: ["203.0.113.10", "2001:db8:10::10"],
        onLink: ["203.0.113.0/24", "2001:db8:10::/64", "203.0.113.1", "fe80::1"],
      },
    ],
    [
      "1000 client ranges",
      {
        ...AUTH,
        allowedClients: Array.from({ length: 1000 }, (_, i) => `fd00:${i.toString(16)}:ffff:ffff::/64`),
      },
    ],
  ])("%s: no error, no warning", (_what, p) => {
    expect(parseProblems(p)).toEqual([]);
  });

  it("reports what is wrong (positive control: a line past squid's limit)", () => {
    const long = { ...AUTH, outgoingAddress: `198.51.100.7${" ".repeat(9000)}x` };
    expect(parseProblems(long).length).toBeGreaterThan(0);
  });
});

describe("squid.conf", () => {
  it("puts the auth helper, the outgoing address and the port in, and the access list after the auth lines", () => {
    const lines = buildSquidConf(AUTH).split("\n");
    expect(lines).toContain(`auth_param basic program @KVMP_AUTH_HELPER@ ${PASSWORD_FILE}`);
    expect(lines).toContain("tcp_outgoing_address 198.51.100.7");
    expect(lines).toContain("http_port 3128");
    expect(lines.indexOf("acl kvmp_users proxy_auth REQUIRED")).toBeLessThan(
      lines.indexOf("http_access deny !kvmp_clients !kvmp_self"),
    );
    expect(lines.indexOf("http_access deny all")).toBeGreaterThan(
      lines.indexOf("http_access allow kvmp_users"),
    );
  });

  it("without auth asks for no credentials and never admits everyone", () => {
    const conf = buildSquidConf(NO_AUTH);
    expect(conf).toContain(`acl kvmp_clients src ${DEFAULT_ALLOWED_CLIENTS.join(" ")}`);
    expect(conf).not.toMatch(/http_access allow all/);
    expect(conf).not.toContain("auth_param");
  });

  it("names squid after its configuration: visible_hostname is squidName, the same for the same setup", () => {
    const conf = buildSquidConf(AUTH);
    expect(conf.split("\n")).toContain(`visible_hostname ${squidName(AUTH)}`);
    expect(squidName(AUTH)).toMatch(/^kvm-proxy-[0-9a-f]{12}$/);
    expect(squidName({ ...AUTH })).toBe(squidName(AUTH));
  });

  it.each<[string, Partial<ProxySetup>]>([
    ["port", { port: 8080 }],
    ["allowedClients", { allowedClients: ["203.0.113.0/24"] }],
    ["allowedDestinations", { allowedDestinations: ["192.168.10.0/24"] }],
    ["the static addresses", { ownAddresses: ["203.0.113.10"], onLink: ["203.0.113.0/24"] }],
    ["outgoingAddress", { outgoingAddress: "198.51.100.8" }],
    ["auth", { auth: undefined }],
  ])("gives squid another name when %s changes", (_field, change) => {
    expect(squidName({ ...AUTH, ...change })).not.toBe(squidName(AUTH));
  });

  it("keeps the name when only the password changes (the hash is in the password file, not in squid.conf)", () => {
    const other = {
      ...AUTH,
      auth: {
        username: "crawler",
        passwordHash: squidPasswordHash("another password", "crawler", "urn:edge"),
      },
    };
    expect(squidName(other)).toBe(squidName(AUTH));
  });

  it("sends targets neither Via nor X-Forwarded-For, and hides squid's version", () => {
    const conf = buildSquidConf(AUTH);
    for (const l of [
      "request_header_access Via deny all",
      "forwarded_for delete",
      "httpd_suppress_version_string on",
    ]) {
      expect(conf).toContain(`${l}\n`);
    }
  });
});

describe("the setup script", () => {
  it.each([
    ["with auth", AUTH],
    ["without auth", NO_AUTH],
    ["with auth and SOCKS", { ...AUTH, socks: { port: 1080 } }],
    ["with SOCKS, without auth", { ...NO_AUTH, socks: { port: 1081 } }],
  ])("%s is a POSIX sh script dash parses", (_what, p) => {
    const script = buildProxySetupScript(p);
    expect(script.startsWith("#!/bin/sh\n")).toBe(true);
    execFileSync("dash", ["-n"], { input: script });
  });

  it("carries the password hash and never the password", () => {
    const script = buildProxySetupScript(AUTH);
    expect(script).toContain(`crawler:${AUTH.auth?.passwordHash}`);
    expect(script).not.toContain("s3cret-Pa55-long");
  });

  it("installs squid with the package manager it finds, waiting for its lock and retrying, and checks the port answers as squid", () => {
    const script = buildProxySetupScript(AUTH);
    for (const pm of [
      "retry apt_install",
      "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends squid",
      "retry dnf -y install squid",
      "retry apk add --wait 300 --no-cache squid",
      "ZYPP_LOCK_TIMEOUT=300",
    ]) {
      expect(script).toContain(pm);
    }
    expect(script).toContain("squid -k parse");
    expect(script).toContain("Accepting HTTPS? Socket connections at.*:3128[, ]");
  });

  it("writes the VM's own addresses and its on-link subnets and gateways for the destination rules", () => {
    const script = buildProxySetupScript(AUTH);
    expect(script).toContain("ip -o addr show scope global");
    expect(script).toContain(">/etc/squid/kvm-proxy-own.acl.new");
    expect(script).toContain(">/etc/squid/kvm-proxy-onlink.acl.new");
  });

  it("with SOCKS, sets Dante up once squid listens: installs it, makes the expired system account with the hash, fills in what the VM found, checks the greeting", () => {
    const script = buildProxySetupScript({ ...AUTH, socks: { port: 1080 } });
    expect(script.indexOf('log "squid is listening on port 3128"')).toBeLessThan(
      script.lastIndexOf("\t\tsocks_setup\n"),
    );
    for (const part of [
      "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends dante-server",
      "retry socks_install",
      `useradd --system --no-create-home --home-dir /nonexistent --shell "$nologin"`,
      `usermod --expiredate 1970-01-02 "$socks_user"`,
      `--password '${AUTH.auth?.passwordHash}' "$socks_user"`,
      "is not the proxy's: choose another proxy.auth.username",
      "block_rules /etc/squid/kvm-proxy-own.acl",
      "block_rules /etc/squid/kvm-proxy-onlink.acl",
      '"$socks_bin" -V -f "$socks_conf"',
      '= "socks 0502" ]',
    ]) {
      expect(script).toContain(part);
    }
    expect(script).not.toContain("s3cret-Pa55-long");
  });

  it("without SOCKS sets up no Dante, and turns off one the image brings (a baked image's)", () => {
    const script = buildProxySetupScript(AUTH);
    expect(script).not.toMatch(/dante-server|danted\.conf|socks_setup/);
    expect(script).toContain(NO_SOCKS_FUNCTION);
    expect(script).toMatch(/\n\t\tno_socks\n\t\texit 0\n/);
  });

  it.each([
    [0, ["is-enabled --quiet danted", "disable --now danted"]],
    [1, ["is-enabled --quiet danted"]],
  ])("no_socks, is-enabled exiting %i: systemctl is asked %j (the real sh)", (code, calls) => {
    const dir = mkdtempSync(path.join(tmpdir(), "kvmpt-no-socks-"));
    try {
      const log = path.join(dir, "calls");
      writeFileSync(log, "");
      writeFileSync(
        path.join(dir, "systemctl"),
        `#!/bin/sh\necho "$*" >>${log}\n[ "$1" = is-enabled ] && exit ${code}\nexit 0\n`,
      );
      chmodSync(path.join(dir, "systemctl"), 0o755);
      execFileSync("sh", ["-c", `log() { :; }\n${NO_SOCKS_FUNCTION}\nno_socks`], {
        env: { PATH: `${dir}:/usr/bin:/bin` },
      });
      expect(readFileSync(log, "utf8").split("\n").filter(Boolean)).toEqual(calls);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("is byte-identical for the same setup", () => {
    expect(buildProxySetupScript(AUTH)).toBe(buildProxySetupScript({ ...AUTH }));
  });
});

describe("with TLS on the proxy port", () => {
  const NOW = new Date();
  const CA = makeCa({ commonName: "kvm-proxy CA edge", now: NOW });
  const LEAF = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.7"], now: NOW });
  const SERVED = { certificate: LEAF.certificatePem + CA.certificatePem, privateKey: LEAF.privateKeyPem };
  const TLS: ProxySetup = { ...AUTH, tls: SERVED };

  it.each<[string, SquidConfInputs["tls"]]>([
    ["true (as squidConfOf says it)", true],
    ["the certificate served", SERVED],
    [
      "the CA that issues it (check's view)",
      { ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem } },
    ],
  ])(
    "squid.conf listens with TLS on the port and plainly on the loopback's probe port only: tls %s",
    (_what, tls) => {
      const lines = buildSquidConf({ ...AUTH, tls }).split("\n");
      expect(lines).toContain(`https_port 3128 tls-cert=${TLS_DIR}/cert.pem tls-key=${TLS_DIR}/key.pem`);
      expect(lines).toContain(`http_port 127.0.0.1:${LOOPBACK_PROBE_PORT}`);
      expect(lines.filter((l) => /^https?_port /.test(l))).toHaveLength(2);
      expect(TLS_DIR).toBe("/etc/squid/kvm-proxy-tls");
      expect(LOOPBACK_PROBE_PORT).toBe(59128);
    },
  );

  it.each<[string, SquidConfInputs["tls"]]>([
    ["absent", undefined],
    ["false", false],
  ])("squid.conf without TLS (tls %s) has the plain port alone", (_what, tls) => {
    const lines = buildSquidConf({ ...AUTH, ...(tls !== undefined ? { tls } : {}) }).split("\n");
    expect(lines.filter((l) => /^https?_port /.test(l))).toEqual(["http_port 3128"]);
  });

  it("names squid the same whether check (a CA) or create (the certificate served) builds it, and otherwise than without TLS", () => {
    const named = squidName({ ...AUTH, tls: true });
    expect(squidName(TLS)).toBe(named);
    expect(
      squidName({ ...AUTH, tls: { ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem } } }),
    ).toBe(named);
    expect(named).not.toBe(squidName(AUTH));
  });

  it.each([
    ["with auth", TLS],
    ["without auth, with SOCKS", { ...NO_AUTH, socks: { port: 1080 }, tls: SERVED }],
  ])("the script %s is a POSIX sh script dash parses", (_what, p) => {
    execFileSync("dash", ["-n"], { input: buildProxySetupScript(p) });
  });

  /** The script's TLS part, run by sh on a scratch folder for TLS_DIR; chown recorded, not run. */
  function runTlsPart(p: ProxySetup): { dir: string; chowns: string[]; done: () => void } {
    const script = buildProxySetupScript(p);
    const part = script.match(
      /\numask 077\nmkdir -p \/etc\/squid\/kvm-proxy-tls\n[\s\S]*?\nmv -f \/etc\/squid\/kvm-proxy-tls\/key\.pem\.new \/etc\/squid\/kvm-proxy-tls\/key\.pem\n/,
    )?.[0];
    expect(part).toBeDefined();
    const scratch = mkdtempSync(path.join(tmpdir(), "kvmpt-tls-"));
    const dir = path.join(scratch, "kvm-proxy-tls");
    const log = path.join(scratch, "chown");
    writeFileSync(log, "");
    execFileSync("sh", [
      "-ec",
      `group=proxy\nchown() { echo "$*" >>${log}; }\n${(part as string).replaceAll(TLS_DIR, dir)}`,
    ]);
    const chowns = readFileSync(log, "utf8").split("\n").filter(Boolean);
    return { dir, chowns, done: () => rmSync(scratch, { recursive: true, force: true }) };
  }

  it("writes the certificate chain (0644) and the key (0640, made under umask 077, then moved into place), both for root and squid's group (the real sh)", () => {
    const { dir, chowns, done } = runTlsPart(TLS);
    try {
      expect(readFileSync(path.join(dir, "cert.pem"), "utf8")).toBe(SERVED.certificate);
      expect(readFileSync(path.join(dir, "key.pem"), "utf8")).toBe(SERVED.privateKey);
      const mode = (f: string) => (statSync(path.join(dir, f)).mode & 0o777).toString(8);
      expect([mode("."), mode("cert.pem"), mode("key.pem")]).toEqual(["750", "644", "640"]);
      expect(existsSync(path.join(dir, "key.pem.new"))).toBe(false);
      expect(chowns).toEqual([`-R root:proxy ${dir}`]);
    } finally {
      done();
    }
    const script = buildProxySetupScript(TLS);
    // The key's file is made while only its owner may read it.
    expect(script.indexOf("umask 077\nmkdir -p /etc/squid/kvm-proxy-tls")).toBeGreaterThan(0);
    expect(script.indexOf("umask 077\nmkdir -p /etc/squid/kvm-proxy-tls")).toBeLessThan(
      script.indexOf("cat >/etc/squid/kvm-proxy-tls/key.pem.new"),
    );
  });

  it("without TLS removes a certificate and key an earlier setup left (a baked image's)", () => {
    const script = buildProxySetupScript(AUTH);
    expect(script.split("\n")).toContain(`rm -rf ${TLS_DIR}`);
    expect(script).not.toContain("cert.pem <<");
    expect(buildProxySetupScript(TLS).split("\n")).not.toContain(`rm -rf ${TLS_DIR}`);
  });

  it("refuses a setup whose TLS is still the CA: create issues the certificate first", () => {
    const ca = { ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem } };
    expect(() => buildProxySetupScript({ ...AUTH, tls: ca })).toThrow(
      "the proxy's certificate is issued at create: the setup takes the one served",
    );
  });

  it.each([
    ["the certificate", { ...SERVED, certificate: `${SERVED.certificate}KVMP_EOF\nrm -rf /\n` }],
    ["the key", { ...SERVED, privateKey: `KVMP_EOF\n${SERVED.privateKey}` }],
  ])("refuses %s holding a line of the heredoc's delimiter, which would end its text early", (_what, tls) => {
    expect(() => buildProxySetupScript({ ...AUTH, tls })).toThrow(
      "the squid setup holds the heredoc delimiter",
    );
  });

  it("waits for squid's log line for an HTTPS listener on the port as for an HTTP one (grep -E)", () => {
    const script = buildProxySetupScript(TLS);
    const pattern = script.match(/grep -qE "([^"]+)"/)?.[1] as string;
    const matches = (line: string) =>
      spawnSync("grep", ["-qE", pattern], { input: `${line}\n` }).status === 0;
    const at = "2026/12/06 11:49:48 kid1|";
    expect(
      matches(`${at} Accepting HTTPS Socket connections at conn13 local=[::]:3128 remote=[::] FD 13 flags=9`),
    ).toBe(true);
    expect(
      matches(`${at} Accepting HTTP Socket connections at conn12 local=[::]:3128 remote=[::] FD 12 flags=9`),
    ).toBe(true);
    // The loopback's probe port is not the proxy's, nor a longer port that starts alike.
    expect(
      matches(
        `${at} Accepting HTTP Socket connections at conn14 local=127.0.0.1:59128 remote=[::] FD 14 flags=9`,
      ),
    ).toBe(false);
    expect(
      matches(
        `${at} Accepting HTTPS Socket connections at conn15 local=[::]:31280 remote=[::] FD 15 flags=9`,
      ),
    ).toBe(false);
  });
});
