/**
 * Whatever preview accepts, create builds: for inputs
 * made to be mostly valid (user-data and vendor-data of every kind and of
 * sizes up to the seed's limit, NICs with static addresses, proxy blocks
 * with and without auth, the guest agent on and off), every case `check`
 * accepts gives a create spec whose seed (the proxy's setup script
 * included) and domain XML build without throwing, the seed's files within
 * their limit. A fixed seed and a random one (printed; replay with
 * KVMP_PROPERTY_SEED).
 */
import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { buildDomainXml } from "../../../provider/kvm/domain/domain-xml";
import { buildSeed, seedFiles } from "../../../provider/kvm/guest/seed";
import { MAX_SEED_FILE_BYTES } from "../../../provider/kvm/guest/seed-iso";
import { resolveHostNics } from "../../../provider/kvm/network/nic-rules";
import { hashedProxyBlock } from "../../../provider/program/proxy-auth";
import { checkInputs } from "../../../provider/resource/check";
import { decodeChecked } from "../../../provider/resource/checked-inputs";
import { createSpec } from "../../../provider/resource/mapping";
import { readStackConfig } from "../../../provider/resource/stack-config";

const FIXED_SEED = 230_001;
const RUNS = Number(process.env.KVMP_PROPERTY_RUNS ?? 200);
const replay = process.env.KVMP_PROPERTY_SEED;
const randomSeed = replay !== undefined ? Number(replay) : Math.floor(Math.random() * 2 ** 31);

const config = readStackConfig(
  (k) =>
    ({
      "kvm:hosts": { lab: { uri: "unix:///run/libvirt/libvirt-sock" } },
      "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
    })[k],
);

/** Text of about `n` bytes (the seed's limit is MAX_SEED_FILE_BYTES per file). */
const sized = fc
  .constantFrom(0, 10, 1000, 64 * 1024, MAX_SEED_FILE_BYTES - 200_000, MAX_SEED_FILE_BYTES - 1000)
  .map((n) => "x".repeat(n));

const userData = fc.oneof(
  fc.constant("#cloud-config\n"),
  sized.map((pad) => `#cloud-config\n# ${pad}\n`),
  fc.constant("#!/bin/sh\necho hi\n"),
  fc.constant("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n--b--\n"),
);
const vendorData = fc.oneof(
  fc.constant(undefined),
  fc.constant({ vendorData: "#cloud-config\nruncmd: [[true]]\n" }),
  sized.map((pad) => ({ vendorData: `#cloud-config\n# ${pad}\n` })),
  fc.constant({ vendorData: "#!/bin/sh\necho vendor\n" }),
  fc.constant({ vendorData: "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b--\n" }),
  fc.constant({ vendorDataBase64: gzipSync(Buffer.from("#cloud-config\n")).toString("base64") }),
);
const nics = fc.oneof(
  fc.constant(undefined),
  fc.constant({ nics: [{ network: "default" }] }),
  fc.integer({ min: 2, max: 250 }).map((n) => ({
    nics: [
      {
        bridge: "br0",
        addresses: [`203.0.113.${n}/24`, `2001:db8::${n.toString(16)}/64`],
        gateway4: "203.0.113.1",
      },
      { network: "default" },
    ],
  })),
);
const proxy = fc.oneof(
  fc.constant(undefined),
  fc.record({
    port: fc.constantFrom(3128, 8080, 60000),
    allowedClients: fc.constantFrom(["10.0.0.0/8"], ["192.168.0.0/16", "fd00::/8"]),
    allowedDestinations: fc.constantFrom([], ["172.16.0.0/12"]),
  }),
  fc.record({
    auth: fc.record({
      username: fc.constantFrom("crawler", "u-1"),
      password: fc.constantFrom("a long password", "p@ss:w#rd/%-12"),
    }),
    allowedClients: fc.constantFrom(
      ["0.0.0.0/0", "::/0"],
      Array.from({ length: 300 }, (_, i) => `198.18.${i % 256}.0/24`),
    ),
  }),
);

const inputs = fc.record({
  userData,
  vendorData,
  nics,
  proxy,
  installGuestAgent: fc.boolean(),
  name: fc.oneof(fc.constant(undefined), fc.constantFrom("edge-1", "a".repeat(63))),
});

function casesPass(seed: number): void {
  fc.assert(
    fc.property(inputs, (i) => {
      const news: Record<string, unknown> = {
        host: "lab",
        image: "debian",
        userData: i.userData,
        installGuestAgent: i.installGuestAgent,
        owner: { project: "p", stack: "s", urn: "urn:pulumi:s::p::KvmProxy::edge", resource: "edge" },
        ...(i.vendorData ?? {}),
        ...(i.nics ?? {}),
        ...(i.name !== undefined ? { name: i.name } : {}),
        ...(i.proxy !== undefined
          ? { proxy: hashedProxyBlock(i.proxy, "urn:pulumi:s::p::KvmProxy::edge") }
          : {}),
      };
      const r = checkInputs({}, news, { config, randomBytes: (n) => new Uint8Array(n).fill(7) });
      if (r.failures.length > 0) return;
      const spec = createSpec(decodeChecked(r.inputs));
      const files = seedFiles(spec);
      for (const f of [files.userData, files.vendorData, files.networkConfig]) {
        if (f !== undefined) expect(Buffer.byteLength(f)).toBeLessThanOrEqual(MAX_SEED_FILE_BYTES);
      }
      expect(buildSeed(spec).length).toBeGreaterThan(0);
      buildDomainXml({
        name: spec.name,
        domainType: "kvm",
        memoryMiB: spec.memoryMiB,
        vcpus: spec.vcpus,
        firmware: spec.image.firmware,
        diskPath: "/var/lib/libvirt/images/x.qcow2",
        seedPath: "/var/lib/libvirt/images/x.iso",
        // The host's network when the proxy names none, as create resolves it.
        nics: resolveHostNics(spec.nics, { kind: "network", network: "default" }),
        metadata: {
          owner: spec.owner,
          image: { ref: spec.imageRef, url: spec.image.url, format: spec.image.format },
          specHash: spec.specHash,
          createdAt: "2026-12-01T00:00:00Z",
          proxyPort: spec.proxyPort,
          diskGiB: spec.diskGiB,
          memoryMiB: spec.memoryMiB,
          vcpus: spec.vcpus,
          storagePool: "default",
          tags: {},
        },
      });
    }),
    { seed, numRuns: RUNS },
  );
}

describe("whatever preview accepts, create builds", () => {
  it.each([
    ["fixed", FIXED_SEED],
    ["random", randomSeed],
  ])(
    "%s seed %i: the seed and the domain XML build for every accepted input",
    (_what, seed) => {
      if (_what === "random")
        console.log(`check-builds: random seed ${seed} (replay: KVMP_PROPERTY_SEED=${seed})`);
      casesPass(seed);
    },
    240_000,
  );
});
