/**
 * A VM's NICs: where each attaches (a libvirt network, an existing host
 * bridge, or a macvtap device on a host interface), its MAC, static
 * addresses, gateways, nameservers, rate limits and nwfilter. One description
 * ({@link NicSpec}) and one set of rules, used by the host config (the host's
 * default NIC), by `check` (a resource's `network`/`bridge` shorthand and its
 * `nics`), by the domain XML builder and by the seed's network-config. Pure.
 */

import { bridgeNameProblem, type DIRECT_MODES, networkNameProblem } from "./nic-rules";
import type { Failures } from "./validation";

export { checkNicSpecs, readNics } from "./nic-input";
export {
  bandwidthKbpsProblem,
  bridgeNameProblem,
  DIRECT_MODES,
  deriveMac,
  directModeProblem,
  filterNameProblem,
  filterParameters,
  libvirtBandwidth,
  MAX_BANDWIDTH_KBPS,
  MAX_NICS,
  macAddressProblem,
  networkNameProblem,
  normaliseMac,
} from "./nic-rules";
export type DirectMode = (typeof DIRECT_MODES)[number];

/**
 * A NIC's attachment: a libvirt network, an existing host bridge, or a
 * macvtap device on a host interface (`direct`).
 */
export type NicAttachment =
  | { kind: "network"; network: string }
  | { kind: "bridge"; bridge: string }
  | { kind: "direct"; dev: string; mode: DirectMode };

/** Rate limits of a NIC, kilobits per second (1000 bits), as the user gives them. */
export interface NicBandwidth {
  /** Traffic to the guest. */
  inboundKbps?: number;
  /** Traffic from the guest. */
  outboundKbps?: number;
}

/**
 * One NIC of a VM, as check resolved it: the one description the domain XML,
 * the seed's network-config, the filter parameters and the address outputs
 * are built from.
 */
export interface NicSpec {
  attachment: NicAttachment;
  /** Lower case; always set for NICs given in `nics` (check derives a stable one when none is given). */
  mac?: string;
  /** Static addresses, CIDR (`203.0.113.7/24`, `2001:db8::7/64`); empty: DHCP / RA. */
  addresses: string[];
  gateway4?: string;
  gateway6?: string;
  nameservers: string[];
  bandwidth?: NicBandwidth;
  /** A libvirt nwfilter (e.g. `clean-traffic`), its `IP` parameters the NIC's static IPv4 addresses. */
  filter?: string;
  /** The NIC `proxyUrl` uses (exactly one NIC of a VM is). */
  primary: boolean;
}

/** The network NICs attach to when neither the host nor the resource names one. */
export const DEFAULT_NETWORK = "default";

/** Values a caller has not decided yet (e.g. Pulumi's unknowns at preview): passed over, not validated. */
export interface NicFieldsOptions {
  isPending?: (v: unknown) => boolean;
}

/**
 * Reads the `network` and `bridge` fields of `input` (null counts as not
 * given): at most one of them, each a valid name. Failures are recorded at
 * `network`/`bridge` under `f`. Returns the attachment, undefined when
 * neither is given (or one is pending), or "invalid".
 */
export function readNicFields(
  input: { network?: unknown; bridge?: unknown },
  f: Failures,
  options: NicFieldsOptions = {},
): NicAttachment | "invalid" | undefined {
  const given = (v: unknown) => v !== undefined && v !== null;
  const pending = (v: unknown) => options.isPending?.(v) === true;
  const { network, bridge } = input;
  let ok = true;
  if (given(network) && given(bridge)) {
    f.fail("bridge", "give either network or bridge, not both");
    ok = false;
  }
  if (given(network) && !pending(network)) {
    const problem = networkNameProblem(network);
    if (problem !== undefined) {
      f.fail("network", problem);
      ok = false;
    }
  }
  if (given(bridge) && !pending(bridge)) {
    const problem = bridgeNameProblem(bridge);
    if (problem !== undefined) {
      f.fail("bridge", problem);
      ok = false;
    }
  }
  if (!ok) return "invalid";
  if (pending(network) || pending(bridge)) return undefined;
  if (given(bridge)) return { kind: "bridge", bridge: bridge as string };
  if (given(network)) return { kind: "network", network: network as string };
  return undefined;
}
