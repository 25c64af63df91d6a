/**
 * Jump hosts for the ssh2 transport, through real sshds in
 * the test host's namespaces: a bastion on the veth address (the only one
 * reachable from here), a second bastion and the target on the namespace's
 * loopback, reachable only from inside. Hosts are configured as users do
 * (kvm:hosts with `jump`), built by the HostPool and used by the KVM
 * operations against the real libvirtd behind the target.
 */
import { chmodSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import { type HostConfig, parseConfig } from "../../../provider/kvm/config/host-config";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { buildTransport, HostPool } from "../../../provider/kvm/host/hosts";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { JumpHosts } from "../../../provider/transport/jump";
import { type TestHost, testHost } from "../../support/test-host";
import { baseSpec, imageConfig, makeQcow2, ownedBy, uniqueName, virshQuiet } from "../kvm/ops-helpers";
import { clientKey, fingerprintOf, startSshd, type TestSshd } from "./bastions";
import { authList, errorText, okReply, pubKey, scratchDir } from "./helpers";

const BASTION_PORT = 2231;
const INNER_BASTION_PORT = 2232;
const TARGET_PORT = 2233;

let host: TestHost;
let dir: string;
let bastion: TestSshd;
let inner: TestSshd;
let target: TestSshd;
/** The second bastion accepts only this key: a hop with credentials of its own. */
let innerKey: { text: string; pub: string };
let image: ImageConfig;
const domains: string[] = [];

beforeAll(async () => {
  host = testHost();
  dir = scratchDir(host, "jump");
  chmodSync(dir, 0o755);
  const hostClient = pubKey(`${host.sshKeyPath}.pub`);
  innerKey = clientKey(dir, "inner_client");
  bastion = await startSshd(host, {
    name: "bastion",
    address: host.address,
    port: BASTION_PORT,
    authorized: [hostClient],
  });
  inner = await startSshd(host, {
    name: "inner",
    address: "127.0.0.1",
    port: INNER_BASTION_PORT,
    authorized: [innerKey.pub],
  });
  target = await startSshd(host, {
    name: "target",
    address: "127.0.0.1",
    port: TARGET_PORT,
    authorized: [hostClient],
  });
  const img = makeQcow2(dir, "jump-image", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterAll(() => {
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  bastion?.stop();
  inner?.stop();
  target?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** All three host keys, as the host's inline known_hosts (each hop takes the host's unless it has its own). */
function allKnownHosts(): string {
  return `${[bastion, inner, target].map((s) => s.knownHostsLine).join("\n")}\n`;
}

const bastionUri = () => `ssh://root@${host.address}:${BASTION_PORT}`;
const innerUri = () => `ssh://root@127.0.0.1:${INNER_BASTION_PORT}`;

function hosts(entries: Record<string, Record<string, unknown>>): Record<string, HostConfig> {
  const common = { domainType: "qemu", pool: host.poolName, network: host.network };
  return parseConfig({
    hosts: Object.fromEntries(
      Object.entries(entries).map(([k, v]) => [
        k,
        {
          uri: `ssh://root@127.0.0.1:${TARGET_PORT}`,
          privateKeyPath: host.sshKeyPath,
          knownHosts: allKnownHosts(),
          ...common,
          ...v,
        },
      ]),
    ),
  }).hosts;
}

const oneHop = () => ({ jump: bastionUri() });
const twoHops = () => ({ jump: [bastionUri(), { uri: innerUri(), privateKey: innerKey.text }] });

async function failureOf(pool: HostPool, key: string): Promise<ProviderError> {
  try {
    await pool.libvirt(key).connectGetLibVersion();
  } catch (err) {
    return err as ProviderError;
  } finally {
    await pool.closeAll();
  }
  throw new Error("expected the connection to fail");
}

describe("reaching libvirtd through jump hosts", () => {
  it("the target is not reachable directly (positive control)", async () => {
    const pool = new HostPool(hosts({ direct: {} }));
    const err = await failureOf(pool, "direct");
    expect(err).toBeInstanceOf(ProviderError);
    expect(err.message).toMatch(/cannot reach ssh:\/\/root@127\.0\.0\.1:2233/);
  });

  it.each([
    ["one hop", oneHop],
    ["two hops, the second with a key of its own", twoHops],
  ])("creates, reads and deletes a VM through %s", async (_what, reach) => {
    const pool = new HostPool(hosts({ behind: reach() }));
    const ops = new KvmOperations(pool, {
      retry: { maxAttempts: 2, initialDelayMs: 10, deadlineMs: 60_000 },
    });
    const name = uniqueName("jump");
    domains.push(name);
    const before = { bastion: bastion.logins(), inner: inner.logins(), target: target.logins() };
    try {
      const created = await ops.create(baseSpec("behind", name, image));
      expect(created.defined).toBe(true);
      const status = await ops.get("behind", name);
      expect(status.state).not.toBe("failed");
      expect(status.uuid).toBe(created.uuid);
      const deleted = await ops.delete("behind", name, ownedBy(name));
      expect(deleted.domainRemoved).toBe(true);
      expect((await ops.get("behind", name)).state).toBe("absent");
    } finally {
      await pool.closeAll();
    }
    // One login per hop for the whole run: every call went over the same connections.
    const twoHop = reach === twoHops;
    expect(bastion.logins() - before.bastion).toBe(1);
    expect(inner.logins() - before.inner).toBe(twoHop ? 1 : 0);
    expect(target.logins() - before.target).toBe(1);
  });

  it("shares one bastion connection among every host behind it, and closes it with the last", async () => {
    const config = hosts({
      a: oneHop(),
      b: { ...oneHop(), uri: `ssh://root@127.0.0.1:${TARGET_PORT}?socket=/var/run/libvirt/libvirt-sock` },
    });
    const jumpHosts = new JumpHosts();
    const [ta, tb] = [config.a, config.b].map((h) => buildTransport(h as HostConfig, { jumpHosts }));
    const before = bastion.logins();
    const [sa, sb] = await Promise.all([ta?.open(), tb?.open()]);
    expect(await authList(sa as Duplex, 1)).toMatchObject(okReply(1));
    expect(await authList(sb as Duplex, 2)).toMatchObject(okReply(2));
    // Two hosts, two target logins, one bastion login.
    expect(bastion.logins() - before).toBe(1);
    expect(jumpHosts.open).toBe(1);
    await ta?.close();
    expect(jumpHosts.open).toBe(1);
    // The second host still works over it.
    expect(await authList(sb as Duplex, 3)).toMatchObject(okReply(3));
    await tb?.close();
    for (let i = 0; i < 100 && jumpHosts.open > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(jumpHosts.open).toBe(0);
  });

  it("refuses a bastion whose host key is not the known one, naming the bastion, its key type and fingerprint", async () => {
    const other = clientKey(dir, "not_the_bastion");
    const wrong = `[${host.address}]:${BASTION_PORT} ${other.pub}\n`;
    const pool = new HostPool(hosts({ x: { jump: { uri: bastionUri(), knownHosts: wrong } } }));
    const before = target.logins();
    const err = await failureOf(pool, "x");
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(
      new RegExp(
        `^jump host ssh://root@${host.address.replace(/\./g, "\\.")}:${BASTION_PORT}: SSH host key verification failed for ${host.address.replace(/\./g, "\\.")}:${BASTION_PORT}`,
      ),
    );
    expect(err.message).toContain("ssh-ed25519");
    expect(err.message).toContain(fingerprintOf(bastion.hostKey, dir));
    expect(err.message).toMatch(/differs/);
    // Nothing went past the bastion.
    expect(target.logins()).toBe(before);
  });

  it("refuses an unknown target behind a good bastion, naming the target (not the bastion)", async () => {
    const onlyBastion = `${bastion.knownHostsLine}\n`;
    const pool = new HostPool(hosts({ x: { knownHosts: onlyBastion, jump: bastionUri() } }));
    const err = await failureOf(pool, "x");
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(
      /^SSH host key verification failed for 127\.0\.0\.1:2233: the host is not in the inline known_hosts/,
    );
    expect(err.message).toContain(fingerprintOf(target.hostKey, dir));
  });

  it("names the hop whose login failed: the second bastion without its own key", async () => {
    const pool = new HostPool(hosts({ x: { jump: [bastionUri(), innerUri()] } }));
    const err = await failureOf(pool, "x");
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(
      /^jump host ssh:\/\/root@127\.0\.0\.1:2232: SSH authentication as root to 127\.0\.0\.1:2232 failed/,
    );
  });

  it("names the hop that could not reach the next one", async () => {
    const pool = new HostPool(hosts({ x: { uri: "ssh://root@127.0.0.1:2299", jump: bastionUri() } }));
    const err = await failureOf(pool, "x");
    expect(err.kind).toBe("transient");
    expect(err.message).toMatch(
      new RegExp(
        `^jump host ssh://root@${host.address.replace(/\./g, "\\.")}:${BASTION_PORT} could not open a connection to 127\\.0\\.0\\.1:2299`,
      ),
    );
  });

  it("puts no secret of a hop into an error", async () => {
    const pool = new HostPool(
      hosts({
        x: {
          jump: [bastionUri(), { uri: innerUri(), privateKey: innerKey.text }],
          knownHosts: `${bastion.knownHostsLine}\n`,
        },
      }),
    );
    const err = await failureOf(pool, "x");
    const text = errorText(err);
    for (const line of innerKey.text.split("\n").filter((l) => l.length > 20 && !l.startsWith("-----"))) {
      expect(text).not.toContain(line);
    }
    expect(readFileSync(path.join(dir, "inner_client"), "utf8")).toBe(innerKey.text);
  });
});
