/**
 * The OpenSSH transport with the system's real `ssh`
 * against real sshds in the test host's namespaces (bastions.ts): a bastion
 * on the veth address, a target on the namespace's loopback reachable only
 * through it. Hosts are configured as users do (kvm:hosts, transport
 * "openssh") and used through the HostPool and the KVM operations.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import { type HostConfig, parseConfig } from "../../../provider/kvm/config/host-config";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { buildTransport, HostPool } from "../../../provider/kvm/host/hosts";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { OpenSshTransport } from "../../../provider/transport/openssh";
import { repoRoot, type TestHost, testHost } from "../../support/test-host";
import { baseSpec, imageConfig, makeQcow2, ownedBy, uniqueName, virshQuiet } from "../kvm/ops-helpers";
import { fingerprintOf, startSshd, type TestSshd } from "./bastions";
import { authList, childPids, keygen, okReply, pubKey, scratchDir } from "./helpers";

const BASTION_PORT = 2241;
const TARGET_PORT = 2243;

let host: TestHost;
let dir: string;
let bastion: TestSshd;
let target: TestSshd;
let keyText: string;
let image: ImageConfig;
const domains: string[] = [];
/** Client keys of the other types the agent serves. */
let otherKeys: Record<"ecdsa" | "rsa", { text: string; pub: string }>;

function keyOf(type: "ecdsa" | "rsa", extra: string[]): { text: string; pub: string } {
  const f = path.join(dir, `client_${type}`);
  keygen(f, type, "", extra);
  return { text: readFileSync(f, "utf8"), pub: pubKey(`${f}.pub`) };
}

beforeAll(async () => {
  host = testHost();
  dir = scratchDir(host, "openssh");
  chmodSync(dir, 0o755);
  const hostClient = pubKey(`${host.sshKeyPath}.pub`);
  keyText = readFileSync(host.sshKeyPath, "utf8");
  otherKeys = { ecdsa: keyOf("ecdsa", ["-b", "384"]), rsa: keyOf("rsa", ["-b", "3072"]) };
  bastion = await startSshd(host, {
    name: "ob",
    address: host.address,
    port: BASTION_PORT,
    authorized: [hostClient, otherKeys.ecdsa.pub, otherKeys.rsa.pub],
  });
  target = await startSshd(host, {
    name: "ot",
    address: "127.0.0.1",
    port: TARGET_PORT,
    authorized: [hostClient],
  });
  const img = makeQcow2(dir, "openssh-image", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterAll(() => {
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  bastion?.stop();
  target?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const bastionAt = () => `${host.address}:${BASTION_PORT}`;

function openssh(entry: Record<string, unknown>): HostConfig {
  const h = parseConfig({
    hosts: {
      x: { transport: "openssh", domainType: "qemu", pool: host.poolName, network: host.network, ...entry },
    },
  }).hosts.x;
  return h as HostConfig;
}

function file(name: string, content: string): string {
  const f = path.join(dir, name);
  writeFileSync(f, content, { mode: 0o600 });
  return f;
}

/** The ssh process under the transport's watchdog shell, and the folder its -F config is in. */
function sshOf(t: OpenSshTransport): { pid: number; folder: string } {
  const sh = t.pid;
  if (sh === undefined) throw new Error("no ssh running");
  for (const pid of childPids(sh)) {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    const cfg = argv[argv.indexOf("-F") + 1];
    if (argv[0]?.endsWith("ssh") && cfg) return { pid, folder: path.dirname(cfg) };
  }
  throw new Error(`no ssh under ${sh}`);
}

/** Running (a zombie is not: PID 1 here does not reap orphans, so an exited orphan stays one). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

async function until(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 300 && !ok(); i++) await new Promise((r) => setTimeout(r, 50));
  if (!ok()) throw new Error(`still not: ${what}`);
}

async function failureOf(t: { open(): Promise<unknown>; close(): Promise<void> }): Promise<ProviderError> {
  try {
    await t.open();
  } catch (err) {
    return err as ProviderError;
  } finally {
    await t.close();
  }
  throw new Error("expected open() to fail");
}

describe("the OpenSSH transport", () => {
  it("carries libvirt's stream with a key from the stack config that never touches disk, and ends ssh with the connection", async () => {
    const t = buildTransport(
      openssh({
        uri: `ssh://root@${bastionAt()}`,
        privateKey: keyText,
        knownHosts: `${bastion.knownHostsLine}\n`,
      }),
    ) as OpenSshTransport;
    expect(t).toBeInstanceOf(OpenSshTransport);
    const logins = bastion.logins();
    const stream = await t.open();
    expect(await authList(stream, 1)).toMatchObject(okReply(1));
    const { pid, folder } = sshOf(t);
    // The key reached ssh through our agent: the login used it...
    expect(bastion.logins() - logins).toBe(1);
    expect(bastion.log()).toContain(fingerprintOf(pubKey(`${host.sshKeyPath}.pub`), dir));
    // ...and no file of the connection's folder (0700) holds it.
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    const secretLines = keyText.split("\n").filter((l) => l.length > 20 && !l.startsWith("-----"));
    for (const name of readdirSync(folder)) {
      const f = path.join(folder, name);
      if (!statSync(f).isFile()) continue;
      const content = readFileSync(f, "utf8");
      for (const l of secretLines) expect(content, name).not.toContain(l);
    }
    stream.destroy();
    await t.close();
    expect(alive(pid)).toBe(false);
    expect(existsSync(folder)).toBe(false);
  });

  it.each(["ecdsa", "rsa"] as const)(
    "serves an %s key from the stack config to ssh as well",
    async (type) => {
      const t = buildTransport(
        openssh({
          uri: `ssh://root@${bastionAt()}`,
          privateKey: otherKeys[type].text,
          knownHosts: `${bastion.knownHostsLine}\n`,
        }),
      );
      try {
        const stream = await t.open();
        expect(await authList(stream, 2)).toMatchObject(okReply(2));
        stream.destroy();
      } finally {
        await t.close();
      }
      expect(bastion.log()).toContain(fingerprintOf(otherKeys[type].pub, dir));
    },
  );

  it("reaches a host behind a bastion through a ProxyJump of an ssh config file: create, read, delete", async () => {
    const config = file(
      "ssh_config.proxyjump",
      [
        "Host kvmp-behind",
        "  HostName 127.0.0.1",
        `  Port ${TARGET_PORT}`,
        `  ProxyJump root@${bastionAt()}`,
        "",
      ].join("\n"),
    );
    const known = file("known_hosts.both", `${bastion.knownHostsLine}\n${target.knownHostsLine}\n`);
    const h = openssh({
      uri: "ssh://root@kvmp-behind",
      sshConfig: config,
      privateKey: keyText,
      knownHostsPath: known,
    });
    const pool = new HostPool({ behind: { ...h, key: "behind" } });
    const ops = new KvmOperations(pool, {
      retry: { maxAttempts: 2, initialDelayMs: 10, deadlineMs: 60_000 },
    });
    const name = uniqueName("openssh");
    domains.push(name);
    const before = { bastion: bastion.logins(), target: target.logins() };
    try {
      const created = await ops.create(baseSpec("behind", name, image));
      expect(created.defined).toBe(true);
      expect((await ops.get("behind", name)).uuid).toBe(created.uuid);
      expect((await ops.delete("behind", name, ownedBy(name))).domainRemoved).toBe(true);
    } finally {
      await pool.closeAll();
    }
    expect(bastion.logins() - before.bastion).toBe(1);
    expect(target.logins() - before.target).toBe(1);
  });

  it("reaches a host behind a bastion named by kvm:hosts jump (ssh -J)", async () => {
    const t = buildTransport(
      openssh({
        uri: `ssh://root@127.0.0.1:${TARGET_PORT}`,
        jump: `ssh://root@${bastionAt()}`,
        privateKey: keyText,
        knownHosts: `${bastion.knownHostsLine}\n${target.knownHostsLine}\n`,
      }),
    );
    try {
      const stream = await t.open();
      expect(await authList(stream, 5)).toMatchObject(okReply(5));
      stream.destroy();
    } finally {
      await t.close();
    }
  });

  it("refuses a ProxyJump bastion whose key is not in the known_hosts it was given, naming it, and adds nothing there", async () => {
    const config = file(
      "ssh_config.badbastion",
      `Host kvmp-behind\n  HostName 127.0.0.1\n  Port ${TARGET_PORT}\n  ProxyJump root@${bastionAt()}\n`,
    );
    const knownContent = `${target.knownHostsLine}\n`;
    const known = file("known_hosts.targetonly", knownContent);
    const logins = target.logins();
    const err = await failureOf(
      buildTransport(
        openssh({
          uri: "ssh://root@kvmp-behind",
          sshConfig: config,
          privateKey: keyText,
          knownHostsPath: known,
        }),
      ),
    );
    expect(err).toBeInstanceOf(ProviderError);
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(/refused the host key/);
    expect(err.message).toContain(`[${host.address}]:${BASTION_PORT}`);
    expect(readFileSync(known, "utf8")).toBe(knownContent);
    expect(target.logins()).toBe(logins);
  });

  it("refuses a target whose key differs, quoting OpenSSH's fingerprint, and never accepts it", async () => {
    const wrong = `[127.0.0.1]:${TARGET_PORT} ${pubKey(`${host.sshKeyPath}.pub`)}\n`;
    const knownContent = `${bastion.knownHostsLine}\n${wrong}`;
    const known = file("known_hosts.wrongtarget", knownContent);
    const err = await failureOf(
      buildTransport(
        openssh({
          uri: `ssh://root@127.0.0.1:${TARGET_PORT}`,
          jump: `ssh://root@${bastionAt()}`,
          privateKey: keyText,
          knownHostsPath: known,
        }),
      ),
    );
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(/refused the host key/);
    expect(err.message).toContain(fingerprintOf(target.hostKey, dir));
    expect(readFileSync(known, "utf8")).toBe(knownContent);
  });

  it("ends ssh when the process that started it dies without closing", async () => {
    // The transport, compiled, in a process of its own that is then killed.
    const out = path.join(dir, "compiled");
    execFileSync(
      "npx",
      [
        "tsc",
        "--outDir",
        out,
        "--target",
        "ES2022",
        "--module",
        "commonjs",
        "--moduleResolution",
        "node",
        "--esModuleInterop",
        "--skipLibCheck",
        "--types",
        "node",
        path.join(repoRoot, "provider/transport/openssh.ts"),
      ],
      { cwd: repoRoot },
    );
    const options = {
      host: host.address,
      port: BASTION_PORT,
      user: "root",
      privateKey: keyText,
      knownHosts: `${bastion.knownHostsLine}\n`,
    };
    const program = `
      const { OpenSshTransport } = require(${JSON.stringify(path.join(out, "transport/openssh.js"))});
      const t = new OpenSshTransport(JSON.parse(process.argv[1]));
      t.open().then(() => process.stdout.write(String(t.pid) + "\\n"), (e) => { console.error(e); process.exit(1); });
      setInterval(() => {}, 1000);`;
    const child: ChildProcess = spawn(process.execPath, ["-e", program, JSON.stringify(options)], {
      cwd: repoRoot,
      env: { ...process.env, NODE_PATH: path.join(repoRoot, "node_modules") },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const shPid = await new Promise<number>((resolve, reject) => {
      child.stdout?.once("data", (d: Buffer) => resolve(Number(d.toString().trim())));
      child.once("exit", (code) => reject(new Error(`child exited ${code}`)));
    });
    const sshPid = Number(
      spawnSync("pgrep", ["-P", String(shPid), "-x", "ssh"], { encoding: "utf8" }).stdout.trim(),
    );
    expect(alive(sshPid)).toBe(true);
    child.kill("SIGKILL");
    await until("ssh gone after its parent was killed", () => !alive(sshPid));
    expect(alive(shPid)).toBe(false);
  });

  it("uses an existing ControlMaster of the user's (no new login) and cancels its forward there when closed", async () => {
    const ctl = path.join(dir, "ctl");
    const known = file("known_hosts.master", `${bastion.knownHostsLine}\n`);
    const master = spawn("ssh", [
      "-F",
      "/dev/null",
      ...["-o", "StrictHostKeyChecking=yes", "-o", `UserKnownHostsFile=${known}`, "-o", "BatchMode=yes"],
      ...["-i", host.sshKeyPath, "-M", "-S", ctl, "-N", "-p", String(BASTION_PORT), `root@${host.address}`],
    ]);
    try {
      await until("the master answers", () => spawnSync("ssh", ["-S", ctl, "-O", "check", "x"]).status === 0);
      const config = file("ssh_config.mux", `ControlPath ${ctl}\n`);
      const logins = bastion.logins();
      const t = buildTransport(
        openssh({ uri: `ssh://root@${bastionAt()}`, sshConfig: config, knownHostsPath: known }),
      ) as OpenSshTransport;
      const stream = await t.open();
      expect(await authList(stream, 9)).toMatchObject(okReply(9));
      // The master listens on our forward's socket.
      const forwarded = spawnSync("ss", ["-xlpH"], { encoding: "utf8" })
        .stdout.split("\n")
        .find(
          (l) => l.includes("kvmp-ssh-") && l.includes("libvirt.sock") && l.includes(`pid=${master.pid},`),
        )
        ?.split(/\s+/)
        .find((w) => w.endsWith("libvirt.sock"));
      expect(forwarded).toBeDefined();
      // The master's connection carried it: no new login, and no ssh of ours kept running.
      expect(bastion.logins()).toBe(logins);
      await until("our ssh handed the forward over and exited", () => t.pid === undefined);
      stream.destroy();
      await t.close();
      // The master lives on (it is the user's), without our forward: nothing listens there any more.
      expect(spawnSync("ssh", ["-S", ctl, "-O", "check", "x"]).status).toBe(0);
      const listeners = spawnSync("ss", ["-xlpH"], { encoding: "utf8" }).stdout;
      expect(listeners).not.toContain(forwarded);
    } finally {
      master.kill();
    }
  });
});
