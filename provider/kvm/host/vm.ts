/**
 * What the KVM operations report of a VM and of a delete: the types their
 * helpers (addresses, delete, provision) share with them and with the
 * resource layer. Types only.
 */

import type { ParsedDomain } from "../domain/domain-xml";
import type { ProxyMetadata } from "../domain/metadata";
import type { NicAddresses, ProxyState } from "../domain/states";
import type { NicSpec } from "../network/nic";
import type { LibvirtState } from "./domains";

/** What get reports. */
export interface VmStatus {
  host: string;
  name: string;
  state: ProxyState;
  uuid?: string;
  /** libvirt's virDomainState and reason. */
  libvirtState?: LibvirtState;
  /** First routable IPv4 of the guest. */
  ipv4?: string;
  /** Where `ipv4` came from; `static`: the configuration, while no guest agent answers (waitForIp). */
  ipSource?: "agent" | "lease" | "static";
  /** First global IPv6 of the guest. */
  ipv6Address?: string;
  /** Every address per NIC, v4 and v6, CIDR (addresses.ts); set when asked, of a running domain. */
  ipAddresses?: NicAddresses[];
  /** Whether the guest agent answered when the addresses were asked. */
  guestAgentAnswered?: boolean;
  mac?: string;
  metadata?: ProxyMetadata;
  /** The parsed domain XML. */
  domain?: ParsedDomain;
  /** After a provision whose address pools gave NICs their addresses: the NICs as the VM was made. */
  createdNics?: NicSpec[];
}

/** What delete did. */
export interface DeleteResult {
  /** True when a domain was destroyed/undefined. */
  domainRemoved: boolean;
  /** Per-VM volumes removed. */
  volumesRemoved: string[];
  /** Why nothing could be done, when that was the case (still a success). */
  noop?: "host-not-configured" | "pool-missing" | "not-ours";
  /** With noop "not-ours": the owner the domain's metadata names, or "unmanaged". */
  foreignOwner?: string;
}

/** Options of {@link KvmOperations.delete}. */
export interface DeleteOptions {
  /**
   * Delete only what belongs to this owner URN: a domain of the name whose
   * metadata names another owner, or none, is left alone with its volumes
   * (they back it). A create's rollback passes its own: two creates of one
   * name at once must not roll back each other's VM.
   */
  owner?: string;
  /** How long transient failures are retried, ms (the resource's `timeouts.delete`; default the retry policy's). */
  deadlineMs?: number;
  /**
   * The owner whose create chose the volumes' names (tagged with it, see
   * names.ts): found even when the domain is already gone. Without it, a
   * domain's volumes are the ones its disks name.
   */
  volumeOwner?: string;
}
