/**
 * The Pulumi CLI run INSIDE the test host's network namespace, asynchronously
 * (a CLI run waits on guest boots), so that what the provider sends to guest
 * addresses (health checks) stays in the namespace. Runs not finished when a
 * test ends are stopped by {@link NetnsCli.stopAll} (SIGINT, then SIGKILL).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { pulumiEnv, type RunResult, type Workspace } from "../pulumi/harness";

export class NetnsCli {
  private readonly running = new Set<ChildProcess>();
  /** More environment for the next runs (e.g. KVMP_TRACE_FILE). */
  extraEnv: Record<string, string> = {};

  constructor(
    private readonly netns: string,
    private readonly ws: Workspace,
  ) {}

  run(...args: string[]): Promise<RunResult> {
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
      child.once("close", (code) => {
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
