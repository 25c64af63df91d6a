/**
 * The guest's proxy setup (provider/kvm/proxy-setup.ts): the password hash
 * against OpenSSL's own MD5-crypt, squid.conf's access rules, and the
 * vendor-data script (parsed by dash, the POSIX shell of Debian's /bin/sh).
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  buildProxySetupScript,
  buildSquidConf,
  DEFAULT_ALLOWED_CLIENTS,
  md5Crypt,
  PASSWORD_FILE,
  type ProxySetup,
  squidName,
  squidPasswordHash,
} from "../../../provider/kvm/proxy-setup";

const AUTH: ProxySetup = {
  port: 3128,
  auth: { username: "crawler", passwordHash: squidPasswordHash("s3cret-Pa55", "crawler@edge") },
  allowedClients: ["203.0.113.0/24", "2001:db8::/32"],
  outgoingAddress: "198.51.100.7",
};

describe("md5Crypt", () => {
  it.each([
    ["hello", "abcdefgh"],
    ["sixteen-bytes-pw", "x"],
    ["a much longer password than sixteen bytes", "./Zz09"],
    ["ünïcödé pässwörd", "saltsalt"],
    ["with:colon and $dollar", "Q"],
  ])("matches openssl passwd -1 for %j with salt %j", (password, salt) => {
    const reference = execFileSync("openssl", ["passwd", "-1", "-salt", salt, "-stdin"], {
      input: password,
      encoding: "utf8",
    }).trim();
    expect(md5Crypt(password, salt)).toBe(reference);
  });

  it("refuses a salt squid's helper could not read", () => {
    expect(() => md5Crypt("x", "has$dollar")).toThrow(/salt/);
    expect(() => md5Crypt("x", "")).toThrow(/salt/);
  });
});

describe("squidPasswordHash", () => {
  it("is the same for the same password and context (a deterministic seed), and differs by context", () => {
    const a = squidPasswordHash("pw", "crawler@edge-1");
    expect(squidPasswordHash("pw", "crawler@edge-1")).toBe(a);
    expect(squidPasswordHash("pw", "crawler@edge-2")).not.toBe(a);
    expect(squidPasswordHash("pw2", "crawler@edge-1")).not.toBe(a);
  });

  it("is an MD5-crypt hash whose salt, re-hashed by OpenSSL, verifies the password", () => {
    const h = squidPasswordHash("s3cret", "ctx");
    const salt = h.split("$")[2] as string;
    expect(h).toMatch(/^\$1\$[./0-9A-Za-z]{8}\$[./0-9A-Za-z]{22}$/);
    const reference = execFileSync("openssl", ["passwd", "-1", "-salt", salt, "-stdin"], {
      input: "s3cret",
      encoding: "utf8",
    }).trim();
    expect(h).toBe(reference);
  });
});

describe("squid.conf", () => {
  it("denies clients outside allowedClients before asking for credentials, then requires them", () => {
    const lines = buildSquidConf(AUTH).split("\n");
    const order = [
      "acl kvmp_clients src 203.0.113.0/24 2001:db8::/32",
      "http_access deny !kvmp_clients",
      "http_access deny manager",
      "http_access deny !kvmp_users",
      "http_access allow kvmp_users",
      "http_access deny all",
    ].map((l) => lines.indexOf(l));
    expect(order.every((i) => i >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(lines).toContain(`auth_param basic program @KVMP_AUTH_HELPER@ ${PASSWORD_FILE}`);
    expect(lines).toContain("tcp_outgoing_address 198.51.100.7");
    expect(lines).toContain("http_port 3128");
  });

  it("without auth admits only allowedClients (the private ranges by default) and never everyone", () => {
    const conf = buildSquidConf({ port: 8080, allowedClients: DEFAULT_ALLOWED_CLIENTS });
    expect(conf).toContain(`acl kvmp_clients src ${DEFAULT_ALLOWED_CLIENTS.join(" ")}`);
    expect(conf).toContain("http_access allow kvmp_clients\nhttp_access deny all");
    expect(conf).not.toMatch(/http_access allow all/);
    expect(conf).not.toContain("auth_param");
  });

  it("writes 'all' for a client range of everyone (squid refuses 0.0.0.0/0) and drops duplicates", () => {
    expect(buildSquidConf({ port: 3128, allowedClients: ["0.0.0.0/0", "::/0"] })).toContain(
      "acl kvmp_clients src all\n",
    );
    expect(buildSquidConf({ port: 3128, allowedClients: ["10.0.0.0/8", "10.0.0.0/8"] })).toContain(
      "acl kvmp_clients src 10.0.0.0/8\n",
    );
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
    ["outgoingAddress", { outgoingAddress: "198.51.100.8" }],
    ["auth", { auth: undefined }],
  ])("gives squid another name when %s changes", (_field, change) => {
    expect(squidName({ ...AUTH, ...change })).not.toBe(squidName(AUTH));
  });

  it("keeps the name when only the password changes (the hash is in the password file, not in squid.conf)", () => {
    const other = { ...AUTH, auth: { username: "crawler", passwordHash: squidPasswordHash("other", "c") } };
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
    ["without auth", { port: 3128, allowedClients: DEFAULT_ALLOWED_CLIENTS }],
  ])("%s is a POSIX sh script dash parses", (_what, p) => {
    const script = buildProxySetupScript(p);
    expect(script.startsWith("#!/bin/sh\n")).toBe(true);
    execFileSync("dash", ["-n"], { input: script });
  });

  it("carries the password hash and never the password", () => {
    const script = buildProxySetupScript(AUTH);
    expect(script).toContain(`crawler:${AUTH.auth?.passwordHash}`);
    expect(script).not.toContain("s3cret-Pa55");
  });

  it("installs squid with the package manager it finds, and checks the port answers as squid", () => {
    const script = buildProxySetupScript(AUTH);
    for (const pm of ["apt-get -y install squid", "dnf -y install squid", "apk add --no-cache squid"]) {
      expect(script).toContain(pm);
    }
    expect(script).toContain("squid -k parse");
    expect(script).toContain("Accepting HTTP Socket connections at.*:3128[, ]");
  });

  it("is byte-identical for the same setup", () => {
    expect(buildProxySetupScript(AUTH)).toBe(buildProxySetupScript({ ...AUTH }));
  });
});
