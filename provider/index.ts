/**
 * pulumi-kvm-proxy: the KvmProxy Pulumi resource, the ProxyFleet component, and the pure builders it
 * uses, so a program (or a test) can inspect exactly what would be sent to
 * libvirt and to the guest: domain XML, volume XML, the NoCloud seed ISO,
 * vendor-data, metadata, names and provider IDs.
 *
 * Loading this module does not load the provider runtime (libvirt client,
 * transports): that happens only inside the dynamic provider process.
 */

export { buildVendorData, GUEST_AGENT_SCRIPT, type VendorDataOptions } from "./kvm/cloud-init";
export { type DomainType, type HostConfig, parseConfig, validateConfig } from "./kvm/config";
export { buildDomainXml, type DomainSpec, macAddressProblem, parseDomainXml } from "./kvm/domain-xml";
export {
  type Firmware,
  type ImageConfig,
  type ImageFormat,
  type ImageIdentity,
  imageSourceOf,
  resolveImage,
} from "./kvm/image";
export { buildMetadataXml, METADATA_NAMESPACE, type ProxyMetadata, parseMetadata } from "./kvm/metadata";
export { autoDomainName, domainNameProblem, overlayVolumeName, seedVolumeName } from "./kvm/names";
export { formatProviderId, parseProviderId } from "./kvm/provider-id";
export { buildSeed, type SeedSpec } from "./kvm/seed";
export { buildMetaData, buildSeedIso, MAX_SEED_FILE_BYTES, type SeedIsoFiles } from "./kvm/seed-iso";
export { ValidationError, type ValidationFailure } from "./kvm/validation";
export { buildOverlayVolumeXml, buildSeedVolumeXml } from "./kvm/volume-xml";
export {
  DEFAULTS,
  type HealthCheck,
  type InlineImage,
  KVM_PROXY_TYPE,
  type KvmProxyArgs,
  type KvmProxyOutputs,
  REPLACE_PROPERTIES,
  type Timeouts,
  UPDATE_PROPERTIES,
} from "./resource/args";
export { KvmProxy, PROVIDER_MODULE } from "./resource/kvm-proxy";
export { PROXY_FLEET_TYPE, ProxyFleet, type ProxyFleetArgs } from "./resource/proxy-fleet";
export { defaultUserData } from "./resource/squid";
