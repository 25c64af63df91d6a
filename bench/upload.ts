/**
 * Figure 2: MB/s (10^6 bytes per second) streaming one file of pseudo-random
 * bytes from disk into the pool, and the growth of our RSS while doing it.
 *
 * Every contender reads the same file (generated once under .state/bench and
 * read once before the rounds, so it sits in the page cache for everybody).
 * Per round, in rotated order:
 *   oursSsh     storageVolUpload over SshTransport (stream-local channel to libvirtd)
 *   oursOpenssh storageVolUpload over OpenSshTransport (the system's ssh, aes128-gcm as opensshGcm)
 *   virshSsh    virsh vol-upload over qemu+ssh (OpenSSH + virt-ssh-helper)
 *   ssh2Bare    a bare ssh2 Client: exec `cat > /dev/null`, file piped into the channel
 *   opensshGcm  OpenSSH `ssh -c aes128-gcm@openssh.com host 'cat > /dev/null' < file`
 *   oursUnix    storageVolUpload over the unix socket
 *   virshUnix   virsh vol-upload over the unix socket
 *   oursSsh64k, oursUnix64k  ours again, reading the file 64 KiB at a time (Node's default)
 * Ours and ssh2Bare read the file config.readChunk bytes at a time (1 MiB by default).
 * Ours and ssh2Bare are timed from an established connection; the external
 * commands are timed from spawn to exit, minus the median time of the same
 * command doing no transfer in the same round (virsh vol-info on the same
 * volume; ssh host true), so connection set-up is left out for everybody.
 * Each uploaded volume is deleted right after its upload.
 */
import { randomFillSync } from "node:crypto";
import {
  closeSync,
  createReadStream,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { Client } from "ssh2";
import type { Libvirt, LibvirtConnection, StoragePool } from "../provider/libvirt";
import type { Transport } from "../provider/transport/types";
import {
  benchDir,
  config,
  connect,
  cpuTicks,
  host,
  libvirtdPid,
  log,
  median,
  opensshTransport,
  rotate,
  run,
  runWithInput,
  sshdPid,
  sshTransport,
  sshUri,
  sshWrapper,
  TICKS_PER_SECOND,
  ticksBetween,
  treeTicks,
  unixTransport,
  unixUri,
} from "./common";
import { benchSeed, type SeedResults } from "./seed";

export type UploadContender =
  | "oursSsh"
  | "oursOpenssh"
  | "oursSsh64k"
  | "virshSsh"
  | "ssh2Bare"
  | "opensshGcm"
  | "oursUnix"
  | "oursUnix64k"
  | "virshUnix";

/** Node's default highWaterMark for file streams, which callers get unless they choose otherwise. */
const NODE_DEFAULT_READ_CHUNK = 64 * 1024;

export interface UploadSample {
  mbPerSecond: number;
  seconds: number;
  /** For external commands: the no-transfer time subtracted from `seconds`. */
  overheadSeconds?: number;
  /** For ours: peak RSS growth in bytes over the RSS just before the upload. */
  rssGrowth?: number;
  /** For the OpenSSH transport: the CPU seconds the upload cost each process involved. */
  cpu?: UploadCpu;
}

/** CPU seconds of one upload over the OpenSSH transport, per process (figure 2g's ceiling). */
export interface UploadCpu {
  /** This process (the RPC framing and the file reads). */
  ours: number;
  /** Its child processes: the ssh client doing the crypto, and the watchdog shell. */
  ssh: number;
  /** The test host's sshd processes (the session's crypto and its socket forward). */
  sshd: number;
  /** libvirtd receiving the stream and writing the volume. */
  libvirtd: number;
}

export interface UploadResults {
  /** Where the volumes were (absent in results of runs before it was recorded: the disk pool). */
  pool?: "memory" | "disk";
  rounds: number;
  bytes: number;
  chunkSize: number | undefined;
  readChunk: number;
  cipher: string;
  samples: Record<UploadContender, UploadSample[]>;
  /** Figure 2i, run with this part (absent in results of runs before it existed). */
  seed?: SeedResults;
}

const VOL_PREFIX = "kvmpb-upload";

/**
 * With config.uploadPool "memory", every contender uploads into this transient
 * dir pool on tmpfs. Into a disk pool each 1 GiB upload leaves dirty pages the
 * kernel writes back during the next contender's turn, which moved the ratios
 * more than any code change (bench/notes.md); the bare ssh2 and OpenSSH
 * contenders write to /dev/null, so on disk they were also spared that cost.
 */
const MEMORY_POOL = "kvmpb-mem";
const MEMORY_POOL_DIR = "/dev/shm/kvmpb-mem-pool";

/** The pool the upload figures use (see config.uploadPool). */
export function uploadPoolName(): string {
  return config.uploadPool === "memory" ? MEMORY_POOL : host.poolName;
}

async function ensureMemoryPool(lv: Libvirt): Promise<void> {
  try {
    await lv.storagePoolLookupByName(MEMORY_POOL);
    return;
  } catch {
    // Not there yet.
  }
  mkdirSync(MEMORY_POOL_DIR, { recursive: true });
  await run("virsh", [
    "-q",
    "-c",
    unixUri(),
    "pool-create-as",
    MEMORY_POOL,
    "dir",
    "--target",
    MEMORY_POOL_DIR,
  ]);
}

/** Removes the tmpfs pool and its folder (no-op with the disk pool). */
export async function dropMemoryPool(): Promise<void> {
  if (config.uploadPool !== "memory") return;
  await run("virsh", ["-q", "-c", unixUri(), "pool-destroy", MEMORY_POOL]).catch(() => undefined);
  rmSync(MEMORY_POOL_DIR, { recursive: true, force: true });
}

/** The shared source file: pseudo-random bytes, written 1 MiB at a time, reused while its size fits. */
export function sourceFile(bytes: number): string {
  mkdirSync(benchDir, { recursive: true });
  const file = path.join(benchDir, `upload-${bytes}.bin`);
  try {
    if (statSync(file).size === bytes) return file;
  } catch {
    // Not there yet.
  }
  log(`writing ${bytes} pseudo-random bytes to ${file}`);
  const fd = openSync(file, "w");
  const buf = Buffer.allocUnsafe(1024 * 1024);
  for (let left = bytes; left > 0; left -= buf.length) {
    randomFillSync(buf);
    writeSync(fd, buf, 0, Math.min(left, buf.length));
  }
  closeSync(fd);
  return file;
}

export async function readThrough(file: string): Promise<void> {
  for await (const _ of createReadStream(file, { highWaterMark: 1024 * 1024 })) {
    // Only to pull the file into the page cache.
  }
}

function volumeXml(name: string, bytes: number): string {
  return `<volume><name>${name}</name><capacity unit='bytes'>${bytes}</capacity><allocation unit='bytes'>0</allocation><target><format type='raw'/></target></volume>`;
}

/** The admin connection that creates and deletes the volumes (never timed). */
export class Volumes {
  private serial = 0;
  constructor(
    private readonly lv: Libvirt,
    private readonly pool: StoragePool,
    private readonly bytes: number,
  ) {}

  static async open(bytes: number): Promise<{ volumes: Volumes; conn: LibvirtConnection }> {
    const { conn, lv } = connect(unixTransport);
    if (config.uploadPool === "memory") await ensureMemoryPool(lv);
    const pool = await lv.storagePoolLookupByName(uploadPoolName());
    // Leftovers of an interrupted run.
    for (const v of await lv.storagePoolListAllVolumes(pool)) {
      if (v.name.startsWith(VOL_PREFIX)) await lv.storageVolDelete(v);
    }
    return { volumes: new Volumes(lv, pool, bytes), conn };
  }

  async create(what: string): Promise<string> {
    const name = `${VOL_PREFIX}-${process.pid}-${what}-${++this.serial}`;
    await this.lv.storageVolCreateXml(this.pool, volumeXml(name, this.bytes));
    return name;
  }

  async remove(name: string): Promise<void> {
    await this.lv.storageVolDelete(await this.lv.storageVolLookupByName(this.pool, name));
  }
}

/** Samples process RSS every 50 ms; returns the peak growth over the RSS at start. */
function rssWatcher(): { stop: () => number } {
  (globalThis as { gc?: () => void }).gc?.();
  const base = process.memoryUsage.rss();
  let peak = base;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 50);
  return {
    stop: () => {
      clearInterval(timer);
      peak = Math.max(peak, process.memoryUsage.rss());
      return peak - base;
    },
  };
}

/** CPU readings of the processes an upload over SSH involves; {@link cpuSince} turns two into seconds. */
function cpuNow() {
  return {
    ours: process.cpuUsage(),
    ssh: treeTicks(process.pid),
    sshd: treeTicks(sshdPid()),
    libvirtd: cpuTicks(libvirtdPid()),
  };
}

function cpuSince(before: ReturnType<typeof cpuNow>): UploadCpu {
  const after = cpuNow();
  const used = process.cpuUsage(before.ours);
  return {
    ours: (used.user + used.system) / 1e6,
    ssh: ticksBetween(before.ssh, after.ssh) / TICKS_PER_SECOND,
    sshd: ticksBetween(before.sshd, after.sshd) / TICKS_PER_SECOND,
    libvirtd: (after.libvirtd - before.libvirtd) / TICKS_PER_SECOND,
  };
}

export async function ours(
  volumes: Volumes,
  make: () => Transport,
  file: string,
  bytes: number,
  readChunk = config.readChunk,
  measureCpu = false,
): Promise<UploadSample> {
  const name = await volumes.create("ours");
  const { conn, lv } = connect(make);
  try {
    const pool = await lv.storagePoolLookupByName(uploadPoolName());
    const vol = await lv.storageVolLookupByName(pool, name);
    const source = createReadStream(file, { highWaterMark: readChunk });
    const watch = rssWatcher();
    // Read once the connection (and so its ssh and sshd processes) is up.
    const cpuBefore = measureCpu ? cpuNow() : undefined;
    const start = process.hrtime.bigint();
    const sent = await lv.storageVolUpload(vol, source, { chunkSize: config.uploadChunk });
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const cpu = cpuBefore === undefined ? undefined : cpuSince(cpuBefore);
    const rssGrowth = watch.stop();
    if (sent !== bytes) throw new Error(`upload sent ${sent} bytes, expected ${bytes}`);
    return { mbPerSecond: bytes / 1e6 / seconds, seconds, rssGrowth, ...(cpu ? { cpu } : {}) };
  } finally {
    await conn.close();
    await volumes.remove(name);
  }
}

export async function virsh(
  volumes: Volumes,
  uri: string,
  file: string,
  bytes: number,
): Promise<UploadSample> {
  const name = await volumes.create("virsh");
  try {
    const base = ["-q", "-c", uri];
    // The same connection set-up and one trivial call on the volume, without the transfer.
    const idle: number[] = [];
    for (let i = 0; i < 3; i++)
      idle.push((await run("virsh", [...base, "vol-info", "--pool", uploadPoolName(), name])).seconds);
    const { seconds: total } = await run("virsh", [
      ...base,
      "vol-upload",
      "--pool",
      uploadPoolName(),
      name,
      file,
    ]);
    const overheadSeconds = median(idle);
    const seconds = total - overheadSeconds;
    return { mbPerSecond: bytes / 1e6 / seconds, seconds, overheadSeconds };
  } finally {
    await volumes.remove(name);
  }
}

async function openssh(file: string, bytes: number): Promise<UploadSample> {
  const base = [
    sshWrapper(),
    "-c",
    "aes128-gcm@openssh.com",
    "-p",
    String(host.sshPort),
    `${host.sshUser}@${host.address}`,
  ];
  const idle: number[] = [];
  for (let i = 0; i < 3; i++) idle.push((await run("/bin/sh", [...base, "true"])).seconds);
  const { seconds: total } = await runWithInput("/bin/sh", [...base, "cat > /dev/null"], file);
  const overheadSeconds = median(idle);
  const seconds = total - overheadSeconds;
  return { mbPerSecond: bytes / 1e6 / seconds, seconds, overheadSeconds };
}

/** The known_hosts entry's key for the test host, base64 as in the file. */
function knownHostKey(): string {
  const pattern = `[${host.address}]:${host.sshPort}`;
  for (const line of readFileSync(host.knownHostsPath, "utf8").split("\n")) {
    const [hosts, , key] = line.trim().split(/\s+/);
    if (hosts?.split(",").includes(pattern) && key) return key;
  }
  throw new Error(`no known_hosts entry for ${pattern} in ${host.knownHostsPath}`);
}

/** A bare ssh2 connection with the same key and host key check; reports the negotiated cipher. */
function ssh2Connect(): Promise<{ client: Client; cipher: string }> {
  const expected = knownHostKey();
  return new Promise((resolve, reject) => {
    const client = new Client();
    let cipher = "?";
    client.on("handshake", (neg) => {
      cipher = neg.cs.cipher;
    });
    client.on("ready", () => resolve({ client, cipher }));
    client.on("error", reject);
    client.connect({
      host: host.address,
      port: host.sshPort,
      username: host.sshUser,
      privateKey: readFileSync(host.sshKeyPath),
      algorithms: { serverHostKey: ["ssh-ed25519"] },
      hostVerifier: (key: Buffer) => key.toString("base64") === expected,
    });
  });
}

async function ssh2Bare(file: string, bytes: number): Promise<UploadSample> {
  const { client } = await ssh2Connect();
  try {
    const channel = await new Promise<import("ssh2").ClientChannel>((resolve, reject) =>
      client.exec("cat > /dev/null", (err, ch) => (err ? reject(err) : resolve(ch))),
    );
    const exited = new Promise<void>((resolve, reject) => {
      channel.on("exit", (code: number | null) =>
        code === 0 ? resolve() : reject(new Error(`remote cat exited with ${code}`)),
      );
    });
    channel.resume();
    const start = process.hrtime.bigint();
    await pipeline(createReadStream(file, { highWaterMark: config.readChunk }), channel);
    await exited;
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    return { mbPerSecond: bytes / 1e6 / seconds, seconds };
  } finally {
    client.end();
  }
}

export async function benchUpload(): Promise<UploadResults> {
  const bytes = config.uploadMiB * 1024 * 1024;
  const file = sourceFile(bytes);
  await readThrough(file);
  const { client, cipher } = await ssh2Connect();
  client.end();
  const { volumes, conn } = await Volumes.open(bytes);
  const contenders: [UploadContender, () => Promise<UploadSample>][] = [
    ["oursSsh", () => ours(volumes, sshTransport, file, bytes)],
    ["oursOpenssh", () => ours(volumes, opensshTransport, file, bytes, config.readChunk, true)],
    ["oursSsh64k", () => ours(volumes, sshTransport, file, bytes, NODE_DEFAULT_READ_CHUNK)],
    ["virshSsh", () => virsh(volumes, sshUri(), file, bytes)],
    ["ssh2Bare", () => ssh2Bare(file, bytes)],
    ["opensshGcm", () => openssh(file, bytes)],
    ["oursUnix", () => ours(volumes, unixTransport, file, bytes)],
    ["oursUnix64k", () => ours(volumes, unixTransport, file, bytes, NODE_DEFAULT_READ_CHUNK)],
    ["virshUnix", () => virsh(volumes, unixUri(), file, bytes)],
  ];
  const samples = Object.fromEntries(contenders.map(([n]) => [n, [] as UploadSample[]])) as Record<
    UploadContender,
    UploadSample[]
  >;
  try {
    for (let round = 0; round < config.uploadRounds; round++) {
      for (const [name, runOne] of rotate(contenders, round)) {
        const s = await runOne();
        samples[name].push(s);
        const extra =
          s.rssGrowth !== undefined
            ? `, RSS +${(s.rssGrowth / 2 ** 20).toFixed(1)} MiB`
            : s.overheadSeconds !== undefined
              ? ` (set-up ${s.overheadSeconds.toFixed(2)} s subtracted)`
              : "";
        log(
          `upload round ${round + 1}/${config.uploadRounds} ${name}: ${s.mbPerSecond.toFixed(0)} MB/s in ${s.seconds.toFixed(2)} s${extra}`,
        );
      }
    }
  } finally {
    await conn.close();
    await dropMemoryPool();
  }
  const seed = await benchSeed();
  return {
    seed,
    pool: config.uploadPool,
    rounds: config.uploadRounds,
    bytes,
    chunkSize: config.uploadChunk,
    readChunk: config.readChunk,
    cipher,
    samples,
  };
}
