/**
 * The KvmProxy class in a program (the Node.js SDK's mock runtime standing
 * in for the engine): the outputs it exposes are those of the property
 * registry, each resolved from the provider's state.
 */
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";
import { KvmProxy } from "../../../provider/program/kvm-proxy";
import {
  CLASS_OUTPUTS,
  KVM_PROXY_OUTPUT_PROPERTIES,
  SECRET_DERIVED_OUTPUTS,
} from "../../../provider/resource/kvm-proxy-properties";

/** A value per output, told apart by its name. */
const STATE: Record<string, unknown> = Object.fromEntries(
  Object.keys(KVM_PROXY_OUTPUT_PROPERTIES).map((k) => [k, `value of ${k}`]),
);

function resolved<T>(o: pulumi.Output<T>): Promise<T> {
  return new Promise((resolve) => o.apply((v) => resolve(v)));
}

describe("the KvmProxy class's outputs", () => {
  let proxy: KvmProxy;
  beforeAll(() => {
    pulumi.runtime.setMocks(
      {
        newResource: (args) => ({ id: "kvm://lab/edge", state: { ...args.inputs, ...STATE } }),
        call: () => ({}),
      },
      "project",
      "stack",
      false,
    );
    proxy = new KvmProxy("edge", { host: "lab", image: "debian-12" });
  });

  it("exposes every output of the registry but the derived, internal and program-made ones", () => {
    expect(CLASS_OUTPUTS).toContain("ipv6Address");
    expect(CLASS_OUTPUTS).toContain("ipAddresses");
    for (const k of [
      "resolvedImage",
      "owner",
      "autoname",
      "proxyUrlWithCredentials",
      ...SECRET_DERIVED_OUTPUTS,
    ])
      expect(CLASS_OUTPUTS, k).not.toContain(k);
  });

  it.each(CLASS_OUTPUTS.map((k) => [k] as const))("resolves %s from the provider's state", async (k) => {
    const output: unknown = proxy[k];
    if (!pulumi.Output.isInstance(output)) expect.fail(`${k} is no Output`);
    await expect(resolved(output)).resolves.toBe(`value of ${k}`);
  });

  it("resolves no output computed from a secret", () => {
    for (const k of SECRET_DERIVED_OUTPUTS)
      expect((proxy as unknown as Record<string, unknown>)[k], k).toBeUndefined();
  });
});
