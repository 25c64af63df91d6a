import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDomainXml, type DomainSpec, parseDomainXml } from "../../../provider/kvm/domain/domain-xml";
import { METADATA_NAMESPACE, parseMetadata } from "../../../provider/kvm/domain/metadata";
import { cachedImageVolumeName, overlayVolumeName, seedVolumeName } from "../../../provider/kvm/domain/names";
import {
  buildCachedImageVolumeXml,
  buildOverlayVolumeXml,
  buildSeedVolumeXml,
  GIB,
} from "../../../provider/kvm/domain/volume-xml";
import { attribute, childElement, descend, parseXml, textContent } from "../../../provider/kvm/domain/xml";
import { type TestHost, testHost, virshUri } from "../../support/test-host";
import { oneNic, sampleMetadata } from "../../unit/kvm/fixtures";

// libvirt's own client as the independent judge of what we build: the
// project's RPC client is tested elsewhere.
let host: TestHost;
let scratch: string;

function virsh(...args: string[]): string {
  return execFileSync("virsh", ["-q", "-c", virshUri(host), ...args], { encoding: "utf8", timeout: 30_000 });
}

function quietly(...args: string[]): void {
  try {
    virsh(...args);
  } catch {
    // already gone
  }
}

function xmlFile(name: string, xml: string): string {
  const file = path.join(scratch, name);
  writeFileSync(file, xml);
  return file;
}

const suffix = randomBytes(4).toString("hex");

beforeAll(() => {
  host = testHost();
  scratch = mkdtempSync(path.join(tmpdir(), "kvmp-domain-xml-"));
});

afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

function spec(name: string, overrides: Partial<DomainSpec> = {}): DomainSpec {
  return {
    name,
    domainType: "qemu",
    memoryMiB: 256,
    vcpus: 1,
    firmware: "uefi",
    diskPath: path.join(host.poolPath, overlayVolumeName(name)),
    seedPath: path.join(host.poolPath, seedVolumeName(name)),
    nics: oneNic(undefined, "52:54:00:4b:56:01"),
    metadata: sampleMetadata({ tags: { "a'/><disk type='volume'": "]]>&<\n" } }),
    ...overrides,
  };
}

describe("domain XML against libvirtd", () => {
  const name = `kvmpt-dx-${suffix}`;

  afterAll(() => {
    quietly("undefine", "--nvram", name);
  });

  it("defines a UEFI TCG domain whose disk files do not exist yet, and reads it back", () => {
    const s = spec(name);
    virsh("define", xmlFile("domain.xml", buildDomainXml(s)));

    const dumped = virsh("dumpxml", "--inactive", name);
    const parsed = parseDomainXml(dumped);
    expect(parsed).toMatchObject({
      name,
      domainType: "qemu",
      memoryMiB: 256,
      vcpus: 1,
      firmware: "uefi",
      diskPath: s.diskPath,
      seedPath: s.seedPath,
      mac: "52:54:00:4b:56:01",
      nic: { kind: "network", network: "default" },
      metadata: s.metadata,
    });
    expect(parsed.machine).toMatch(/^pc-q35-/);
    // libvirt kept type='file' disks with our paths and the firmware request as given.
    expect(parsed.disks.map((d) => [d.type, d.device, d.source])).toEqual([
      ["file", "disk", s.diskPath],
      ["file", "cdrom", s.seedPath],
    ]);
    // Parsed, not grepped: the injection attempt in the tag key legitimately
    // carries the text type='volume' inside an escaped attribute value.
    expect(parsed.disks.every((d) => d.type === "file")).toBe(true);
    const os = childElement(parseXml(dumped), "os");
    expect(attribute(os, "firmware")).toBe("efi");
    expect(descend(os, "firmware", "feature")?.attrs).toEqual({ enabled: "no", name: "secure-boot" });
    expect(attribute(childElement(parseXml(dumped), "cpu"), "mode")).toBe("maximum");
  });

  it("returns our metadata through virDomainGetMetadata", () => {
    const fragment = virsh("metadata", name, METADATA_NAMESPACE);
    expect(parseMetadata(fragment)).toEqual(spec(name).metadata);
  });

  it("undefines with the NVRAM flag", () => {
    virsh("undefine", "--nvram", name);
    expect(virsh("list", "--all", "--name")).not.toContain(name);
  });
});

describe("volumes and a started domain against libvirtd", () => {
  const name = `kvmpt-dv-${suffix}`;
  const image = cachedImageVolumeName({ url: `file:///kvmpt/${suffix}.qcow2`, format: "qcow2" });
  const overlay = overlayVolumeName(name);
  const seed = seedVolumeName(name);

  afterAll(() => {
    quietly("destroy", name);
    quietly("undefine", "--nvram", name);
    for (const vol of [overlay, seed, image]) quietly("vol-delete", "--pool", host.poolName, vol);
  });

  it("creates the cached image, the overlay and the seed from our volume XML", () => {
    virsh(
      "vol-create",
      host.poolName,
      xmlFile(
        "image.xml",
        buildCachedImageVolumeXml({ name: image, format: "qcow2", capacityBytes: 64 * 1024 ** 2 }),
      ),
    );
    const imagePath = virsh("vol-path", "--pool", host.poolName, image).trim();
    virsh(
      "vol-create",
      host.poolName,
      xmlFile(
        "overlay.xml",
        buildOverlayVolumeXml({
          name: overlay,
          backingPath: imagePath,
          backingFormat: "qcow2",
          imageVirtualSizeBytes: 64 * 1024 ** 2,
          requestedSizeBytes: 1 * GIB,
        }),
      ),
    );
    virsh("vol-create", host.poolName, xmlFile("seed.xml", buildSeedVolumeXml(seed, 1024 ** 2)));

    const vol = parseXml(virsh("vol-dumpxml", "--pool", host.poolName, overlay));
    expect(textContent(childElement(vol, "capacity"))).toBe(String(GIB));
    expect(textContent(descend(vol, "target", "compat"))).toBe("1.1");
    expect(attribute(descend(vol, "target", "format"), "type")).toBe("qcow2");
    expect(textContent(descend(vol, "backingStore", "path"))).toBe(imagePath);
    expect(attribute(descend(vol, "backingStore", "format"), "type")).toBe("qcow2");
  });

  it("starts the domain under TCG with UEFI and the maximum CPU model", () => {
    // The test host's NAT network lives inside its own namespace.
    const network = host.network;
    const diskPath = virsh("vol-path", "--pool", host.poolName, overlay).trim();
    const seedPath = virsh("vol-path", "--pool", host.poolName, seed).trim();
    virsh(
      "define",
      xmlFile(
        "started.xml",
        buildDomainXml(spec(name, { diskPath, seedPath, nics: oneNic({ kind: "network", network }) })),
      ),
    );
    virsh("start", name);
    expect(virsh("domstate", name).trim()).toBe("running");
    const live = parseXml(virsh("dumpxml", name));
    // libvirt auto-selected OVMF and created the NVRAM file it manages.
    expect(textContent(descend(live, "os", "loader"))).toMatch(/OVMF/);
    expect(textContent(descend(live, "os", "nvram"))).not.toBe("");
    virsh("destroy", name);
    virsh("undefine", "--nvram", name);
  });
});
