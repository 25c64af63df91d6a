/**
 * OpenSSH transport: byte streams to a remote libvirtd through the system's
 * `ssh`, which then honours the user's ssh_config (ProxyJump, identities,
 * certificates, an existing ControlMaster) and moves bytes at OpenSSH's speed.
 *
 * One `ssh -N -L <ours>/libvirt.sock:<remote socket>` per connection forwards
 * a local socket, in a 0700 folder of ours, to libvirtd's socket on the host
 * (OpenSSH's direct-streamlocal channel, one per open()). Chosen over a
 * `virt-ssh-helper` per stream (libvirt's own qemu+ssh): the forward moved
 * 247-409 MB/s here, the helper 176-178 (bench/notes.md). `ssh -W` cannot
 * forward to a unix socket in OpenSSH 9.2.
 *
 * Settings and how ssh's complaints read: openssh-config.ts. Keys from the
 * stack config are served by an agent in this process (ssh-agent.ts): never
 * written to disk. The inline known_hosts (not secret) are written to the
 * folder, which is removed when the connection ends.
 *
 * Lifetime: ssh runs under a small shell that holds a pipe from us and ends
 * ssh when that pipe closes, so ssh ends with the connection (close(), or a
 * dropped stream when it was the last) and also when this process dies
 * without cleaning up. When an existing ControlMaster of the user's took the
 * forward over (ssh then exits at once), close() cancels it there
 * (`ssh -O cancel`).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { promises as fs } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Duplex } from "node:stream";
import type { ParsedKey } from "ssh2";
import { messageOf, ProviderError, TimeoutError } from "../errors";
import { later } from "../timers";
import { type CredentialOptions, loadPrivateKey } from "./credentials";
import { LIBVIRT_DEFAULTS, SSH_TIMING } from "./defaults";
import { hostPort, urlHost } from "./host-port";
import type { JumpHop } from "./jump";
import { forwardArgs, forwardSpec, openSshArgs, openSshConfig, openSshError } from "./openssh-config";
import { KeyAgent } from "./ssh-agent";
import { describeEndpoint, type SshKeepalive } from "./ssh-hop";
import type { Transport } from "./types";

export interface OpenSshTransportOptions extends CredentialOptions {
  /** The host as ssh is given it: a name or address, or a Host alias of the ssh_config. */
  host: string;
  /** Undefined: the ssh_config's Port for the host, else 22. */
  port?: number;
  /** Undefined: the ssh_config's User for the host, else the local user. */
  user?: string;
  /** libvirtd's socket on the remote host. */
  socketPath?: string;
  /** Jump hosts (ssh -J), first dialled directly; their keys join the agent, their known_hosts the list. */
  jump?: readonly JumpHop[];
  /** The user's ssh_config; default ~/.ssh/config and /etc/ssh/ssh_config. */
  sshConfig?: string;
  /** The ssh binary (default `ssh` from PATH). */
  sshCommand?: string;
  /** Deadline for ssh to log in and set the forward up. */
  connectTimeoutMs?: number;
  keepalive?: SshKeepalive | false;
}

/** Ends ssh ($1...) when our pipe on fd 0 closes; exits with ssh's status. */
const WATCHDOG = [
  "exec 3<&0",
  '"$@" </dev/null &',
  "s=$!",
  '{ read -r _ <&3; kill -TERM "$s" 2>/dev/null; } &',
  "w=$!",
  'wait "$s"; rc=$?',
  'kill "$w" 2>/dev/null',
  'exit "$rc"',
].join("\n");

interface Forward {
  readonly dir: string;
  readonly socket: string;
  /** ssh's arguments for this target and config with `extra` options before the host. */
  readonly sshArgs: (extra: readonly string[]) => string[];
  readonly child: ChildProcess;
  readonly agent: KeyAgent | undefined;
  /** ssh exited 0 at once: an existing ControlMaster of the user's holds the forward. */
  muxed: boolean;
  exited: boolean;
  stderr: string;
}

export class OpenSshTransport implements Transport {
  readonly description: string;
  readonly host: string;
  readonly port: number | undefined;
  readonly user: string | undefined;
  readonly socketPath: string;
  readonly jump: readonly JumpHop[];
  readonly #options: OpenSshTransportOptions;
  readonly #connectTimeoutMs: number;
  #forward: Forward | undefined;
  #starting: Promise<Forward> | undefined;

  constructor(options: OpenSshTransportOptions) {
    if (!options.host) throw new ProviderError("permanent", "OpenSSH transport needs a host");
    this.host = options.host;
    this.port = options.port;
    this.user = options.user;
    this.socketPath = options.socketPath ?? LIBVIRT_DEFAULTS.socketPath;
    this.jump = [...(options.jump ?? [])];
    this.#options = { ...options };
    this.#connectTimeoutMs = options.connectTimeoutMs ?? SSH_TIMING.connectTimeoutMs;
    const hostPart = urlHost(this.host);
    const userPart = this.user === undefined ? "" : `${this.user}@`;
    const portPart = this.port === undefined ? "" : `:${this.port}`;
    this.description = `ssh://${userPart}${hostPart}${portPart} (OpenSSH)`;
  }

  /** The ssh process of the current forward (tests). */
  get pid(): number | undefined {
    const f = this.#forward;
    return f && !f.exited ? f.child.pid : undefined;
  }

  async open(): Promise<Duplex> {
    const forward = await this.#ready();
    try {
      return await connectSocket(forward.socket);
    } catch (err) {
      // ssh went away under us: one fresh forward.
      if (!forward.exited || forward.muxed) throw this.#streamError(forward, err);
      await this.#stop(forward);
      const again = await this.#ready();
      return connectSocket(again.socket).catch((e: unknown) => {
        throw this.#streamError(again, e);
      });
    }
  }

  /**
   * `ssh -W host:port` with the forward's own configuration (its known hosts
   * and agent; one more login, or none with the user's ControlMaster): the
   * process's stdin and stdout are the connection.
   */
  async openTcp(host: string, port: number): Promise<Duplex> {
    const forward = await this.#ready();
    const target = hostPort(host, port);
    const child = spawn(this.#options.sshCommand ?? "ssh", forward.sshArgs(["-W", target]), {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, LC_ALL: "C" },
    });
    let stderr = "";
    child.stderr?.on("data", (c: Buffer) => {
      stderr = (stderr + c.toString("utf8")).slice(-2000);
    });
    const { stdin, stdout } = child as { stdin: NodeJS.WritableStream; stdout: NodeJS.ReadableStream };
    const stream = new Duplex({
      read: () => {
        stdout.resume();
      },
      write: (chunk, encoding, done) => {
        stdin.write(chunk, encoding, done);
      },
      final: (done) => {
        stdin.end();
        done();
      },
      destroy: (err, done) => {
        if (child.exitCode === null) child.kill();
        done(err);
      },
    });
    stdout.on("data", (d: Buffer) => {
      if (!stream.push(d)) stdout.pause();
    });

    // What the pipes say once the stream is done (destroyed, ssh killed) is no one's.
    for (const p of [stdin, stdout]) p.on("error", () => undefined);
    // The end of the stream is ssh's: once its pipes are closed, a clean exit ends it and a
    // failed one (the far end refused) is its error, not a connection that was reset.
    child.on("close", (code) => {
      if (stream.destroyed) return;
      if (code === 0 || code === null) stream.push(null);
      else {
        const err = openSshError(`${this.description} to ${target}`, `exited with status ${code}`, stderr);
        // Nothing listens there: said as a direct connection would say it.
        if (/Connection refused|connect failed/i.test(stderr)) Object.assign(err, { code: "ECONNREFUSED" });
        stream.destroy(err);
      }
    });
    return stream;
  }

  async close(): Promise<void> {
    const pending = this.#starting;
    if (pending) await pending.catch(() => undefined);
    const forward = this.#forward;
    this.#forward = undefined;
    if (forward) await this.#stop(forward);
  }

  #ready(): Promise<Forward> {
    const f = this.#forward;
    if (f && (!f.exited || f.muxed)) return Promise.resolve(f);
    this.#starting ??= this.#start().finally(() => {
      this.#starting = undefined;
    });
    return this.#starting;
  }

  async #start(): Promise<Forward> {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "kvmp-ssh-"));
    let agent: KeyAgent | undefined;
    try {
      const o = this.#options;
      const keys = await this.#keys();
      if (keys.length > 0) agent = await KeyAgent.start(path.join(dir, "agent.sock"), keys);
      const identityAgent = agent?.path ?? o.agentSocket;
      const configFile = path.join(dir, "ssh_config");
      const keepalive = o.keepalive ?? SSH_TIMING.keepalive;
      await fs.writeFile(
        configFile,
        openSshConfig({
          knownHostsFiles: await this.#knownHostsFiles(dir),
          ...(identityAgent !== undefined ? { identityAgent } : {}),
          ...(o.sshConfig !== undefined ? { userConfig: o.sshConfig } : {}),
          connectTimeoutSeconds: Math.max(1, Math.ceil(this.#connectTimeoutMs / 1000)),
          keepalive: keepalive
            ? {
                intervalSeconds: Math.max(1, Math.round(keepalive.intervalMs / 1000)),
                countMax: keepalive.countMax ?? SSH_TIMING.keepalive.countMax,
              }
            : false,
        }),
        { mode: 0o600 },
      );
      const socket = path.join(dir, "libvirt.sock");
      const target = {
        host: this.host,
        ...(this.port !== undefined ? { port: this.port } : {}),
        ...(this.user !== undefined ? { user: this.user } : {}),
        jump: this.jump.map((h) => describeEndpoint(h)),
      };
      const sshArgs = (extra: readonly string[]) => openSshArgs(configFile, target, extra);
      const forwardLine = sshArgs(forwardArgs(socket, this.socketPath));
      const child = spawn("/bin/sh", ["-c", WATCHDOG, "kvmp-ssh", o.sshCommand ?? "ssh", ...forwardLine], {
        stdio: ["pipe", "ignore", "pipe"],
        env: { ...process.env, LC_ALL: "C" },
      });
      const forward: Forward = {
        dir,
        socket,
        sshArgs,
        child,
        agent,
        muxed: false,
        exited: false,
        stderr: "",
      };
      child.stderr?.on("data", (c: Buffer) => {
        forward.stderr = (forward.stderr + c.toString("utf8")).slice(-4000);
      });
      child.stdin?.on("error", () => undefined);
      await this.#waitReady(forward);
      this.#forward = forward;
      return forward;
    } catch (err) {
      await agent?.close().catch(() => undefined);
      await fs.rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** Resolves once the local socket answers; rejects with ssh's complaint if it exits first. */
  #waitReady(forward: Forward): Promise<void> {
    const { child } = forward;
    return new Promise<void>((resolve, reject) => {
      let done = false;
      const finish = (err?: Error): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearTimeout(poll);
        if (err) {
          child.stdin?.end();
          reject(err);
        } else resolve();
      };
      const timer = later(
        () =>
          finish(
            new TimeoutError(
              `OpenSSH to log in to ${this.description} and forward ${this.socketPath}`,
              this.#connectTimeoutMs,
            ),
          ),
        this.#connectTimeoutMs,
      );
      let poll: NodeJS.Timeout | undefined;
      const probe = (): void => {
        connectSocket(forward.socket).then(
          (s) => {
            s.destroy();
            finish();
          },
          () => {
            if (!done) poll = later(probe, 20);
          },
        );
      };
      child.once("exit", (code, signal) => {
        forward.exited = true;
        // ssh hands a forward to an existing ControlMaster and exits 0, possibly after the socket answered.
        if (code === 0) forward.muxed = true;
        if (code === 0 && !done) {
          // A ControlMaster took the forward over, or it failed without saying so: the socket tells.
          connectSocket(forward.socket).then(
            (s) => {
              s.destroy();
              finish();
            },
            () => finish(openSshError(this.description, "exited with status 0", forward.stderr)),
          );
          return;
        }
        const status = code === null ? `signal ${signal ?? "?"}` : `exit status ${code}`;
        finish(openSshError(this.description, status, forward.stderr));
      });
      child.once("error", (err) =>
        finish(new ProviderError("permanent", `cannot run ssh for ${this.description}: ${err.message}`)),
      );
      probe();
    });
  }

  /** Keys of the host and of each hop that name one, parsed (a passphrase is used here, never by ssh). */
  async #keys(): Promise<ParsedKey[]> {
    const out: ParsedKey[] = [];
    const seen = new Set<string>();
    for (const source of [this.#options, ...this.jump]) {
      const { key } = await loadPrivateKey(source);
      if (key === undefined) continue;
      const blob = (key.getPublicSSH() as Buffer).toString("base64");
      if (seen.has(blob)) continue;
      seen.add(blob);
      out.push(key);
    }
    return out;
  }

  /** The known_hosts of the host and of each hop: paths as given, inline content written into `dir`. */
  async #knownHostsFiles(dir: string): Promise<string[]> {
    const files: string[] = [];
    const sources: CredentialOptions[] = [this.#options, ...this.jump];
    for (const [i, s] of sources.entries()) {
      let file: string | undefined;
      if (s.knownHosts !== undefined) {
        file = path.join(dir, `known_hosts.${i}`);
        await fs.writeFile(file, s.knownHosts, { mode: 0o600 });
      } else {
        file = s.knownHostsPath ?? path.join(os.homedir(), ".ssh", "known_hosts");
      }
      if (!files.includes(file)) files.push(file);
    }
    return files;
  }

  #streamError(forward: Forward, err: unknown): ProviderError {
    if (forward.exited && !forward.muxed) return openSshError(this.description, "exited", forward.stderr);
    const reason = messageOf(err);
    return new ProviderError(
      "transient",
      `cannot reach ${this.description} through its ssh forward: ${reason}`,
    );
  }

  async #stop(forward: Forward): Promise<void> {
    if (this.#forward === forward) this.#forward = undefined;
    if (!forward.exited) {
      const exited = new Promise<void>((resolve) => forward.child.once("exit", () => resolve()));
      forward.child.stdin?.end();
      const timer = later(() => forward.child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
    // Still answering with our ssh gone: a ControlMaster of the user's holds the forward.
    const held =
      forward.muxed ||
      (await connectSocket(forward.socket).then(
        (s) => {
          s.destroy();
          return true;
        },
        () => false,
      ));
    if (held) {
      // Ask the master to drop ours.
      const cancel = forward.sshArgs(["-O", "cancel", "-L", forwardSpec(forward.socket, this.socketPath)]);
      await runQuietly(this.#options.sshCommand ?? "ssh", cancel, 5_000);
    }
    await forward.agent?.close().catch(() => undefined);
    await fs.rm(forward.dir, { recursive: true, force: true });
  }
}

function connectSocket(socketPath: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.createConnection({ path: socketPath });
    s.once("connect", () => {
      s.off("error", reject);
      resolve(s);
    });
    s.once("error", reject);
  });
}

function runQuietly(cmd: string, args: string[], timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: "ignore" });
    const timer = later(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.once("error", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
