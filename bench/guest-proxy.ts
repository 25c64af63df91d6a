/**
 * The proxy the guest figures (6, bench/ready.ts; 8, bench/first-boot.ts)
 * create: squid as the resource sets it up without a proxy block, on a VM
 * of the size the guest tests use (768 MiB, 1 vCPU, 4 GiB).
 */
import { createHash } from "node:crypto";
import type { ImageConfig } from "../provider/kvm/config/image";
import type { CreateSpec } from "../provider/kvm/host/operations";
import { shorthandNic } from "../provider/kvm/network/nic";
import { decodeNics } from "../provider/kvm/network/nic-rules";
import { DEFAULT_ALLOWED_CLIENTS } from "../provider/kvm/proxy/access";
import type { ProxySetup } from "../provider/kvm/proxy/setup";

export const PROXY_PORT = 3128;

/** The squid setup every run creates (what the resource gives a proxy without a proxy block). */
export const SETUP: ProxySetup = {
  port: PROXY_PORT,
  allowedClients: DEFAULT_ALLOWED_CLIENTS,
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
};

/** VM `name` of the Pulumi project `project` (its owner) from `image`, with `userData`. */
export function guestProxySpec(
  project: string,
  name: string,
  image: ImageConfig,
  userData: string,
): CreateSpec {
  return {
    host: "local",
    name,
    image,
    imageRef: image.url,
    memoryMiB: 768,
    vcpus: 1,
    diskGiB: 4,
    userData,
    proxy: SETUP,
    owner: { project, stack: "bench", urn: `urn:pulumi:bench::${project}::kvm:Proxy::${name}` },
    specHash: createHash("sha256").update(name).digest("hex"),
    proxyPort: PROXY_PORT,
    nics: decodeNics([shorthandNic(undefined, undefined)]),
  };
}
