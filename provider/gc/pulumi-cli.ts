/**
 * Runs the user's Pulumi CLI (`pulumi` on PATH) in the project folder, with
 * the caller's environment (backend, passphrase, access token). Output is
 * captured, never echoed: `config --show-secrets` prints decrypted secrets.
 */
import { execFile } from "node:child_process";
import { ProviderError } from "../errors";

/** An argument as a message quotes it: a long one (a config map as JSON) cut to its start. */
function shortened(arg: string): string {
  return arg.length > 80 ? `${arg.slice(0, 60)}... (${arg.length} characters)` : arg;
}

/** A Pulumi CLI command that failed to run or exited non-zero. Permanent. */
export class PulumiCliError extends ProviderError {
  readonly args: readonly string[];
  readonly exitCode: number | undefined;

  constructor(args: readonly string[], exitCode: number | undefined, detail: string) {
    super(
      "permanent",
      `pulumi ${args.map(shortened).join(" ")} failed${exitCode !== undefined ? ` (exit ${exitCode})` : ""}: ${detail}`,
    );
    this.args = args;
    this.exitCode = exitCode;
  }
}

/** The longest one Pulumi CLI command may take, ms (a large stack's export over a slow backend). */
export const CLI_TIMEOUT_MS = 10 * 60_000;

/** Runs `pulumi <args>` and returns its stdout. */
export type PulumiRunner = (args: readonly string[]) => Promise<string>;

/** A runner for the CLI in `cwd`. Errors carry the CLI's stderr only (stdout may hold secrets). */
export function pulumiRunner(cwd: string, bin = "pulumi"): PulumiRunner {
  return (args) =>
    new Promise((resolve, reject) => {
      execFile(
        bin,
        // The global flags first: after a command's `--` they would be taken as its arguments.
        ["--non-interactive", "--color", "never", ...args],
        // Bounded: a command that waited on input or on a wedged backend would hold a cron job for ever.
        { cwd, encoding: "utf8", maxBuffer: 256 * 1024 * 1024, env: process.env, timeout: CLI_TIMEOUT_MS },
        (err, stdout, stderr) => {
          if (err === null) {
            resolve(stdout);
            return;
          }
          const code = typeof err.code === "number" ? err.code : undefined;
          const detail =
            err.code === "ENOENT"
              ? `${bin} not found: install the Pulumi CLI or put it on PATH`
              : stderr.trim() !== ""
                ? stderr.trim()
                : err.message.split("\n")[0];
          reject(new PulumiCliError(args, code, detail ?? "no output"));
        },
      );
    });
}
