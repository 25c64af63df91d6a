/**
 * Numbers of libvirt's RPC protocol: wire ABI, stable. The programs,
 * procedures, auth types and limits are held by a test to libvirt's own
 * remote_protocol.x, qemu_protocol.x and virkeepaliveprotocol.x (kept as data
 * in test/unit/libvirt/protocol/); the rest was checked by hand against
 * src/rpc/virnetprotocol.x, src/libvirt_internal.h and the public headers
 * (libvirt-domain.h, libvirt-storage.h, libvirt-nodedev.h).
 */

export const REMOTE_PROGRAM = 0x20008086;
export const REMOTE_PROTOCOL_VERSION = 1;
export const QEMU_PROGRAM = 0x20008087;
export const QEMU_PROTOCOL_VERSION = 1;

/**
 * The keepalive program (src/rpc/virkeepaliveprotocol.x): body-less MESSAGE
 * packets with status OK, PING answered by PONG, in both directions.
 */
export const KEEPALIVE_PROGRAM = 0x6b656570;
export const KEEPALIVE_PROTOCOL_VERSION = 1;
export const KeepaliveProcedure = {
  PING: 1,
  PONG: 2,
} as const;

/** virDrvFeature (src/libvirt_internal.h): numbers asked with connect_supports_feature. */
export const DrvFeature = {
  /** The remote party speaks the keepalive program; asking also starts the daemon's own pings. */
  PROGRAM_KEEPALIVE: 10,
} as const;

/** Length word (4) + header (6 × 4). */
export const PACKET_HEADER_SIZE = 28;
/**
 * VIR_NET_MESSAGE_MAX on current libvirt (16 MiB before): header + body, not
 * counting the 4-byte length word, exactly as libvirt's own length check.
 */
export const MAX_MESSAGE_SIZE = 32 * 1024 * 1024;

/** virNetMessageType. */
export const PacketType = {
  CALL: 0,
  REPLY: 1,
  MESSAGE: 2,
  STREAM: 3,
  CALL_WITH_FDS: 4,
  REPLY_WITH_FDS: 5,
  STREAM_HOLE: 6,
} as const;
export type PacketType = (typeof PacketType)[keyof typeof PacketType];

/** virNetMessageStatus. */
export const PacketStatus = {
  OK: 0,
  ERROR: 1,
  CONTINUE: 2,
} as const;
export type PacketStatus = (typeof PacketStatus)[keyof typeof PacketStatus];

/** remote_procedure numbers used by this project. */
export const RemoteProcedure = {
  CONNECT_OPEN: 1,
  CONNECT_CLOSE: 2,
  CONNECT_GET_TYPE: 3,
  DOMAIN_CREATE: 9,
  DOMAIN_DEFINE_XML: 11,
  DOMAIN_DESTROY: 12,
  DOMAIN_GET_XML_DESC: 14,
  DOMAIN_LOOKUP_BY_NAME: 23,
  DOMAIN_LOOKUP_BY_UUID: 24,
  DOMAIN_SHUTDOWN: 33,
  CONNECT_SUPPORTS_FEATURE: 60,
  NETWORK_LOOKUP_BY_NAME: 46,
  AUTH_LIST: 66,
  AUTH_POLKIT: 70,
  STORAGE_POOL_REFRESH: 83,
  STORAGE_POOL_LOOKUP_BY_NAME: 84,
  STORAGE_VOL_CREATE_XML: 93,
  STORAGE_VOL_DELETE: 94,
  DOMAIN_INTERFACE_STATS: 65,
  STORAGE_VOL_LOOKUP_BY_NAME: 95,
  STORAGE_VOL_GET_INFO: 98,
  STORAGE_VOL_GET_PATH: 100,
  NODE_GET_FREE_MEMORY: 102,
  NODE_DEVICE_GET_XML_DESC: 114,
  INTERFACE_LOOKUP_BY_NAME: 128,
  NETWORK_IS_ACTIVE: 152,
  STORAGE_POOL_IS_ACTIVE: 154,
  CONNECT_GET_LIB_VERSION: 157,
  DOMAIN_UPDATE_DEVICE_FLAGS: 174,
  NWFILTER_LOOKUP_BY_NAME: 175,
  DOMAIN_CREATE_WITH_FLAGS: 196,
  DOMAIN_OPEN_CONSOLE: 201,
  NODE_GET_MEMORY_STATS: 228,
  STORAGE_VOL_UPLOAD: 208,
  STORAGE_VOL_RESIZE: 260,
  DOMAIN_GET_STATE: 212,
  DOMAIN_UNDEFINE_FLAGS: 231,
  DOMAIN_DESTROY_FLAGS: 234,
  DOMAIN_SET_METADATA: 264,
  DOMAIN_GET_METADATA: 265,
  CONNECT_LIST_ALL_DOMAINS: 273,
  STORAGE_POOL_LIST_ALL_VOLUMES: 282,
  CONNECT_LIST_ALL_NODE_DEVICES: 285,
  DOMAIN_DEFINE_XML_FLAGS: 350,
  DOMAIN_INTERFACE_ADDRESSES: 353,
} as const;

/** qemu_procedure numbers. */
export const QemuProcedure = {
  DOMAIN_MONITOR_COMMAND: 1,
  DOMAIN_AGENT_COMMAND: 3,
} as const;

/** remote_auth_type. */
export const AuthType = {
  NONE: 0,
  SASL: 1,
  POLKIT: 2,
} as const;

/** Protocol limits from remote_protocol.x. */
export const Limits = {
  AUTH_TYPE_LIST_MAX: 20,
  DOMAIN_LIST_MAX: 16384,
  STORAGE_VOL_LIST_MAX: 16384,
  DOMAIN_INTERFACE_MAX: 2048,
  DOMAIN_IP_ADDR_MAX: 2048,
  NODE_DEVICE_LIST_MAX: 65536,
  NODE_MEMORY_STATS_MAX: 16,
} as const;

/** virDomainUndefineFlagsValues. */
export const DomainUndefineFlags = {
  MANAGED_SAVE: 1,
  SNAPSHOTS_METADATA: 2,
  NVRAM: 4,
  KEEP_NVRAM: 8,
  CHECKPOINTS_METADATA: 16,
  TPM: 32,
  KEEP_TPM: 64,
} as const;

/** virDomainInterfaceAddressesSource. */
export const InterfaceAddressSource = {
  LEASE: 0,
  AGENT: 1,
  ARP: 2,
} as const;
export type InterfaceAddressSource = (typeof InterfaceAddressSource)[keyof typeof InterfaceAddressSource];

/** virIPAddrType. */
export const IpAddrType = {
  IPV4: 0,
  IPV6: 1,
} as const;

/** virDomainState. */
export const DomainState = {
  NOSTATE: 0,
  RUNNING: 1,
  BLOCKED: 2,
  PAUSED: 3,
  SHUTDOWN: 4,
  SHUTOFF: 5,
  CRASHED: 6,
  PMSUSPENDED: 7,
} as const;
export type DomainState = (typeof DomainState)[keyof typeof DomainState];

/** virDomainMetadataType. */
export const DomainMetadataType = {
  DESCRIPTION: 0,
  TITLE: 1,
  ELEMENT: 2,
} as const;

/**
 * virDomainModificationImpact (flags of metadata calls and others). The
 * device calls' virDomainDeviceModifyFlags have the same values
 * (VIR_DOMAIN_DEVICE_MODIFY_LIVE = VIR_DOMAIN_AFFECT_LIVE, ...).
 */
export const DomainModificationImpact = {
  CURRENT: 0,
  LIVE: 1,
  CONFIG: 2,
} as const;

/** virDomainDestroyFlagsValues. */
export const DomainDestroyFlags = {
  DEFAULT: 0,
  GRACEFUL: 1,
  REMOVE_LOGS: 2,
} as const;

/** virDomainDefineFlags. */
export const DomainDefineFlags = {
  VALIDATE: 1,
} as const;

/** virDomainCreateFlags. */
export const DomainCreateFlags = {
  PAUSED: 1,
  AUTODESTROY: 2,
  BYPASS_CACHE: 4,
  FORCE_BOOT: 8,
  VALIDATE: 16,
  RESET_NVRAM: 32,
} as const;

/** virDomainXMLFlags. */
export const DomainXmlFlags = {
  SECURE: 1,
  INACTIVE: 2,
  UPDATE_CPU: 4,
  MIGRATABLE: 8,
} as const;

/** virConnectListAllDomainsFlags. */
export const ListAllDomainsFlags = {
  ACTIVE: 1,
  INACTIVE: 2,
  PERSISTENT: 4,
  TRANSIENT: 8,
  RUNNING: 16,
  PAUSED: 32,
  SHUTOFF: 64,
  OTHER: 128,
  MANAGEDSAVE: 256,
  NO_MANAGEDSAVE: 512,
  AUTOSTART: 1024,
  NO_AUTOSTART: 2048,
  HAS_SNAPSHOT: 4096,
  NO_SNAPSHOT: 8192,
  HAS_CHECKPOINT: 16384,
  NO_CHECKPOINT: 32768,
} as const;

/** virConnectListAllNodeDeviceFlags (libvirt-nodedev.h): capability filters. */
export const ListAllNodeDevicesFlags = {
  CAP_NET: 1 << 4,
} as const;

/** virStorageVolType. */
export const StorageVolType = {
  FILE: 0,
  BLOCK: 1,
  DIR: 2,
  NETWORK: 3,
  NETDIR: 4,
  PLOOP: 5,
} as const;

/** virStorageVolCreateFlags. */
export const StorageVolCreateFlags = {
  PREALLOC_METADATA: 1,
  REFLINK: 2,
  VALIDATE: 4,
} as const;

/** virStorageVolDeleteFlags. */
export const StorageVolDeleteFlags = {
  NORMAL: 0,
  ZEROED: 1,
  WITH_SNAPSHOTS: 2,
} as const;

/** virStorageVolUploadFlags. */
export const StorageVolUploadFlags = {
  SPARSE_STREAM: 1,
} as const;

/** virDomainQemuAgentCommandTimeoutValues (seconds, or these sentinels). */
export const QemuAgentCommandTimeout = {
  BLOCK: -2,
  DEFAULT: -1,
  NOWAIT: 0,
  SHUTDOWN: 60,
} as const;

/** virDomainConsoleFlags. */
export const DomainConsoleFlags = {
  /** Take the console from another client holding it. */
  FORCE: 1,
  /** Refuse when the console driver cannot tell another client holds it. */
  SAFE: 2,
} as const;
