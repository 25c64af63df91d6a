/**
 * Shared pieces of the benchmark harness: configuration from the environment,
 * the test host's facts, child processes timed from spawn to exit, libvirtd's
 * CPU counters, and small statistics.
 */
import { spawn } from "node:child_process";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Libvirt, LibvirtConnection } from "../provider/libvirt";
import { SshTransport } from "../provider/transport/ssh";
import type { Transport } from "../provider/transport/types";
import { UnixSocketTransport } from "../provider/transport/unix";

/** The repository root: scripts/bench exports it; falls back to the working directory. */
export const repoRoot = process.env.KVMP_ROOT ?? process.cwd();
export const benchDir = path.join(repoRoot, ".state/bench");

function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return n;
}

function envList(name: string, fallback: number[]): number[] {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const xs = raw.split(",").map((x) => Number(x.trim()));
  if (xs.some((n) => !Number.isInteger(n) || n < 1))
    throw new Error(`${name} must be a comma list of positive integers, got ${raw}`);
  return xs;
}

/**
 * True when KVMP_BENCH_ONLY selects `part`. `ready` boots real guests for
 * several minutes, so only naming it runs it (`all` does not).
 */
export function selected(part: "rpc" | "upload" | "fleet" | "scale" | "ready"): boolean {
  const only = config.only.split(",").map((x) => x.trim());
  return only.includes(part) || (only.includes("all") && part !== "ready");
}

/** Sizes and rounds; the defaults keep a full run under about 10 minutes on 2 cores. */
export const config = {
  rounds: envInt("KVMP_BENCH_ROUNDS", 5),
  /** Timed lookups per contender per round. */
  lookups: envInt("KVMP_BENCH_LOOKUPS", 10_000),
  /** Untimed lookups on the same connection before the timed ones. */
  warmup: envInt("KVMP_BENCH_WARMUP", 1_000),
  /** Untimed lookups per transport and mode once per process, before the first round (JIT warm-up). */
  processWarmup: envInt("KVMP_BENCH_PROCESS_WARMUP", 10_000),
  /** Calls in flight for the pipelined figure. */
  depth: envInt("KVMP_BENCH_DEPTH", 64),
  /** Each upload round moves 6 × the file; 5 rounds of 1 GiB take about 5 minutes on a busy 2-core machine. */
  uploadRounds: envInt("KVMP_BENCH_UPLOAD_ROUNDS", 5),
  uploadMiB: envInt("KVMP_BENCH_UPLOAD_MIB", 1024),
  /**
   * Where figures 2 and 7 upload to: "memory" (default), a transient dir pool on tmpfs, so
   * they measure the pipe and not the disk; "disk", the test host's own pool.
   */
  uploadPool: (process.env.KVMP_BENCH_UPLOAD_POOL === "disk" ? "disk" : "memory") as "memory" | "disk",
  /** Bytes per STREAM packet for our upload (UploadOptions.chunkSize); default: the library's. */
  uploadChunk: process.env.KVMP_BENCH_UPLOAD_CHUNK ? envInt("KVMP_BENCH_UPLOAD_CHUNK", 1) : undefined,
  /**
   * highWaterMark of the file read streams of ours and the bare ssh2 channel (bytes). Node's
   * default is 64 KiB; with it our upload stalls between packets (see docs/benchmarks.md), so
   * the main figures read 1 MiB at a time and extra contenders show ours with 64 KiB reads.
   */
  readChunk: envInt("KVMP_BENCH_READ_CHUNK", 1024 * 1024),
  /** Fleet sizes (proxies on one host) for figures 3-5. */
  fleet: envList("KVMP_BENCH_FLEET", [1, 10, 50]),
  /** Rounds of the fleet figures; each round runs every size, two hosts and the virsh loops once. */
  fleetRounds: envInt("KVMP_BENCH_FLEET_ROUNDS", 2),
  /** Upload sizes in MiB for the scaling figure (the 1 GiB of figure 2 is the largest point). */
  scaleMiB: envList("KVMP_BENCH_SCALE_MIB", [1, 64, 256]),
  scaleRounds: envInt("KVMP_BENCH_SCALE_ROUNDS", 3),
  /** Parts to run: "all" or a comma list of rpc, upload, fleet, scale. */
  only: process.env.KVMP_BENCH_ONLY ?? "all",
  /** The raw results; a run of some parts keeps the other parts' last results in it. */
  results: process.env.KVMP_BENCH_RESULTS ?? path.join(benchDir, "results.json"),
  out: process.env.KVMP_BENCH_OUT ?? path.join(repoRoot, "docs/benchmarks.md"),
};

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
}

export function testHost(): TestHost {
  const dir = process.env.KVMP_TEST_HOST_DIR ?? path.join(repoRoot, ".state/test-host");
  return JSON.parse(readFileSync(path.join(dir, "host.json"), "utf8")) as TestHost;
}

export const host = testHost();

export function libvirtdPid(): number {
  return Number(readFileSync(path.join(host.stateDir, "pids/libvirtd.pid"), "utf8").trim());
}

/** utime + stime of a process in clock ticks (fields 14 and 15 of /proc/<pid>/stat). */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name may hold spaces: fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
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

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function minMax(xs: readonly number[]): [number, number] {
  return [Math.min(...xs), Math.max(...xs)];
}

/** Median and range of per-round ratios a[i]/b[i] (a round pairs contenders that ran side by side). */
export function pairedRatio(
  a: readonly number[],
  b: readonly number[],
): { median: number; range: [number, number] } {
  const ratios = a.map((x, i) => x / (b[i] as number));
  return { median: median(ratios), range: minMax(ratios) };
}

/** Rotates a list by `round` so no contender always runs first. */
export function rotate<T>(xs: readonly T[], round: number): T[] {
  const k = round % xs.length;
  return [...xs.slice(k), ...xs.slice(0, k)];
}

export function log(msg: string): void {
  process.stderr.write(`bench: ${msg}\n`);
}
