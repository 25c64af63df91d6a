import { type ErrorKind, ProviderError } from "../errors";
import { ErrorCode, ErrorDomain, errorCodeName, errorDomainName } from "./error-codes";

/** The wire form of libvirt's remote_error (virNetMessageError), minus the unused dom/net. */
export interface RemoteErrorFields {
  code: number;
  domain: number;
  message: string | null;
  level: number;
  str1: string | null;
  str2: string | null;
  str3: string | null;
  int1: number;
  int2: number;
}

/**
 * Codes where retrying the same request later can succeed. Everything else is
 * permanent: a retry loop must not spin on "domain not found" or bad XML.
 */
const TRANSIENT_CODES: ReadonlySet<number> = new Set<number>([
  // The daemon ran out of memory; it may recover.
  ErrorCode.NO_MEMORY,
  // The daemon's driver is not (yet) reachable, e.g. just after a daemon restart.
  ErrorCode.NO_CONNECT,
  // "cannot acquire state change lock": another job (often an async job such as
  // a migration, save or an agent call) holds the domain; it ends by itself.
  ErrorCode.OPERATION_TIMEOUT,
  // Somebody aborted a job we were waiting on; the next attempt runs afresh.
  ErrorCode.OPERATION_ABORTED,
  // The guest agent has not connected or answered yet: normal while the guest boots.
  ErrorCode.AGENT_UNRESPONSIVE,
  ErrorCode.AGENT_UNSYNCED,
  // A device or file is busy right now.
  ErrorCode.RESOURCE_BUSY,
]);

// Deliberately permanent:
// - OPERATION_INVALID ("domain is not running", "cannot undefine domain with
//   nvram", "domain has active block job"): these describe the object's state,
//   which a blind retry does not change; callers that expect a state change
//   branch on codeName instead.
// - RPC: from the daemon it means we broke the protocol (unexpected stream hole,
//   bad status); our own connection drops surface as ConnectionClosedError.
// - OPERATION_FAILED / INTERNAL_ERROR: generic failures, e.g. QEMU refused to
//   start; retrying identical input fails identically.

/** SYSTEM_ERROR is a failed syscall: transient only when it is about the connection itself. */
const CONNECTION_DOMAINS: ReadonlySet<number> = new Set<number>([ErrorDomain.RPC, ErrorDomain.REMOTE]);

export function classifyRemoteError(code: number, domain: number): ErrorKind {
  if (TRANSIENT_CODES.has(code)) return "transient";
  if (code === ErrorCode.SYSTEM_ERROR && CONNECTION_DOMAINS.has(domain)) return "transient";
  return "permanent";
}

/** An error reported by libvirtd (a REPLY or STREAM packet with status ERROR). */
export class LibvirtError extends ProviderError {
  readonly code: number;
  /** e.g. 'VIR_ERR_NO_DOMAIN'. */
  readonly codeName: string;
  readonly domain: number;
  /** e.g. 'VIR_FROM_QEMU'. */
  readonly domainName: string;
  readonly level: number;
  readonly str1: string | null;
  readonly str2: string | null;
  readonly str3: string | null;
  readonly int1: number;
  readonly int2: number;
  /** The public libvirt function that failed, e.g. 'virDomainLookupByName'. */
  readonly call: string;
  /** libvirt's own message, without our call prefix. */
  readonly libvirtMessage: string;

  constructor(fields: RemoteErrorFields, call: string) {
    const codeName = errorCodeName(fields.code);
    const libvirtMessage = fields.message ?? codeName;
    super(classifyRemoteError(fields.code, fields.domain), `${call}: ${libvirtMessage} (${codeName})`);
    this.code = fields.code;
    this.codeName = codeName;
    this.domain = fields.domain;
    this.domainName = errorDomainName(fields.domain);
    this.level = fields.level;
    this.str1 = fields.str1;
    this.str2 = fields.str2;
    this.str3 = fields.str3;
    this.int1 = fields.int1;
    this.int2 = fields.int2;
    this.call = call;
    this.libvirtMessage = libvirtMessage;
  }
}

/** The byte stream to libvirtd ended or failed; pending and later calls on it cannot complete. */
export class ConnectionClosedError extends ProviderError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("transient", message, options);
  }
}

/**
 * The peer sent bytes that do not follow the protocol (bad length, truncated
 * XDR, unexpected packet). Permanent: the same server will send the same bytes.
 */
export class ProtocolError extends ProviderError {
  constructor(message: string) {
    super("permanent", message);
  }
}

/** True when `err` is a LibvirtError with the given code name, e.g. isLibvirtError(e, 'VIR_ERR_NO_DOMAIN'). */
export function isLibvirtError(err: unknown, codeName?: string): err is LibvirtError {
  return err instanceof LibvirtError && (codeName === undefined || err.codeName === codeName);
}
