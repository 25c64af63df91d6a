/**
 * The whole seed ISO of a proxy with a proxy block: built twice
 * from the same inputs, hashed by the program and checked separately, it is
 * byte-identical (the password's salt comes from the username and the URN,
 * not drawn); another password changes it; the password itself is in no
 * byte of it.
 */
import { describe, expect, it } from "vitest";
import { buildSeed } from "../../../provider/kvm/guest/seed";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { createSpec } from "../../../provider/resource/mapping";
import { readStackConfig } from "../../../provider/resource/stack-config";

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///s" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);
const PASSWORD = "s3cret-Pa55-in-no-byte";

function seedOf(password: string): Buffer {
  const r = checkInputs(
    {},
    {
      host: "lab",
      image: "debian",
      name: "edge-1",
      userData: "#cloud-config\npackages: [curl]\n",
      nics: [{ bridge: "br0", addresses: ["203.0.113.7/24", "2001:db8::7/64"], gateway4: "203.0.113.1" }],
      proxy: hashedProxyBlock(
        {
          port: 3129,
          auth: { username: "crawler", password },
          allowedClients: ["198.51.100.0/24"],
          outgoingAddress: "203.0.113.7",
        },
        "urn:pulumi:s::p::KvmProxy::edge-1",
      ),
      owner: { project: "p", stack: "s", urn: "urn:pulumi:s::p::KvmProxy::edge-1", resource: "edge-1" },
    },
    // Random bytes that differ per call: nothing random may reach the seed.
    { config, randomBytes: (n) => crypto.getRandomValues(new Uint8Array(n)) },
  );
  expect(r.failures).toEqual([]);
  return buildSeed(createSpec(r.inputs as unknown as CheckedInputs));
}

describe("the seed of a proxy with a proxy block", () => {
  it("is byte-identical for the same inputs, built twice", () => {
    expect(seedOf(PASSWORD).equals(seedOf(PASSWORD))).toBe(true);
  });

  it("changes with the password, and holds no byte sequence of it", () => {
    const seed = seedOf(PASSWORD);
    expect(seed.equals(seedOf(`${PASSWORD}x`))).toBe(false);
    expect(seed.includes(Buffer.from(PASSWORD, "utf8"))).toBe(false);
    expect(seed.includes(Buffer.from(PASSWORD, "utf16le"))).toBe(false);
  });
});
