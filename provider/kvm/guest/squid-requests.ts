/**
 * The requests a proxy's squid has answered since the VM booted, by status
 * class, counted inside the guest through its agent from squid's access log
 * (the `status` command). Pure: the program and the reading of its output.
 *
 * The program is Python 3, as the in-guest probe's (guest-probe.ts). It reads
 * squid's native log lines (`time elapsed client action/status bytes method
 * URL ...`, squid's default `logformat squid`) from the log and the copies
 * logrotate keeps beside it (`access.log.1`, `access.log.2.gz`, ...; files
 * last written before the boot are skipped), and counts the lines stamped at
 * or after the boot (`btime` of /proc/stat). Not counted:
 * - requests from the VM itself (a loopback client): the in-guest probes the
 *   provider runs for proxies with auth;
 * - squid's answers to requests that were not proxy requests (`GET /` sent
 *   to the proxy port as to a web server): the health check's. squid 5.7
 *   logs one as `NONE_NONE/400 ... GET /`; a tag of `NONE` or an
 *   `error:` URL in place of the path is read the same way.
 * A line it cannot read (another logformat) is counted as unreadable, never
 * guessed. It prints one JSON object, or `error <reason>`; an interval timer
 * ends it at its deadline, however large the logs.
 *
 * The log's directory is writable by squid's user, so the program bounds
 * what a broken or hostile one can make it hold or wait for
 * ({@link SQUID_LOG_BOUNDS}):
 * - each file is opened without following a symlink and without blocking,
 *   and read only when the open file is a regular file (its mtime, for the
 *   boot filter, is the open file's own); a rotated copy that is a symlink,
 *   FIFO, directory or device is never read and counts as one unreadable
 *   line, and a live log that is one is an error;
 * - a line is read at most `lineBytes` at a time: a longer one counts as one
 *   unreadable line and the rest of it is skipped piece by piece, so neither
 *   a line without a newline nor a gzip bomb is ever held whole (decompressed
 *   bytes come through the same bounded read);
 * - it reads the live log and at most `rotatedFiles` copies written since the
 *   boot, and at most `totalBytes` (decompressed) in all: past either it
 *   prints `error` naming the cap, never a part of the count as the whole.
 */

/** Where squid writes its access log on Debian, Ubuntu, Fedora and Alpine (squid's default). */
export const SQUID_ACCESS_LOG = "/var/log/squid/access.log";

/** The status classes counted, and what holds every other status (squid's 000: no reply was sent). */
export const STATUS_CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"] as const;
export type StatusClass = (typeof STATUS_CLASSES)[number];

/** Requests by status class since the boot, and lines that were not squid's native format. */
export interface SquidRequests {
  byClass: Record<StatusClass, number>;
  unreadable: number;
}

/**
 * What the program reads at most: bytes of a line at a time, rotated copies
 * written since the boot (squid's logrotate keeps two on Debian), and bytes
 * in all, decompressed (millions of native lines; far past what a proxy's
 * log holds between boots, and readable within the deadline).
 */
export const SQUID_LOG_BOUNDS = { lineBytes: 65_536, rotatedFiles: 20, totalBytes: 2 * 1024 ** 3 } as const;

/** The program (argv: the log's path, the deadline in ms). */
export const SQUID_REQUESTS_PROGRAM = `import errno, gzip, json, os, signal, stat, sys
log, deadline_ms = sys.argv[1], int(sys.argv[2])
LINE_BYTES = ${SQUID_LOG_BOUNDS.lineBytes}
ROTATED_FILES = ${SQUID_LOG_BOUNDS.rotatedFiles}
TOTAL_BYTES = ${SQUID_LOG_BOUNDS.totalBytes}

class Deadline(BaseException):
    pass

class Cap(Exception):
    pass

def expire(signum, frame):
    raise Deadline()

def open_regular(path):
    # The fd and its stat when path is a regular file itself, else None.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        # ELOOP: a symlink; ENXIO: a socket.
        if e.errno in (errno.ELOOP, errno.ENXIO):
            return None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st

def rotated_names(folder, base):
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(base + ".") and entry.name[len(base) + 1:].split(".")[0].isdigit():
                    yield entry.name
    except FileNotFoundError:
        return

read = 0

def chunk(f):
    global read
    raw = f.readline(LINE_BYTES)
    read += len(raw)
    if read > TOTAL_BYTES:
        raise Cap("the access logs hold more than ${SQUID_LOG_BOUNDS.totalBytes / 1024 ** 3} GiB to read (the cap on bytes read)")
    return raw

signal.signal(signal.SIGALRM, expire)
signal.setitimer(signal.ITIMER_REAL, deadline_ms / 1000)
counts = {"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, "other": 0}
unreadable = 0
try:
    boot = 0
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                boot = int(line.split()[1])
    folder, base = os.path.split(log)
    files = []
    try:
        live = open_regular(log)
        if live is None:
            print("error the access log at " + log + " is not a regular file")
            sys.exit(0)
        files.append((log, live[0]))
    except FileNotFoundError:
        pass
    rotated = []
    for name in rotated_names(folder or ".", base):
        try:
            found = open_regular(os.path.join(folder, name))
        except FileNotFoundError:
            continue
        if found is None:
            try:
                if os.lstat(os.path.join(folder, name)).st_mtime < boot:
                    continue
            except FileNotFoundError:
                continue
            unreadable += 1
            continue
        fd, st = found
        if st.st_mtime < boot:
            os.close(fd)
            continue
        rotated.append((st.st_mtime, name, fd))
        if len(rotated) > ROTATED_FILES:
            raise Cap("more than " + str(ROTATED_FILES) + " rotated access logs were written since the boot (the cap on files read)")
    rotated.sort(reverse=True)
    files += [(os.path.join(folder, name), fd) for _, name, fd in rotated]
    if not files:
        print("error no access log at " + log)
        sys.exit(0)
    for path, fd in files:
        plain = os.fdopen(fd, "rb", buffering=1 << 20)
        with plain, (gzip.GzipFile(fileobj=plain, mode="rb") if path.endswith(".gz") else plain) as f:
            while True:
                raw = chunk(f)
                if not raw:
                    break
                if len(raw) == LINE_BYTES and not raw.endswith(b"\\n"):
                    unreadable += 1
                    while len(raw) == LINE_BYTES and not raw.endswith(b"\\n"):
                        raw = chunk(f)
                    continue
                fields = raw.split()
                try:
                    stamp = float(fields[0])
                    client = fields[2].decode("ascii")
                    tag, status = fields[3].decode("ascii").rsplit("/", 1)
                    url = fields[6]
                    status = int(status)
                except (IndexError, ValueError, UnicodeDecodeError):
                    unreadable += 1
                    continue
                if stamp < boot:
                    continue
                if client.startswith("127.") or client == "::1":
                    continue
                if tag in ("NONE", "NONE_NONE") and (url.startswith(b"/") or url.startswith(b"error:")):
                    continue
                key = str(status // 100) + "xx"
                counts[key if key in counts and status >= 100 else "other"] += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
except Deadline:
    print("error the access log was not read within " + str(deadline_ms) + " ms")
    sys.exit(0)
except Cap as e:
    signal.setitimer(signal.ITIMER_REAL, 0)
    print("error " + str(e))
    sys.exit(0)
except Exception as e:
    signal.setitimer(signal.ITIMER_REAL, 0)
    print("error " + type(e).__name__ + ": " + str(e)[:200].replace("\\n", " "))
    sys.exit(0)
print(json.dumps({"byClass": counts, "unreadable": unreadable}))
`;

/** The program's arguments: the log at `log`, ended at `deadlineMs`. */
export function squidRequestsArgs(deadlineMs: number, log = SQUID_ACCESS_LOG): string[] {
  return ["-c", SQUID_REQUESTS_PROGRAM, log, String(deadlineMs)];
}

/** Reads the program's output: the counts, or why there are none. */
export function parseSquidRequests(
  stdout: string,
  exitcode: number | undefined,
): { ok: true; requests: SquidRequests } | { ok: false; reason: string } {
  const text = stdout.trim();
  if (text.startsWith("error ")) return { ok: false, reason: text.slice(6) };
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return { ok: false, reason: `the count in the guest printed no result (exit ${exitcode ?? "unknown"})` };
  }
  const counts = (doc as { byClass?: unknown })?.byClass as Record<string, unknown> | undefined;
  const unreadable = (doc as { unreadable?: unknown })?.unreadable;
  const valid = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
  if (typeof counts !== "object" || counts === null || !valid(unreadable)) {
    return { ok: false, reason: "the count in the guest printed an unexpected result" };
  }
  const byClass = {} as Record<StatusClass, number>;
  for (const c of STATUS_CLASSES) {
    const v = counts[c];
    if (!valid(v)) return { ok: false, reason: `the count in the guest printed no ${c} count` };
    byClass[c] = v;
  }
  return { ok: true, requests: { byClass, unreadable } };
}
