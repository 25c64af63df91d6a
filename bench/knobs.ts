/**
 * The benchmark's environment knobs, in one table: name, default and meaning.
 *
 * Everything in bench/ reads its knobs through {@link readKnobs} (common.ts's
 * `config`; ready.ts and render.ts, which do without common.ts, call it
 * themselves), and the report's "Running it" section is rendered from
 * {@link knobs}, so a knob cannot be added without appearing there. The
 * knobs only scripts/bench acts on (render-only, the second test host's
 * folder) are rows here too; test/unit/bench checks that every KVMP_BENCH_*
 * name in bench/ and scripts/bench is in the table and that scripts/bench's
 * defaults are the ones shown.
 *
 * No imports beyond node:path and no side effects: the report and its unit
 * test load this without a test host.
 */
import path from "node:path";

export type Env = Readonly<Record<string, string | undefined>>;

export interface Knob<T> {
  /** The environment variable. */
  readonly name: string;
  /** The default, as the report shows it. */
  readonly shown: string;
  /** What it sets, as the report shows it (markdown, one table cell). */
  readonly meaning: string;
  /** Its value in `env`; `root` is the repository root (KVMP_ROOT). Throws on a malformed value. */
  read(env: Env, root: string): T;
}

/** The value, or undefined when unset or empty. */
function given(env: Env, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw === "" ? undefined : raw;
}

function positiveInt(name: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return n;
}

function int(name: string, fallback: number, meaning: string): Knob<number> {
  return {
    name,
    shown: String(fallback),
    meaning,
    read: (env) => {
      const raw = given(env, name);
      return raw === undefined ? fallback : positiveInt(name, raw);
    },
  };
}

function optionalInt(name: string, shown: string, meaning: string): Knob<number | undefined> {
  return {
    name,
    shown,
    meaning,
    read: (env) => {
      const raw = given(env, name);
      return raw === undefined ? undefined : positiveInt(name, raw);
    },
  };
}

function intList(name: string, fallback: number[], meaning: string): Knob<number[]> {
  return {
    name,
    shown: fallback.join(","),
    meaning,
    read: (env) => {
      const raw = given(env, name);
      if (raw === undefined) return [...fallback];
      const xs = raw.split(",").map((x) => Number(x.trim()));
      if (xs.some((n) => !Number.isInteger(n) || n < 1))
        throw new Error(`${name} must be a comma list of positive integers, got ${raw}`);
      return xs;
    },
  };
}

/** One of `values`; the first is the default. */
function choice<const T extends string>(
  name: string,
  values: readonly [T, ...T[]],
  meaning: string,
): Knob<T> {
  return {
    name,
    shown: values[0],
    meaning,
    read: (env) => {
      const raw = given(env, name);
      if (raw === undefined) return values[0];
      if (!(values as readonly string[]).includes(raw))
        throw new Error(`${name} must be one of ${values.join(", ")}, got ${raw}`);
      return raw as T;
    },
  };
}

function text(
  name: string,
  shown: string,
  meaning: string,
  fallback: (root: string) => string,
): Knob<string> {
  return { name, shown, meaning, read: (env, root) => given(env, name) ?? fallback(root) };
}

function optionalText(name: string, shown: string, meaning: string): Knob<string | undefined> {
  return { name, shown, meaning, read: (env) => given(env, name) };
}

/** Set (to anything but the empty string) or not. */
function flag(name: string, meaning: string): Knob<boolean> {
  return { name, shown: "unset", meaning, read: (env) => given(env, name) !== undefined };
}

/** The knobs, in the order the report lists them. */
export const knobs = {
  /** Rounds of figure 1 (RPC). */
  rounds: int("KVMP_BENCH_ROUNDS", 5, "rounds of the RPC figure"),
  /** Timed lookups per contender per round. */
  lookups: int("KVMP_BENCH_LOOKUPS", 10_000, "timed lookups per contender per round"),
  /** Untimed lookups on the same connection before the timed ones. */
  warmup: int("KVMP_BENCH_WARMUP", 1_000, "untimed lookups before them"),
  /** Untimed lookups per transport and mode once per process, before the first round (JIT warm-up). */
  processWarmup: int(
    "KVMP_BENCH_PROCESS_WARMUP",
    10_000,
    "untimed lookups per transport and mode before the first round",
  ),
  /** Calls in flight for the pipelined figure. */
  depth: int("KVMP_BENCH_DEPTH", 64, "calls in flight for the pipelined runs"),
  /** Each upload round moves the file once per contender. */
  uploadRounds: int("KVMP_BENCH_UPLOAD_ROUNDS", 5, "rounds of the upload figure"),
  uploadMiB: int("KVMP_BENCH_UPLOAD_MIB", 1024, "size of the uploaded file"),
  /** Rounds of the seed-sized upload figure (2g), each contender once per round on its own connection. */
  seedRounds: int(
    "KVMP_BENCH_SEED_ROUNDS",
    40,
    "rounds of the seed-sized (360 KiB) upload figure, run with the upload figure",
  ),
  /**
   * Where figures 2 and 7 upload to: "memory", a transient dir pool on tmpfs, so they measure the
   * pipe and not the disk; "disk", the test host's own pool.
   */
  uploadPool: choice(
    "KVMP_BENCH_UPLOAD_POOL",
    ["memory", "disk"],
    "where figures 2 and 7 upload to: `memory`, a transient dir pool on tmpfs (the pipe is measured, not the disk); `disk`, the test host's pool",
  ),
  /** Bytes per STREAM packet for our upload (UploadOptions.chunkSize); unset: the library's. */
  uploadChunk: optionalInt(
    "KVMP_BENCH_UPLOAD_CHUNK",
    "library default",
    "bytes per STREAM packet for our upload",
  ),
  /**
   * highWaterMark of the file read streams of ours and the bare ssh2 channel (bytes). Node's
   * default is 64 KiB, with which our upload stalled between packets (bench/notes.md), so the main
   * figures read 1 MiB at a time and extra contenders show ours with 64 KiB reads.
   */
  readChunk: int(
    "KVMP_BENCH_READ_CHUNK",
    1024 * 1024,
    "highWaterMark of the file read streams (ours, bare ssh2)",
  ),
  /** Fleet sizes (proxies on one host) for figures 3-5. */
  fleet: intList(
    "KVMP_BENCH_FLEET",
    [1, 10, 50],
    "fleet sizes (proxies on one host); 10 over 2 hosts always runs",
  ),
  /** Rounds of the fleet figures; each round runs every size, two hosts and the virsh loops once. */
  fleetRounds: int(
    "KVMP_BENCH_FLEET_ROUNDS",
    2,
    "rounds of the fleet figures (after one untimed warm-up stack)",
  ),
  /** Upload sizes in MiB for the scaling figure (figure 2's size is its largest point). */
  scaleMiB: intList(
    "KVMP_BENCH_SCALE_MIB",
    [1, 64, 256],
    "upload sizes of the scaling figure (plus section 2's)",
  ),
  scaleRounds: int("KVMP_BENCH_SCALE_ROUNDS", 3, "rounds per size of the scaling figure"),
  /** Figure 6 (bench/ready.ts): the first run misses the image cache, the others hit it. */
  readyRuns: int(
    "KVMP_BENCH_READY_RUNS",
    2,
    "real-guest runs of figure 6: the first misses the image cache, the others hit it",
  ),
  readyFirmware: choice("KVMP_BENCH_READY_FIRMWARE", ["uefi", "bios"], "firmware of figure 6's guests"),
  /** Parts to run: "all" or a comma list (see common.ts's `selected`). */
  only: text(
    "KVMP_BENCH_ONLY",
    "all",
    "a comma list of `rpc`, `upload`, `scale`, `fleet`, `ready`, `firstboot`: run only those; the others keep their last results. `ready` (figure 6: real guests booted up to a healthy proxy) and `firstboot` (figure 8: a stock image's first boot against the test image's) run only when named",
    () => "all",
  ),
  out: text("KVMP_BENCH_OUT", "docs/contributing/benchmarks.md", "where the report goes", (root) =>
    path.join(root, "docs/contributing/benchmarks.md"),
  ),
  /** The raw results; a run of some parts keeps the other parts' last results in it. */
  results: text(
    "KVMP_BENCH_RESULTS",
    ".state/bench/results.json",
    "the raw results, merged across partial runs",
    (root) => path.join(root, ".state/bench/results.json"),
  ),
  /** scripts/bench then runs bench/render.ts instead of bench/main.ts, and starts no test host. */
  renderOnly: flag(
    "KVMP_BENCH_RENDER_ONLY",
    "`1`: measure nothing and start no test host, rewrite the report from the raw results and `bench/notes.md`",
  ),
  /** scripts/bench starts the second test host and sets this to its folder (fleet.ts reads it). */
  host2Dir: optionalText(
    "KVMP_BENCH_HOST2_DIR",
    "set by scripts/bench",
    "state folder of the second test host; unset: the same daemon under a second key",
  ),
  /** The test host the figures run against (scripts/test-host's own variable). */
  testHostDir: text(
    "KVMP_TEST_HOST_DIR",
    ".state/test-host",
    "state folder of the test host the figures run against (scripts/test-host's own variable, so scripts/bench starts that host)",
    (root) => path.join(root, ".state/test-host"),
  ),
  /** The repository root, which the default paths above are relative to. */
  root: text(
    "KVMP_ROOT",
    "set by scripts/bench",
    "the repository root, which the default paths are relative to; unset: the working directory",
    () => process.cwd(),
  ),
} as const satisfies Record<string, Knob<unknown>>;

/** The knobs' values: one field per row of {@link knobs}. */
export type Config = { [K in keyof typeof knobs]: ReturnType<(typeof knobs)[K]["read"]> };

/** Every knob's value in `env`; throws on the first malformed one. */
export function readKnobs(env: Env): Config {
  const root = knobs.root.read(env, process.cwd());
  return Object.fromEntries(
    Object.entries(knobs).map(([key, knob]: [string, Knob<unknown>]) => [key, knob.read(env, root)]),
  ) as Config;
}
