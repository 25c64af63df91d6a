/**
 * Shared pieces of the benchmark harness: the knobs' values (the table is
 * bench/knobs.ts), the test host's facts, child processes timed from spawn to
 * exit, libvirtd's CPU counters, and the small statistics of bench/stats.ts.
 */
import { spawn } from "node:child_process";
import { closeSync, openSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Libvirt, LibvirtConnection } from "../provider/libvirt";
import { OpenSshTransport } from "../provider/transport/openssh";
import { SshTransport } from "../provider/transport/ssh";
import type { Transport } from "../provider/transport/types";
import { UnixSocketTransport } from "../provider/transport/unix";
import { readKnobs } from "./knobs";

export { median, minMax, pairedRatio } from "./stats";

/** The knobs' values (KVMP_BENCH_* and the others of bench/knobs.ts), read once. */
export const config = readKnobs(process.env);

/** The repository root: scripts/bench exports it (KVMP_ROOT); falls back to the working directory. */
export const repoRoot = config.root;
export const benchDir = path.join(repoRoot, ".state/bench");

/**
 * True when KVMP_BENCH_ONLY selects `part`. `ready` boots real guests for
 * several minutes, so only naming it runs it (`all` does not).
 */
export function selected(part: "rpc" | "upload" | "fleet" | "scale" | "ready" | "firstboot"): boolean {
  const only = config.only.split(",").map((x) => x.trim());
  return only.includes(part) || (only.includes("all") && part !== "ready" && part !== "firstboot");
}

/** Connection facts of the running test host (scripts/test-host start writes them). */
export interface TestHost {
  stateDir: string;
  address: string;
  sshPort: number;
  sshUser: string;
  sshKeyPath: string;
  knownHostsPath: string;
  socketPath: string;
  poolName: string;
  poolPath: string;
  /** The host's network namespace, where guests may be reached. */
  netns: string;
  network: string;
  networkAddress: string;
}

export function testHost(): TestHost {
  return JSON.parse(readFileSync(path.join(config.testHostDir, "host.json"), "utf8")) as TestHost;
}

export const host = testHost();

export function libvirtdPid(): number {
  return Number(readFileSync(path.join(host.stateDir, "pids/libvirtd.pid"), "utf8").trim());
}

/** The fields of /proc/<pid>/stat after the command name (field 3, the state, first). */
function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name may hold spaces: fields are counted after its closing parenthesis.
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** utime + stime of a process in clock ticks (fields 14 and 15 of /proc/<pid>/stat). */
export function cpuTicks(pid: number): number {
  const fields = statFields(pid);
  return Number(fields[11]) + Number(fields[12]);
}

/** The processes below `pid` (children, theirs, ...), from the parent field of every /proc/<pid>/stat. */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let ppid: number;
    try {
      ppid = Number(statFields(entry)[1]);
    } catch {
      continue; // gone meanwhile
    }
    const siblings = children.get(ppid);
    if (siblings === undefined) children.set(ppid, [Number(entry)]);
    else siblings.push(Number(entry));
  }
  const out: number[] = [];
  const walk = (p: number): void => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/**
 * CPU ticks of the processes below `pid` that are alive now (a process that
 * exits between two readings takes its ticks with it: measure only what
 * lives through the interval, such as a connection's ssh and sshd).
 */
export function treeTicks(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const p of descendants(pid)) {
    try {
      out.set(p, cpuTicks(p));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Ticks spent between two {@link treeTicks} readings by the processes in both. */
export function ticksBetween(before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0;
  for (const [p, t] of after) sum += t - (before.get(p) ?? t);
  return sum;
}

export function sshdPid(): number {
  return Number(readFileSync(path.join(host.stateDir, "pids/sshd.pid"), "utf8").trim());
}

/** Clock ticks per second (USER_HZ); 100 on Linux/x86. */
export const TICKS_PER_SECOND = 100;

export const unixTransport = (): Transport => new UnixSocketTransport(host.socketPath);

export const sshTransport = (): Transport =>
  new SshTransport({
    host: host.address,
    port: host.sshPort,
    user: host.sshUser,
    privateKeyPath: host.sshKeyPath,
    knownHostsPath: host.knownHostsPath,
    keepalive: false,
  });

/** ssh2 without the quick acknowledgements at an upload's end: the seed figure's "before" reference. */
export const sshTransportNoQuickAck = (): Transport =>
  new SshTransport({
    host: host.address,
    port: host.sshPort,
    user: host.sshUser,
    privateKeyPath: host.sshKeyPath,
    knownHostsPath: host.knownHostsPath,
    keepalive: false,
    quickAck: false,
  });

/**
 * The OpenSSH transport (`transport: "openssh"`), with the cipher of the OpenSSH
 * reference (aes128-gcm, which ssh2 negotiates too) from an ssh_config of the
 * bench's own, as a user's would give it.
 */
export const opensshTransport = (): Transport => {
  const cipherConfig = path.join(benchDir, "ssh_config.cipher");
  writeFileSync(cipherConfig, "Host *\n  Ciphers aes128-gcm@openssh.com\n");
  return new OpenSshTransport({
    host: host.address,
    port: host.sshPort,
    user: host.sshUser,
    privateKeyPath: host.sshKeyPath,
    knownHostsPath: host.knownHostsPath,
    sshConfig: cipherConfig,
    keepalive: false,
  });
};

export function connect(make: () => Transport): { conn: LibvirtConnection; lv: Libvirt } {
  const conn = new LibvirtConnection({ transport: make(), callTimeoutMs: 600_000 });
  return { conn, lv: new Libvirt(conn) };
}

/**
 * The OpenSSH client as libvirt's qemu+ssh and the OpenSSH contender run it:
 * a wrapper (libvirt's `command=` URI parameter) with a config of our own, so
 * the test host's key and known_hosts are used, host keys are checked, and
 * root's ~/.ssh is neither read nor written. (libvirt's `keyfile=` works for
 * this transport, but `known_hosts=` is only for its libssh/libssh2 transports,
 * and OpenSSH takes ~ from the password database, not $HOME.)
 */
export function sshWrapper(): string {
  const configPath = path.join(benchDir, "ssh_config");
  writeFileSync(
    configPath,
    [
      "Host *",
      `  IdentityFile ${host.sshKeyPath}`,
      "  IdentitiesOnly yes",
      `  UserKnownHostsFile ${host.knownHostsPath}`,
      "  GlobalKnownHostsFile /dev/null",
      "  StrictHostKeyChecking yes",
      "  BatchMode yes",
      "",
    ].join("\n"),
  );
  const wrapper = path.join(benchDir, "ssh");
  writeFileSync(wrapper, `#!/bin/sh\nexec /usr/bin/ssh -F '${configPath}' "$@"\n`, { mode: 0o755 });
  return wrapper;
}

export const unixUri = (): string => `qemu:///system?socket=${host.socketPath}`;
export const sshUri = (): string =>
  `qemu+ssh://${host.sshUser}@${host.address}:${host.sshPort}/system?command=${sshWrapper()}`;

export interface RunResult {
  seconds: number;
  stdout: string;
}

/** Runs a command, timing it from spawn to exit; rejects on a non-zero exit. */
export function run(cmd: string, args: string[], opts: { stdin?: string } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const child = spawn(cmd, args, {
      stdio: [opts.stdin ? "pipe" : "ignore", "pipe", "pipe"],
      env: { ...process.env, LC_ALL: "C" },
    });
    if (opts.stdin && child.stdin) child.stdin.end(opts.stdin);
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr?.on("data", (c: Buffer) => {
      stderr += c.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (code === 0) resolve({ seconds, stdout });
      else reject(new Error(`${cmd} ${args.join(" ")} exited with ${code}: ${stderr.trim()}`));
    });
  });
}

/** Runs a command with `inputFile` as its stdin (opened here, read by the child), timed from spawn to exit. */
export function runWithInput(cmd: string, args: string[], inputFile: string): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const fd = openSync(inputFile, "r");
    const started = process.hrtime.bigint();
    const child = spawn(cmd, args, { stdio: [fd, "pipe", "pipe"] });
    closeSync(fd);
    let stderr = "";
    child.stdout?.resume();
    child.stderr?.on("data", (c: Buffer) => {
      stderr += c.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (code === 0) resolve({ seconds, stdout: "" });
      else reject(new Error(`${cmd} exited with ${code}: ${stderr.trim()}`));
    });
  });
}

/**
 * Runs `script` (a compiled bench file) with `--child` inside the test host's
 * namespace, the only place its guests may be reached from; resolves with the
 * JSON of the last line it prints.
 */
export function runInNamespace<T>(script: string, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn("ip", ["netns", "exec", host.netns, process.execPath, script, "--child"], {
      env: { ...process.env, KVMP_ROOT: repoRoot },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (b: Buffer) => {
      out += b.toString();
    });
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) reject(new Error(`${what} bench exited ${code}`));
      else resolve(JSON.parse(out.trim().split("\n").at(-1) ?? "") as T);
    });
  });
}

/** Rotates a list by `round` so no contender always runs first. */
export function rotate<T>(xs: readonly T[], round: number): T[] {
  const k = round % xs.length;
  return [...xs.slice(k), ...xs.slice(0, k)];
}

export function log(msg: string): void {
  process.stderr.write(`bench: ${msg}\n`);
}
