/**
 * The pure mappings of the resource (provider/resource/mapping.ts): createSpec
 * (and through it the image the VM boots from), specHashOf, the outputs and
 * proxyUrl of a proxy with TLS; and the metadata fragment setTags writes
 * (metadataForSet, provider/kvm/domain/metadata.ts).
 */
import { describe, expect, it } from "vitest";
import { type ImageIdentity, imageSourceOf } from "../../../provider/kvm/config/image";
import { metadataForSet, type ProxyMetadata, parseMetadata } from "../../../provider/kvm/domain/metadata";
import { type NicSpec, shorthandNic } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import { DEFAULT_ALLOWED_CLIENTS } from "../../../provider/kvm/proxy/access";
import { issueLeaf, makeCa } from "../../../provider/kvm/tls/certificate";
import { type ProxyTls, tlsPublic } from "../../../provider/kvm/tls/proxy-tls";
import type { CheckedInputs } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { REPLACE_PROPERTIES, UPDATE_PROPERTIES } from "../../../provider/resource/kvm-proxy-properties";
import {
  createSpec,
  liveOutputs,
  outputsFrom,
  proxySetupOf,
  proxyUrl,
  specHashOf,
  squidConfOf,
} from "../../../provider/resource/mapping";
import { readStackConfig } from "../../../provider/resource/stack-config";
import { sampleMetadata } from "../kvm/fixtures";

const SHA = "c".repeat(64);

/** Inputs as check leaves them for a proxy built from the image key `debian`. */
function inputs(overrides: Partial<CheckedInputs> = {}): CheckedInputs {
  return {
    host: "lab",
    image: "debian",
    resolvedImage: {
      url: "https://example.com/debian.qcow2",
      format: "qcow2",
      firmware: "uefi",
      sha256: SHA,
    },
    userData: "#cloud-config\n",
    installGuestAgent: true,
    memoryMiB: 512,
    vcpus: 1,
    diskGiB: 10,
    name: "edge-abababab",
    autoname: true,
    proxyPort: 3128,
    healthCheck: {},
    waitForIp: true,
    timeouts: { create: 600, delete: 300 },
    tags: { team: "crawl" },
    owner: {
      project: "infra",
      stack: "prod",
      urn: "urn:pulumi:prod::infra::pulumi-nodejs:dynamic:KvmProxy::edge",
      resource: "edge",
    },
    ...overrides,
  };
}

function resolved(overrides: Partial<ImageIdentity>): ImageIdentity {
  return { ...inputs().resolvedImage, ...overrides };
}

describe("createSpec", () => {
  it("carries every input the VM is built from, its owner and its spec hash", () => {
    const c = inputs();
    expect(createSpec(c)).toEqual({
      host: "lab",
      name: "edge-abababab",
      image: {
        url: "https://example.com/debian.qcow2",
        format: "qcow2",
        firmware: "uefi",
        sha256: SHA,
      },
      imageRef: "debian",
      memoryMiB: 512,
      vcpus: 1,
      diskGiB: 10,
      userData: "#cloud-config\n",
      installGuestAgent: true,
      owner: {
        project: "infra",
        stack: "prod",
        urn: "urn:pulumi:prod::infra::pulumi-nodejs:dynamic:KvmProxy::edge",
      },
      specHash: specHashOf(c),
      proxyPort: 3128,
      proxy: {
        port: 3128,
        allowedClients: DEFAULT_ALLOWED_CLIENTS,
        allowedDestinations: [],
        ownAddresses: [],
        onLink: [],
      },
      nics: [shorthandNic(undefined, undefined)],
      tags: { team: "crawl" },
    });
  });

  it("passes vendorData on, and the shorthand's network and fixed MAC as its one NIC", () => {
    const spec = createSpec(
      inputs({ vendorData: "#!/bin/sh\ntrue\n", network: "lan", macAddress: "52:54:00:aa:bb:cc" }),
    );
    expect(spec.vendorData).toBe("#!/bin/sh\ntrue\n");
    expect(spec.nics).toEqual([shorthandNic({ kind: "network", network: "lan" }, "52:54:00:aa:bb:cc")]);
  });

  it.each<[string, Record<string, unknown>, NicSpec[]]>([
    ["no network or bridge: the host's NIC", {}, [shorthandNic(undefined, undefined)]],
    ["a bridge", { bridge: "br0" }, [shorthandNic({ kind: "bridge", bridge: "br0" }, undefined)]],
  ])("gives the shorthand with %s as one NIC", (_, fields, want) => {
    expect(createSpec(inputs(fields)).nics).toEqual(want);
  });

  it("records the image as given: the key, or for an inline image its URL", () => {
    expect(createSpec(inputs()).imageRef).toBe("debian");
    const inline = inputs({
      image: { url: "/srv/images/x.raw", format: "raw" },
      resolvedImage: { url: "file:///srv/images/x.raw", format: "raw", firmware: "uefi" },
    });
    expect(createSpec(inline).imageRef).toBe("file:///srv/images/x.raw");
  });

  it("names the owner after the provider ID when the inputs have none (read back from an old state)", () => {
    expect(createSpec(inputs({ owner: undefined })).owner).toEqual({
      project: "unknown",
      stack: "unknown",
      urn: "kvm://lab/edge-abababab",
    });
  });

  // Where the bytes come from is derived from the image's URL (imageSourceOf), seen through createSpec's `image`.
  it.each<[string, ImageIdentity, Record<string, unknown>]>([
    [
      "an https URL is downloaded over HTTP",
      resolved({ url: "https://example.com/a.qcow2" }),
      { kind: "http", url: "https://example.com/a.qcow2" },
    ],
    [
      "an http URL is downloaded over HTTP",
      resolved({ url: "http://mirror.lan:8080/a.qcow2" }),
      { kind: "http", url: "http://mirror.lan:8080/a.qcow2" },
    ],
    [
      "a file: URL is read from its path",
      resolved({ url: "file:///srv/images/x.raw", format: "raw" }),
      { kind: "file", path: "/srv/images/x.raw" },
    ],
    [
      "a file: URL's escapes are decoded in the path",
      resolved({ url: "file:///srv/my%20images/d%C3%A9bian%231.qcow2" }),
      { kind: "file", path: "/srv/my images/débian#1.qcow2" },
    ],
  ])("image source: %s", (_what, image, source) => {
    const spec = createSpec(inputs({ resolvedImage: image }));
    expect(spec.image).toEqual({
      url: image.url,
      format: image.format,
      firmware: image.firmware,
      sha256: image.sha256,
    });
    expect(imageSourceOf(spec.image.url)).toEqual(source);
  });

  it("leaves out the image's sha256 when it is not pinned", () => {
    const { sha256: _, ...unpinned } = inputs().resolvedImage;
    expect(createSpec(inputs({ resolvedImage: unpinned })).image).not.toHaveProperty("sha256");
  });

  it("reads an image given as an absolute path (through check) from that path", () => {
    const config = readStackConfig((k) => ({ "kvm:hosts": { lab: { uri: "unix:///s" } } })[k]);
    const r = checkInputs(
      {},
      { host: "lab", image: "/srv/images/edge disk.qcow2" },
      { config, randomBytes: (n) => new Uint8Array(n) },
    );
    expect(r.failures).toEqual([]);
    const spec = createSpec(r.inputs as unknown as CheckedInputs);
    expect(imageSourceOf(spec.image.url)).toEqual({ kind: "file", path: "/srv/images/edge disk.qcow2" });
    expect(spec.image.url).toBe("file:///srv/images/edge%20disk.qcow2");
  });
});

describe("specHashOf", () => {
  // One change per property that rebuilds the VM (REPLACE_PROPERTIES; `image` is the resolved image).
  const REBUILDS: [string, Partial<CheckedInputs>][] = [
    ["host", { host: "lab2" }],
    ["image", { image: "other", resolvedImage: resolved({ url: "https://example.com/other.qcow2" }) }],
    ["userData", { userData: "#cloud-config\nhostname: x\n" }],
    ["userDataBase64", { userData: undefined, userDataBase64: "I2Nsb3VkLWNvbmZpZwo=" }],
    ["vendorData", { vendorData: "#!/bin/sh\n" }],
    ["vendorDataBase64", { vendorDataBase64: "IyEvYmluL3NoCg==" }],
    ["proxy", { proxy: { port: 3128, allowedClients: ["203.0.113.0/24"], allowedDestinations: [] } }],
    ["installGuestAgent", { installGuestAgent: false }],
    ["memoryMiB", { memoryMiB: 1024 }],
    ["vcpus", { vcpus: 2 }],
    ["diskGiB", { diskGiB: 20 }],
    ["network", { network: "lan" }],
    ["bridge", { bridge: "br0" }],
    ["macAddress", { macAddress: "52:54:00:12:34:56" }],
    ["name", { name: "edge-fixed", autoname: false }],
    ["proxyPort", { proxyPort: 8080 }],
    [
      "nics",
      {
        nics: decodeNics([
          {
            bridge: "br0",
            mac: "52:54:00:00:00:01",
            addresses: ["203.0.113.7/24"],
            nameservers: [],
            primary: true,
          },
        ]),
      },
    ],
    ["networkConfig", { networkConfig: "version: 2\n" }],
  ];
  // The image config behind an unchanged key rebuilds too: each field of the resolved image.
  const IMAGE_FIELDS: [string, Partial<ImageIdentity>][] = [
    ["url", { url: "https://example.com/debian-13.qcow2" }],
    ["format", { format: "raw" }],
    ["firmware", { firmware: "bios" }],
    ["sha256", { sha256: "d".repeat(64) }],
  ];
  // Changed in place: the hash stays.
  const IN_PLACE: [string, Partial<CheckedInputs>][] = [
    ["tags", { tags: { team: "edge", tier: "1" } }],
    ["healthCheck", { healthCheck: { url: "http://example.com/", expectStatus: 204 } }],
    ["egressCheck", { egressCheck: { url: "https://echo.example/" } }],
    ["waitForIp", { waitForIp: false, healthCheck: false }],
    ["timeouts", { timeouts: { create: 60, delete: 30 } }],
    ["rotation", { rotation: { maxAge: 604_800, batch: 2 } }],
    ["keepOnFailure", { keepOnFailure: true }],
  ];

  it("has a row for every property that rebuilds the VM and every one changed in place", () => {
    expect(REBUILDS.map(([p]) => p).sort()).toEqual([...REPLACE_PROPERTIES].sort());
    expect(IN_PLACE.map(([p]) => p).sort()).toEqual([...UPDATE_PROPERTIES].sort());
  });

  it("is a SHA-256 hex digest, the same for equal inputs", () => {
    expect(specHashOf(inputs())).toMatch(/^[0-9a-f]{64}$/);
    expect(specHashOf(inputs())).toBe(specHashOf(inputs()));
  });

  it.each(REBUILDS)("changes when %s changes", (_property, change) => {
    expect(specHashOf(inputs(change))).not.toBe(specHashOf(inputs()));
  });

  it.each(IMAGE_FIELDS)("changes when the image's %s changes behind the same key", (_field, change) => {
    expect(specHashOf(inputs({ resolvedImage: resolved(change) }))).not.toBe(specHashOf(inputs()));
  });

  it.each(IN_PLACE)("stays when %s changes", (_property, change) => {
    expect(specHashOf(inputs(change))).toBe(specHashOf(inputs()));
  });

  it("stays when only a NIC's bandwidth changes (updated in place)", () => {
    const nic = {
      network: "default",
      mac: "52:54:00:00:00:01",
      addresses: [],
      nameservers: [],
      primary: true,
    };
    expect(specHashOf(inputs({ nics: decodeNics([{ ...nic, bandwidth: { outboundKbps: 8000 } }]) }))).toBe(
      specHashOf(inputs({ nics: decodeNics([nic]) })),
    );
  });

  it("stays when the image key changes to one of the same image", () => {
    expect(specHashOf(inputs({ image: "debian-copy" }))).toBe(specHashOf(inputs()));
  });
});

describe("TLS through the mapping", () => {
  const NOW = new Date();
  const CA = makeCa({ commonName: "kvm-proxy CA edge", now: NOW });
  const OTHER_CA = makeCa({ commonName: "the user's CA", now: NOW });
  const LEAF = issueLeaf({ ca: CA, ipAddresses: ["203.0.113.7"], now: NOW });
  const NIC: NicSpec = {
    bridge: "br0",
    mac: "52:54:00:00:00:01",
    addresses: ["203.0.113.7/24"],
    gateway4: "203.0.113.1",
    nameservers: [],
    primary: true,
  };
  const MADE: ProxyTls = { ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem, made: true } };
  const USERS_CA: ProxyTls = {
    ca: { certificate: OTHER_CA.certificatePem, privateKey: OTHER_CA.privateKeyPem },
  };
  const GIVEN: ProxyTls = {
    certificate: LEAF.certificatePem + CA.certificatePem,
    privateKey: LEAF.privateKeyPem,
  };
  /** Inputs as check leaves them for a proxy at 203.0.113.7 with `tls`. */
  const withTls = (tls: ProxyTls | undefined, port = 3128) =>
    inputs({
      proxyPort: port,
      nics: decodeNics([NIC]),
      proxy: {
        port,
        allowedClients: ["203.0.113.0/24"],
        allowedDestinations: [],
        ...(tls !== undefined ? { tls } : {}),
      },
    });
  const STATUS = {
    host: "lab",
    name: "edge-abababab",
    state: "running" as const,
    uuid: "u",
    mac: "52:54:00:00:00:01",
    ipv4: "203.0.113.7",
  };
  const KEYS = [CA.privateKeyPem, OTHER_CA.privateKeyPem, LEAF.privateKeyPem];

  /** Every string inside `v`. */
  const strings = (v: unknown): string[] =>
    typeof v === "string"
      ? [v]
      : typeof v === "object" && v !== null
        ? Object.values(v).flatMap(strings)
        : [];
  /** The lines of a private key found in any string of `v`. */
  const keyLinesIn = (v: unknown): string[] => {
    const all = strings(v).join("\n");
    const lines = KEYS.flatMap((k) => k.split("\n").filter((l) => l.length > 8 && !l.startsWith("-----")));
    return [...lines.filter((l) => all.includes(l)), ...(all.includes("PRIVATE KEY") ? ["PRIVATE KEY"] : [])];
  };

  it.each<[string, ProxyTls, string | undefined]>([
    ["a CA made for the proxy", MADE, CA.certificatePem],
    ["the user's CA", USERS_CA, OTHER_CA.certificatePem],
    ["a certificate given", GIVEN, undefined],
  ])(
    "outputs with %s: an https proxyUrl, the public TLS alone, proxyCaCertificate only for a CA, no private key anywhere",
    (_what, tls, caCertificate) => {
      const out = outputsFrom(withTls(tls), STATUS);
      expect(out.proxyUrl).toBe("https://203.0.113.7:3128");
      expect((out.proxy as { tls?: unknown }).tls).toEqual(tlsPublic(tls));
      expect(out.proxyCaCertificate).toBe(caCertificate);
      expect("proxyCaCertificate" in out).toBe(caCertificate !== undefined);
      expect(keyLinesIn(out)).toEqual([]);
      // Refreshed from the outputs: https still, and still no key.
      const live = liveOutputs(out, { ...STATUS, ipAddresses: [] } as never);
      expect(live.proxyUrl).toBe("https://203.0.113.7:3128");
      expect(keyLinesIn(live)).toEqual([]);
    },
  );

  it("outputs without TLS: an http proxyUrl, no TLS, no proxyCaCertificate", () => {
    const out = outputsFrom(withTls(undefined), STATUS);
    expect(out.proxyUrl).toBe("http://203.0.113.7:3128");
    expect(out.proxy).not.toHaveProperty("tls");
    expect(out).not.toHaveProperty("proxyCaCertificate");
    expect(liveOutputs(out, STATUS as never).proxyUrl).toBe("http://203.0.113.7:3128");
  });

  it.each<[string, number, boolean, string]>([
    ["203.0.113.7", 3128, true, "https://203.0.113.7:3128"],
    ["2001:db8::7", 8443, true, "https://[2001:db8::7]:8443"],
    ["203.0.113.7", 3128, false, "http://203.0.113.7:3128"],
  ])("proxyUrl(%s, %i, tls %s) is %s", (ip, port, tls, url) => {
    expect(proxyUrl(ip, port, tls)).toBe(url);
  });

  it("hands create the TLS whole (the CA, its key included, issues the certificate there) and squid.conf only that there is TLS", () => {
    const c = withTls(MADE);
    expect(createSpec(c).proxy?.tls).toEqual(MADE);
    expect(proxySetupOf(c).tls).toEqual(MADE);
    expect(squidConfOf(c).tls).toBe(true);
    expect(squidConfOf(withTls(undefined))).not.toHaveProperty("tls");
  });

  it.each<[string, ProxyTls | undefined, ProxyTls | undefined]>([
    ["TLS added", undefined, MADE],
    ["another CA", MADE, USERS_CA],
    ["a CA instead of the certificate", GIVEN, MADE],
    [
      "another certificate given",
      GIVEN,
      { certificate: OTHER_CA.certificatePem, privateKey: OTHER_CA.privateKeyPem },
    ],
  ])("specHashOf changes with %s", (_what, before, after) => {
    expect(specHashOf(withTls(after))).not.toBe(specHashOf(withTls(before)));
  });

  it("specHashOf takes no key (the metadata holding it is readable on the host), nor whether the CA was made", () => {
    const otherKey = (tls: ProxyTls): ProxyTls =>
      "ca" in tls ? { ca: { ...tls.ca, privateKey: "another key" } } : { ...tls, privateKey: "another key" };
    for (const tls of [MADE, USERS_CA, GIVEN])
      expect(specHashOf(withTls(otherKey(tls)))).toBe(specHashOf(withTls(tls)));
    expect(
      specHashOf(withTls({ ca: { certificate: CA.certificatePem, privateKey: CA.privateKeyPem } })),
    ).toBe(specHashOf(withTls(MADE)));
  });
});

describe("metadataForSet", () => {
  const CASES: [string, ProxyMetadata][] = [
    ["full metadata", sampleMetadata()],
    [
      "an unpinned image and no tags",
      sampleMetadata({
        image: { ref: "file:///srv/x.raw", url: "file:///srv/x.raw", format: "raw" },
        tags: {},
      }),
    ],
    [
      "values with XML's special characters",
      sampleMetadata({
        owner: { project: "p&q", stack: "s<1>", urn: "urn:pulumi:s::p::t::a'b\"c" },
        tags: { "team/x": 'a & <b> "c"' },
      }),
    ],
  ];

  it.each(CASES)("declares no namespace: %s", (_what, m) => {
    expect(metadataForSet(m)).not.toMatch(/xmlns/);
  });

  it.each(CASES)("names no element with a prefix: %s", (_what, m) => {
    const names = [...metadataForSet(m).matchAll(/<\/?([^\s/>]+)/g)].map((x) => x[1]);
    expect(names.length).toBeGreaterThan(0);
    expect(names.filter((n) => n?.includes(":"))).toEqual([]);
    expect(names[0]).toBe("proxy");
  });

  it.each(CASES)("reads back through parseMetadata as written: %s", (_what, m) => {
    expect(parseMetadata(metadataForSet(m))).toEqual(m);
  });
});
