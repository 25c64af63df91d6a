/**
 * Where a VM's NIC attaches: a libvirt network or an existing host bridge.
 * One description and one set of name rules, used by the host config (the
 * host's default NIC), by `check` (a resource's own `network`/`bridge`) and
 * by the domain XML builder. Pure.
 */
import type { Failures } from "./validation";

/** macvtap modes of a `direct` NIC (libvirt's `<source dev mode>`). */
export const DIRECT_MODES = ["bridge", "vepa", "private", "passthrough"] as const;
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

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$/;
// Linux limits interface names to 15 bytes (IFNAMSIZ - 1).
const INTERFACE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$/;

/** Why `v` is not a libvirt network name, or undefined. */
export function networkNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && NETWORK_NAME.test(v)) return undefined;
  return "must be a libvirt network name: 1-128 letters, digits, '.', '_', '+', ':' or '-', starting with a letter or digit";
}

/** Why `v` is not a Linux interface name (a host bridge), or undefined. */
export function bridgeNameProblem(v: unknown): string | undefined {
  if (typeof v === "string" && INTERFACE_NAME.test(v)) return undefined;
  return "must be a Linux interface name: 1-15 letters, digits, '.', '_' or '-'";
}

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
