/**
 * Entry point of `npm run bench` (scripts/bench compiles this into dist-bench/
 * and runs it): runs the figures, writes the raw samples to
 * .state/bench/results.json and the report to docs/benchmarks.md.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { benchDir, config, log, repoRoot } from "./common";
import { type Environment, render } from "./report";
import { benchRpc, type RpcResults } from "./rpc";
import { benchUpload, type UploadResults } from "./upload";

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

function writeReport(env: Environment, rpc: RpcResults | undefined, upload: UploadResults | undefined): void {
  const notesFile = path.join(repoRoot, "bench/notes.md");
  const notes = existsSync(notesFile) ? readFileSync(notesFile, "utf8") : "";
  writeFileSync(config.out, render(env, rpc, upload, notes));
}

/** KVMP_BENCH_RENDER_ONLY=1: rewrite the report from the last run's results.json (after editing notes.md). */
function renderOnly(): void {
  const saved = JSON.parse(readFileSync(path.join(benchDir, "results.json"), "utf8")) as {
    env: Environment;
    rpc?: RpcResults;
    upload?: UploadResults;
  };
  writeReport(saved.env, saved.rpc, saved.upload);
  log(`re-rendered ${config.out} from ${path.join(benchDir, "results.json")}`);
}

async function main(): Promise<void> {
  mkdirSync(benchDir, { recursive: true });
  if (process.env.KVMP_BENCH_RENDER_ONLY) {
    renderOnly();
    return;
  }
  const started = new Date();
  const loadBefore = loadavg();
  const loadSamples: number[] = [os.loadavg()[0] as number];
  const sampler = setInterval(() => loadSamples.push(os.loadavg()[0] as number), 10_000);
  sampler.unref();
  log(`config ${JSON.stringify(config)}; load ${loadBefore}`);

  let rpc: RpcResults | undefined;
  let upload: UploadResults | undefined;
  try {
    if (config.only === "all" || config.only === "rpc") rpc = await benchRpc();
    if (config.only === "all" || config.only === "upload") upload = await benchUpload();
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
  const env: Environment = {
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
  writeFileSync(
    path.join(benchDir, "results.json"),
    `${JSON.stringify({ config, env, rpc, upload }, null, 2)}\n`,
  );
  writeReport(env, rpc, upload);
  log(`wrote ${config.out} in ${env.durationSeconds.toFixed(0)} s; load ${env.loadAfter}`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
