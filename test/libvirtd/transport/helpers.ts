import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import type { Duplex } from "node:stream";
import type { TestHost } from "../../support/test-host";

/** libvirt's remote program number and the procedure we use to prove we reached the daemon. */
const REMOTE_PROGRAM = 0x20008086;
const PROC_AUTH_LIST = 66;

export interface RpcHeader {
  length: number;
  prog: number;
  vers: number;
  proc: number;
  type: number;
  serial: number;
  status: number;
}

/** Reads exactly one libvirt RPC packet (uint32 length including itself, then the header). */
function readPacket(stream: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length >= 4 && buf.length >= buf.readUInt32BE(0)) {
        cleanup();
        resolve(buf.subarray(0, buf.readUInt32BE(0)));
      }
    };
    const onEnd = () => {
      cleanup();
      reject(new Error(`stream ended after ${buf.length} bytes`));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const cleanup = () => {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("error", onError);
    };
    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("error", onError);
  });
}

/** Sends a hand-built AUTH_LIST call with `serial` and returns the reply's header. */
export async function authList(stream: Duplex, serial = 1): Promise<RpcHeader> {
  const call = Buffer.alloc(28);
  call.writeUInt32BE(28, 0);
  call.writeUInt32BE(REMOTE_PROGRAM, 4);
  call.writeUInt32BE(1, 8); // protocol version
  call.writeInt32BE(PROC_AUTH_LIST, 12);
  call.writeInt32BE(0, 16); // type CALL
  call.writeUInt32BE(serial, 20);
  call.writeInt32BE(0, 24); // status OK
  const reply = readPacket(stream);
  stream.write(call);
  const p = await reply;
  return {
    length: p.readUInt32BE(0),
    prog: p.readUInt32BE(4),
    vers: p.readUInt32BE(8),
    proc: p.readInt32BE(12),
    type: p.readInt32BE(16),
    serial: p.readUInt32BE(20),
    status: p.readInt32BE(24),
  };
}

/** The reply libvirtd sends to a successful AUTH_LIST call with `serial`. */
export function okReply(serial: number): Partial<RpcHeader> {
  return { prog: REMOTE_PROGRAM, vers: 1, proc: PROC_AUTH_LIST, type: 1, serial, status: 0 };
}

/** Ends a stream and waits for it to close. */
export function closeStream(stream: Duplex): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed) return resolve();
    stream.once("close", () => resolve());
    stream.on("error", () => undefined);
    stream.end();
  });
}

/** `ssh-keygen -lf` output for a public key file: [bits, "SHA256:…", type in parentheses]. */
export function sshKeygenFingerprint(pubFile: string): string {
  const out = execFileSync("ssh-keygen", ["-l", "-E", "sha256", "-f", pubFile], { encoding: "utf8" });
  const fp = out.split(/\s+/)[1];
  if (!fp?.startsWith("SHA256:")) throw new Error(`unexpected ssh-keygen output: ${out}`);
  return fp;
}

export function keygen(file: string, type: string, passphrase = "", extra: string[] = []): void {
  execFileSync("ssh-keygen", [
    "-q",
    "-t",
    type,
    ...extra,
    "-N",
    passphrase,
    "-C",
    "kvmp-transport-test",
    "-f",
    file,
  ]);
}

/** "type base64" of a .pub file, without its comment. */
export function pubKey(pubFile: string): string {
  return readFileSync(pubFile, "utf8").trim().split(/\s+/).slice(0, 2).join(" ");
}

/** A scratch folder under the test host's state (cleaned up by the caller). */
export function scratchDir(host: TestHost, prefix: string): string {
  const base = path.join(host.stateDir, "scratch");
  mkdirSync(base, { recursive: true });
  return mkdtempSync(path.join(base, `${prefix}-`));
}

/** Appends one line to the host's authorized_keys; returns a function that removes exactly that line. */
export function authorize(host: TestHost, pubLine: string): () => void {
  const file = path.join(host.stateDir, "ssh", "authorized_keys");
  const line = pubLine.trim();
  const current = readFileSync(file, "utf8");
  writeFileSync(file, `${current.endsWith("\n") || current === "" ? current : `${current}\n`}${line}\n`);
  return () => {
    const lines = readFileSync(file, "utf8").split("\n");
    writeFileSync(file, lines.filter((l) => l.trim() !== line).join("\n"));
  };
}

/** Resolves once a TCP connect to host:port succeeds. */
async function waitForPort(host: string, port: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host, port });
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${host}:${port}`);
}

export interface ExtraSshd {
  port: number;
  dir: string;
  pidFile: string;
  /** Public host key files by type. */
  hostKeys: Record<string, string>;
  stop(): void;
}

/**
 * A second sshd inside the test host's namespaces (network and the private mount
 * namespace libvirtd sees, entered through the host sshd's PID), so
 * virt-ssh-helper there finds libvirtd at its usual path.
 */
export async function startExtraSshd(
  host: TestHost,
  opts: { port: number; streamLocal: boolean; hostKeyTypes: Array<"ed25519" | "ecdsa" | "rsa"> },
): Promise<ExtraSshd> {
  const dir = scratchDir(host, `sshd-${opts.port}`);
  const pidFile = path.join(dir, "sshd.pid");
  const hostKeys: Record<string, string> = {};
  const keyLines: string[] = [];
  for (const t of opts.hostKeyTypes) {
    const file = path.join(dir, `ssh_host_${t}_key`);
    keygen(file, t, "", t === "ecdsa" ? ["-b", "521"] : t === "rsa" ? ["-b", "2048"] : []);
    hostKeys[t] = `${file}.pub`;
    keyLines.push(`HostKey ${file}`);
  }
  const config = path.join(dir, "sshd_config");
  writeFileSync(
    config,
    [
      `Port ${opts.port}`,
      `ListenAddress ${host.address}`,
      ...keyLines,
      `PidFile ${pidFile}`,
      `AuthorizedKeysFile ${path.join(host.stateDir, "ssh", "authorized_keys")}`,
      "PermitRootLogin prohibit-password",
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "UsePAM no",
      // As in scripts/test-host: the checkout may live under a world-writable /tmp.
      "StrictModes no",
      `AllowStreamLocalForwarding ${opts.streamLocal ? "yes" : "no"}`,
      // OpenSSH 9.2 also refuses stream-local forwarding under AllowTcpForwarding no.
      ...(opts.streamLocal ? [] : ["AllowTcpForwarding no"]),
      "X11Forwarding no",
      "PrintMotd no",
      "MaxSessions 64",
      // DEBUG1 logs each refused channel open, which the fallback test counts.
      `LogLevel ${opts.streamLocal ? "VERBOSE" : "DEBUG1"}`,
      "",
    ].join("\n"),
  );
  spawnSshdBesideHost(host, config, path.join(dir, "sshd.log"));
  await waitForPort(host.address, opts.port);
  return { port: opts.port, dir, pidFile, hostKeys, stop: () => stopSshd(pidFile, dir) };
}

/** Starts `/usr/sbin/sshd -f config` in the test host's namespaces (beside its own sshd); throws if it fails. */
export function spawnSshdBesideHost(host: TestHost, config: string, logFile: string): void {
  const hostSshdPid = readFileSync(path.join(host.stateDir, "pids", "sshd.pid"), "utf8").trim();
  const r = spawnSync(
    "nsenter",
    ["-t", hostSshdPid, "-m", "-n", "/usr/sbin/sshd", "-f", config, "-E", logFile],
    {
      encoding: "utf8",
    },
  );
  if (r.status !== 0) throw new Error(`sshd did not start: ${r.stderr}`);
}

/** The PIDs of `pid`'s children (an sshd's per-connection processes). */
export function childPids(pid: number | string): number[] {
  return spawnSync("pgrep", ["-P", String(pid)], { encoding: "utf8" })
    .stdout.split("\n")
    .filter(Boolean)
    .map(Number);
}

/** Stops the sshd whose PID is in `pidFile` (session children first, then the listener) and removes `dir`. */
export function stopSshd(pidFile: string, dir: string): void {
  try {
    const pid = Number(readFileSync(pidFile, "utf8").trim());
    for (const k of childPids(pid)) process.kill(k, "SIGTERM");
    process.kill(pid, "SIGTERM");
  } catch {
    // Already gone.
  }
  rmSync(dir, { recursive: true, force: true });
}

/** Kills the per-connection sshd processes of an extra sshd (by PID), dropping its clients. */
export function dropConnections(sshd: ExtraSshd): number {
  const kids = childPids(readFileSync(sshd.pidFile, "utf8").trim());
  for (const k of kids) process.kill(k, "SIGKILL");
  return kids.length;
}

/** Every string an error could leak through: message, stack and the cause chain. */
export function errorText(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    if (e instanceof Error) {
      parts.push(e.message, e.stack ?? "", JSON.stringify(e));
      e = e.cause;
    } else {
      parts.push(String(e));
      break;
    }
  }
  return parts.join("\n");
}
