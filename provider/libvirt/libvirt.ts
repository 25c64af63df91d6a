import type { CallOptions, ReadStream, RpcCaller } from "./connection";
import { DomainMetadataType, type InterfaceAddressSource, QemuAgentCommandTimeout } from "./constants";
import { Procedures } from "./procedures";
import type {
  Domain,
  DomainInterface,
  DomainInterfaceStats,
  DomainStateInfo,
  HostInterface,
  Network,
  NodeDevice,
  NwFilter,
  StoragePool,
  StorageVol,
  StorageVolInfo,
} from "./types";
import type { UploadOptions, UploadSource } from "./upload";

/**
 * Typed libvirt API: one method per procedure, named like libvirt's public
 * function without the 'vir' prefix. Flags default to 0. Over a
 * LibvirtConnection the handshake (authList, connectOpen) and connectClose are
 * done by the connection; they are here for callers driving a raw caller.
 */
export class Libvirt {
  constructor(private readonly rpc: RpcCaller) {}

  // ---- connection ----

  authList(opts?: CallOptions): Promise<number[]> {
    return this.rpc.call(Procedures.authList, undefined, opts);
  }

  connectOpen(name: string | null, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.connectOpen, { name, flags }, opts);
  }

  connectClose(opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.connectClose, undefined, opts);
  }

  /** The driver name, e.g. 'QEMU' or 'TEST'. */
  connectGetType(opts?: CallOptions): Promise<string> {
    return this.rpc.call(Procedures.connectGetType, undefined, opts);
  }

  /** libvirt version of the daemon as major * 1,000,000 + minor * 1,000 + release. */
  connectGetLibVersion(opts?: CallOptions): Promise<number> {
    return this.rpc.call(Procedures.connectGetLibVersion, undefined, opts);
  }

  /** The host's free memory in bytes (MemFree on Linux: page cache the kernel would give back is not in it). */
  nodeGetFreeMemory(opts?: CallOptions): Promise<number> {
    return this.rpc.call(Procedures.nodeGetFreeMemory, undefined, opts);
  }

  /**
   * The host's memory figures in KiB, by libvirt's field name: on Linux
   * `total`, `free`, `buffers` and `cached` (/proc/meminfo's MemTotal,
   * MemFree, Buffers and Cached), over all NUMA cells. Two calls: the
   * first asks how many figures there are (libvirt's Linux driver
   * refuses any other count in the second).
   */
  async nodeGetMemoryStats(opts?: CallOptions): Promise<Record<string, number>> {
    const ALL_CELLS = -1;
    const { nparams } = await this.rpc.call(
      Procedures.nodeGetMemoryStats,
      { nparams: 0, cellNum: ALL_CELLS, flags: 0 },
      opts,
    );
    if (nparams === 0) return {};
    const { params } = await this.rpc.call(
      Procedures.nodeGetMemoryStats,
      { nparams, cellNum: ALL_CELLS, flags: 0 },
      opts,
    );
    return Object.fromEntries(params.map((p) => [p.field, p.value]));
  }

  connectSupportsFeature(feature: number, opts?: CallOptions): Promise<boolean> {
    return this.rpc.call(Procedures.connectSupportsFeature, { feature }, opts);
  }

  /** All domains matching ListAllDomainsFlags (0 = all). */
  connectListAllDomains(flags = 0, opts?: CallOptions): Promise<Domain[]> {
    return this.rpc.call(Procedures.connectListAllDomains, { needResults: true, flags }, opts);
  }

  // ---- domains ----

  domainLookupByName(name: string, opts?: CallOptions): Promise<Domain> {
    return this.rpc.call(Procedures.domainLookupByName, { name }, opts);
  }

  domainLookupByUuid(uuid: string, opts?: CallOptions): Promise<Domain> {
    return this.rpc.call(Procedures.domainLookupByUuid, { uuid }, opts);
  }

  domainDefineXml(xml: string, opts?: CallOptions): Promise<Domain> {
    return this.rpc.call(Procedures.domainDefineXml, { xml }, opts);
  }

  domainDefineXmlFlags(xml: string, flags = 0, opts?: CallOptions): Promise<Domain> {
    return this.rpc.call(Procedures.domainDefineXmlFlags, { xml, flags }, opts);
  }

  domainCreate(dom: Domain, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainCreate, { dom }, opts);
  }

  /** Starts a defined domain; returns it with its new id. */
  domainCreateWithFlags(dom: Domain, flags = 0, opts?: CallOptions): Promise<Domain> {
    return this.rpc.call(Procedures.domainCreateWithFlags, { dom, flags }, opts);
  }

  domainDestroy(dom: Domain, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainDestroy, { dom }, opts);
  }

  domainDestroyFlags(dom: Domain, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainDestroyFlags, { dom, flags }, opts);
  }

  domainShutdown(dom: Domain, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainShutdown, { dom }, opts);
  }

  domainUndefineFlags(dom: Domain, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainUndefineFlags, { dom, flags }, opts);
  }

  domainGetState(dom: Domain, flags = 0, opts?: CallOptions): Promise<DomainStateInfo> {
    return this.rpc.call(Procedures.domainGetState, { dom, flags }, opts);
  }

  /** A NIC's counters; `device` is its target dev (`vnet3`) or MAC. */
  domainInterfaceStats(dom: Domain, device: string, opts?: CallOptions): Promise<DomainInterfaceStats> {
    return this.rpc.call(Procedures.domainInterfaceStats, { dom, device }, opts);
  }

  domainGetXmlDesc(dom: Domain, flags = 0, opts?: CallOptions): Promise<string> {
    return this.rpc.call(Procedures.domainGetXmlDesc, { dom, flags }, opts);
  }

  /** For DomainMetadataType.ELEMENT pass the namespace URI; for title/description pass null. */
  domainGetMetadata(
    dom: Domain,
    type: number,
    uri: string | null,
    flags = 0,
    opts?: CallOptions,
  ): Promise<string> {
    return this.rpc.call(Procedures.domainGetMetadata, { dom, type, uri, flags }, opts);
  }

  /** Sets (or with metadata null removes) a metadata item. For ELEMENT, key is the namespace prefix. */
  domainSetMetadata(
    dom: Domain,
    type: number,
    metadata: string | null,
    key: string | null,
    uri: string | null,
    flags = 0,
    opts?: CallOptions,
  ): Promise<void> {
    return this.rpc.call(Procedures.domainSetMetadata, { dom, type, metadata, key, uri, flags }, opts);
  }

  /** Convenience for the common custom-namespace element case. */
  domainSetMetadataElement(
    dom: Domain,
    uri: string,
    key: string,
    xml: string | null,
    flags = 0,
    opts?: CallOptions,
  ): Promise<void> {
    return this.domainSetMetadata(dom, DomainMetadataType.ELEMENT, xml, key, uri, flags, opts);
  }

  domainInterfaceAddresses(
    dom: Domain,
    source: InterfaceAddressSource,
    flags = 0,
    opts?: CallOptions,
  ): Promise<DomainInterface[]> {
    return this.rpc.call(Procedures.domainInterfaceAddresses, { dom, source, flags }, opts);
  }

  /**
   * virDomainQemuAgentCommand: sends a guest agent JSON command; returns the
   * agent's JSON reply (null when the agent sends none). `timeout` is seconds
   * or a QemuAgentCommandTimeout sentinel.
   */
  domainQemuAgentCommand(
    dom: Domain,
    cmd: string,
    timeout: number = QemuAgentCommandTimeout.DEFAULT,
    flags = 0,
    opts?: CallOptions,
  ): Promise<string | null> {
    return this.rpc.call(Procedures.domainAgentCommand, { dom, cmd, timeout, flags }, opts);
  }

  /**
   * virDomainUpdateDeviceFlags: changes one device in place. `xml` is the
   * whole device element (libvirt finds a NIC by its MAC and refuses changes
   * it cannot make live); flags LIVE and/or CONFIG (DomainModificationImpact).
   */
  domainUpdateDeviceFlags(dom: Domain, xml: string, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.domainUpdateDeviceFlags, { dom, xml, flags }, opts);
  }

  // ---- host networking ----

  /** A network filter by name; fails with VIR_ERR_NO_NWFILTER when the host has none of that name. */
  nwfilterLookupByName(name: string, opts?: CallOptions): Promise<NwFilter> {
    return this.rpc.call(Procedures.nwfilterLookupByName, { name }, opts);
  }

  /** A libvirt network by name; fails with VIR_ERR_NO_NETWORK when the host has none of that name. */
  networkLookupByName(name: string, opts?: CallOptions): Promise<Network> {
    return this.rpc.call(Procedures.networkLookupByName, { name }, opts);
  }

  /** Whether network `net` is started (a defined network may be inactive). */
  networkIsActive(net: Network, opts?: CallOptions): Promise<boolean> {
    return this.rpc.call(Procedures.networkIsActive, { net }, opts);
  }

  /** A host interface by name (the interface driver); VIR_ERR_NO_INTERFACE when it knows none. */
  interfaceLookupByName(name: string, opts?: CallOptions): Promise<HostInterface> {
    return this.rpc.call(Procedures.interfaceLookupByName, { name }, opts);
  }

  /** Node devices matching ListAllNodeDevicesFlags (0 = all). */
  connectListAllNodeDevices(flags = 0, opts?: CallOptions): Promise<NodeDevice[]> {
    return this.rpc.call(Procedures.connectListAllNodeDevices, { needResults: true, flags }, opts);
  }

  nodeDeviceGetXmlDesc(name: string, flags = 0, opts?: CallOptions): Promise<string> {
    return this.rpc.call(Procedures.nodeDeviceGetXmlDesc, { name, flags }, opts);
  }

  // ---- storage ----

  storagePoolLookupByName(name: string, opts?: CallOptions): Promise<StoragePool> {
    return this.rpc.call(Procedures.storagePoolLookupByName, { name }, opts);
  }

  /** Whether storage pool `pool` is started (a defined pool may be inactive). */
  storagePoolIsActive(pool: StoragePool, opts?: CallOptions): Promise<boolean> {
    return this.rpc.call(Procedures.storagePoolIsActive, { pool }, opts);
  }

  storagePoolRefresh(pool: StoragePool, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.storagePoolRefresh, { pool, flags }, opts);
  }

  /** Every volume of an active pool (flags must be 0). */
  storagePoolListAllVolumes(pool: StoragePool, flags = 0, opts?: CallOptions): Promise<StorageVol[]> {
    return this.rpc.call(Procedures.storagePoolListAllVolumes, { pool, needResults: true, flags }, opts);
  }

  storageVolCreateXml(pool: StoragePool, xml: string, flags = 0, opts?: CallOptions): Promise<StorageVol> {
    return this.rpc.call(Procedures.storageVolCreateXml, { pool, xml, flags }, opts);
  }

  storageVolLookupByName(pool: StoragePool, name: string, opts?: CallOptions): Promise<StorageVol> {
    return this.rpc.call(Procedures.storageVolLookupByName, { pool, name }, opts);
  }

  storageVolGetInfo(vol: StorageVol, opts?: CallOptions): Promise<StorageVolInfo> {
    return this.rpc.call(Procedures.storageVolGetInfo, { vol }, opts);
  }

  storageVolGetPath(vol: StorageVol, opts?: CallOptions): Promise<string> {
    return this.rpc.call(Procedures.storageVolGetPath, { vol }, opts);
  }

  storageVolDelete(vol: StorageVol, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.storageVolDelete, { vol, flags }, opts);
  }

  /** virStorageVolResize: sets the volume's capacity (growing needs no flag; shrinking needs SHRINK). */
  storageVolResize(vol: StorageVol, capacity: number, flags = 0, opts?: CallOptions): Promise<void> {
    return this.rpc.call(Procedures.storageVolResize, { vol, capacity, flags }, opts);
  }

  /**
   * virDomainOpenConsole: what the domain's first console (or `devName`)
   * prints from now on goes to `onData`, until the stream ends or is closed.
   */
  domainOpenConsole(
    dom: Domain,
    onData: (chunk: Buffer) => void,
    options: { devName?: string; flags?: number } & CallOptions = {},
  ): Promise<ReadStream> {
    const { devName, flags, ...call } = options;
    return this.rpc.readStream(
      Procedures.domainOpenConsole,
      { dom, devName: devName ?? null, flags: flags ?? 0 },
      onData,
      call,
    );
  }

  /** Streams `source` into the volume without buffering it whole; resolves with bytes sent. */
  storageVolUpload(vol: StorageVol, source: UploadSource, options: UploadOptions = {}): Promise<number> {
    const args = { vol, offset: options.offset ?? 0, length: options.length ?? 0, flags: options.flags ?? 0 };
    return this.rpc.upload(Procedures.storageVolUpload, args, source, options);
  }
}
