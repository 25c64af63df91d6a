/** What the trace hook learns about each call; never carries upload bodies or whole XML documents. */
export interface CallTrace {
  /** Public libvirt name, e.g. 'virDomainLookupByName'. */
  call: string;
  /** Short one-line summary of the arguments, e.g. 'dom=kvmp-a flags=4'. */
  args: string;
  durationMs: number;
  /** Set when the call failed. */
  error?: Error;
  /** For uploads: bytes sent. */
  bytes?: number;
}

export type TraceHook = (trace: CallTrace) => void;

const MAX_STRING = 64;

function summarizeValue(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "string") {
    // XML documents and agent commands can be long: say how long, not what.
    return v.length > MAX_STRING ? `<${v.length} chars>` : JSON.stringify(v);
  }
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  if (v instanceof Uint8Array) return `<${v.length} bytes>`;
  if (typeof v === "object") {
    const o = v as Record<string, unknown>;
    // Libvirt objects are known by name: a storage volume as pool/name, others by name.
    if (typeof o.pool === "string" && typeof o.name === "string") return `${o.pool}/${o.name}`;
    if (typeof o.name === "string") return o.name;
  }
  return "<object>";
}

/** 'dom=kvmp-a flags=4' for { dom: {name:'kvmp-a',...}, flags: 4 }; '' for no args. */
export function summarizeArgs(args: unknown): string {
  if (args === undefined || args === null) return "";
  if (typeof args !== "object" || args instanceof Uint8Array) return summarizeValue(args);
  return Object.entries(args as Record<string, unknown>)
    .map(([k, v]) => `${k}=${summarizeValue(v)}`)
    .join(" ");
}
