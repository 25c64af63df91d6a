/**
 * The NoCloud seed of one VM, assembled in one place: meta-data from the
 * name, the user's user-data byte for byte, vendor-data (the guest-agent
 * bootstrap and the proxy setup beside the user's own, see vendor-data.ts
 * and proxy/setup.ts) and network-config (the user's own, or built from the
 * NICs: network-config.ts).
 * `create` writes what {@link buildSeed} returns; `check` calls the same
 * function at preview, so input that cannot make a seed fails there, naming
 * the field, and never half-way through a create. Pure.
 */

import { messageOf } from "../../errors";
import type { CheckedNic } from "../network/nic-rules";
import { buildProxySetupScript, type ProxySetup } from "../proxy/setup";
import { Failures } from "../validation";
import { buildNetworkConfig, needsNetworkConfig } from "./network-config";
import { buildMetaData, buildSeedIso, MAX_SEED_FILE_BYTES, type SeedIsoFiles } from "./seed-iso";
import { buildVendorData } from "./vendor-data";

/** What a VM's seed is made of. */
export interface SeedSpec {
  /** The domain name: the instance-id and hostname unless those are given. */
  name: string;
  /** Guest hostname (default: the name). */
  hostname?: string;
  /** cloud-init instance-id (default: the name). */
  instanceId?: string;
  /** cloud-init user-data, placed in the seed byte for byte (strings as UTF-8). */
  userData: string | Buffer;
  /** The user's vendor-data, beside the guest-agent bootstrap. */
  vendorData?: string | Buffer;
  /** Add the guest-agent bootstrap to vendor-data (default true). */
  installGuestAgent?: boolean;
  /** A NoCloud network-config of the user's own, byte for byte; otherwise built from `nics` when they need one. */
  networkConfig?: string | Buffer;
  /** The VM's NICs (at least one): the network-config is built from them when they need one. */
  nics: readonly CheckedNic[];
  /** The guest's proxy, set up by a vendor-data script (kvm/proxy/setup.ts). */
  proxy?: ProxySetup;
}

/** The seed fields a failure can name (the resource maps them to its inputs). */
export type SeedField = "name" | "userData" | "vendorData" | "networkConfig";

function bytes(v: string | Buffer): number {
  return typeof v === "string" ? Buffer.byteLength(v, "utf8") : v.length;
}

/**
 * The seed's files. Throws a ValidationError whose failures name the
 * {@link SeedField} at fault (all of them, not only the first).
 */
export function seedFiles(spec: SeedSpec): SeedIsoFiles {
  const f = new Failures();
  const attempt = <T>(field: SeedField, make: () => T): T | undefined => {
    try {
      return make();
    } catch (err) {
      f.fail(field, messageOf(err));
      return undefined;
    }
  };
  const metaData = attempt("name", () =>
    buildMetaData({ instanceId: spec.instanceId ?? spec.name, localHostname: spec.hostname ?? spec.name }),
  );
  const vendorData = attempt("vendorData", () =>
    buildVendorData({
      installGuestAgent: spec.installGuestAgent ?? true,
      ...(spec.vendorData !== undefined ? { vendorData: spec.vendorData } : {}),
      ...(spec.proxy !== undefined ? { proxySetup: buildProxySetupScript(spec.proxy) } : {}),
    }),
  );
  const networkConfig =
    spec.networkConfig ??
    (needsNetworkConfig(spec.nics)
      ? attempt("networkConfig", () => buildNetworkConfig(spec.nics))
      : undefined);
  const sized: [SeedField, string | Buffer | undefined, string][] = [
    ["userData", spec.userData, ""],
    ["vendorData", vendorData, spec.installGuestAgent === false ? "" : "with the guest-agent script "],
    ["networkConfig", networkConfig, ""],
  ];
  for (const [field, value, what] of sized) {
    if (value !== undefined && bytes(value) > MAX_SEED_FILE_BYTES) {
      f.fail(field, `${what}is ${bytes(value)} bytes, over the seed limit of ${MAX_SEED_FILE_BYTES} bytes`);
    }
  }
  f.throwIfAny("invalid seed");
  const files: SeedIsoFiles = { metaData: metaData as string, userData: spec.userData };
  if (vendorData !== undefined) files.vendorData = vendorData;
  if (networkConfig !== undefined) files.networkConfig = networkConfig;
  return files;
}

/** The seed ISO (byte-deterministic for the same spec). Throws as {@link seedFiles}. */
export function buildSeed(spec: SeedSpec): Buffer {
  return buildSeedIso(seedFiles(spec));
}
