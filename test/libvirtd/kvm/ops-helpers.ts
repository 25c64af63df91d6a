import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { Duplex } from "node:stream";
import { ProviderError } from "../../../provider/errors";
import { type HostConfig, parseConfig } from "../../../provider/kvm/config/host-config";
import { type ImageConfig, parseImage } from "../../../provider/kvm/config/image";
import { perVmVolumeNames } from "../../../provider/kvm/domain/names";
import { CallTracer, type TraceRecord } from "../../../provider/kvm/host/call-tracer";
import { buildTransport, HostPool, type HostPoolOptions } from "../../../provider/kvm/host/hosts";
import type { CreateSpec } from "../../../provider/kvm/host/operations";
import { shorthandNic } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import { Failures } from "../../../provider/kvm/validation";
import type { Libvirt } from "../../../provider/libvirt/libvirt";
import type { Transport } from "../../../provider/transport/types";
import { type TestHost, virshUri } from "../../support/test-host";

/** Prefix of everything these tests create in libvirt. */
export const PREFIX = "kvmpt-ops-";

let seq = 0;
/** A unique domain name. */
export function uniqueName(tag: string): string {
  seq += 1;
  return `${PREFIX}${tag}-${process.pid}-${seq}`;
}

export function virsh(host: TestHost, ...args: string[]): string {
  return execFileSync("virsh", ["-q", "-c", virshUri(host), ...args], { encoding: "utf8", timeout: 60_000 });
}

/** virsh, ignoring failure (cleanup of things that may be gone). */
export function virshQuiet(host: TestHost, ...args: string[]): void {
  try {
    virsh(host, ...args);
  } catch {
    // already gone
  }
}

export function scratchDir(host: TestHost, prefix: string): string {
  const base = path.join(host.stateDir, "scratch");
  mkdirSync(base, { recursive: true });
  return mkdtempSync(path.join(base, `${prefix}-`));
}

/**
 * A qcow2 image with real content: `mib` MiB of pseudo-random data converted
 * to qcow2 (so it is bigger than one 1 MiB upload packet and a cut lands mid-way).
 */
export function makeQcow2(
  dir: string,
  name: string,
  mib: number,
  virtualMiB = 64,
): { path: string; sha256: string } {
  const raw = path.join(dir, `${name}.raw`);
  const out = path.join(dir, `${name}.qcow2`);
  let state = createHash("sha256").update(name).digest();
  const chunks: Buffer[] = [];
  for (let i = 0; i < mib * 1024 * 1024; i += 32) {
    state = createHash("sha256").update(state).digest();
    chunks.push(state);
  }
  writeFileSync(raw, Buffer.concat(chunks));
  execFileSync("truncate", ["-s", `${virtualMiB}M`, raw]);
  execFileSync("qemu-img", ["convert", "-q", "-f", "raw", "-O", "qcow2", raw, out]);
  return { path: out, sha256: sha256File(out) };
}

export function sha256File(file: string): string {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

/** Provider config for the test host: `local` over the unix socket, `remote` over SSH. */
export function hostConfigs(host: TestHost): Record<string, HostConfig> {
  const common = { domainType: "qemu", pool: host.poolName, network: host.network };
  return parseConfig({
    hosts: {
      local: { uri: `unix://${host.socketPath}`, ...common },
      remote: {
        uri: `ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
        privateKeyPath: host.sshKeyPath,
        knownHostsPath: host.knownHostsPath,
        ...common,
      },
    },
  }).hosts;
}

/**
 * An image entry as the provider reads it, booting with BIOS unless the test asks for UEFI: these
 * images hold nothing bootable, and under TCG SeaBIOS then idles at about half a second of a core
 * while OVMF spends about ten in its first 20 s. What UEFI changes (an NVRAM file that undefine must
 * remove) is asked for where it is tested.
 */
export function imageConfig(input: {
  url: string;
  sha256?: string;
  format?: string;
  firmware?: "uefi" | "bios";
}): ImageConfig {
  const f = new Failures();
  const image = parseImage(undefined, { firmware: "bios", ...input }, f);
  f.throwIfAny();
  return image as ImageConfig;
}

/** Trace records collected in memory. */
export class TraceLog {
  readonly records: TraceRecord[] = [];
  readonly lines: string[] = [];
  readonly tracer = new CallTracer({
    level: 1,
    sink: (line, record) => {
      this.lines.push(line);
      this.records.push(record);
    },
  });

  /** Uploads into volume `vol` (pool/name) seen so far. */
  uploads(volName: string): number {
    return this.records.filter(
      (r) => r.call === "virStorageVolUpload" && r.fields.some((f) => f.endsWith(`/${volName}`)),
    ).length;
  }
}

/**
 * Transports that can be cut: `cut()` destroys every open stream; after
 * `kill()` opens fail too (a process that died mid-way cannot clean up).
 */
export class CuttableTransports {
  private readonly streams = new Set<Duplex>();
  killed = false;

  readonly factory = (cfg: HostConfig): Transport => {
    const inner = buildTransport(cfg);
    return {
      description: inner.description,
      open: async () => {
        if (this.killed) throw new ProviderError("permanent", "transport killed by the test");
        const s = await inner.open();
        this.streams.add(s);
        s.once("close", () => this.streams.delete(s));
        return s;
      },
      close: () => inner.close(),
    };
  };

  cut(): void {
    for (const s of this.streams) s.destroy();
  }

  kill(): void {
    this.killed = true;
    this.cut();
  }
}

export function hostPool(host: TestHost, options: HostPoolOptions = {}): HostPool {
  return new HostPool(hostConfigs(host), options);
}

/** The owner URN {@link baseSpec} records for `name`. */
export function ownerUrnOf(name: string): string {
  return `urn:pulumi:test::kvmpt::kvm:Proxy::${name}`;
}

/**
 * Delete options naming {@link baseSpec}'s owner for `name`, as the resource
 * passes its own: the owner's tag finds the VM's volumes once the domain is gone.
 */
export function ownedBy(name: string): { volumeOwner: string } {
  return { volumeOwner: ownerUrnOf(name) };
}

/** The per-VM volumes a create of {@link baseSpec} makes for `name` (tagged with its owner, names.ts). */
export function vmVolumes(
  name: string,
  ownerUrn = ownerUrnOf(name),
): { root: string; seed: string; both: string[] } {
  const [root, seed] = perVmVolumeNames(name, ownerUrn) as [string, string];
  return { root, seed, both: [root, seed] };
}

export function baseSpec(hostKey: string, name: string, image: ImageConfig): CreateSpec {
  return {
    host: hostKey,
    name,
    image,
    imageRef: image.url,
    memoryMiB: 128,
    vcpus: 1,
    diskGiB: 1,
    userData: "#cloud-config\nhostname: test\n",
    owner: { project: "kvmpt", stack: "test", urn: ownerUrnOf(name) },
    specHash: createHash("sha256").update(name).digest("hex"),
    proxyPort: 3128,
    // The shorthand's one NIC on the host's NIC (create resolves it).
    nics: decodeNics([shorthandNic(undefined, undefined)]),
  };
}

/** A small HTTP server on 127.0.0.1 serving files, with redirects and mid-body cuts. */
export class ImageServer {
  private server: http.Server | undefined;
  readonly files = new Map<string, string>();
  /** Paths whose body is cut after this many bytes (Content-Length still announces the whole file). */
  readonly cutAfter = new Map<string, number>();
  /** Paths whose body stops after this many bytes and stays open until {@link releaseHeld}. */
  readonly holdAfter = new Map<string, number>();
  /** Called once a held body has sent its bytes. */
  onHeld: (() => void) | undefined;
  private readonly held = new Set<http.ServerResponse>();
  requests = 0;

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => {
      this.requests += 1;
      const url = req.url ?? "/";
      if (url.startsWith("/redirect/")) {
        res.writeHead(302, { location: url.slice("/redirect".length) });
        res.end();
        return;
      }
      const file = this.files.get(url);
      if (file === undefined) {
        res.writeHead(404);
        res.end();
        return;
      }
      const body = readFileSync(file);
      res.writeHead(200, { "content-length": body.length, "content-type": "application/octet-stream" });
      const hold = this.holdAfter.get(url);
      if (hold !== undefined) {
        this.held.add(res);
        res.write(body.subarray(0, hold), () => this.onHeld?.());
        return;
      }
      const cut = this.cutAfter.get(url);
      if (cut === undefined) {
        res.end(body);
        return;
      }
      res.write(body.subarray(0, cut), () => {
        setTimeout(() => res.socket?.destroy(), 50);
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
  }

  url(p: string): string {
    const addr = this.server?.address() as AddressInfo;
    return `http://127.0.0.1:${addr.port}${p}`;
  }

  /** Cuts every held body short (the client sees the connection drop). */
  releaseHeld(): void {
    for (const res of this.held) res.socket?.destroy();
    this.held.clear();
  }

  async stop(): Promise<void> {
    this.releaseHeld();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}

interface LeaseEntry {
  "mac-address"?: string;
  [k: string]: unknown;
}

/**
 * The NAT network's dnsmasq lease file, written by hand (libvirt reads it for
 * virDomainInterfaceAddresses' lease source). Edits keep the entries of other
 * guests on the shared host; {@link restore} drops every MAC added here.
 */
export class DnsmasqLeases {
  private readonly added = new Set<string>();

  constructor(private readonly file: string) {}

  read(): LeaseEntry[] {
    try {
      const parsed = JSON.parse(readFileSync(this.file, "utf8")) as unknown;
      return Array.isArray(parsed) ? (parsed as LeaseEntry[]) : [];
    } catch {
      return [];
    }
  }

  /** Read-modify-write of the whole file. */
  edit(change: (leases: LeaseEntry[]) => LeaseEntry[]): void {
    writeFileSync(this.file, `${JSON.stringify(change(this.read()), null, 2)}\n`);
  }

  /**
   * Leases for `mac`, one per address (an IPv6 one carries an IAID, as
   * dnsmasq's DHCPv6 leases do); `replace` drops the MAC's earlier ones.
   */
  add(mac: string, ips: readonly string[], opts: { hostname: string; replace?: boolean }): void {
    this.added.add(mac);
    const expiry = Math.floor(Date.now() / 1000) + 3600;
    this.edit((l) => [
      ...(opts.replace ? l.filter((e) => e["mac-address"] !== mac) : l),
      ...ips.map((ip, i) => ({
        "ip-address": ip,
        "mac-address": mac,
        hostname: opts.hostname,
        "expiry-time": expiry,
        ...(ip.includes(":") ? { iaid: String(1000 + i) } : {}),
      })),
    ]);
  }

  /** Drops every lease of the MACs added here. */
  restore(): void {
    this.edit((l) => l.filter((e) => !this.added.has(e["mac-address"] ?? "")));
  }
}

/**
 * Has `lv` run `work` (another process's create, say) once, right after the
 * first of its domain or volume listings returns and before its caller sees
 * it: the work lands between a count's two reads of the host, whichever it
 * reads first. Returns whether it ran.
 */
export function betweenReads(lv: Libvirt, work: () => Promise<unknown>): () => boolean {
  let running: Promise<unknown> | undefined;
  const afterFirst = async <T>(read: Promise<T>): Promise<T> => {
    const result = await read;
    running ??= work();
    await running;
    return result;
  };
  const listDomains = lv.connectListAllDomains.bind(lv);
  const listVolumes = lv.storagePoolListAllVolumes.bind(lv);
  lv.connectListAllDomains = (...args) => afterFirst(listDomains(...args));
  lv.storagePoolListAllVolumes = (...args) => afterFirst(listVolumes(...args));
  return () => running !== undefined;
}
