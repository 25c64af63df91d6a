/**
 * What the health check probes, from the checked inputs (create, update) or
 * from the state's outputs (refresh, which has no inputs): the address, the
 * port, the name this proxy's squid gives itself, and the URL, asked from
 * here for proxies without auth, inside the guest for proxies with auth
 * (the provider has no credentials: the password never leaves the
 * program). Pure.
 */
import type { HostConfig } from "../kvm/config/host-config";
import type { NicSpec } from "../kvm/network/nic";
import { DEFAULT_ALLOWED_CLIENTS } from "../kvm/proxy/access";
import { LOOPBACK_PROBE_PORT, squidName } from "../kvm/proxy/setup";
import { type TlsPublic, tlsPublic } from "../kvm/tls/proxy-tls";
import type { ProbeTarget } from "../probes/health-check";
import { type CheckedInputs, DEFAULTS } from "./args";
import { hostOnlyNetwork } from "./check-nics";
import { squidConfOf, vmNicSpecsOf } from "./mapping";
import type { RecordedState } from "./recorded-state";

/** What a probe needs of a proxy's inputs. */
export interface ProbeInputs
  extends Pick<
    CheckedInputs,
    "healthCheck" | "egressCheck" | "proxyPort" | "network" | "bridge" | "macAddress"
  > {
  proxy?: {
    auth?: { username: string };
    allowedClients: readonly string[];
    allowedDestinations: readonly string[];
    outgoingAddress?: string;
    socks?: { port: number };
    /** With TLS on the proxy port: what its certificate must be (the checked block's, or the outputs'). */
    tls?: TlsPublic;
  };
  nics?: NicSpec[];
}

/**
 * The port a probe inside the guest asks squid on: the proxy port, or with
 * TLS squid's plain loopback listener (kvm/proxy/setup.ts LOOPBACK_PROBE_PORT).
 */
export function guestProbePort(c: ProbeInputs): number {
  return c.proxy?.tls !== undefined ? LOOPBACK_PROBE_PORT : c.proxyPort;
}

/**
 * Where the probe of a proxy on `host` goes from: `healthCheck.via`, or by
 * default "host" when the proxy's address is likely reachable from its host
 * only (check-nics.ts hostOnlyNetwork), "local" otherwise.
 */
export function probeVia(c: ProbeInputs, host: HostConfig): "local" | "host" {
  if (c.healthCheck !== false && c.healthCheck.via !== undefined) return c.healthCheck.via;
  return hostOnlyNetwork(vmNicSpecsOf(c), host) !== undefined ? "host" : "local";
}

/**
 * The probe for a VM at `ip`, or undefined when the inputs turn it off;
 * `connect` opens the connection when it goes through the host.
 */
export function probeTargetOf(
  c: ProbeInputs,
  ip: string,
  connect?: ProbeTarget["connect"],
): ProbeTarget | undefined {
  if (c.healthCheck === false) return undefined;
  const url = c.proxy?.auth === undefined ? c.healthCheck.url : undefined;
  return {
    ...(connect !== undefined ? { connect } : {}),
    ...(c.proxy?.tls !== undefined ? { tls: tlsPublic(c.proxy.tls) } : {}),
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
 * The egress check of a proxy (its URL, and whether it runs inside the
 * guest: with auth, as the health check's URL does), or undefined without one.
 */
export function egressProbeOf(c: ProbeInputs): { url: string; inGuest: boolean } | undefined {
  if (c.egressCheck === undefined) return undefined;
  return { url: c.egressCheck.url, inGuest: c.proxy?.auth !== undefined };
}

/**
 * What the probe of a refresh needs from the state's outputs: the health
 * check, the port, the proxy block squid.conf was written from (the outputs
 * show it without the password) and the NICs.
 */
export function probeInputsOf(state: RecordedState): ProbeInputs {
  const shown = state.proxy;
  // The URL as recorded: the object is held to its shape, not its fields (recorded-state.ts).
  const egressUrl: unknown = state.egressCheck?.url;
  return {
    healthCheck: state.healthCheck ?? {},
    ...(typeof egressUrl === "string" ? { egressCheck: { url: egressUrl } } : {}),
    proxyPort: state.proxyPort ?? DEFAULTS.proxyPort,
    ...(state.nics !== undefined ? { nics: state.nics } : {}),
    ...(state.network !== undefined ? { network: state.network } : {}),
    ...(state.bridge !== undefined ? { bridge: state.bridge } : {}),
    ...(shown !== undefined
      ? {
          proxy: {
            allowedClients: shown.allowedClients ?? [...DEFAULT_ALLOWED_CLIENTS],
            allowedDestinations: shown.allowedDestinations ?? [],
            ...(shown.outgoingAddress !== undefined ? { outgoingAddress: shown.outgoingAddress } : {}),
            ...(shown.auth !== undefined ? { auth: { username: shown.auth.username } } : {}),
            ...(shown.socks !== undefined ? { socks: { port: shown.socks.port } } : {}),
            ...(shown.tls !== undefined ? { tls: shown.tls } : {}),
          },
        }
      : {}),
  };
}
