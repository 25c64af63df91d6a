/**
 * The health check's target: refresh, which has only the state's outputs,
 * probes for the same squid (address, port, credentials, name) that create
 * probed from the checked inputs.
 */
import { describe, expect, it } from "vitest";
import { squidName } from "../../../provider/kvm/proxy-setup";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { readStackConfig } from "../../../provider/resource/config";
import { outputsFrom, proxySetupOf } from "../../../provider/resource/mapping";
import { probeInputsOf, probeTargetOf } from "../../../provider/resource/probe-target";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);
const IP = "192.0.2.10";

function checked(news: Record<string, unknown>): CheckedInputs {
  const r = checkInputs(
    {},
    { host: "lab", image: "debian", ...news },
    { config, randomBytes: (n) => new Uint8Array(n) },
  );
  expect(r.failures).toEqual([]);
  return r.inputs as unknown as CheckedInputs;
}

describe("the probe target", () => {
  it.each<[string, Record<string, unknown>]>([
    ["no proxy block", {}],
    ["the proxyPort shorthand", { proxyPort: 8080 }],
    ["a proxy block without auth", { proxy: { allowedClients: ["203.0.113.0/24"] } }],
    [
      "auth, clients, an outgoing address and a target URL",
      {
        proxy: {
          port: 3129,
          auth: { username: "crawler", password: "s3cret:Pa55" },
          allowedClients: ["203.0.113.0/24", "2001:db8::/32"],
          outgoingAddress: IP,
        },
        healthCheck: { url: "http://example.com/", expectStatus: 204 },
      },
    ],
  ])("from the outputs equals the one from the inputs: %s", (_what, news) => {
    const c = checked(news);
    const outputs = outputsFrom(c, {
      host: "lab",
      name: c.name,
      state: "running",
      uuid: "u",
      mac: "52:54:00:00:00:01",
      ipv4: IP,
    });
    const fromInputs = probeTargetOf(c, IP);
    expect(fromInputs?.squidName).toBe(squidName(proxySetupOf(c)));
    expect(probeTargetOf(probeInputsOf(outputs), IP)).toEqual(fromInputs);
  });

  it("is none when the health check is off", () => {
    expect(probeTargetOf(checked({ healthCheck: false }), IP)).toBeUndefined();
  });
});
