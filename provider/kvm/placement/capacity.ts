/**
 * What a host can take: the limits a host entry of `kvm:hosts` may declare,
 * which placement counts against and which bound creates in flight. Pure.
 */
import { isObject, rejectUnknown } from "../fields";
import type { Failures } from "../validation";

/** A host's declared capacity. Every limit is optional; `concurrentCreates` has a default. */
export interface HostCapacity {
  /** Memory the host gives our VMs in all, MiB. */
  memoryMiB?: number;
  /** vCPUs the host gives our VMs in all. */
  vcpus?: number;
  /** Most proxies on the host. */
  proxies?: number;
  /** Creates in flight on the host at once, whatever Pulumi's --parallel (default {@link DEFAULT_CONCURRENT_CREATES}). */
  concurrentCreates: number;
}

/** Creates in flight per host when the host says nothing: enough to overlap I/O, few enough not to pile up on it. */
export const DEFAULT_CONCURRENT_CREATES = 4;

export const CAPACITY_FIELDS = ["memoryMiB", "vcpus", "proxies", "concurrentCreates"] as const;

/** Reads a host's `capacity` (undefined: no limits, the default create concurrency). Failures at `capacity.<field>`. */
export function parseCapacity(v: unknown, f: Failures): HostCapacity {
  const out: HostCapacity = { concurrentCreates: DEFAULT_CONCURRENT_CREATES };
  if (v === undefined || v === null) return out;
  if (!isObject(v)) {
    f.fail("capacity", "must be {memoryMiB, vcpus, proxies, concurrentCreates}");
    return out;
  }
  const at = f.at("capacity");
  rejectUnknown(v, CAPACITY_FIELDS, at);
  for (const field of CAPACITY_FIELDS) {
    const x = v[field];
    if (x === undefined || x === null) continue;
    if (typeof x !== "number" || !Number.isInteger(x) || x < 1 || x > 1_000_000_000) {
      at.fail(field, "must be a positive integer");
      continue;
    }
    out[field] = x;
  }
  return out;
}
