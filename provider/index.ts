/**
 * pulumi-kvm-proxy: the KvmProxy Pulumi resource, the ProxyFleet component, and the pure builders it
 * uses, so a program (or a test) can inspect exactly what would be sent to
 * libvirt and to the guest: domain XML, volume XML, the NoCloud seed ISO,
 * vendor-data, metadata, names and provider IDs.
 *
 * Loading this module does not load the provider runtime (libvirt client,
 * transports): that happens only inside the dynamic provider process.
 */

export { type DomainType, type HostConfig, parseConfig, validateConfig } from "./kvm/config/host-config";
export {
  type Firmware,
  type ImageConfig,
  type ImageFormat,
  type ImageIdentity,
  imageSourceOf,
  resolveImage,
} from "./kvm/config/image";
export { buildDomainXml, type DomainSpec, macAddressProblem, parseDomainXml } from "./kvm/domain/domain-xml";
export {
  buildMetadataXml,
  METADATA_NAMESPACE,
  type ProxyMetadata,
  parseMetadata,
} from "./kvm/domain/metadata";
export { autoDomainName, domainNameProblem, overlayVolumeName, seedVolumeName } from "./kvm/domain/names";
export { formatProviderId, parseProviderId } from "./kvm/domain/provider-id";
export { buildOverlayVolumeXml, buildSeedVolumeXml } from "./kvm/domain/volume-xml";
export { buildSeed, type SeedSpec } from "./kvm/guest/seed";
export { buildMetaData, buildSeedIso, MAX_SEED_FILE_BYTES, type SeedIsoFiles } from "./kvm/guest/seed-iso";
export { buildVendorData, GUEST_AGENT_SCRIPT, type VendorDataOptions } from "./kvm/guest/vendor-data";
export { type NicSpec, shorthandNic } from "./kvm/network/nic";
export { type CheckedNic, decodeNics } from "./kvm/network/nic-rules";
export { ValidationError, type ValidationFailure } from "./kvm/validation";
export { KvmProxy, PROVIDER_MODULE } from "./program/kvm-proxy";
export { PROXY_FLEET_TYPE, ProxyFleet, type ProxyFleetArgs } from "./program/proxy-fleet";
export {
  DEFAULTS,
  type HealthCheck,
  type HostInput,
  type InlineImage,
  KVM_PROXY_TYPE,
  type KvmProxyArgs,
  type Timeouts,
} from "./resource/args";
export { defaultUserData } from "./resource/default-user-data";
export { REPLACE_PROPERTIES, UPDATE_PROPERTIES } from "./resource/kvm-proxy-properties";
export type { KvmProxyOutputs } from "./resource/outputs";
