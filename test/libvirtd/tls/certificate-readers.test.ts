/**
 * The proxy's certificates (provider/kvm/tls/certificate.ts) as real readers
 * take them: OpenSSL's CLI, GnuTLS's certtool, and a real TLS handshake with
 * this machine's squid 5.7 (the guests' own version, GnuTLS flavour)
 * serving the leaf on `https_port`, reached through curl, gnutls-cli,
 * Python's ssl module, Node's tls and Go's net/http, each trusting only the
 * CA. And what the CA's name constraints are for: leaves for a DNS name
 * signed with the CA's key by OpenSSL (what a leaked key allows) are refused
 * by OpenSSL, GnuTLS, Go, Python and Node alike.
 *
 * Everything stays on the loopback: squid listens on 127.0.0.1 and ::1, asks
 * no DNS server but 127.0.0.1, and its only destination is port 1 of the
 * loopback (refused at once: squid answers 503). It needs squid and
 * gnutls-bin (certtool, gnutls-cli), which scripts/test-host installs, and
 * curl, openssl, python3 and go (which the pulumi group uses too). Nothing
 * here needs the test host itself.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { connect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CertificateAndKey,
  certificateFingerprint,
  issueLeaf,
  makeCa,
  publicKeyPin,
} from "../../../provider/kvm/tls/certificate";

let dir: string;
let squid: ChildProcess | undefined;
/** The port of the leaf (on 127.0.0.1 and ::1), and of a DNS-named leaf from the same CA (127.0.0.1). */
let port = 0;
let dnsPort = 0;
const DESTINATION = "http://127.0.0.1:1/";
const REQUEST = `GET ${DESTINATION} HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n`;

const file = (name: string) => path.join(dir, name);

function run(
  cmd: string,
  args: string[],
  o: { input?: string; env?: NodeJS.ProcessEnv; timeout?: number } = {},
) {
  const r = spawnSync(cmd, args, {
    encoding: "utf8",
    input: o.input,
    env: o.env ?? process.env,
    timeout: o.timeout ?? 30_000,
  });
  if (r.error) throw r.error;
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function write(name: string, pair: CertificateAndKey): void {
  writeFileSync(file(`${name}.pem`), pair.certificatePem);
  writeFileSync(file(`${name}.key`), pair.privateKeyPem);
}

/**
 * A leaf signed with the CA's key by OpenSSL itself, as whoever held a leaked
 * key could: `san` its subjectAltName (none when empty), `cn` its commonName.
 */
function foreignLeaf(name: string, san: string, cn: string): void {
  const key = file(`${name}.key`);
  const csr = file(`${name}.csr`);
  run(
    "openssl",
    ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"].concat([
      "-keyout",
      key,
      "-subj",
      `/CN=${cn}`,
      "-out",
      csr,
    ]),
  );
  const ext = ["basicConstraints=critical,CA:FALSE", "extendedKeyUsage=serverAuth"];
  if (san !== "") ext.push(`subjectAltName=${san}`);
  writeFileSync(file(`${name}.ext`), `${ext.join("\n")}\n`);
  const made = run(
    "openssl",
    ["x509", "-req", "-in", csr, "-CA", file("ca.pem"), "-CAkey", file("ca.key")].concat([
      "-set_serial",
      "7",
      "-days",
      "30",
      "-extfile",
      file(`${name}.ext`),
      "-out",
      file(`${name}.pem`),
    ]),
  );
  if (made.status !== 0) throw new Error(`openssl x509 -req: ${made.out}`);
}

/** The leaves OpenSSL signs with the CA's key, for a DNS name, each a way to ask for one. */
const FOREIGN: [string, string, string][] = [
  ["dns", "DNS:example.com", "attacker"],
  ["dns-and-ip", "DNS:example.com,IP:127.0.0.1", "attacker"],
  ["cn-only", "", "example.com"],
];

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

async function startSquid(): Promise<void> {
  const listen = (addr: string, p: number, leaf: string) =>
    `https_port ${addr}:${p} tls-cert=${file(`${leaf}.pem`)} tls-key=${file(`${leaf}.key`)}`;
  const conf = [
    listen("127.0.0.1", port, "leaf"),
    listen("[::1]", port, "leaf"),
    listen("127.0.0.1", dnsPort, "dns"),
    "http_access allow localhost",
    "http_access deny all",
    "dns_nameservers 127.0.0.1",
    "pinger_enable off",
    "visible_hostname kvmp-tls-test",
    "shutdown_lifetime 0 seconds",
    `pid_filename ${file("squid.pid")}`,
    `cache_log ${file("cache.log")}`,
    "access_log none",
    "cache_store_log none",
    `coredump_dir ${dir}`,
  ];
  writeFileSync(file("squid.conf"), `${conf.join("\n")}\n`);
  // squid drops to the proxy user, which reads the key files from here on.
  run("chown", ["-R", "proxy:proxy", dir]);
  squid = spawn("squid", ["-N", "-f", file("squid.conf")], { stdio: "ignore" });
  for (let i = 0; i < 100; i++) {
    let log = "";
    try {
      log = readFileSync(file("cache.log"), "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (/FATAL/.test(log)) throw new Error(`squid failed: ${log}`);
    if ((log.match(/Accepting HTTPS Socket connections/g) ?? []).length === 3) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error("squid did not start");
}

async function stopSquid(): Promise<void> {
  const child = squid;
  if (child === undefined || child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

let ca: CertificateAndKey;
let leaf: CertificateAndKey;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "kvmp-tls-"));
  ca = makeCa({ commonName: "kvm-proxy test CA", now: new Date() });
  leaf = issueLeaf({ ca, ipAddresses: ["127.0.0.1", "::1"], now: new Date() });
  write("ca", ca);
  write("leaf", leaf);
  for (const [name, san, cn] of FOREIGN) foreignLeaf(name, san, cn);
  // Valid for 127.0.0.1 and named "kvm proxy": no DNS name, but a commonName.
  foreignLeaf("ip-with-cn", "IP:127.0.0.1", "kvm proxy");
  port = await freePort();
  dnsPort = await freePort();
  await startSquid();
});

afterAll(async () => {
  await stopSquid();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("OpenSSL", () => {
  it("reads the CA: CA:TRUE pathlen 0, keyCertSign and cRLSign, name constraints to IP addresses", () => {
    const text = run("openssl", ["x509", "-in", file("ca.pem"), "-noout", "-text"]).out;
    expect(text).toMatch(/Version: 3 \(0x2\)/);
    expect(text).toMatch(/Basic Constraints: critical\s+CA:TRUE, pathlen:0/);
    expect(text).toMatch(/Key Usage: critical\s+Certificate Sign, CRL Sign/);
    expect(text).toMatch(/Subject Key Identifier:/);
    expect(text).toMatch(
      /Name Constraints: critical\s+Permitted:\s+IP:0\.0\.0\.0\/0\.0\.0\.0\s+IP:0:0:0:0:0:0:0:0\/0:0:0:0:0:0:0:0\s+DNS:invalid\s+Excluded:\s+DNS:\s*\n/,
    );
    expect(text).toMatch(/Public Key Algorithm: id-ecPublicKey[\s\S]*NIST CURVE: P-256/);
  });

  it("reads the leaf: its IP addresses, no CA, a server key, keys named", () => {
    const text = run("openssl", ["x509", "-in", file("leaf.pem"), "-noout", "-text"]).out;
    expect(text).toMatch(
      /Subject Alternative Name: critical\s+IP Address:127\.0\.0\.1, IP Address:0:0:0:0:0:0:0:1\n/,
    );
    expect(text).toMatch(/Basic Constraints: critical\s+CA:FALSE/);
    expect(text).toMatch(/Key Usage: critical\s+Digital Signature\n/);
    expect(text).toMatch(/Extended Key Usage:\s+TLS Web Server Authentication/);
    expect(text).toMatch(/Issuer: CN = kvm-proxy test CA/);
    expect(text).toMatch(/Subject: *\n/);
    const caText = run("openssl", ["x509", "-in", file("ca.pem"), "-noout", "-text"]).out;
    const caKeyId = caText.match(/Subject Key Identifier:\s+(\S+)/)?.[1];
    expect(text).toMatch(new RegExp(`Authority Key Identifier:\\s+(keyid:)?${caKeyId}`));
  });

  it("prints the fingerprint certificateFingerprint gives", () => {
    const out = run("openssl", ["x509", "-in", file("leaf.pem"), "-noout", "-fingerprint", "-sha256"]).out;
    expect(out.trim()).toBe(`sha256 Fingerprint=${certificateFingerprint(leaf.certificatePem)}`);
  });

  it.each(["127.0.0.1", "::1"])("verifies the leaf against the CA for %s", (ip) => {
    const r = run("openssl", ["verify", "-verify_ip", ip, "-CAfile", file("ca.pem"), file("leaf.pem")]);
    expect(r.out).toMatch(/: OK\n/);
    expect(r.status).toBe(0);
  });

  it("does not verify it for another address", () => {
    const r = run("openssl", [
      "verify",
      "-verify_ip",
      "127.0.0.2",
      "-CAfile",
      file("ca.pem"),
      file("leaf.pem"),
    ]);
    expect(r.out).toMatch(/IP address mismatch/);
    expect(r.status).not.toBe(0);
  });

  it.each(FOREIGN)("refuses a leaf for a DNS name from the same CA (%s) by its name constraints", (name) => {
    const r = run("openssl", ["verify", "-CAfile", file("ca.pem"), file(`${name}.pem`)]);
    expect(r.out).toMatch(/(permitted|excluded) subtree violation/);
    expect(r.status).not.toBe(0);
  });
});

describe("GnuTLS certtool", () => {
  const verify = (leafFile: string, hostname?: string) =>
    run("certtool", [
      "--verify",
      ...(hostname !== undefined ? ["--verify-hostname", hostname] : []),
      "--load-ca-certificate",
      file("ca.pem"),
      "--infile",
      file(leafFile),
    ]).out;

  it("reads the CA's name constraints", () => {
    const info = run("certtool", ["-i", "--infile", file("ca.pem")]).out;
    expect(info).toMatch(
      /Name Constraints \(critical\):\s+Permitted:\s+IPAddress: 0\.0\.0\.0\/0\s+IPAddress: ::\/0\s+DNSname: invalid\s+Excluded:\s+DNSname: *\n/,
    );
  });

  it.each(["127.0.0.1", "::1"])("verifies the leaf against the CA for %s", (ip) => {
    expect(verify("leaf.pem", ip)).toMatch(
      /Chain verification output: Verified\. The certificate is trusted\./,
    );
  });

  it.each(FOREIGN)("refuses a leaf for a DNS name from the same CA (%s) by its name constraints", (name) => {
    expect(verify(`${name}.pem`)).toMatch(/Not verified\..*violates the signer's constraints/);
  });

  it("refuses a leaf for 127.0.0.1 that has a commonName: why the leaf's subject is empty", () => {
    expect(verify("ip-with-cn.pem", "127.0.0.1")).toMatch(
      /Not verified\..*violates the signer's constraints/,
    );
    // OpenSSL takes it (a commonName with a space does not read as a host name).
    expect(run("openssl", ["verify", "-CAfile", file("ca.pem"), file("ip-with-cn.pem")]).status).toBe(0);
  });
});

describe("a TLS handshake with squid serving the leaf", () => {
  const curl = (proxy: string, ...args: string[]) =>
    run("curl", [
      "-g",
      "-sS",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "--max-time",
      "10",
      "--proxy",
      proxy,
      ...args,
    ]);
  const v4 = () => `https://127.0.0.1:${port}`;
  const v6 = () => `https://[::1]:${port}`;

  it("curl with --proxy-cacert gets squid's answer through IPv4 and IPv6; without it, fails verification (exit 60)", () => {
    expect(curl(v4(), "--proxy-cacert", file("ca.pem"), DESTINATION)).toEqual({ status: 0, out: "503" });
    // curl before 8.6 checks a proxy's IPv6 address against the certificate only when the destination is
    // an IPv6 address too (Debian 12 has 7.88); for any other destination it fails whatever the certificate.
    expect(curl(v6(), "--proxy-cacert", file("ca.pem"), "http://[::1]:1/")).toEqual({
      status: 0,
      out: "503",
    });
    const r = curl(v4(), DESTINATION);
    expect(r.status).toBe(60);
    expect(r.out).toMatch(/unable to get local issuer certificate/);
  });

  it("curl pins the leaf's key by publicKeyPin and refuses another key (exit 90)", () => {
    // As a TLS server (squid answers a request that is not a proxy's with 400): curl's command line
    // ignores --proxy-pinnedpubkey before 8.10, so the pin is shown with --pinnedpubkey.
    const direct = (pin: string) =>
      run(
        "curl",
        ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--insecure"].concat([
          "--pinnedpubkey",
          pin,
          `https://127.0.0.1:${port}/`,
        ]),
      );
    expect(direct(publicKeyPin(leaf.certificatePem))).toEqual({ status: 0, out: "400" });
    expect(direct(publicKeyPin(ca.certificatePem)).status).toBe(90);
  });

  it.each(["127.0.0.1", "::1"])(
    "gnutls-cli trusts it at %s and gets squid's answer; not without the CA",
    async (host) => {
      const out = await interact(
        "gnutls-cli",
        ["--x509cafile", file("ca.pem"), "-p", String(port), host],
        /HTTP\/1\.1 \d{3} /,
      );
      expect(out).toMatch(/- Status: The certificate is trusted\./);
      expect(out).toMatch(/HTTP\/1\.1 503/);
      // GnuTLS prints the same pin publicKeyPin gives.
      expect(out).toContain(`pin-sha256:${publicKeyPin(leaf.certificatePem).slice("sha256//".length)}`);
      const without = await interact(
        "gnutls-cli",
        ["-p", String(port), host],
        /The certificate is NOT trusted|HTTP\/1\.1 \d{3} /,
      );
      expect(without).toMatch(/The certificate is NOT trusted/);
    },
  );

  const PYTHON = `
import socket, ssl, sys
host, port, cafile, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=cafile or None)
try:
    with socket.create_connection((host, port), timeout=10) as s, ctx.wrap_socket(s, server_hostname=name) as t:
        t.sendall(sys.stdin.read().encode())
        print(t.recv(200).split(b"\\r\\n")[0].decode())
except ssl.SSLError as e:
    print("ssl error:", e.reason, e.verify_message if hasattr(e, "verify_message") else "")
`;
  const python = (host: string, p: number, cafile: string, name = host) =>
    run("python3", ["-c", PYTHON, host, String(p), cafile, name], { input: REQUEST }).out.trim();

  it.each(["127.0.0.1", "::1"])(
    "Python's ssl module (OpenSSL) trusts it at %s; not without the CA (its default trust store)",
    (host) => {
      expect(python(host, port, file("ca.pem"))).toBe("HTTP/1.1 503 Service Unavailable");
      expect(python(host, port, "")).toMatch(
        /CERTIFICATE_VERIFY_FAILED.*unable to get local issuer certificate/,
      );
    },
  );

  it("Python refuses the DNS-named leaf from the same CA by its name constraints", () => {
    expect(python("127.0.0.1", dnsPort, file("ca.pem"), "example.com")).toMatch(/subtree violation/);
  });

  const node = (host: string, p: number, ca?: string, servername?: string) =>
    new Promise<string>((resolve) => {
      const s = connect({ host, port: p, ca, servername, timeout: 10_000 }, () => s.write(REQUEST));
      let data = "";
      s.setEncoding("utf8");
      s.on("data", (d) => {
        data += d;
      });
      s.on("end", () => resolve(data.split("\r\n")[0] as string));
      s.on("error", (e: NodeJS.ErrnoException) => resolve(`error ${e.code}: ${e.message}`));
      s.on("timeout", () => s.destroy(new Error("timeout")));
    });

  it.each(["127.0.0.1", "::1"])("Node's tls trusts it at %s; not without the CA", async (host) => {
    expect(await node(host, port, ca.certificatePem)).toBe("HTTP/1.1 503 Service Unavailable");
    expect(await node(host, port)).toMatch(/^error UNABLE_TO_VERIFY_LEAF_SIGNATURE/);
  });

  it("Node refuses the DNS-named leaf from the same CA by its name constraints", async () => {
    expect(await node("127.0.0.1", dnsPort, ca.certificatePem, "example.com")).toMatch(/subtree violation/);
  });

  const GO = `package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

func pool(caFile string) *x509.CertPool {
	p := x509.NewCertPool()
	if caFile != "" {
		b, _ := os.ReadFile(caFile)
		p.AppendCertsFromPEM(b)
	}
	return p
}

// get <proxy URL> <URL> <CA file or "">: a request through the HTTPS proxy.
// verify <CA file> <leaf file> <name>: the leaf's chain to the CA, for the name.
func main() {
	switch os.Args[1] {
	case "get":
		proxy, _ := url.Parse(os.Args[2])
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool(os.Args[4])}}}
		resp, err := client.Get(os.Args[3])
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		resp.Body.Close()
		fmt.Println("status:", resp.StatusCode)
	case "verify":
		b, _ := os.ReadFile(os.Args[3])
		block, _ := pem.Decode(b)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err == nil {
			_, err = leaf.Verify(x509.VerifyOptions{Roots: pool(os.Args[2]), DNSName: os.Args[4]})
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println("verified")
	}
}
`;

  it("Go's net/http trusts it at both addresses, fails without the CA, and refuses the DNS-named leaves by the name constraints", () => {
    writeFileSync(file("main.go"), GO);
    // Only the standard library, no module: nothing to download.
    const env = { ...process.env, GOTOOLCHAIN: "local", GOPROXY: "off", GOFLAGS: "-mod=mod" };
    const built = run("go", ["build", "-o", file("client"), file("main.go")], { env, timeout: 110_000 });
    expect(built).toEqual({ status: 0, out: "" });
    const go = (...args: string[]) => run(file("client"), args).out.trim();
    expect(go("get", v4(), DESTINATION, file("ca.pem"))).toBe("status: 503");
    expect(go("get", v6(), DESTINATION, file("ca.pem"))).toBe("status: 503");
    expect(go("get", v4(), DESTINATION, "")).toMatch(/certificate signed by unknown authority/);
    expect(go("verify", file("ca.pem"), file("leaf.pem"), "::1")).toBe("verified");
    expect(go("verify", file("ca.pem"), file("dns.pem"), "example.com")).toMatch(
      /not authorized to sign for this name: DNS name "example.com" is (not permitted|excluded)/,
    );
    expect(go("verify", file("ca.pem"), file("dns-and-ip.pem"), "127.0.0.1")).toMatch(
      /not authorized to sign for this name: DNS name "example.com"/,
    );
  }, 120_000);
});

/**
 * Runs `cmd` with the request on its stdin, kept open until its output
 * matches `until` (or it exits, or 10 s pass): gnutls-cli quits at the end
 * of its input before the answer arrives.
 */
function interact(cmd: string, args: string[], until: RegExp): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    const done = () => {
      clearTimeout(timer);
      child.kill();
      resolve(out);
    };
    const timer = setTimeout(done, 10_000);
    const take = (d: Buffer) => {
      out += d.toString("utf8");
      if (until.test(out)) done();
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    child.on("close", done);
    child.stdin.on("error", () => {});
    child.stdin.write(REQUEST);
  });
}
