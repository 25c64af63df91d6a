import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { knobs, readKnobs } from "../../../bench/knobs";
import { type Environment, type Results, render } from "../../../bench/report";
import { throttleFigure } from "../../../bench/report/fleet";
import { loadResults, renderSaved, saveResults } from "../../../bench/results";
import type { RpcContender, Sample } from "../../../bench/rpc";

const root = path.resolve(__dirname, "../../..");

/** A made-up environment and figure 1 with every round alike: no data of any real run. */
function minimalResults(): Results {
  const env: Environment = {
    startedAt: "2000-01-01T00:00:00Z",
    finishedAt: "2000-01-01T00:01:40Z",
    durationSeconds: 100,
    loadBefore: "0.10 / 0.20 / 0.30",
    loadAfter: "0.40 / 0.50 / 0.60",
    loadSamples: [0.1, 0.2],
    cpus: 2,
    node: "v20.0.0",
    libvirt: "9.0.0",
    openssh: "OpenSSH_0.0",
    ssh2: "0.0.0",
    otherProcesses: "",
  };
  const rounds = (callsPerSecond: number): Sample[] =>
    [1, 2, 3].map(() => ({ callsPerSecond, daemonUsPerCall: 100, clientUsPerCall: 50 }));
  const samples: Record<RpcContender, Sample[]> = {
    oursUnixSeq: rounds(4000),
    oursUnixPipe: rounds(12000),
    oursSshSeq: rounds(2000),
    oursSshPipe: rounds(8000),
    pyUnixSeq: rounds(3200),
    pySshSeq: rounds(1600),
    oursOpensshSeq: rounds(1900),
    oursOpensshPipe: rounds(7500),
  };
  return {
    env,
    rpc: { rounds: 3, lookups: 10_000, depth: 64, samples },
    ranAt: { rpc: "2000-01-01T00:01:40Z" },
  };
}

describe("the benchmark report", () => {
  it("renders the figure rows of the parts it has, the notes and every knob of the table", () => {
    const md = render(minimalResults(), "## Findings\n\nNotes go here.\n");
    expect(md).toContain(
      "| 1a. lookups, unix, sequential (vs C client sequential) | 4,000 calls/s | 3,200 calls/s | 1.25× | ≥ 1.0× | yes |",
    );
    expect(md).toContain("## 1. RPC: domain lookups per second on one connection");
    expect(md).not.toContain("## 2. Upload");
    expect(md).toContain("## Findings\n\nNotes go here.");
    expect(md).toContain("| variable | default | meaning |");
    for (const k of Object.values(knobs)) expect(md).toContain(`| ${k.name} | ${k.shown} | `);
    expect(md).toContain("| KVMP_BENCH_UPLOAD_POOL | memory | ");
  });

  describe("re-rendered from saved results alone (KVMP_BENCH_RENDER_ONLY)", () => {
    let dir: string | undefined;
    afterEach(() => {
      if (dir) rmSync(dir, { recursive: true, force: true });
      dir = undefined;
    });

    it("writes the report from the results file and the notes, with no test host", () => {
      dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-bench-render-"));
      mkdirSync(path.join(dir, "bench"));
      writeFileSync(path.join(dir, "bench/notes.md"), "## Findings\n\nFrom the notes file.\n");
      const results = path.join(dir, "results.json");
      writeFileSync(results, JSON.stringify({ config: {}, ...minimalResults() }));
      const out = path.join(dir, "benchmarks.md");
      renderSaved(readKnobs({ KVMP_ROOT: dir, KVMP_BENCH_RESULTS: results, KVMP_BENCH_OUT: out }));
      const md = readFileSync(out, "utf8");
      expect(md).toBe(render(minimalResults(), "## Findings\n\nFrom the notes file.\n"));
      expect(md).toContain("| 1b. lookups, unix, 64 in flight (vs C client sequential) | 12,000 calls/s |");
    });

    it("saves the results with this run's knobs, not the ones merged in from the last file", () => {
      dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-bench-render-"));
      const file = path.join(dir, "results.json");
      const config = readKnobs({ KVMP_ROOT: dir, KVMP_BENCH_ROUNDS: "7" });
      saveResults(file, config, { ...minimalResults(), config: { rounds: 1 } } as Results);
      expect(loadResults(file)?.config).toEqual(JSON.parse(JSON.stringify(config)));
      expect(loadResults(file)?.rpc?.depth).toBe(64);
    });

    it("says so when there are no saved results", () => {
      dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-bench-render-"));
      const config = readKnobs({ KVMP_ROOT: dir });
      expect(() => renderSaved(config)).toThrow(/no .*results\.json to render from/);
    });
  });
});

describe("figure 3e: a throttled up against the theoretical time of its waves", () => {
  const run = (proxies: number, seconds: number) => ({
    proxies,
    concurrentCreates: 2,
    parallel: 20,
    seconds,
  });

  it("takes a wave from the two-wave stack minus the one-wave stack, so fixed costs cancel", () => {
    // Fixed 6 s, 2 s per wave: 2 proxies 8 s, 4 proxies 10 s; 10 proxies (5 waves) in theory 16 s.
    const f = throttleFigure([run(2, 8), run(4, 10), run(10, 17)]);
    expect(f).toEqual({ proxies: 10, seconds: 17, theoretical: 16, concurrentCreates: 2, parallel: 20 });
  });

  it("uses the medians over rounds, and needs three sizes", () => {
    const f = throttleFigure([run(2, 8), run(2, 9), run(2, 100), run(4, 11), run(10, 17)]);
    expect(f?.theoretical).toBe(9 + 4 * 2);
    expect(throttleFigure([run(2, 8), run(10, 17)])).toBeUndefined();
  });
});

describe("the benchmark's knob table", () => {
  it("gives the defaults when nothing is set, relative to KVMP_ROOT", () => {
    const c = readKnobs({ KVMP_ROOT: "/r" });
    expect(c.rounds).toBe(5);
    expect(c.fleet).toEqual([1, 10, 50]);
    expect(c.uploadPool).toBe("memory");
    expect(c.uploadChunk).toBeUndefined();
    expect(c.readyFirmware).toBe("uefi");
    expect(c.renderOnly).toBe(false);
    expect(c.results).toBe("/r/.state/bench/results.json");
    expect(c.testHostDir).toBe("/r/.state/test-host");
  });

  it("reads what is set and refuses malformed values", () => {
    const c = readKnobs({
      KVMP_BENCH_FLEET: "2, 4",
      KVMP_BENCH_UPLOAD_POOL: "disk",
      KVMP_BENCH_RENDER_ONLY: "1",
    });
    expect(c.fleet).toEqual([2, 4]);
    expect(c.uploadPool).toBe("disk");
    expect(c.renderOnly).toBe(true);
    expect(() => readKnobs({ KVMP_BENCH_ROUNDS: "0" })).toThrow(/KVMP_BENCH_ROUNDS/);
    expect(() => readKnobs({ KVMP_BENCH_UPLOAD_POOL: "tape" })).toThrow(/memory, disk/);
  });

  /** bench/**.ts (the table itself aside) and scripts/bench. */
  function sources(): { file: string; text: string }[] {
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(path.join(root, d), { withFileTypes: true })) {
        const rel = path.join(d, e.name);
        if (e.isDirectory()) walk(rel);
        else if (rel.endsWith(".ts") && rel !== path.join("bench", "knobs.ts")) files.push(rel);
      }
    };
    walk("bench");
    files.push("scripts/bench");
    return files.map((file) => ({ file, text: readFileSync(path.join(root, file), "utf8") }));
  }

  it("has a row for every KVMP_BENCH_* variable named in bench/ and scripts/bench", () => {
    const names = new Set(Object.values(knobs).map((k) => k.name));
    const missing = sources().flatMap(({ file, text }) =>
      [...text.matchAll(/\bKVMP_BENCH_[A-Z0-9_]*[A-Z0-9]\b/g)]
        .map((m) => m[0])
        .filter((n) => !names.has(n))
        .map((n) => `${file}: ${n}`),
    );
    expect(missing).toEqual([]);
  });

  it("is the only reader of KVMP_* variables in bench/", () => {
    const direct = sources()
      .filter(({ file }) => file.startsWith("bench"))
      .flatMap(({ file, text }) =>
        [...text.matchAll(/process\.env(?:\.|\[")(KVMP_\w+)/g)].map((m) => `${file}: ${m[1]}`),
      );
    expect(direct).toEqual([]);
  });

  it("shows the defaults scripts/bench uses", () => {
    const script = readFileSync(path.join(root, "scripts/bench"), "utf8");
    const byName = new Map(Object.values(knobs).map((k) => [k.name, k.shown]));
    // `${X:-}` only tests whether X is set; the others give a default.
    const defaults = [...script.matchAll(/\$\{(KVMP_BENCH_\w+):-([^}]+)\}/g)].map((m) => [m[1], m[2]]);
    expect(defaults.length).toBeGreaterThan(0);
    for (const [name, value] of defaults) expect([name, byName.get(name as string)]).toEqual([name, value]);
  });
});
