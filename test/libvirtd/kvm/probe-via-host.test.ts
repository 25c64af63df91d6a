/**
 * The health check through the host (`healthCheck.via: "host"`):
 * a real squid, with the squid.conf the provider writes, listens inside the
 * test host's network namespace on its loopback, which this process (in the
 * root namespace) cannot reach: its own 127.0.0.1 is another one. The probe
 * goes over the SSH connection the provider's host pool holds (a
 * direct-tcpip channel from the host's sshd), with ssh2 and with OpenSSH.
 * `allowedClients` leaves the probe's source out: `GET /` is still answered
 * by squid itself (before any access check), a proxied request is refused,
 * and a stopped squid fails the probe.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HostConfig, parseConfig } from "../../../provider/kvm/config/host-config";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { buildSquidConf, type ProxySetup, squidName } from "../../../provider/kvm/proxy/setup";
import { type ProbeTarget, probeOnce } from "../../../provider/probes/health-check";
import { type TestHost, testHost } from "../../support/test-host";

/** The port of the namespace's squid: on its loopback only (it binds every address of the namespace). */
const PORT = 3991;
const SETUP: ProxySetup = {
  port: PORT,
  // Not the probe's source (127.0.0.1): admitting it is not what makes the probe pass.
  allowedClients: ["10.99.0.0/16"],
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
};

let host: TestHost;
let dir: string;
let squid: ChildProcess | undefined;

function startSquid(): Promise<void> {
  const conf = buildSquidConf(SETUP)
    .replaceAll("/etc/squid/", `${dir}/`)
    .replace("@KVMP_AUTH_HELPER@", "/usr/lib/squid/basic_ncsa_auth");
  for (const f of ["kvm-proxy-own.acl", "kvm-proxy-onlink.acl"])
    writeFileSync(path.join(dir, f), "192.0.2.99\n");
  writeFileSync(
    path.join(dir, "squid.conf"),
    `${conf}\npid_filename ${dir}/squid.pid\ncache_log ${dir}/cache.log\naccess_log none\n`,
  );
  squid = spawn("ip", ["netns", "exec", host.netns, "squid", "-N", "-f", path.join(dir, "squid.conf")], {
    stdio: "ignore",
  });
  // Ready once squid answers inside the namespace.
  return new Promise((resolve, reject) => {
    const until = Date.now() + 20_000;
    const poll = () => {
      const probe = spawn("ip", [
        "netns",
        "exec",
        host.netns,
        "curl",
        "-s",
        "-o",
        "/dev/null",
        `http://127.0.0.1:${PORT}/`,
      ]);
      probe.once("exit", (code) => {
        if (code === 0) resolve();
        else if (Date.now() > until) reject(new Error(`squid did not start (${dir}/cache.log)`));
        else setTimeout(poll, 200);
      });
    };
    poll();
  });
}

function stopSquid(): Promise<void> {
  const child = squid;
  squid = undefined;
  if (child === undefined || child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGINT");
  });
}

function pools(): Record<string, HostPool> {
  const remote = {
    uri: `ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
    privateKeyPath: host.sshKeyPath,
    knownHostsPath: host.knownHostsPath,
  };
  const hosts = (transport: string) =>
    parseConfig({ hosts: { remote: { ...remote, transport } } }).hosts as Record<string, HostConfig>;
  return { ssh2: new HostPool(hosts("ssh2")), openssh: new HostPool(hosts("openssh")) };
}

let byTransport: Record<string, HostPool>;

beforeAll(async () => {
  host = testHost();
  dir = mkdtempSync(path.join(host.stateDir, "probe-via-host-"));
  chmodSync(dir, 0o777);
  byTransport = pools();
  await startSquid();
});

afterAll(async () => {
  await stopSquid();
  for (const p of Object.values(byTransport ?? {})) await p.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

const target = (pool?: HostPool, url?: string): ProbeTarget => ({
  ip: "127.0.0.1",
  proxyPort: PORT,
  squidName: squidName(SETUP),
  ...(url !== undefined ? { url } : {}),
  ...(pool !== undefined
    ? { connect: () => pool.tunnel("remote", "127.0.0.1", PORT) as Promise<import("node:stream").Duplex> }
    : {}),
});

describe.each(["ssh2", "openssh"])("a probe through the host (%s)", (transport) => {
  it("reaches the namespace's squid, which this process cannot reach itself, and proves it is this proxy's", async () => {
    const pool = byTransport[transport] as HostPool;
    expect(await probeOnce(target(pool), 10_000)).toEqual({ ok: true, status: 400 });
    const direct = await probeOnce(target(), 3_000);
    expect(direct.ok).toBe(false);
  });

  it("widens nothing: a request through the proxy from the probe's source is refused", async () => {
    const pool = byTransport[transport] as HostPool;
    const r = await probeOnce(target(pool, "http://192.0.2.99/"), 10_000);
    expect(r).toMatchObject({ ok: false, reason: expect.stringMatching(/403/) });
  });
});

describe("a stopped squid", () => {
  it("fails the probe through the host, with either transport", async () => {
    await stopSquid();
    for (const pool of Object.values(byTransport)) {
      const r = await probeOnce(target(pool), 10_000);
      // As a direct probe would say it (refresh's degraded reason).
      expect(r).toMatchObject({ ok: false, reason: expect.stringMatching(/ECONNREFUSED/) });
    }
  });
});
