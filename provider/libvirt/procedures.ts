import {
  readDomain,
  readOptString,
  readStoragePool,
  readStorageVol,
  readUuid,
  writeDomain,
  writeOptString,
  writeStoragePool,
  writeStorageVol,
  writeUuid,
} from "./codec";
import {
  type InterfaceAddressSource,
  Limits,
  QEMU_PROGRAM,
  QEMU_PROTOCOL_VERSION,
  QemuProcedure,
  REMOTE_PROGRAM,
  REMOTE_PROTOCOL_VERSION,
  RemoteProcedure,
} from "./constants";
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
import type { XdrReader, XdrWriter } from "./xdr";

/**
 * One RPC procedure: where it lives on the wire, its public libvirt name, and
 * how its args and reply are encoded. The typed facade and the connection's
 * tracing both work from these descriptors, so a procedure is described once.
 */
export interface Procedure<A, R> {
  readonly program: number;
  readonly version: number;
  readonly proc: number;
  /** The protocol name without prefix, e.g. 'domain_lookup_by_name'. */
  readonly name: string;
  /** libvirt's public function name, e.g. 'virDomainLookupByName'. */
  readonly call: string;
  encodeArgs(w: XdrWriter, args: A): void;
  decodeReply(r: XdrReader): R;
}

// Words libvirt spells in capitals inside public names (virDomainGetXMLDesc,
// virDomainLookupByUUID, virDomainLookupByID).
const ACRONYMS: ReadonlySet<string> = new Set(["xml", "uuid", "id", "cpu", "pm", "scsi", "wwn", "fs", "ip"]);
// Words spelled neither capitalised nor all in capitals (virNWFilterLookupByName).
const SPELLINGS: Readonly<Record<string, string>> = { nwfilter: "NWFilter" };

/**
 * Public libvirt name of a procedure: camel case with a 'vir' prefix
 * (domain_lookup_by_name → virDomainLookupByName). QEMU-program procedures
 * belong to libvirt-qemu, whose names carry 'Qemu' after the object
 * (domain_agent_command → virDomainQemuAgentCommand).
 */
export function publicName(name: string, program = REMOTE_PROGRAM): string {
  const words = name.split("_").filter((w) => w.length > 0);
  if (program === QEMU_PROGRAM && words.length > 1) words.splice(1, 0, "qemu");
  const camel = words
    .map((w) => SPELLINGS[w] ?? (ACRONYMS.has(w) ? w.toUpperCase() : w.charAt(0).toUpperCase() + w.slice(1)))
    .join("");
  return `vir${camel}`;
}

const noArgs = (): void => {};
const noReply = (): void => {};

function remote<A, R>(
  name: string,
  proc: number,
  encodeArgs: (w: XdrWriter, args: A) => void,
  decodeReply: (r: XdrReader) => R,
): Procedure<A, R> {
  return {
    program: REMOTE_PROGRAM,
    version: REMOTE_PROTOCOL_VERSION,
    proc,
    name,
    call: publicName(name),
    encodeArgs,
    decodeReply,
  };
}

function qemu<A, R>(
  name: string,
  proc: number,
  encodeArgs: (w: XdrWriter, args: A) => void,
  decodeReply: (r: XdrReader) => R,
): Procedure<A, R> {
  return {
    program: QEMU_PROGRAM,
    version: QEMU_PROTOCOL_VERSION,
    proc,
    name,
    call: publicName(name, QEMU_PROGRAM),
    encodeArgs,
    decodeReply,
  };
}

// ---- argument shapes (field names follow the .x files) ----

export interface DomainArg {
  dom: Domain;
}
export interface DomainFlagsArg {
  dom: Domain;
  flags: number;
}
export interface PoolFlagsArg {
  pool: StoragePool;
  flags: number;
}
export interface VolArg {
  vol: StorageVol;
}
export interface DomainSetMetadataArgs {
  dom: Domain;
  /** virDomainMetadataType. */
  type: number;
  /** null removes the element. */
  metadata: string | null;
  key: string | null;
  uri: string | null;
  flags: number;
}
export interface DomainGetMetadataArgs {
  dom: Domain;
  type: number;
  uri: string | null;
  flags: number;
}
export interface StorageVolUploadArgs {
  vol: StorageVol;
  offset: bigint | number;
  /** 0 means "until the end of the stream". */
  length: bigint | number;
  flags: number;
}
export interface DomainOpenConsoleArgs {
  dom: Domain;
  /** The console device's alias; null for the domain's first console. */
  devName: string | null;
  /** DomainConsoleFlags. */
  flags: number;
}

export interface DomainAgentCommandArgs {
  dom: Domain;
  /** A guest agent JSON command, e.g. '{"execute":"guest-ping"}'. */
  cmd: string;
  /** Seconds, or a QemuAgentCommandTimeout sentinel. */
  timeout: number;
  flags: number;
}

export interface DomainUpdateDeviceFlagsArgs {
  dom: Domain;
  /** One device element, e.g. an `<interface>`, identified the way libvirt matches it (a NIC by its MAC). */
  xml: string;
  /** virDomainDeviceModifyFlags: LIVE, CONFIG or both. */
  flags: number;
}

const wDom = (w: XdrWriter, a: DomainArg): void => writeDomain(w, a.dom);
const wDomFlags = (w: XdrWriter, a: DomainFlagsArg): void => {
  writeDomain(w, a.dom);
  w.uint(a.flags);
};
const wVol = (w: XdrWriter, a: VolArg): void => writeStorageVol(w, a.vol);

/** Every procedure this client speaks. */
export const Procedures = {
  authList: remote<void, number[]>("auth_list", RemoteProcedure.AUTH_LIST, noArgs, (r) =>
    r.array(Limits.AUTH_TYPE_LIST_MAX, (r2) => r2.int()),
  ),
  connectOpen: remote<{ name: string | null; flags: number }, void>(
    "connect_open",
    RemoteProcedure.CONNECT_OPEN,
    (w, a) => {
      writeOptString(w, a.name);
      w.uint(a.flags);
    },
    noReply,
  ),
  connectClose: remote<void, void>("connect_close", RemoteProcedure.CONNECT_CLOSE, noArgs, noReply),
  connectGetType: remote<void, string>("connect_get_type", RemoteProcedure.CONNECT_GET_TYPE, noArgs, (r) =>
    r.string(),
  ),
  connectGetLibVersion: remote<void, number>(
    "connect_get_lib_version",
    RemoteProcedure.CONNECT_GET_LIB_VERSION,
    noArgs,
    (r) => r.uhyperNumber(),
  ),
  nodeGetFreeMemory: remote<void, number>(
    "node_get_free_memory",
    RemoteProcedure.NODE_GET_FREE_MEMORY,
    noArgs,
    (r) => r.uhyperNumber(),
  ),
  nodeGetMemoryStats: remote<
    { nparams: number; cellNum: number; flags: number },
    { params: { field: string; value: number }[]; nparams: number }
  >(
    "node_get_memory_stats",
    RemoteProcedure.NODE_GET_MEMORY_STATS,
    (w, a) => {
      w.int(a.nparams);
      w.int(a.cellNum);
      w.uint(a.flags);
    },
    (r) => ({
      params: r.array(Limits.NODE_MEMORY_STATS_MAX, (x) => ({ field: x.string(), value: x.uhyperNumber() })),
      nparams: r.int(),
    }),
  ),
  connectSupportsFeature: remote<{ feature: number }, boolean>(
    "connect_supports_feature",
    RemoteProcedure.CONNECT_SUPPORTS_FEATURE,
    (w, a) => w.int(a.feature),
    (r) => r.int() !== 0,
  ),
  connectListAllDomains: remote<{ needResults: boolean; flags: number }, Domain[]>(
    "connect_list_all_domains",
    RemoteProcedure.CONNECT_LIST_ALL_DOMAINS,
    (w, a) => {
      w.int(a.needResults ? 1 : 0);
      w.uint(a.flags);
    },
    (r) => {
      const domains = r.array(Limits.DOMAIN_LIST_MAX, readDomain);
      r.uint(); // ret: the count, redundant with the array length
      return domains;
    },
  ),
  domainLookupByName: remote<{ name: string }, Domain>(
    "domain_lookup_by_name",
    RemoteProcedure.DOMAIN_LOOKUP_BY_NAME,
    (w, a) => w.string(a.name),
    readDomain,
  ),
  domainLookupByUuid: remote<{ uuid: string }, Domain>(
    "domain_lookup_by_uuid",
    RemoteProcedure.DOMAIN_LOOKUP_BY_UUID,
    (w, a) => writeUuid(w, a.uuid),
    readDomain,
  ),
  domainDefineXml: remote<{ xml: string }, Domain>(
    "domain_define_xml",
    RemoteProcedure.DOMAIN_DEFINE_XML,
    (w, a) => w.string(a.xml),
    readDomain,
  ),
  domainDefineXmlFlags: remote<{ xml: string; flags: number }, Domain>(
    "domain_define_xml_flags",
    RemoteProcedure.DOMAIN_DEFINE_XML_FLAGS,
    (w, a) => {
      w.string(a.xml);
      w.uint(a.flags);
    },
    readDomain,
  ),
  domainCreate: remote<DomainArg, void>("domain_create", RemoteProcedure.DOMAIN_CREATE, wDom, noReply),
  domainCreateWithFlags: remote<DomainFlagsArg, Domain>(
    "domain_create_with_flags",
    RemoteProcedure.DOMAIN_CREATE_WITH_FLAGS,
    wDomFlags,
    readDomain,
  ),
  domainDestroy: remote<DomainArg, void>("domain_destroy", RemoteProcedure.DOMAIN_DESTROY, wDom, noReply),
  domainDestroyFlags: remote<DomainFlagsArg, void>(
    "domain_destroy_flags",
    RemoteProcedure.DOMAIN_DESTROY_FLAGS,
    wDomFlags,
    noReply,
  ),
  domainShutdown: remote<DomainArg, void>("domain_shutdown", RemoteProcedure.DOMAIN_SHUTDOWN, wDom, noReply),
  domainUndefineFlags: remote<DomainFlagsArg, void>(
    "domain_undefine_flags",
    RemoteProcedure.DOMAIN_UNDEFINE_FLAGS,
    wDomFlags,
    noReply,
  ),
  domainGetState: remote<DomainFlagsArg, DomainStateInfo>(
    "domain_get_state",
    RemoteProcedure.DOMAIN_GET_STATE,
    wDomFlags,
    (r) => ({ state: r.int(), reason: r.int() }),
  ),
  domainInterfaceStats: remote<{ dom: Domain; device: string }, DomainInterfaceStats>(
    "domain_interface_stats",
    RemoteProcedure.DOMAIN_INTERFACE_STATS,
    (w, a) => {
      writeDomain(w, a.dom);
      w.string(a.device);
    },
    (r) => ({
      rxBytes: r.hyperNumber(),
      rxPackets: r.hyperNumber(),
      rxErrs: r.hyperNumber(),
      rxDrop: r.hyperNumber(),
      txBytes: r.hyperNumber(),
      txPackets: r.hyperNumber(),
      txErrs: r.hyperNumber(),
      txDrop: r.hyperNumber(),
    }),
  ),
  domainGetXmlDesc: remote<DomainFlagsArg, string>(
    "domain_get_xml_desc",
    RemoteProcedure.DOMAIN_GET_XML_DESC,
    wDomFlags,
    (r) => r.string(),
  ),
  domainGetMetadata: remote<DomainGetMetadataArgs, string>(
    "domain_get_metadata",
    RemoteProcedure.DOMAIN_GET_METADATA,
    (w, a) => {
      writeDomain(w, a.dom);
      w.int(a.type);
      writeOptString(w, a.uri);
      w.uint(a.flags);
    },
    (r) => r.string(),
  ),
  domainSetMetadata: remote<DomainSetMetadataArgs, void>(
    "domain_set_metadata",
    RemoteProcedure.DOMAIN_SET_METADATA,
    (w, a) => {
      writeDomain(w, a.dom);
      w.int(a.type);
      writeOptString(w, a.metadata);
      writeOptString(w, a.key);
      writeOptString(w, a.uri);
      w.uint(a.flags);
    },
    noReply,
  ),
  domainInterfaceAddresses: remote<
    { dom: Domain; source: InterfaceAddressSource; flags: number },
    DomainInterface[]
  >(
    "domain_interface_addresses",
    RemoteProcedure.DOMAIN_INTERFACE_ADDRESSES,
    (w, a) => {
      writeDomain(w, a.dom);
      w.uint(a.source);
      w.uint(a.flags);
    },
    (r) =>
      r.array(Limits.DOMAIN_INTERFACE_MAX, (r2) => ({
        name: r2.string(),
        hwaddr: readOptString(r2),
        addrs: r2.array(Limits.DOMAIN_IP_ADDR_MAX, (r3) => ({
          type: r3.int(),
          addr: r3.string(),
          prefix: r3.uint(),
        })),
      })),
  ),
  domainUpdateDeviceFlags: remote<DomainUpdateDeviceFlagsArgs, void>(
    "domain_update_device_flags",
    RemoteProcedure.DOMAIN_UPDATE_DEVICE_FLAGS,
    (w, a) => {
      writeDomain(w, a.dom);
      w.string(a.xml);
      w.uint(a.flags);
    },
    noReply,
  ),
  nwfilterLookupByName: remote<{ name: string }, NwFilter>(
    "nwfilter_lookup_by_name",
    RemoteProcedure.NWFILTER_LOOKUP_BY_NAME,
    (w, a) => w.string(a.name),
    (r) => ({ name: r.string(), uuid: readUuid(r) }),
  ),
  networkLookupByName: remote<{ name: string }, Network>(
    "network_lookup_by_name",
    RemoteProcedure.NETWORK_LOOKUP_BY_NAME,
    (w, a) => w.string(a.name),
    (r) => ({ name: r.string(), uuid: readUuid(r) }),
  ),
  networkIsActive: remote<{ net: Network }, boolean>(
    "network_is_active",
    RemoteProcedure.NETWORK_IS_ACTIVE,
    (w, a) => {
      w.string(a.net.name);
      writeUuid(w, a.net.uuid);
    },
    (r) => r.int() !== 0,
  ),
  interfaceLookupByName: remote<{ name: string }, HostInterface>(
    "interface_lookup_by_name",
    RemoteProcedure.INTERFACE_LOOKUP_BY_NAME,
    (w, a) => w.string(a.name),
    (r) => ({ name: r.string(), mac: r.string() }),
  ),
  connectListAllNodeDevices: remote<{ needResults: boolean; flags: number }, NodeDevice[]>(
    "connect_list_all_node_devices",
    RemoteProcedure.CONNECT_LIST_ALL_NODE_DEVICES,
    (w, a) => {
      w.int(a.needResults ? 1 : 0);
      w.uint(a.flags);
    },
    (r) => {
      const devices = r.array(Limits.NODE_DEVICE_LIST_MAX, (r2) => ({ name: r2.string() }));
      r.uint(); // ret: the count, redundant with the array length
      return devices;
    },
  ),
  nodeDeviceGetXmlDesc: remote<{ name: string; flags: number }, string>(
    "node_device_get_xml_desc",
    RemoteProcedure.NODE_DEVICE_GET_XML_DESC,
    (w, a) => {
      w.string(a.name);
      w.uint(a.flags);
    },
    (r) => r.string(),
  ),
  storagePoolLookupByName: remote<{ name: string }, StoragePool>(
    "storage_pool_lookup_by_name",
    RemoteProcedure.STORAGE_POOL_LOOKUP_BY_NAME,
    (w, a) => w.string(a.name),
    readStoragePool,
  ),
  storagePoolIsActive: remote<{ pool: StoragePool }, boolean>(
    "storage_pool_is_active",
    RemoteProcedure.STORAGE_POOL_IS_ACTIVE,
    (w, a) => writeStoragePool(w, a.pool),
    (r) => r.int() !== 0,
  ),
  storagePoolRefresh: remote<PoolFlagsArg, void>(
    "storage_pool_refresh",
    RemoteProcedure.STORAGE_POOL_REFRESH,
    (w, a) => {
      writeStoragePool(w, a.pool);
      w.uint(a.flags);
    },
    noReply,
  ),
  storagePoolListAllVolumes: remote<{ pool: StoragePool; needResults: boolean; flags: number }, StorageVol[]>(
    "storage_pool_list_all_volumes",
    RemoteProcedure.STORAGE_POOL_LIST_ALL_VOLUMES,
    (w, a) => {
      writeStoragePool(w, a.pool);
      w.int(a.needResults ? 1 : 0);
      w.uint(a.flags);
    },
    (r) => {
      const vols = r.array(Limits.STORAGE_VOL_LIST_MAX, readStorageVol);
      r.uint(); // ret: the count, redundant with the array length
      return vols;
    },
  ),
  storageVolCreateXml: remote<{ pool: StoragePool; xml: string; flags: number }, StorageVol>(
    "storage_vol_create_xml",
    RemoteProcedure.STORAGE_VOL_CREATE_XML,
    (w, a) => {
      writeStoragePool(w, a.pool);
      w.string(a.xml);
      w.uint(a.flags);
    },
    readStorageVol,
  ),
  storageVolLookupByName: remote<{ pool: StoragePool; name: string }, StorageVol>(
    "storage_vol_lookup_by_name",
    RemoteProcedure.STORAGE_VOL_LOOKUP_BY_NAME,
    (w, a) => {
      writeStoragePool(w, a.pool);
      w.string(a.name);
    },
    readStorageVol,
  ),
  storageVolGetInfo: remote<VolArg, StorageVolInfo>(
    "storage_vol_get_info",
    RemoteProcedure.STORAGE_VOL_GET_INFO,
    wVol,
    // `char type` is a 4-byte int in XDR.
    (r) => ({ type: r.int(), capacity: r.uhyperNumber(), allocation: r.uhyperNumber() }),
  ),
  storageVolGetPath: remote<VolArg, string>(
    "storage_vol_get_path",
    RemoteProcedure.STORAGE_VOL_GET_PATH,
    wVol,
    (r) => r.string(),
  ),
  storageVolDelete: remote<{ vol: StorageVol; flags: number }, void>(
    "storage_vol_delete",
    RemoteProcedure.STORAGE_VOL_DELETE,
    (w, a) => {
      writeStorageVol(w, a.vol);
      w.uint(a.flags);
    },
    noReply,
  ),
  storageVolResize: remote<{ vol: StorageVol; capacity: number; flags: number }, void>(
    "storage_vol_resize",
    RemoteProcedure.STORAGE_VOL_RESIZE,
    (w, a) => {
      writeStorageVol(w, a.vol);
      w.uhyper(a.capacity);
      w.uint(a.flags);
    },
    noReply,
  ),
  storageVolUpload: remote<StorageVolUploadArgs, void>(
    "storage_vol_upload",
    RemoteProcedure.STORAGE_VOL_UPLOAD,
    (w, a) => {
      writeStorageVol(w, a.vol);
      w.uhyper(a.offset);
      w.uhyper(a.length);
      w.uint(a.flags);
    },
    noReply,
  ),
  /** Opens a stream of what the console prints (a read stream: the server sends its data). */
  domainOpenConsole: remote<DomainOpenConsoleArgs, void>(
    "domain_open_console",
    RemoteProcedure.DOMAIN_OPEN_CONSOLE,
    (w, a) => {
      writeDomain(w, a.dom);
      writeOptString(w, a.devName);
      w.uint(a.flags);
    },
    noReply,
  ),
  domainAgentCommand: qemu<DomainAgentCommandArgs, string | null>(
    "domain_agent_command",
    QemuProcedure.DOMAIN_AGENT_COMMAND,
    (w, a) => {
      writeDomain(w, a.dom);
      w.string(a.cmd);
      w.int(a.timeout);
      w.uint(a.flags);
    },
    readOptString,
  ),
} as const;

const byNumber = new Map<string, Procedure<unknown, unknown>>();
for (const p of Object.values(Procedures) as Procedure<unknown, unknown>[]) {
  byNumber.set(`${p.program}:${p.proc}`, p);
}

/** The procedure descriptor for a (program, proc) pair, if this client knows it. */
export function procedureByNumber(program: number, proc: number): Procedure<unknown, unknown> | undefined {
  return byNumber.get(`${program}:${proc}`);
}

/** Public name for any (program, proc), falling back to a numeric label for unknown ones. */
export function callNameOf(program: number, proc: number): string {
  return procedureByNumber(program, proc)?.call ?? `procedure ${proc} of program 0x${program.toString(16)}`;
}
