/**
 * The health probe run inside the guest, through its agent: a request for
 * the health check's URL through the guest's own squid on loopback (squid
 * admits the VM's own processes without credentials, and applies every
 * destination rule to them). For proxies with `auth`, whose password the
 * provider never learns. Pure: the program and the reading of its output.
 *
 * The program is Python 3 (every cloud-init guest has it; curl is not on
 * every image), given on the command line, printing one `key value` line
 * each: `status`, `via`, `x-cache`, `body` (the first bytes of the reply's
 * body as a JSON string, for the egress check), or `error`.
 */

/** The interpreter the probe runs with (cloud-init itself needs it). */
export const GUEST_PROBE_INTERPRETER = "/usr/bin/python3";

/** The most bytes of a reply's body the probe prints (an IP echo's answer is a few dozen). */
export const GUEST_PROBE_BODY_LIMIT = 4096;

/** The probe's program (argv: port, url). */
export const GUEST_PROBE_PROGRAM = `import json, sys, urllib.request, urllib.error
port, url = sys.argv[1], sys.argv[2]
proxy = "http://127.0.0.1:" + port
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
request = urllib.request.Request(url, headers={"User-Agent": "pulumi-kvm-proxy-health"})
try:
    reply = opener.open(request, timeout=10)
    status, headers, body = reply.status, reply.headers, reply.read(${GUEST_PROBE_BODY_LIMIT})
except urllib.error.HTTPError as e:
    status, headers, body = e.code, e.headers, e.read(${GUEST_PROBE_BODY_LIMIT})
except Exception as e:
    print("error " + type(e).__name__ + ": " + str(e)[:200].replace("\\n", " "))
    sys.exit(0)
print("status " + str(status))
print("via " + (headers.get("Via") or ""))
print("x-cache " + (headers.get("X-Cache") or ""))
print("body " + json.dumps(body.decode("utf-8", "replace")))
`;

/** The arguments of the probe for `url` through the squid on `port`. */
export function guestProbeArgs(port: number, url: string): string[] {
  return ["-c", GUEST_PROBE_PROGRAM, String(port), url];
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
