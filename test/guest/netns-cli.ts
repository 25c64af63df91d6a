/**
 * The Pulumi CLI run INSIDE the test host's network namespace, asynchronously
 * (a CLI run waits on guest boots), so that what the provider sends to guest
 * addresses (health checks) stays in the namespace. Runs not finished when a
 * test ends are stopped by {@link NetnsCli.stopAll} (SIGINT, then SIGKILL).
 */
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { pulumiEnv, type RunResult, type Workspace } from "../pulumi/harness";
import { watchWhile } from "../support/wait-until";
import { engineProgress } from "./engine-progress";
import type { GuestProgress } from "./support";

/** How a watched run knows it still moves, and when it gives up. */
export interface CliWatch {
  /**
   * The guests the run makes or waits on (their consoles left to the
   * provider), or a function naming them at each look (members whose names
   * the run picks).
   */
  guests: readonly GuestProgress[] | (() => readonly GuestProgress[]);
  /** Fail (and interrupt the CLI) when neither its events nor the guests changed for this long. */
  stallMs: number;
  /** Fail at this long whatever the progress: far above a normal run. */
  ceilingMs: number;
}

export class NetnsCli {
  private readonly running = new Set<ChildProcess>();
  /** More environment for the next runs (e.g. KVMP_TRACE_FILE). */
  extraEnv: Record<string, string> = {};

  constructor(
    private readonly netns: string,
    private readonly ws: Workspace,
  ) {}

  run(...args: string[]): Promise<RunResult> {
    return this.start(args);
  }

  /**
   * {@link run}, watched: fails with the wait's error (and interrupts the
   * CLI, SIGINT, then SIGKILL after a minute) when for `watch.stallMs`
   * neither the engine's events (its event log, the provider's status lines
   * without their elapsed times) nor any of `watch.guests` changed, or at
   * `watch.ceilingMs`. Adds `--event-log` unless `args` has one.
   */
  async watched(args: string[], watch: CliWatch): Promise<RunResult> {
    const given = args.indexOf("--event-log");
    const eventLog =
      given >= 0
        ? (args[given + 1] as string)
        : path.join(this.ws.dir, `watched-${++this.watchedRuns}.jsonl`);
    const all = given >= 0 ? args : [...args, "--event-log", eventLog];
    return watchWhile((signal) => this.start(all, signal), {
      what: `pulumi ${args.join(" ")} to finish`,
      progress: async () => ({
        events: engineProgress(eventLog),
        guests: await Promise.all(
          (typeof watch.guests === "function" ? watch.guests() : watch.guests).map((g) => g.read()),
        ),
      }),
      stallMs: watch.stallMs,
      ceilingMs: watch.ceilingMs,
      pollMs: 5_000,
    });
  }

  /** {@link watched}, throwing with the whole output unless the exit code is 0. */
  async mustWatched(args: string[], watch: CliWatch): Promise<RunResult> {
    const r = await this.watched(args, watch);
    if (r.code !== 0) throw new Error(`pulumi ${args.join(" ")} exited ${r.code}:\n${r.output}`);
    return r;
  }

  private watchedRuns = 0;

  private start(args: string[], signal?: AbortSignal): Promise<RunResult> {
    return new Promise((resolve, reject) => {
      const child = spawn(
        "ip",
        [
          ...["netns", "exec", this.netns, "pulumi", ...args],
          ...["--stack", this.ws.stack, "--non-interactive", "--color", "never"],
        ],
        {
          cwd: this.ws.dir,
          // PULUMI_DEBUG_COMMANDS enables --event-log.
          env: {
            ...pulumiEnv(),
            PULUMI_BACKEND_URL: `file://${this.ws.backend}`,
            PULUMI_DEBUG_COMMANDS: "true",
            ...this.extraEnv,
          },
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      this.running.add(child);
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => {
        stdout += d.toString();
      });
      child.stderr.on("data", (d: Buffer) => {
        stderr += d.toString();
      });
      child.once("error", reject);
      const interrupt = () => {
        if (child.pid === undefined) return;
        process.kill(child.pid, "SIGINT");
        setTimeout(
          () => child.exitCode === null && child.pid !== undefined && process.kill(child.pid, "SIGKILL"),
          60_000,
        ).unref();
      };
      signal?.addEventListener("abort", interrupt, { once: true });
      child.once("close", (code) => {
        signal?.removeEventListener("abort", interrupt);
        this.running.delete(child);
        resolve({ code: code ?? -1, stdout, stderr, output: `${stdout}\n${stderr}` });
      });
    });
  }

  /** Runs and throws with the whole output unless the exit code is 0. */
  async must(...args: string[]): Promise<RunResult> {
    const r = await this.run(...args);
    if (r.code !== 0) throw new Error(`pulumi ${args.join(" ")} exited ${r.code}:\n${r.output}`);
    return r;
  }

  /** Stops the runs still going: the CLI cancels gracefully on SIGINT; SIGKILL after a minute. */
  async stopAll(): Promise<void> {
    for (const child of this.running) {
      const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
      if (child.pid !== undefined) process.kill(child.pid, "SIGINT");
      const timer = setTimeout(() => child.pid !== undefined && process.kill(child.pid, "SIGKILL"), 60_000);
      await closed;
      clearTimeout(timer);
    }
  }
}
