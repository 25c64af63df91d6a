export { type CallRequest, OutgoingStream, RpcClient, type RpcClientOptions } from "./client";
export {
  type CallOptions,
  LibvirtConnection,
  type LibvirtConnectionOptions,
  type RpcCaller,
} from "./connection";
export * from "./constants";
export { ErrorCode, ErrorDomain, errorCodeName, errorDomainName } from "./error-codes";
export {
  ConnectionClosedError,
  classifyRemoteError,
  isLibvirtError,
  LibvirtError,
  ProtocolError,
  type RemoteErrorFields,
} from "./errors";
export {
  KEEPALIVE_DEFAULTS,
  Keepalive,
  type KeepaliveClock,
  type KeepaliveOptions,
  keepaliveBoundMs,
} from "./keepalive";
export { Libvirt } from "./libvirt";
export { encodePacket, type Packet, PacketDecoder, type PacketHeader } from "./packet";
export { callNameOf, type Procedure, Procedures, publicName } from "./procedures";
export { type CallTrace, summarizeArgs, type TraceHook } from "./trace";
export type * from "./types";
export { DEFAULT_UPLOAD_CHUNK, type UploadOptions, type UploadSource, uploadStream } from "./upload";
export { REMOTE_STRING_MAX, XdrReader, XdrWriter } from "./xdr";
