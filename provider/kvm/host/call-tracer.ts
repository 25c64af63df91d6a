/**
 * Logging of libvirt calls: one line per call after it returns; and of the
 * TCP connections a host opens for us (a probe through it), once open.
 *
 *   rpc=virDomainLookupByName host=edge name="web-1" 1.4ms uuid=… id=3
 *   rpc=virDomainCreate host=edge dom=web-1 12.0ms libvirtError=VIR_ERR_OPERATION_INVALID libvirtCode=55 error="…"
 *   tcp=direct-tcpip host=edge to=192.168.122.40:3128 3.1ms
 *
 * Level from KVMP_LOG: unset or 0 off, 1 calls, 2 calls plus the XML sent and
 * received (domain and volume XML, metadata, addresses). KVMP_TRACE_FILE=<path>
 * sends the lines to that file instead of stderr (appended, one write per
 * line, so several provider processes can share it) and turns level 1 on when
 * KVMP_LOG is unset: the Pulumi engine does not pass a provider's stderr on
 * reliably, and the benchmarks and call-count tests read this file. Never logged at any
 * level: upload bodies (the seed ISO carries user-data), guest-agent commands
 * and replies, keys. The domain and volume XML hold no secrets.
 *
 * Calls made through the typed facade are traced by {@link CallTracer.wrap},
 * which sees results; the handshake calls the connection makes by itself
 * (auth list, open, close) reach the connection's trace hook instead, which
 * {@link CallTracer.hook} logs, so every call appears exactly once.
 */
import { appendFileSync } from "node:fs";
import type { CallOptions, ReadStream, RpcCaller } from "../../libvirt/connection";
import { LibvirtError } from "../../libvirt/errors";
import type { Procedure } from "../../libvirt/procedures";
import type { CallTrace, TraceHook } from "../../libvirt/trace";
import type { UploadOptions, UploadSource } from "../../libvirt/upload";
import { domainStateName } from "../domain/states";

/** 0 off, 1 calls, 2 calls with XML. */
export type TraceLevel = 0 | 1 | 2;

/** The environment variable holding the level. */
export const TRACE_ENV = "KVMP_LOG";

/** The environment variable naming a file the lines are appended to. */
export const TRACE_FILE_ENV = "KVMP_TRACE_FILE";

/**
 * Reads {@link TRACE_ENV}: `1` → 1, `2` (or more) → 2, anything else → 0;
 * unset with {@link TRACE_FILE_ENV} set → 1.
 */
export function traceLevelFromEnv(env: NodeJS.ProcessEnv = process.env): TraceLevel {
  const raw = env[TRACE_ENV];
  if ((raw === undefined || raw === "") && env[TRACE_FILE_ENV]) return 1;
  const n = Number.parseInt(raw ?? "0", 10);
  if (!Number.isFinite(n) || n <= 0) return 0;
  return n >= 2 ? 2 : 1;
}

/** One traced call, structured (what the line says). */
export interface TraceRecord {
  /** A libvirt call (the default), or a TCP connection opened through the host. */
  kind?: "rpc" | "tcp";
  host: string;
  /** Public libvirt name, e.g. 'virStorageVolUpload'. */
  call: string;
  /** `key=value` identifiers from the arguments. */
  fields: string[];
  durationMs: number;
  /** `key=value` curated results (empty on failure). */
  result: string[];
  error?: Error;
}

/** Receives each formatted line and its record. */
export type TraceSink = (line: string, record: TraceRecord) => void;

/** Writes lines to stderr: the Pulumi engine shows a provider's stderr. */
export const stderrSink: TraceSink = (line) => {
  process.stderr.write(`${line}\n`);
};

/** Appends each line to `file` (created 0600: the lines name hosts and domains). */
export function fileSink(file: string): TraceSink {
  return (line) => {
    // One append per line: O_APPEND keeps lines of concurrent writers whole.
    appendFileSync(file, `${line}\n`, { mode: 0o600 });
  };
}

/** The sink the environment asks for: {@link fileSink} when {@link TRACE_FILE_ENV} is set, else stderr. */
export function sinkFromEnv(env: NodeJS.ProcessEnv = process.env): TraceSink {
  const file = env[TRACE_FILE_ENV];
  return file ? fileSink(file) : stderrSink;
}

// Calls the connection makes by itself, never through a wrapped caller.
const HANDSHAKE_CALLS: ReadonlySet<string> = new Set(["virAuthList", "virConnectOpen", "virConnectClose"]);

const SHORT = 96;

function quote(s: string): string {
  return JSON.stringify(s);
}

/** A string argument: quoted when short, otherwise only its length (an XML or a blob). */
function shortString(s: string): string {
  return s.length > SHORT ? `<${s.length} chars>` : quote(s);
}

function namedObject(v: unknown): string | undefined {
  if (typeof v !== "object" || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.pool === "string" && typeof o.name === "string") return `${o.pool}/${o.name}`;
  if (typeof o.name === "string") return o.name;
  return undefined;
}

/** Argument names whose values are XML documents: shown at level 2 only. */
const XML_ARGS: ReadonlySet<string> = new Set(["xml", "metadata"]);
/** Argument names never shown, at any level. */
const SECRET_ARGS: ReadonlySet<string> = new Set(["cmd"]);

/** The identifiers of a call, as `key=value` strings. */
export function describeArgs(args: unknown, level: TraceLevel): string[] {
  if (args === undefined || args === null || typeof args !== "object") return [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(args as Record<string, unknown>)) {
    if (k === "needResults") continue;
    if (SECRET_ARGS.has(k)) {
      out.push(`${k}=<${typeof v === "string" ? v.length : 0} chars>`);
      continue;
    }
    if (XML_ARGS.has(k) && typeof v === "string") {
      out.push(level >= 2 ? `${k}=${quote(v)}` : `${k}=<${v.length} chars>`);
      continue;
    }
    if ((k === "flags" || k === "offset" || k === "length") && (v === 0 || v === 0n)) continue;
    const named = namedObject(v);
    if (named !== undefined) out.push(`${k}=${named}`);
    else if (typeof v === "string") out.push(`${k}=${shortString(v)}`);
    else if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") out.push(`${k}=${v}`);
    else if (v === null) out.push(`${k}=null`);
    else if (v instanceof Uint8Array) out.push(`${k}=<${v.length} bytes>`);
  }
  return out;
}

/** Curated results: what a reader needs, never more. XML, metadata and addresses only at level 2. */
export function describeResult(call: string, result: unknown, level: TraceLevel): string[] {
  if (result === undefined || result === null) return [];
  switch (call) {
    case "virDomainQemuAgentCommand":
      // Agent replies can carry guest command output: never logged.
      return [`reply=<${typeof result === "string" ? result.length : 0} chars>`];
    case "virStorageVolUpload":
      return [`bytes=${String(result)}`];
    case "virDomainGetState": {
      const s = result as { state: number; reason: number };
      return [`state=${domainStateName(s.state)}`, `reason=${s.reason}`];
    }
    case "virDomainGetXMLDesc":
    case "virDomainGetMetadata":
    case "virStorageVolGetXMLDesc": {
      const s = String(result);
      return level >= 2 ? [`xml=${quote(s)}`] : [`chars=${s.length}`];
    }
    case "virDomainInterfaceAddresses": {
      const ifaces = result as {
        name: string;
        hwaddr: string | null;
        addrs: { addr: string; prefix: number }[];
      }[];
      if (level < 2) return [`interfaces=${ifaces.length}`];
      const text = ifaces
        .map((i) => `${i.name}(${i.hwaddr ?? "-"}):${i.addrs.map((a) => `${a.addr}/${a.prefix}`).join(",")}`)
        .join(";");
      return [`interfaces=${ifaces.length}`, `addresses=${quote(text)}`];
    }
    case "virConnectListAllDomains":
    case "virStoragePoolListAllVolumes": {
      const list = result as { name: string }[];
      const out = [`count=${list.length}`];
      if (level >= 2) out.push(`names=${quote(list.map((x) => x.name).join(","))}`);
      return out;
    }
    case "virStorageVolGetInfo": {
      const i = result as { capacity: number; allocation: number; type: number };
      return [`capacity=${i.capacity}`, `allocation=${i.allocation}`];
    }
    default:
      break;
  }
  if (typeof result === "string") return [`result=${shortString(result)}`];
  if (typeof result === "number" || typeof result === "boolean") return [`result=${result}`];
  if (typeof result === "object") {
    const o = result as Record<string, unknown>;
    const out: string[] = [];
    if (typeof o.uuid === "string") out.push(`uuid=${o.uuid}`);
    if (typeof o.id === "number") out.push(`id=${o.id}`);
    if (typeof o.key === "string") out.push(`key=${shortString(o.key)}`);
    return out;
  }
  return [];
}

/** The error part of a line: libvirt's code name and number, then its message. */
export function describeError(err: Error): string[] {
  if (err instanceof LibvirtError) {
    return [`libvirtError=${err.codeName}`, `libvirtCode=${err.code}`, `error=${quote(err.libvirtMessage)}`];
  }
  return [`error=${quote(err.message)}`];
}

/** Formats a record as one line (see the module comment). */
export function formatTraceLine(r: TraceRecord): string {
  const parts = [
    `${r.kind ?? "rpc"}=${r.call}`,
    `host=${r.host}`,
    ...r.fields,
    `${r.durationMs.toFixed(1)}ms`,
  ];
  if (r.error) parts.push(...describeError(r.error));
  else parts.push(...r.result);
  return parts.join(" ");
}

/** Options of {@link CallTracer}. */
export interface CallTracerOptions {
  /** Default: from {@link TRACE_ENV}. */
  level?: TraceLevel;
  /** Default: from {@link TRACE_FILE_ENV} ({@link sinkFromEnv}). */
  sink?: TraceSink;
}

/**
 * Logs libvirt calls per host. Level 0 costs nothing: wrap() returns the
 * caller unchanged and hook() returns undefined.
 */
export class CallTracer {
  readonly level: TraceLevel;
  private readonly sink: TraceSink;

  constructor(options: CallTracerOptions = {}) {
    this.level = options.level ?? traceLevelFromEnv();
    this.sink = options.sink ?? sinkFromEnv();
  }

  get enabled(): boolean {
    return this.level > 0;
  }

  /** The connection trace hook for `host`: logs the handshake calls the connection makes itself. */
  hook(host: string): TraceHook | undefined {
    if (!this.enabled) return undefined;
    return (t: CallTrace) => {
      if (!HANDSHAKE_CALLS.has(t.call)) return;
      const fields = t.args === "" ? [] : [t.args];
      this.emit({
        host,
        call: t.call,
        fields,
        durationMs: t.durationMs,
        result: [],
        ...(t.error ? { error: t.error } : {}),
      });
    };
  }

  /** Wraps a caller so each call (and upload) through it is logged once after it settles. */
  wrap(host: string, caller: RpcCaller): RpcCaller {
    if (!this.enabled) return caller;
    const tracer = this;
    return {
      call<A, R>(proc: Procedure<A, R>, args: A, options?: CallOptions): Promise<R> {
        return tracer.traced(host, proc, args, () => caller.call(proc, args, options));
      },
      upload<A>(
        proc: Procedure<A, void>,
        args: A,
        source: UploadSource,
        options?: UploadOptions,
      ): Promise<number> {
        // The source is never looked at: only its byte count reaches the line.
        return tracer.traced(host, proc, args, () => caller.upload(proc, args, source, options));
      },
      readStream<A>(
        proc: Procedure<A, void>,
        args: A,
        onData: (chunk: Buffer) => void,
        options?: CallOptions,
      ): Promise<ReadStream> {
        // The data is never looked at: only the opening call reaches the line.
        return tracer.traced(host, proc, args, () => caller.readStream(proc, args, onData, options));
      },
    };
  }

  /** Logs the opening of a TCP connection through `host` to `target` (`address:port`), once it settles. */
  tunnel<T>(host: string, target: string, opening: Promise<T>): Promise<T> {
    if (!this.enabled) return opening;
    const started = performance.now();
    const record = (error?: Error) =>
      this.emit({
        kind: "tcp",
        host,
        call: "direct-tcpip",
        fields: [`to=${target}`],
        durationMs: performance.now() - started,
        result: [],
        ...(error !== undefined ? { error } : {}),
      });
    return opening.then(
      (v) => {
        record();
        return v;
      },
      (err: unknown) => {
        record(err instanceof Error ? err : new Error(String(err)));
        throw err;
      },
    );
  }

  private async traced<A, R>(
    host: string,
    proc: Procedure<A, unknown>,
    args: A,
    run: () => Promise<R>,
  ): Promise<R> {
    const started = performance.now();
    try {
      const result = await run();
      this.emit({
        host,
        call: proc.call,
        fields: describeArgs(args, this.level),
        durationMs: performance.now() - started,
        result: describeResult(proc.call, result, this.level),
      });
      return result;
    } catch (err) {
      this.emit({
        host,
        call: proc.call,
        fields: describeArgs(args, this.level),
        durationMs: performance.now() - started,
        result: [],
        error: err instanceof Error ? err : new Error(String(err)),
      });
      throw err;
    }
  }

  private emit(record: TraceRecord): void {
    try {
      this.sink(formatTraceLine(record), record);
    } catch {
      // A broken sink must not break libvirt calls.
    }
  }
}
