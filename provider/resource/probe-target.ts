/**
 * What the health check probes, from the checked inputs (create, update) or
 * from the state's outputs (refresh, which has no inputs): the address, the
 * port, the name this proxy's squid gives itself, and the URL, asked from
 * here for proxies without auth, inside the guest for proxies with auth
 * (the provider has no credentials: the password never leaves the
 * program). Pure.
 */
import type { NicSpec } from "../kvm/network/nic";
import { DEFAULT_ALLOWED_CLIENTS } from "../kvm/squid/access";
import { squidName } from "../kvm/squid/setup";
import { type CheckedInputs, DEFAULTS, type KvmProxyOutputs } from "./args";
import type { ProbeTarget } from "./health-check";
import { squidConfOf } from "./mapping";

type Props = Record<string, unknown>;

/** What a probe needs of a proxy's inputs. */
export interface ProbeInputs extends Pick<CheckedInputs, "healthCheck" | "proxyPort"> {
  proxy?: {
    auth?: { username: string };
    allowedClients: readonly string[];
    allowedDestinations: readonly string[];
    outgoingAddress?: string;
  };
  nics?: readonly Pick<NicSpec, "addresses" | "gateway4" | "gateway6">[];
}

/** The probe from here for a VM at `ip`, or undefined when the inputs turn it off. */
export function probeTargetOf(c: ProbeInputs, ip: string): ProbeTarget | undefined {
  if (c.healthCheck === false) return undefined;
  const url = c.proxy?.auth === undefined ? c.healthCheck.url : undefined;
  return {
    ip,
    proxyPort: c.proxyPort,
    squidName: squidName(squidConfOf(c)),
    ...(url !== undefined ? { url } : {}),
    ...(url !== undefined && c.healthCheck.expectStatus !== undefined
      ? { expectStatus: c.healthCheck.expectStatus }
      : {}),
  };
}

/** The probe of a proxy with auth and a URL, run inside the guest; undefined for others. */
export function guestProbeOf(c: ProbeInputs): { url: string; expectStatus?: number } | undefined {
  if (c.healthCheck === false || c.proxy?.auth === undefined || c.healthCheck.url === undefined)
    return undefined;
  return {
    url: c.healthCheck.url,
    ...(c.healthCheck.expectStatus !== undefined ? { expectStatus: c.healthCheck.expectStatus } : {}),
  };
}

/**
 * What the probe of a refresh needs from the state's outputs: the health
 * check, the port, the proxy block squid.conf was written from (the outputs
 * show it without the password) and the NICs.
 */
export function probeInputsOf(props: Props): ProbeInputs {
  const healthCheck = (props.healthCheck ?? {}) as CheckedInputs["healthCheck"];
  const proxyPort = typeof props.proxyPort === "number" ? props.proxyPort : DEFAULTS.proxyPort;
  const shown = (props.proxy ?? undefined) as KvmProxyOutputs["proxy"];
  const nics = Array.isArray(props.nics) ? (props.nics as NicSpec[]) : undefined;
  return {
    healthCheck,
    proxyPort,
    ...(nics !== undefined ? { nics } : {}),
    ...(shown !== undefined
      ? {
          proxy: {
            allowedClients: shown.allowedClients ?? [...DEFAULT_ALLOWED_CLIENTS],
            allowedDestinations: shown.allowedDestinations ?? [],
            ...(shown.outgoingAddress !== undefined ? { outgoingAddress: shown.outgoingAddress } : {}),
            ...(shown.auth !== undefined ? { auth: { username: shown.auth.username } } : {}),
          },
        }
      : {}),
  };
}
