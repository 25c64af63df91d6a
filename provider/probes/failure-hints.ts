/**
 * What a failed health or egress probe most likely means and which input
 * changes it, from the probe's failure reason (health-check.ts,
 * readiness.ts) and where the probe went from. Pure: text in, text out;
 * the reasons carry no secrets (a probe never holds the proxy's password).
 */

/** Which check failed and how its probe travelled. */
export interface ProbeSituation {
  check: "healthCheck" | "egressCheck";
  /** The probe went through the VM's host (`healthCheck.via: "host"`), not directly from here. */
  viaHost: boolean;
  /** The probe ran inside the guest, through its agent (proxies with auth). */
  inGuest?: boolean;
}

/** A reason's kind, by the text health-check.ts and probe-reader.ts give it. */
type Kind = "unreachable" | "refused" | "denied" | "upstream" | "auth" | "agent" | "other";

function kindOf(reason: string): Kind {
  if (/guest agent does not answer/.test(reason)) return "agent";
  if (/\bHTTP 403\b/.test(reason)) return "denied";
  if (/\bHTTP 407\b/.test(reason)) return "auth";
  if (/\bHTTP (502|503|504)\b/.test(reason)) return "upstream";
  if (/\bECONNREFUSED\b/.test(reason)) return "refused";
  if (
    /\b(ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ECONNRESET|EPIPE)\b|no complete answer within|no probe ran/.test(
      reason,
    )
  )
    return "unreachable";
  return "other";
}

/**
 * The likely causes of `reason` and the fields that change them, as one
 * sentence to append to the failure ("likely: ..."), or undefined when
 * the reason says all there is.
 */
export function probeFailureHint(reason: string, s: ProbeSituation): string | undefined {
  switch (kindOf(reason)) {
    case "unreachable":
      if (s.inGuest) return undefined;
      return s.viaHost
        ? "the VM's host could not reach the proxy port either: a firewall on the host or in the guest, " +
            "or squid has not started yet (the first boot still running: raise timeouts.create)"
        : "the proxy is not reachable from the machine running Pulumi: a VM on the hypervisor's NAT network " +
            'is reachable only from its host (set healthCheck.via: "host", or give the VM a bridged or direct NIC: ' +
            "bridge, nics[].bridge or nics[].direct), or a firewall between here and the VM drops the connection";
    case "refused":
      return (
        "nothing listens on the proxy port yet: squid has not started (the first boot still running: " +
        "raise timeouts.create), or a firewall rejects the connection"
      );
    case "denied":
      return (
        `squid refused the request: the ${s.check}.url may be a destination the proxy refuses ` +
        "(it reaches only public destinations by default; open private, CGNAT or ULA ranges with " +
        "proxy.allowedDestinations), or the probing machine's address is not in proxy.allowedClients"
      );
    case "auth":
      return "the proxy asks for credentials (proxy.auth); a probe from outside the guest carries none";
    case "upstream":
      return (
        `the proxy could not fetch ${s.check}.url: the VM has no route out through its network, ` +
        `its DNS fails, or the URL's server is down (choose a ${s.check}.url the VM can reach)`
      );
    case "agent":
      return (
        "the probe of a proxy with proxy.auth runs inside the guest through its agent: " +
        "keep installGuestAgent true, and let the first boot finish (raise timeouts.create)"
      );
    default:
      return undefined;
  }
}

/** `reason` with its hint appended, when there is one. */
export function withProbeHint(reason: string, s: ProbeSituation): string {
  const hint = probeFailureHint(reason, s);
  return hint === undefined ? reason : `${reason}. Likely: ${hint}`;
}
