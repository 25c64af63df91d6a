import { describe, expect, it } from "vitest";
import { probeFailureHint, withProbeHint } from "../../../provider/probes/failure-hints";

const local = { check: "healthCheck", viaHost: false } as const;
const viaHost = { check: "healthCheck", viaHost: true } as const;
const egress = { check: "egressCheck", viaHost: false } as const;
const inGuest = { check: "healthCheck", viaHost: false, inGuest: true } as const;

describe("the likely causes of a failed probe, with the field to change", () => {
  it.each([
    [
      "never answered, from here",
      "192.168.122.50:3128: ETIMEDOUT",
      local,
      ['healthCheck.via: "host"', "nics[].bridge", "firewall"],
    ],
    [
      "no answer within the probe's deadline",
      "192.168.122.50:3128: no complete answer within 10 s",
      local,
      ['healthCheck.via: "host"'],
    ],
    [
      "unreachable from the host too",
      "192.168.122.50:3128: EHOSTUNREACH",
      viaHost,
      ["firewall", "timeouts.create"],
    ],
    ["refused", "192.168.122.50:3128: ECONNREFUSED", local, ["squid has not started", "timeouts.create"]],
    [
      "a 403 for the health check's URL",
      "http://10.0.0.5/ through the proxy returned HTTP 403, expected 200",
      local,
      ["healthCheck.url", "proxy.allowedDestinations", "proxy.allowedClients"],
    ],
    [
      "a 403 for the egress echo",
      "http://10.0.0.5/ip through the proxy returned HTTP 403",
      egress,
      ["egressCheck.url", "proxy.allowedDestinations", "proxy.allowedClients"],
    ],
    [
      "a refused CONNECT",
      "proxy 192.168.122.50:3128 refused CONNECT example.com:443 with HTTP 403",
      local,
      ["proxy.allowedDestinations"],
    ],
    ["a 407", "http://example.com/ through the proxy returned HTTP 407, expected 200", local, ["proxy.auth"]],
    [
      "a 503 of the target",
      "http://example.com/ through the proxy returned HTTP 503, expected 200",
      egress,
      ["egressCheck.url", "DNS"],
    ],
    [
      "no guest agent",
      "the guest agent does not answer (the in-guest probe needs it)",
      inGuest,
      ["installGuestAgent", "timeouts.create"],
    ],
  ])("%s", (_what, reason, situation, names) => {
    const hint = probeFailureHint(reason, situation);
    expect(hint).toBeDefined();
    for (const n of names) expect(hint).toContain(n);
  });

  it("suggests probing through the host only when the probe went from here", () => {
    expect(probeFailureHint("x: ETIMEDOUT", viaHost)).not.toContain("healthCheck.via");
    expect(probeFailureHint("x: ETIMEDOUT", local)).toContain("healthCheck.via");
  });

  it("adds nothing to a reason that says all there is", () => {
    const reason =
      "squid at 192.168.122.50:3128 answers as other, not as kvm-proxy-0: its setup has not run yet";
    expect(probeFailureHint(reason, local)).toBeUndefined();
    expect(withProbeHint(reason, local)).toBe(reason);
  });

  it("keeps the reason first, then the hint", () => {
    expect(withProbeHint("192.168.122.50:3128: ECONNREFUSED", local)).toMatch(
      /^192\.168\.122\.50:3128: ECONNREFUSED\. Likely: nothing listens/,
    );
  });
});
