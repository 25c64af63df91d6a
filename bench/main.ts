/**
 * Entry point of `npm run bench` (scripts/bench compiles this into dist-bench/
 * and runs it): runs the figures KVMP_BENCH_ONLY selects, merges them into the
 * raw results (.state/bench/results.json, keeping the other parts' last
 * results) and writes the report (docs/contributing/benchmarks.md) from all of them.
 * Re-rendering alone (KVMP_BENCH_RENDER_ONLY) is bench/render.ts, which
 * scripts/bench runs instead, without a test host.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { benchDir, config, log, repoRoot, selected } from "./common";
import { benchFirstBoot } from "./first-boot";
import { benchFleet } from "./fleet";
import { benchReady } from "./ready";
import type { Part, Results } from "./report";
import { loadResults, renderSaved, saveResults, writeReport } from "./results";
import { benchRpc } from "./rpc";
import { benchScale } from "./scale";
import { benchUpload } from "./upload";

/** stdout and stderr of a command (ssh -V prints to stderr). */
function cmdOutput(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return `${r.stdout ?? ""}${r.stderr ?? ""}`.trim();
}

function versionOf(cmd: string, args: string[]): string {
  const out = execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return out.trim().split("\n")[0] ?? "?";
}

const loadavg = (): string =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(" / ");

/** Processes using more than 10% of a CPU right now, other than ours: the neighbours. */
function busyNeighbours(): string {
  const ps = cmdOutput("ps", ["-eo", "pid,pcpu,comm", "--sort=-pcpu", "--no-headers"]);
  const busy = ps
    .split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter(([pid, pcpu]) => Number(pcpu) > 10 && Number(pid) !== process.pid)
    .map(([, pcpu, comm]) => `${comm} ${pcpu}%`);
  return busy.length
    ? `Busy processes at the end (ps %CPU over their lifetime): ${busy.slice(0, 8).join(", ")}.`
    : "";
}

async function main(): Promise<void> {
  mkdirSync(benchDir, { recursive: true });
  if (config.renderOnly) {
    // scripts/bench runs render.js for this; here only if main.js is run by hand.
    renderSaved(config);
    log(`re-rendered ${config.out} from ${config.results}`);
    return;
  }
  const started = new Date();
  const loadBefore = loadavg();
  const loadSamples: number[] = [os.loadavg()[0] as number];
  const sampler = setInterval(() => loadSamples.push(os.loadavg()[0] as number), 10_000);
  sampler.unref();
  log(`config ${JSON.stringify(config)}; load ${loadBefore}`);

  // Parts not run now keep their last results, so partial runs merge into one report.
  const saved = loadResults(config.results);
  const results: Partial<Results> = {
    ...(saved ?? {}),
    ranAt: { ...(saved?.ranAt ?? {}) },
  };
  const stamp = (part: Part) => {
    (results.ranAt as Record<string, string>)[part] = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  };
  // In this order; each part's results replace its last ones.
  const parts: { [P in Part]: () => Promise<NonNullable<Results[P]>> } = {
    rpc: benchRpc,
    upload: benchUpload,
    scale: benchScale,
    fleet: benchFleet,
    ready: benchReady,
    firstboot: benchFirstBoot,
  };
  try {
    for (const part of Object.keys(parts) as Part[]) {
      if (!selected(part)) continue;
      (results as Record<Part, unknown>)[part] = await parts[part]();
      stamp(part);
    }
  } finally {
    clearInterval(sampler);
  }
  const finished = new Date();
  loadSamples.push(os.loadavg()[0] as number);

  const ssh2Version = (
    JSON.parse(readFileSync(path.join(repoRoot, "node_modules/ssh2/package.json"), "utf8")) as {
      version: string;
    }
  ).version;
  results.env = {
    startedAt: started.toISOString().replace(/\.\d+Z$/, "Z"),
    finishedAt: finished.toISOString().replace(/\.\d+Z$/, "Z"),
    durationSeconds: (finished.getTime() - started.getTime()) / 1000,
    loadBefore,
    loadAfter: loadavg(),
    loadSamples,
    cpus: os.cpus().length,
    node: process.version,
    libvirt: versionOf("virsh", ["--version"]),
    openssh: cmdOutput("ssh", ["-V"]).split(",")[0] ?? "OpenSSH",
    ssh2: ssh2Version,
    otherProcesses: busyNeighbours(),
  };
  const full = results as Results;
  saveResults(config.results, config, full);
  writeReport(full, config);
  log(`wrote ${config.out} in ${full.env.durationSeconds.toFixed(0)} s; load ${full.env.loadAfter}`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
