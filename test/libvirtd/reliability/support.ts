/**
 * Shared by the reliability tests: KvmOperations wired through the wire
 * relay, leak counting with libvirt's own client (virsh) and the pool
 * folder, and the JSON results docs/contributing/reliability.md is rendered from.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { ProviderError } from "../../../provider/errors";
import { parseConfig } from "../../../provider/kvm/config/host-config";
import { partialMarkerVolumeName } from "../../../provider/kvm/domain/names";
import type { CallTracer } from "../../../provider/kvm/host/call-tracer";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations, type KvmOperationsOptions } from "../../../provider/kvm/host/operations";
import type { RetryPolicy } from "../../../provider/kvm/host/retry";
import { repoRoot, type TestHost, virshUri } from "../../support/test-host";
import { sha256File, virsh, virshQuiet } from "../kvm/ops-helpers";

/** Host key of the relayed host in these tests' configuration. */
export const RELAYED = "relayed";

/**
 * Fast retries: the cut-point tables run a hundred creates, and a refused
 * relay must exhaust the retries quickly. The policy is the product's own
 * code path, only with shorter waits.
 */
export const FAST_RETRY = { initialDelayMs: 5, maxDelayMs: 50, maxAttempts: 4, deadlineMs: 30_000 };

/** A fresh KvmOperations (as a new `pulumi up` process would have) reaching libvirtd through `socketPath`. */
export function relayedOps(
  host: TestHost,
  socketPath: string,
  options: {
    tracer?: CallTracer;
    callTimeoutMs?: number;
    retry?: RetryPolicy;
    ops?: Pick<KvmOperationsOptions, "defineGraceMs" | "definePollMs">;
  } = {},
): KvmOperations {
  const hosts = parseConfig({
    hosts: {
      [RELAYED]: {
        uri: `unix://${socketPath}`,
        domainType: "qemu",
        pool: host.poolName,
        network: host.network,
      },
    },
  }).hosts;
  const pool = new HostPool(hosts, {
    callTimeoutMs: options.callTimeoutMs ?? 30_000,
    ...(options.tracer !== undefined ? { tracer: options.tracer } : {}),
  });
  return new KvmOperations(pool, {
    retry: options.retry ?? FAST_RETRY,
    images: new ImageCache({}),
    ...options.ops,
  });
}

/** How a run ended: ok, or the error's kind and message. */
export interface Outcome {
  result: "ok" | "transient" | "permanent";
  message?: string;
}

export async function outcomeOf(run: Promise<unknown>): Promise<Outcome> {
  try {
    await run;
    return { result: "ok" };
  } catch (err) {
    const kind = err instanceof ProviderError ? err.kind : "permanent";
    return { result: kind, message: err instanceof Error ? err.message : String(err) };
  }
}

/** Domain names (any state) starting with `prefix`, as virsh lists them. */
export function domainsWith(host: TestHost, prefix: string): string[] {
  return virsh(host, "list", "--all", "--name")
    .split("\n")
    .map((s) => s.trim())
    .filter((n) => n.startsWith(prefix));
}

/**
 * Pool volumes starting with `prefix`, as virsh lists them. No pool refresh:
 * other suites upload into the shared pool meanwhile and a refresh would
 * fail on their jobs; files libvirt does not know are counted by poolFilesWith.
 */
export function volumesWith(host: TestHost, prefix: string): string[] {
  return virsh(host, "vol-list", host.poolName)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n.startsWith(prefix));
}

/** Removes every domain and pool volume starting with `prefix`: a failed case must not leave its VM to the next. */
export function removeAllWith(host: TestHost, prefix: string): void {
  for (const d of domainsWith(host, prefix)) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  for (const v of volumesWith(host, prefix)) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
}

/** Files in the pool folder starting with `prefix` (catches files libvirt does not list). */
export function poolFilesWith(host: TestHost, prefix: string): string[] {
  return readdirSync(host.poolPath).filter((n) => n.startsWith(prefix));
}

/** What a case left behind; every count must be zero after the final delete. */
export interface Leftovers {
  domains: number;
  volumes: number;
  files: number;
  markers: number;
  /** A cached image whose bytes differ from the source (a later create would use it). */
  corruptCache: number;
}

/**
 * Counts leftovers of objects named with `prefix`, plus the partial marker of
 * cached image `cacheName` and whether that image, when present, holds
 * exactly the source's bytes.
 */
export function leftovers(
  host: TestHost,
  prefix: string,
  cacheName: string,
  sourceSha256: string,
): Leftovers {
  const markerName = partialMarkerVolumeName(cacheName);
  const vols = volumesWith(host, "");
  const cacheFile = path.join(host.poolPath, cacheName);
  const cachePresent = vols.includes(cacheName) && existsSync(cacheFile);
  const markerPresent = vols.includes(markerName);
  return {
    domains: domainsWith(host, prefix).length,
    volumes: vols.filter((v) => v.startsWith(prefix)).length,
    files: poolFilesWith(host, prefix).length,
    markers: markerPresent ? 1 : 0,
    // A cached image beside its marker is a partial upload nothing uses; alone it must be whole.
    corruptCache: cachePresent && !markerPresent && sha256File(cacheFile) !== sourceSha256 ? 1 : 0,
  };
}

export const NO_LEFTOVERS: Leftovers = { domains: 0, volumes: 0, files: 0, markers: 0, corruptCache: 0 };

/** Where results go (.state/reliability/<name>.json), for scripts/reliability-tables. */
export function writeResults(name: string, rows: unknown[]): void {
  const dir = path.join(repoRoot, ".state", "reliability");
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    path.join(dir, `${name}.json`),
    `${JSON.stringify({ generatedAt: new Date().toISOString(), rows }, null, 2)}\n`,
  );
}

/** Removes a cached image and its marker with virsh (cases start from an empty cache). */
export function dropCachedImage(host: TestHost, cacheName: string): void {
  for (const v of [cacheName, partialMarkerVolumeName(cacheName)]) {
    try {
      execFileSync("virsh", ["-q", "-c", virshUri(host), "vol-delete", "--pool", host.poolName, v], {
        stdio: "ignore",
      });
    } catch {
      // not there
    }
  }
}
