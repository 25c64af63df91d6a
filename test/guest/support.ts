/**
 * Helpers of the booted-guest tests: the guest agent (run a command, read a
 * file, wait for it), probes of a guest's squid, and the host-side files a
 * guest leaves (NVRAM, volumes).
 *
 * The network rule: a guest's address is only ever used inside the test
 * host's network namespace (`ip netns exec`), and only when it lies on the
 * namespace's NAT network. The test process itself never opens a connection
 * to a guest; it talks to guests through libvirt and the guest agent.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { expect } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import {
  GUEST_AGENT_SCRIPT,
  GUEST_AGENT_SCRIPT_FILENAME,
  guestAgentScript,
} from "../../provider/kvm/guest/vendor-data";
import { lookupDomain } from "../../provider/kvm/host/domains";
import { HostPool } from "../../provider/kvm/host/hosts";
import type { Progress } from "../../provider/kvm/progress";
import { PROXY_APT_PACKAGES, PROXY_SETUP_SCRIPT_FILENAME } from "../../provider/kvm/proxy/setup";
import type { ReadStream } from "../../provider/libvirt/connection";
import type { Libvirt } from "../../provider/libvirt/libvirt";
import type { Domain } from "../../provider/libvirt/types";
import { type TargetAddresses, type TestHost, testHost, virshUri } from "../support/test-host";
import { done, pending, type WaitBounds, waitUntil, watchWhile } from "../support/wait-until";

const execFileAsync = promisify(execFile);

/** What test/guest/global-setup.ts provides (`inject("guest")`). */
export interface GuestEnv {
  /** The test host's network namespace. */
  netns: string;
  /**
   * The test image (test/guest/images.ts) over HTTP, once built: a file waits
   * for it and learns its SHA-256 with `testImage(env)`.
   */
  /** The image over HTTP from inside the namespace, reachable from the root namespace (veth). */
  imageUrlFromRoot: string;
  /** The image over HTTP on the namespace's loopback (for a provider running inside it). */
  imageUrlInNetns: string;
  /** The NAT network's gateway, inside the namespace, reachable from guests. */
  gateway: string;
  /** e.g. "192.168.213.": guest addresses must start with it. */
  subnetPrefix: string;
  /** A URL on the namespace's outward target address that answers 204 (the proxy target: "the internet"). */
  targetUrl: string;
  /** A target answering 200 with the client's address: what a proxy's outgoing connection comes from. */
  whoamiUrl: string;
  /** A URL on the namespace's inward (private) target address answering 204: the proxies must refuse it. */
  inwardUrl: string;
  /** `address:443` of a server on the inward address: a CONNECT to it must be refused. */
  inwardTlsAddress: string;
  /** The target addresses of the test host (test/support/test-host.ts). */
  targets: TargetAddresses;
}

declare module "vitest" {
  export interface ProvidedContext {
    guest: GuestEnv;
  }
}

/**
 * A wait on a guest fails when nothing the test can see of it (or of the
 * create making it) has changed for this long: a loaded machine slows a
 * guest down, it does not stop it.
 */
export const GUEST_STALL_MS = 5 * 60_000;
/** The safety net of a wait on booting guests: far above a normal run (3–8 minutes a guest). */
export const GUEST_CEILING_MS = 50 * 60_000;
/**
 * `timeouts.create` the tests give a proxy that should boot: a ceiling for
 * the product too, under the test's so that the product's own error (it
 * names the VM and the console's tail) comes first; the test's stall check
 * is what fails a create that stopped moving.
 */
export const CREATE_TIMEOUT = "45m";
/** A vitest timeout for a test or hook that waits on guests: above the ceiling, so the wait's own error is what a failure shows. */
export const GUEST_TEST_TIMEOUT_MS = GUEST_CEILING_MS + 5 * 60_000;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Seconds since `t0` (performance.now()), one decimal. */
export function since(t0: number): number {
  return Math.round((performance.now() - t0) / 100) / 10;
}

/** Throws unless `ip` is an address of the namespace's NAT network (the only ones we may probe). */
export function assertGuestAddress(env: GuestEnv, ip: string | undefined): string {
  if (ip === undefined || !ip.startsWith(env.subnetPrefix) || !/^\d+\.\d+\.\d+\.\d+$/.test(ip)) {
    throw new Error(`refusing to probe ${ip}: not an address of the test host's NAT network`);
  }
  return ip;
}

/** What a request through a proxy got. */
export interface ProxyReply {
  /** The HTTP status ("000" when nothing answered); for a CONNECT, squid's answer to it. */
  status: string;
  body: string;
  seconds: number;
  /** Why squid refused, as its X-Squid-Error header names it. */
  squidError?: string;
}

export interface RequestOptions {
  credentials?: string;
  /** The source address (curl --interface). */
  from?: string;
  /** A CONNECT tunnel to the URL's host and port instead of a GET. */
  connect?: boolean;
  maxSeconds?: number;
  /** Throw the body away (a large download), keeping the status and the time. */
  discardBody?: boolean;
}

/** A `kvm:hosts` entry that reaches the test host over SSH, as a user's stack config would. */
export function sshHostEntry(host: TestHost): Record<string, unknown> {
  return {
    uri: `ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
    privateKeyPath: host.sshKeyPath,
    knownHostsPath: host.knownHostsPath,
    domainType: "qemu",
    pool: host.poolName,
    network: host.network,
  };
}

/** `http://address:port` of a proxy, brackets around an IPv6 address. */
export function proxyUrlOf(address: string, port = 3128): string {
  return `http://${address.includes(":") ? `[${address}]` : address}:${port}`;
}

/**
 * One GET of `url` (or a CONNECT to its host and port) through the proxy at
 * `proxy` (a URL), made INSIDE the namespace; the caller answers for the
 * proxy's address being one of the namespace's.
 */
export async function requestThrough(
  env: GuestEnv,
  proxy: string,
  url: string,
  options: RequestOptions = {},
): Promise<ProxyReply> {
  const maxSeconds = options.maxSeconds ?? 10;
  const code = options.connect ? "%{http_connect}" : "%{http_code}";
  // Headers to a file of their own (squid's X-Squid-Error), the body and the -w line to stdout.
  const dir = mkdtempSync(path.join(tmpdir(), "kvmpt-curl-"));
  const headerFile = path.join(dir, "headers");
  const args = ["netns", "exec", env.netns, "curl", "-s", "-D", headerFile, "-w", `\n${code} %{time_total}`];
  args.push("--max-time", String(maxSeconds), "--noproxy", "", ...(options.connect ? ["-p"] : []));
  if (options.discardBody) args.push("-o", "/dev/null");
  if (options.credentials !== undefined) args.push("--proxy-user", options.credentials);
  if (options.from !== undefined) args.push("--interface", options.from);
  args.push("-x", proxy, url);
  let out: string;
  try {
    out = (await execFileAsync("ip", args, { encoding: "utf8", timeout: (maxSeconds + 20) * 1000 })).stdout;
  } catch (err) {
    out = (err as { stdout?: string }).stdout ?? "";
  }
  const headers = existsSync(headerFile) ? readFileSync(headerFile, "utf8") : "";
  rmSync(dir, { recursive: true, force: true });
  const nl = out.lastIndexOf("\n");
  const [status, seconds] = out
    .slice(nl + 1)
    .trim()
    .split(" ");
  const squidError = /^X-Squid-Error: (.*)$/im.exec(headers)?.[1]?.trim();
  return {
    status: status || "000",
    body: nl < 0 ? "" : out.slice(0, nl),
    seconds: Number(seconds ?? 0),
    ...(squidError !== undefined ? { squidError } : {}),
  };
}

/** {@link requestThrough} the squid at `ip:port`, an address of the namespace's NAT network. */
export async function proxyRequest(
  env: GuestEnv,
  ip: string,
  url: string,
  options: RequestOptions & { port?: number } = {},
): Promise<ProxyReply> {
  const { port, ...rest } = options;
  return requestThrough(env, proxyUrlOf(assertGuestAddress(env, ip), port), url, rest);
}

/** The status of one GET of `env.targetUrl` through the squid at `ip:port`. */
export async function proxyStatus(env: GuestEnv, ip: string, port = 3128): Promise<string> {
  return (await proxyRequest(env, ip, env.targetUrl, { port })).status;
}

/** How a wait on a guest knows it still moves: its progress reader and limits, without the words of what it waits for. */
export type GuestWait = Omit<WaitBounds, "what">;

/**
 * Polls {@link proxyStatus} until it is `want` and returns it; fails when the
 * guest's progress stalls (`wait`), naming the last status seen.
 */
export async function waitForProxyStatus(
  env: GuestEnv,
  ip: string,
  want: string,
  wait: GuestWait,
  port = 3128,
): Promise<string> {
  return waitUntil({
    what: `the squid at ${ip}:${port} to answer ${want} for ${env.targetUrl}`,
    check: async () => {
      const status = await proxyStatus(env, ip, port);
      return status === want ? done(status) : pending(`status ${status}`);
    },
    ...wait,
  });
}

/**
 * Where a booting guest stands, as far as the test can see without touching
 * the product: the domain's state, the bytes its disks have read and written
 * (libvirt's block stats: a guest booting or installing packages is never
 * quiet for long), and where the test may use them, how many bytes its
 * serial console has printed, whether its guest agent answers and, once it
 * does, cloud-init's stage and the sizes of its two logs. A wait on the
 * guest counts any change of it as progress.
 */
export class GuestProgress {
  private consoleBytes = 0;
  private console: ReadStream | undefined;
  private last: Record<string, unknown> = {};
  private readAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly lv: Libvirt,
    private readonly name: string,
    private readonly options: {
      /** Read the serial console (only where nothing else needs it: a provider's create keeps its tail). */
      console?: boolean;
      /**
       * Ask the guest agent (whether it answers, cloud-init's stage, its
       * logs): only where no provider waits on the same agent meanwhile,
       * since libvirt runs one agent command per domain at a time and a slow
       * one would hold the provider's.
       */
      agent?: boolean;
      /** Look again at most this often (a look runs a command in the guest; default 10 s). */
      everyMs?: number;
    } = {},
  ) {}

  /** The latest look (cached for `everyMs`): never throws, a part it cannot read it leaves out. */
  async read(): Promise<Record<string, unknown>> {
    if (performance.now() - this.readAt < (this.options.everyMs ?? 10_000)) return this.last;
    this.readAt = performance.now();
    const now: Record<string, unknown> = {};
    const dom = await lookupDomain(this.lv, this.name).catch(() => undefined);
    if (dom === undefined) {
      now.domain = "absent";
    } else {
      now.state = await this.lv
        .domainGetState(dom)
        .then((s) => s.state)
        .catch(() => "unreadable");
      const disk = await diskBytes(this.name);
      if (disk !== undefined) now.disk = disk;
      if (this.options.console && this.console === undefined) {
        this.console = await this.lv
          .domainOpenConsole(dom, (chunk) => {
            this.consoleBytes += chunk.length;
          })
          .catch(() => undefined);
      }
      if (this.console !== undefined) now.console = this.consoleBytes;
      if (this.options.agent) {
        const agent = new GuestAgent(this.lv, dom);
        now.agent = await agent.command("guest-ping", undefined, 5).then(
          () => true,
          () => false,
        );
        if (now.agent === true) Object.assign(now, await cloudInitProgress(agent));
      }
    }
    this.last = now;
    return now;
  }

  /** The bounds of a wait on this guest: its progress, with `stallMs` and `ceilingMs`. */
  bounds(limits: { stallMs: number; ceilingMs: number }): GuestWait {
    return { progress: () => this.read(), ...limits };
  }

  /** Stops reading the console (never throws). */
  async stop(): Promise<void> {
    await this.console?.close().catch(() => undefined);
    this.console = undefined;
  }
}

/** Bytes read and written by domain `name`'s disks (`virsh domblkstat`, all disks summed); undefined when unreadable. */
async function diskBytes(name: string): Promise<number | undefined> {
  try {
    const { stdout } = await execFileAsync("virsh", ["-q", "-c", virshUri(testHost()), "domblkstat", name], {
      encoding: "utf8",
      timeout: 30_000,
    });
    let bytes = 0;
    for (const m of stdout.matchAll(/\b(?:rd|wr)_bytes\s+(\d+)/g)) bytes += Number(m[1]);
    return bytes;
  } catch {
    return undefined;
  }
}

/** cloud-init's stage (status.json) and the sizes of cloud-init.log and cloud-init-output.log; what cannot be read is left out. */
async function cloudInitProgress(agent: GuestAgent): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  try {
    const status = JSON.parse((await agent.readFile("/run/cloud-init/status.json")).toString("utf8")) as {
      v1?: { stage?: string | null; [stage: string]: unknown };
    };
    const v1 = status.v1 ?? {};
    out.stage = v1.stage ?? null;
    out.finished = Object.entries(v1)
      .filter(([, v]) => typeof v === "object" && v !== null && (v as { finished?: unknown }).finished)
      .map(([k]) => k);
  } catch {
    // Not written yet.
  }
  try {
    const r = await agent.exec(
      "/bin/sh",
      ["-c", "stat -c '%s' /var/log/cloud-init.log /var/log/cloud-init-output.log 2>/dev/null; true"],
      20_000,
    );
    out.logBytes = r.stdout.toString("utf8").trim().split("\n").filter(Boolean).map(Number);
  } catch {
    // The agent stopped answering between the ping and the command.
  }
  return out;
}

/**
 * What a create's progress listener last reported, without its elapsed time
 * (which changes while nothing else does): a create that reports nothing new
 * for a while has stalled.
 */
export class CreateProgress {
  private last: unknown = "no progress reported yet";
  readonly listener = (p: Progress): void => {
    const { elapsedMs: _, ...rest } = p as Progress & { elapsedMs?: number };
    this.last = rest;
  };
  read(): unknown {
    return this.last;
  }
}

/** What guest-exec reported. */
export interface ExecResult {
  exitcode: number | undefined;
  signal: number | undefined;
  stdout: Buffer;
  stderr: Buffer;
}

interface AgentError {
  class?: string;
  desc?: string;
}

/**
 * The guest agent of one domain, over our own libvirt client
 * (virDomainQemuAgentCommand).
 */
export class GuestAgent {
  constructor(
    private readonly lv: Libvirt,
    private readonly dom: Domain,
  ) {}

  /** Sends one agent command; returns its `return` value, throws on an agent error. */
  async command<T>(execute: string, args?: Record<string, unknown>, timeoutSeconds = 30): Promise<T> {
    const cmd = JSON.stringify(args === undefined ? { execute } : { execute, arguments: args });
    const reply = await this.lv.domainQemuAgentCommand(this.dom, cmd, timeoutSeconds);
    if (reply === null) throw new Error(`guest agent: no reply to ${execute}`);
    const parsed = JSON.parse(reply) as { return?: T; error?: AgentError };
    if (parsed.error !== undefined) {
      throw new Error(`guest agent: ${execute} failed: ${parsed.error.class}: ${parsed.error.desc}`);
    }
    return parsed.return as T;
  }

  /** Waits until the agent answers guest-ping; fails when the guest's progress stalls (`wait`). */
  async waitReady(wait: GuestWait): Promise<void> {
    await waitUntil({
      what: "the guest agent to answer guest-ping",
      check: async () => {
        try {
          await this.command("guest-ping", undefined, 10);
          return done(undefined);
        } catch (err) {
          return pending((err as Error).message);
        }
      },
      pollMs: 2_000,
      ...wait,
    });
  }

  /**
   * Runs `file args...` in the guest and waits for it (guest-exec, then
   * guest-exec-status), at most `timeoutMs`; an abort of `signal` ends the
   * wait with its reason.
   */
  async exec(
    file: string,
    args: string[] = [],
    timeoutMs = 60_000,
    signal?: AbortSignal,
  ): Promise<ExecResult> {
    const { pid } = await this.command<{ pid: number }>("guest-exec", {
      path: file,
      arg: args,
      "capture-output": true,
    });
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const st = await this.command<{
        exited: boolean;
        exitcode?: number;
        signal?: number;
        "out-data"?: string;
        "err-data"?: string;
      }>("guest-exec-status", { pid });
      if (st.exited) {
        return {
          exitcode: st.exitcode,
          signal: st.signal,
          stdout: Buffer.from(st["out-data"] ?? "", "base64"),
          stderr: Buffer.from(st["err-data"] ?? "", "base64"),
        };
      }
      if (performance.now() > deadline) {
        throw new Error(`guest-exec ${file} ${args.join(" ")} still running after ${timeoutMs} ms`);
      }
      signal?.throwIfAborted();
      await sleep(2_000);
      signal?.throwIfAborted();
    }
  }

  /** Runs a shell command; returns its stdout as text, throws on a non-zero exit. */
  async sh(script: string, timeoutMs = 60_000): Promise<string> {
    const r = await this.exec("/bin/sh", ["-c", script], timeoutMs);
    if (r.exitcode !== 0) {
      throw new Error(`sh -c ${JSON.stringify(script)} exited ${r.exitcode}: ${r.stderr.toString()}`);
    }
    return r.stdout.toString("utf8");
  }

  /** True when `file` exists in the guest (`test -e`). */
  async exists(file: string): Promise<boolean> {
    const r = await this.exec("/usr/bin/test", ["-e", file]);
    return r.exitcode === 0;
  }

  /** A guest file's exact bytes (guest-file-open / guest-file-read / guest-file-close). */
  async readFile(file: string): Promise<Buffer> {
    const handle = await this.command<number>("guest-file-open", { path: file, mode: "r" });
    try {
      const chunks: Buffer[] = [];
      for (;;) {
        const r = await this.command<{ count: number; "buf-b64": string; eof: boolean }>("guest-file-read", {
          handle,
          count: 48 * 1024,
        });
        chunks.push(Buffer.from(r["buf-b64"], "base64"));
        if (r.eof || r.count === 0) break;
      }
      return Buffer.concat(chunks);
    } finally {
      await this.command("guest-file-close", { handle });
    }
  }

  /** The IPv4 addresses the agent reports (guest-network-get-interfaces), loopback excluded. */
  async ipv4Addresses(): Promise<string[]> {
    const ifaces = await this.command<
      { name: string; "ip-addresses"?: { "ip-address-type": string; "ip-address": string }[] }[]
    >("guest-network-get-interfaces");
    return ifaces
      .flatMap((i) => i["ip-addresses"] ?? [])
      .filter((a) => a["ip-address-type"] === "ipv4" && !a["ip-address"].startsWith("127."))
      .map((a) => a["ip-address"]);
  }
}

/** A libvirt connection of the test's own to the test host (unix socket), for agents and progress readers. */
export function testHostLibvirt(host: TestHost): { lv: Libvirt; close: () => Promise<void> } {
  const pool = new HostPool(
    parseConfig({
      hosts: { local: { uri: `unix://${host.socketPath}`, pool: host.poolName, network: host.network } },
    }).hosts,
  );
  return { lv: pool.libvirt("local"), close: () => pool.closeAll() };
}

/** An agent for domain `name`. */
export async function agentFor(lv: Libvirt, name: string): Promise<GuestAgent> {
  return new GuestAgent(lv, await lv.domainLookupByName(name));
}

/** The NVRAM file libvirt keeps for a UEFI domain (the test host's private /var/lib/libvirt). */
export function nvramPath(host: TestHost, name: string): string {
  return path.join(host.stateDir, "lib/qemu/nvram", `${name}_VARS.fd`);
}

/** NVRAM files of domain `name` (any template suffix). */
export function nvramFiles(host: TestHost, name: string): string[] {
  const dir = path.join(host.stateDir, "lib/qemu/nvram");
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((f) => f.startsWith(`${name}_`));
}

/** Files of domain `name` in the pool folder (overlay, seed, anything else named after it). */
export function poolFilesOf(host: TestHost, name: string): string[] {
  return readdirSync(host.poolPath).filter((f) => f.startsWith(`${name}-`));
}

/** cloud-init's /run/cloud-init/result.json: the errors of the whole run. */
export async function cloudInitErrors(agent: GuestAgent): Promise<string[]> {
  const text = (await agent.readFile("/run/cloud-init/result.json")).toString("utf8");
  const parsed = JSON.parse(text) as { v1?: { errors?: unknown[] } };
  return (parsed.v1?.errors ?? []).map((e) => String(e));
}

/** What cloud-init said once it was done. */
export interface CloudInitOutcome {
  /** `cloud-init status --wait`'s output (its progress dots, then `status: ...`). */
  status: string;
  /** /run/cloud-init/result.json's errors. */
  errors: string[];
}

/**
 * Waits for cloud-init to finish in the guest (`cloud-init status --wait`)
 * and reads its result; fails when the guest's progress stalls (`wait`).
 */
export async function waitCloudInitDone(agent: GuestAgent, wait: GuestWait): Promise<CloudInitOutcome> {
  const r = await watchWhile(
    (signal) => agent.exec("/usr/bin/cloud-init", ["status", "--wait"], wait.ceilingMs, signal),
    { what: "cloud-init to finish (cloud-init status --wait)", pollMs: 5_000, ...wait },
  );
  return {
    status: r.stdout
      .toString("utf8")
      .replace(/^\.+\n?/, "")
      .trim(),
    errors: await cloudInitErrors(agent),
  };
}

/**
 * The guest-agent script travelled alone as vendor-data (cloud-init names it
 * part-001), is byte for byte the provider's, ran and said so, and cloud-init
 * finished without errors.
 */
export async function expectVendorScriptRan(
  agent: GuestAgent,
  ci: CloudInitOutcome,
  /**
   * The proxy setup script the vendor-data carries beside the agent's (the resource's path), when it
   * does: its text, or a pattern where the test cannot rebuild it (a certificate issued at create).
   */
  proxySetup?: string | RegExp,
): Promise<void> {
  expect(ci.status).toBe("status: done");
  const dir = "/var/lib/cloud/instance/scripts/vendor";
  const files = (await agent.sh(`ls -1 ${dir}`)).split("\n").filter((f) => f !== "");
  const log = (await agent.readFile("/var/log/cloud-init-output.log")).toString("utf8");
  if (proxySetup === undefined) {
    expect(files).toHaveLength(1);
    expect((await agent.readFile(`${dir}/${files[0]}`)).toString("utf8")).toBe(GUEST_AGENT_SCRIPT);
  } else {
    expect(files.sort()).toEqual([GUEST_AGENT_SCRIPT_FILENAME, PROXY_SETUP_SCRIPT_FILENAME]);
    // Beside the proxy setup, the agent's script installs squid in its own transaction.
    expect((await agent.readFile(`${dir}/${GUEST_AGENT_SCRIPT_FILENAME}`)).toString("utf8")).toBe(
      guestAgentScript(PROXY_APT_PACKAGES),
    );
    const setup = (await agent.readFile(`${dir}/${PROXY_SETUP_SCRIPT_FILENAME}`)).toString("utf8");
    if (typeof proxySetup === "string") expect(setup).toBe(proxySetup);
    else expect(proxySetup.test(setup), "the proxy setup script").toBe(true);
    expect(log).toMatch(/kvm-proxy-squid: squid is listening on port \d+/);
  }
  expect(log).toContain("kvm-proxy-guest-agent: qemu-guest-agent enabled and started");
  expect(ci.errors).toEqual([]);
}
