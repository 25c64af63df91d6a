/**
 * Objects of libvirt's remote protocol as this client presents them.
 *
 * UUIDs are canonical lower-case strings ("8-4-4-4-12"): they are what virsh
 * prints, what goes into Pulumi state and logs, and they compare with ===.
 * The wire form (16 raw bytes) is converted at the codec boundary.
 */

/** remote_nonnull_domain. `id` is -1 for a domain that is not running. */
export interface Domain {
  name: string;
  uuid: string;
  id: number;
}

/** remote_nonnull_storage_pool. */
export interface StoragePool {
  name: string;
  uuid: string;
}

/** remote_nonnull_storage_vol. */
export interface StorageVol {
  pool: string;
  name: string;
  key: string;
}

/** remote_domain_get_state_ret: a virDomainState and its reason (meaning depends on the state). */
export interface DomainStateInfo {
  state: number;
  reason: number;
}

/**
 * remote_domain_interface_stats_ret: a NIC's counters as the guest sees them
 * (libvirt swaps a tap device's host-side rx and tx), since its device was
 * made; -1 where the hypervisor does not count.
 */
export interface DomainInterfaceStats {
  rxBytes: number;
  rxPackets: number;
  rxErrs: number;
  rxDrop: number;
  txBytes: number;
  txPackets: number;
  txErrs: number;
  txDrop: number;
}

/** remote_storage_vol_get_info_ret. Sizes in bytes (a safe integer up to 8 PiB). */
export interface StorageVolInfo {
  /** virStorageVolType. */
  type: number;
  capacity: number;
  allocation: number;
}

/** remote_domain_ip_addr. */
export interface DomainIpAddress {
  /** virIPAddrType: 0 IPv4, 1 IPv6. */
  type: number;
  addr: string;
  prefix: number;
}

/** remote_domain_interface. */
export interface DomainInterface {
  name: string;
  hwaddr: string | null;
  addrs: DomainIpAddress[];
}

/** remote_nonnull_network: a libvirt network (virsh net-list --all). */
export interface Network {
  name: string;
  uuid: string;
}

/** remote_nonnull_nwfilter: a network filter (virsh nwfilter-list). */
export interface NwFilter {
  name: string;
  uuid: string;
}

/** remote_nonnull_interface: a host network interface as the interface driver knows it. */
export interface HostInterface {
  name: string;
  mac: string;
}

/** remote_nonnull_node_device: a host device, named e.g. `net_eth0_52_54_00_12_34_56`. */
export interface NodeDevice {
  name: string;
}
