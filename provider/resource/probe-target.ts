/**
 * What the health check probes, from the checked inputs (create, update) or
 * from the state's outputs (refresh, which has no inputs): the address, the
 * port, the credentials, and the name this proxy's squid gives itself. Pure.
 */
import { DEFAULT_ALLOWED_CLIENTS, squidName } from "../kvm/proxy-setup";
import type { CheckedInputs, KvmProxyOutputs } from "./args";
import type { ProbeTarget } from "./health-check";
import { squidConfOf } from "./mapping";

type Props = Record<string, unknown>;

/** What a probe needs of a proxy's inputs. */
export type ProbeInputs = Pick<CheckedInputs, "healthCheck" | "proxyPort" | "proxy">;

/** The health check's target for a VM at `ip`, or undefined when the inputs turn it off. */
export function probeTargetOf(c: ProbeInputs, ip: string): ProbeTarget | undefined {
  if (c.healthCheck === false) return undefined;
  const auth = c.proxy?.auth;
  return {
    ip,
    proxyPort: c.proxyPort,
    squidName: squidName(squidConfOf(c)),
    ...(c.healthCheck.url !== undefined ? { url: c.healthCheck.url } : {}),
    ...(c.healthCheck.expectStatus !== undefined ? { expectStatus: c.healthCheck.expectStatus } : {}),
    ...(auth !== undefined ? { auth } : {}),
  };
}

/**
 * What the probe of a refresh needs from the state's outputs: the health
 * check, the port, the credentials (from the secret proxyUrlWithCredentials)
 * and the proxy block squid.conf was written from (the outputs show it
 * without the password).
 */
export function probeInputsOf(props: Props): ProbeInputs {
  const healthCheck = (props.healthCheck ?? {}) as CheckedInputs["healthCheck"];
  const proxyPort = typeof props.proxyPort === "number" ? props.proxyPort : 3128;
  let auth: { username: string; password: string } | undefined;
  try {
    const u =
      typeof props.proxyUrlWithCredentials === "string" ? new URL(props.proxyUrlWithCredentials) : undefined;
    if (u !== undefined && u.username !== "") {
      auth = { username: decodeURIComponent(u.username), password: decodeURIComponent(u.password) };
    }
  } catch {
    auth = undefined;
  }
  const shown = (props.proxy ?? undefined) as KvmProxyOutputs["proxy"];
  if (shown === undefined && auth === undefined) return { healthCheck, proxyPort };
  return {
    healthCheck,
    proxyPort,
    proxy: {
      port: proxyPort,
      allowedClients: shown?.allowedClients ?? [...DEFAULT_ALLOWED_CLIENTS],
      ...(shown?.outgoingAddress !== undefined ? { outgoingAddress: shown.outgoingAddress } : {}),
      ...(auth !== undefined ? { auth } : {}),
    },
  };
}
