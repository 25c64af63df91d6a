import type { DomainSpec } from "../../../provider/kvm/domain/domain-xml";
import type { ProxyMetadata } from "../../../provider/kvm/domain/metadata";
import { type NicAttachment, shorthandNic } from "../../../provider/kvm/network/nic";
import { type CheckedNic, decodeNics } from "../../../provider/kvm/network/nic-rules";

export const SHA = "a".repeat(64);

export function sampleMetadata(overrides: Partial<ProxyMetadata> = {}): ProxyMetadata {
  return {
    owner: { project: "infra", stack: "prod", urn: "urn:pulumi:prod::infra::kvm:index:Proxy::web" },
    image: {
      ref: "debian",
      url: "https://cloud.debian.org/images/debian-13.qcow2",
      format: "qcow2",
      sha256: SHA,
    },
    specHash: "b".repeat(64),
    createdAt: "2026-09-04T14:04:00.000Z",
    proxyPort: 3128,
    diskGiB: 10,
    tags: { team: "crawl", env: "prod" },
    ...overrides,
  };
}

/** The NICs of the one-NIC shorthand (the resource's `network`/`bridge`/`macAddress`), checked: default network "default". */
export function oneNic(
  attachment: NicAttachment = { kind: "network", network: "default" },
  macAddress?: string,
): CheckedNic[] {
  return decodeNics([shorthandNic(attachment, macAddress)]);
}

export function sampleSpec(overrides: Partial<DomainSpec> = {}): DomainSpec {
  return {
    name: "web-1",
    domainType: "kvm",
    memoryMiB: 1024,
    vcpus: 2,
    firmware: "uefi",
    diskPath: "/var/lib/libvirt/images/web-1-root.qcow2",
    seedPath: "/var/lib/libvirt/images/web-1-seed.iso",
    nics: oneNic(),
    metadata: sampleMetadata(),
    ...overrides,
  };
}
