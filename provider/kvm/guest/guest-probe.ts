/**
 * The health probe run inside the guest, through its agent: a request for
 * the health check's URL through the guest's own squid on loopback (squid
 * admits the VM's own processes without credentials, and applies every
 * destination rule to them). For proxies with `auth`, whose password the
 * provider never learns. Pure: the program and the reading of its output.
 *
 * The program is Python 3 (every cloud-init guest has it; curl is not on
 * every image), given on the command line, printing one `key value` line
 * each: `status`, `via`, `x-cache`, `body` (the reply's body as a JSON
 * string, for the egress check), or `error`. It keeps the {@link ProbeBounds}
 * every probe keeps (probes/probe-reader.ts from here), with the same reasons.
 */

import { durationText } from "../../errors";

/**
 * The two bounds of one probe's exchange. A probe's far end may be hostile
 * (the egress check asks a URL the user gives, through the proxy): neither a
 * reply trickled a byte at a time nor an endless body holds a probe.
 */
export interface ProbeBounds {
  /** The whole exchange (connect, headers, body) ends by then, ms: a deadline, not an idle timer. */
  deadlineMs: number;
  /** The most bytes of the reply's body read; past them the probe fails. 0: none (status and headers decide). */
  bodyBytes: number;
}

/** Why a probe failed at its deadline. */
export function deadlineReason(ms: number): string {
  return `no complete answer within ${durationText(ms)}`;
}

/** Why a probe failed at its body's cap. */
export function sizeReason(bytes: number): string {
  return `reply larger than ${bytes} bytes`;
}

/** The interpreter the probe runs with (cloud-init itself needs it). */
export const GUEST_PROBE_INTERPRETER = "/usr/bin/python3";

/**
 * The probe's program (argv: port, url, deadline ms, body bytes, the
 * deadline's reason as deadlineReason words it). The
 * deadline is an interval timer whose signal ends whatever the request is
 * waiting on; the body is read up to one byte past its cap, no further.
 * Its reasons are deadlineReason's and sizeReason's.
 */
export const GUEST_PROBE_PROGRAM = `import json, signal, sys, urllib.request, urllib.error
port, url, deadline_ms, body_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
deadline_reason = sys.argv[5]

class Deadline(BaseException):
    pass

def expire(signum, frame):
    raise Deadline()

def fail(reason):
    print("error " + reason)
    sys.exit(0)

signal.signal(signal.SIGALRM, expire)
signal.setitimer(signal.ITIMER_REAL, deadline_ms / 1000)
proxy = "http://127.0.0.1:" + port
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
request = urllib.request.Request(url, headers={"User-Agent": "pulumi-kvm-proxy-health"})
try:
    try:
        reply = opener.open(request)
    except urllib.error.HTTPError as e:
        reply = e
    body = reply.read(body_bytes + 1) if body_bytes > 0 else b""
    signal.setitimer(signal.ITIMER_REAL, 0)
except Deadline:
    fail(deadline_reason)
except Exception as e:
    signal.setitimer(signal.ITIMER_REAL, 0)
    fail(type(e).__name__ + ": " + str(e)[:200].replace("\\n", " "))
if len(body) > body_bytes:
    fail("reply larger than " + str(body_bytes) + " bytes")
print("status " + str(reply.getcode()))
print("via " + (reply.headers.get("Via") or ""))
print("x-cache " + (reply.headers.get("X-Cache") or ""))
print("body " + json.dumps(body.decode("utf-8", "replace")))
`;

/** The arguments of the probe for `url` through the squid on `port`, within `bounds`. */
export function guestProbeArgs(port: number, url: string, bounds: ProbeBounds): string[] {
  return [
    "-c",
    GUEST_PROBE_PROGRAM,
    String(port),
    url,
    String(bounds.deadlineMs),
    String(bounds.bodyBytes),
    deadlineReason(bounds.deadlineMs),
  ];
}

/** What the probe saw: the reply's status and squid's headers, or why there was none. */
export type GuestProbeReply =
  | { status: number; via: string; xCache: string; body: string }
  | { error: string };

/** Reads the probe's output. */
export function parseGuestProbe(stdout: string, exitcode: number | undefined): GuestProbeReply {
  const fields = new Map<string, string>();
  for (const line of stdout.split("\n")) {
    const space = line.indexOf(" ");
    if (space > 0) fields.set(line.slice(0, space), line.slice(space + 1).trim());
    else if (line !== "") fields.set(line, "");
  }
  const error = fields.get("error");
  if (error !== undefined) return { error };
  const status = Number(fields.get("status"));
  if (!Number.isInteger(status) || status < 100) {
    return { error: `the probe in the guest printed no status (exit ${exitcode ?? "unknown"})` };
  }
  return {
    status,
    via: fields.get("via") ?? "",
    xCache: fields.get("x-cache") ?? "",
    body: bodyOf(fields.get("body")),
  };
}

/** The body line's JSON string, or "" when it is missing or not one. */
function bodyOf(line: string | undefined): string {
  if (line === undefined) return "";
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === "string" ? v : "";
  } catch {
    return "";
  }
}
