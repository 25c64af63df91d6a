import { execFileSync, spawnSync } from "node:child_process";
import {
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { constants, createGzip, gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import {
  parseSquidRequests,
  SQUID_LOG_BOUNDS,
  type StatusClass,
  squidRequestsArgs,
} from "../../../../provider/kvm/guest/squid-requests";

const COUNTS = { "1xx": 0, "2xx": 7, "3xx": 1, "4xx": 3, "5xx": 2, other: 1 };

describe("reading the count squid's access log gave in the guest", () => {
  it("the counts by class and the lines it could not read", () => {
    expect(parseSquidRequests(`${JSON.stringify({ byClass: COUNTS, unreadable: 4 })}\n`, 0)).toEqual({
      ok: true,
      requests: { byClass: COUNTS, unreadable: 4 },
    });
  });

  it.each([
    [
      "the program's own reason",
      "error no access log at /var/log/squid/access.log\n",
      "no access log at /var/log/squid/access.log",
    ],
    ["nothing printed", "", "the count in the guest printed no result (exit 1)"],
    ["not JSON", "Traceback (most recent call last):", "the count in the guest printed no result (exit 1)"],
    [
      "a class missing",
      JSON.stringify({ byClass: { ...COUNTS, "5xx": undefined }, unreadable: 0 }),
      "the count in the guest printed no 5xx count",
    ],
    [
      "a negative count",
      JSON.stringify({ byClass: { ...COUNTS, "2xx": -1 }, unreadable: 0 }),
      "the count in the guest printed no 2xx count",
    ],
    [
      "a fraction",
      JSON.stringify({ byClass: { ...COUNTS, "4xx": 1.5 }, unreadable: 0 }),
      "the count in the guest printed no 4xx count",
    ],
    [
      "no unreadable count",
      JSON.stringify({ byClass: COUNTS }),
      "the count in the guest printed an unexpected result",
    ],
    ["null", "null", "the count in the guest printed an unexpected result"],
  ])("%s: a reason, never made-up counts", (_what, stdout, reason) => {
    expect(parseSquidRequests(stdout, 1)).toEqual({ ok: false, reason });
  });

  it("the program gets the log's path and its deadline as arguments, nothing of the user's", () => {
    const args = squidRequestsArgs(15_000);
    expect(args.slice(2)).toEqual(["/var/log/squid/access.log", "15000"]);
    expect(args[0]).toBe("-c");
  });
});

// The program itself, run by this machine's python3 (as the guest's) under an
// address-space cap, so that a log it would read whole fails the case with a
// MemoryError instead of taking the machine's memory, and under a timeout
// past its own deadline, so that a read that blocks fails it too. No case here
// is about the deadline: it is a guard against a hang, far past what reading a
// gigabyte takes on a loaded machine (12 s seen with two guest files beside).
const MEMORY_CAP = 256 * 1024 ** 2;
const DEADLINE_MS = 60_000;
const workDir = mkdtempSync(path.join(tmpdir(), "squid-requests-test-"));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

function count(log: string): ReturnType<typeof parseSquidRequests> {
  const run = spawnSync(
    "prlimit",
    [`--as=${MEMORY_CAP}`, "python3", ...squidRequestsArgs(DEADLINE_MS, log)],
    {
      encoding: "utf8",
      timeout: DEADLINE_MS + 5_000,
    },
  );
  expect(run.error, "python3 under prlimit ran and ended by itself").toBeUndefined();
  expect(run.stderr).toBe("");
  return parseSquidRequests(run.stdout, run.status ?? undefined);
}

/** One line of squid's native format, stamped now (after the boot). */
const native = (
  status: number,
  { tag = "TCP_MISS", client = "192.0.2.10", url = "http://example.com/" } = {},
) =>
  `${(Date.now() / 1000).toFixed(3)}    120 ${client} ${tag}/${status} 512 GET ${url} - HIER_DIRECT/198.51.100.7 text/html\n`;

/** The live log of every case: six counted requests, the VM's own and the health check's left out. */
const LIVE = [
  native(200),
  native(200),
  native(200, { tag: "TCP_TUNNEL", url: "example.com:443" }),
  native(301),
  native(407, { tag: "TCP_DENIED" }),
  native(503),
  native(200, { client: "127.0.0.1" }),
  native(400, { tag: "NONE_NONE", url: "/" }),
].join("");
const ZERO: Record<StatusClass, number> = { "1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, other: 0 };
const LIVE_COUNTS: Record<StatusClass, number> = { ...ZERO, "2xx": 3, "3xx": 1, "4xx": 1, "5xx": 1 };
const plus = (more: Partial<Record<StatusClass, number>>) => {
  const sum = { ...LIVE_COUNTS };
  for (const [c, n] of Object.entries(more)) sum[c as StatusClass] += n;
  return sum;
};
const counted = (byClass: Record<StatusClass, number>, unreadable = 0) => ({
  ok: true,
  requests: { byClass, unreadable },
});

/** A log directory of its own with the live log, arranged further by `arrange`; the live log's path. */
async function logDir(arrange: (dir: string) => void | Promise<void> = () => {}): Promise<string> {
  const dir = mkdtempSync(path.join(workDir, "log-"));
  writeFileSync(path.join(dir, "access.log"), LIVE);
  await arrange(dir);
  return path.join(dir, "access.log");
}

/** A gzip member of `zeros` NUL bytes (no newline) and then `tail`, streamed: never held whole. */
async function gzipBomb(file: string, zeros: number, tail: string): Promise<void> {
  const chunk = Buffer.alloc(1024 ** 2);
  async function* body() {
    for (let left = zeros; left > 0; left -= chunk.length)
      yield left >= chunk.length ? chunk : chunk.subarray(0, left);
    yield Buffer.from(tail);
  }
  await pipeline(Readable.from(body()), createGzip({ strategy: constants.Z_RLE }), createWriteStream(file));
}

describe("the count in the guest, run by this machine's python3 in 256 MiB of address space", {
  timeout: DEADLINE_MS + 30_000,
}, () => {
  it("the live log, a rotated copy and a compressed one: every request since the boot by class, exactly", async () => {
    const log = await logDir((dir) => {
      writeFileSync(path.join(dir, "access.log.1"), native(204) + native(404));
      writeFileSync(path.join(dir, "access.log.2.gz"), gzipSync(`${native(500)}not squid's format\n`));
    });
    expect(count(log)).toEqual(counted(plus({ "2xx": 1, "4xx": 1, "5xx": 1 }), 1));
  });

  it.each([
    ["a symlink to /dev/zero", (p: string) => symlinkSync("/dev/zero", p)],
    [
      "a symlink to a log outside the directory",
      (p: string) => {
        const elsewhere = path.join(mkdtempSync(path.join(workDir, "elsewhere-")), "secret.log");
        writeFileSync(elsewhere, native(200).repeat(10));
        symlinkSync(elsewhere, p);
      },
    ],
    ["a FIFO no one writes to", (p: string) => execFileSync("mkfifo", [p])],
    ["a directory", (p: string) => mkdirSync(p)],
    [
      "a socket",
      (p: string) =>
        execFileSync("python3", [
          "-c",
          "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
          p,
        ]),
    ],
  ])(
    "a rotated copy that is %s is never read: one unreadable, the live log's counts exact",
    async (_what, make) => {
      const log = await logDir((dir) => make(path.join(dir, "access.log.1")));
      expect(count(log)).toEqual(counted(LIVE_COUNTS, 1));
    },
  );

  it("a live log that is a symlink is not followed: an error names it, no counts from its target", async () => {
    const log = await logDir((dir) => {
      const target = path.join(dir, "other.log");
      writeFileSync(target, LIVE);
      rmSync(path.join(dir, "access.log"));
      symlinkSync(target, path.join(dir, "access.log"));
    });
    expect(count(log)).toEqual({ ok: false, reason: `the access log at ${log} is not a regular file` });
  });

  it.each([
    [
      "a 300 MB line without a newline (sparse NUL bytes) in access.log.1",
      (dir: string) => {
        const file = path.join(dir, "access.log.1");
        writeFileSync(file, native(204));
        truncateSync(file, 300 * 1000 ** 2);
        writeFileSync(file, `\n${native(404)}`, { flag: "a" });
      },
    ],
    [
      "a gzip bomb access.log.2.gz: 1 GiB of NUL bytes without a newline",
      async (dir: string) => {
        writeFileSync(path.join(dir, "access.log.1"), native(204));
        await gzipBomb(path.join(dir, "access.log.2.gz"), 1024 ** 3, `\n${native(404)}`);
      },
    ],
  ])(
    "%s: one unreadable line, read in bounded pieces, and the lines around it counted",
    async (_what, make) => {
      const log = await logDir(make);
      expect(count(log)).toEqual(counted(plus({ "2xx": 1, "4xx": 1 }), 1));
    },
  );

  it(`more than ${SQUID_LOG_BOUNDS.rotatedFiles} rotated copies written since the boot: an error naming the cap, not a part of the count`, async () => {
    const log = await logDir((dir) => {
      for (let i = 1; i <= SQUID_LOG_BOUNDS.rotatedFiles + 1; i++)
        writeFileSync(path.join(dir, `access.log.${i}`), native(200));
    });
    expect(count(log)).toEqual({
      ok: false,
      reason: `more than ${SQUID_LOG_BOUNDS.rotatedFiles} rotated access logs were written since the boot (the cap on files read)`,
    });
  });

  it("copies last written before the boot are neither read nor counted towards the cap on files", async () => {
    const log = await logDir((dir) => {
      for (let i = 1; i <= SQUID_LOG_BOUNDS.rotatedFiles + 5; i++) {
        const file = path.join(dir, `access.log.${i}`);
        writeFileSync(file, native(200));
        if (i > 4) utimesSync(file, new Date("2001-01-01"), new Date("2001-01-01"));
      }
    });
    expect(count(log)).toEqual(counted(plus({ "2xx": 4 })));
  });

  it("more than 2 GiB in all, across copies each under it: an error naming the cap on bytes read", async () => {
    expect(SQUID_LOG_BOUNDS.totalBytes).toBe(2 * 1024 ** 3);
    const log = await logDir((dir) => {
      for (const name of ["access.log.1", "access.log.2"]) {
        const file = path.join(dir, name);
        writeFileSync(file, native(200));
        truncateSync(file, 1.25 * 1024 ** 3);
      }
    });
    expect(count(log)).toEqual({
      ok: false,
      reason: "the access logs hold more than 2 GiB to read (the cap on bytes read)",
    });
  });
});
