/**
 * Command-line options of `pulumi-kvm-proxy gc`, parsed with node:util
 * parseArgs (strict: unknown flags are usage errors, never ignored).
 */
import { parseArgs } from "node:util";
import { messageOf, ProviderError } from "../errors";
import { parseDuration } from "../kvm/duration";

/** Default `--min-age`: longer than any create's default deadline (10m) plus slack. */
export const DEFAULT_MIN_AGE = "15m";

/** What gc was asked to do. */
export interface GcOptions {
  /** The Pulumi project folder. */
  cwd: string;
  /** The stack whose config names the hosts; undefined = the current stack. */
  stack?: string;
  minAgeMs: number;
  allProjects: boolean;
  /** Delete the orphans found (default: only list them). */
  delete: boolean;
  json: boolean;
  help: boolean;
}

/** Bad command line. Permanent; the CLI exits 2. */
export class UsageError extends ProviderError {
  constructor(message: string) {
    super("permanent", message);
  }
}

export const GC_USAGE = `Usage: pulumi-kvm-proxy gc [options]

Lists VMs managed by pulumi-kvm-proxy whose owning stack no longer holds them
(orphans), on every host in the stack config's kvm:hosts. Lists only, unless
--delete is given. Run it in the Pulumi project folder.

Options:
  --stack <name>      stack whose config provides kvm:hosts (default: the current stack)
  --cwd <dir>         the Pulumi project folder (default: .)
  --min-age <dur>     skip orphans younger than this, e.g. 30s, 15m, 2h (default: ${DEFAULT_MIN_AGE})
  --all-projects      judge VMs of other Pulumi projects too (default: only this project's)
  --delete            delete the orphans listed (each VM and its disk and seed volumes)
  --json              print one JSON document instead of a table
  -h, --help          show this help

Exit codes: 0 done; 1 something could not be read or deleted (a host, a stack,
a VM's metadata) — the rest is still reported; 2 bad usage.`;

/** Parses gc's arguments (those after `gc`). Throws UsageError. */
export function parseGcArgs(argv: readonly string[], defaultCwd: string): GcOptions {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        stack: { type: "string", short: "s" },
        cwd: { type: "string", short: "C" },
        "min-age": { type: "string" },
        "all-projects": { type: "boolean" },
        delete: { type: "boolean" },
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new UsageError(messageOf(err));
  }
  const minAgeText = (values["min-age"] as string | undefined) ?? DEFAULT_MIN_AGE;
  const minAge = parseDuration(minAgeText);
  if (minAge === undefined || minAge < 0) {
    throw new UsageError(`--min-age ${JSON.stringify(minAgeText)} is not a duration such as 30s, 15m or 2h`);
  }
  const stack = values.stack as string | undefined;
  if (stack === "") throw new UsageError("--stack must not be empty");
  return {
    cwd: (values.cwd as string | undefined) ?? defaultCwd,
    ...(stack !== undefined ? { stack } : {}),
    minAgeMs: minAge * 1000,
    allProjects: values["all-projects"] === true,
    delete: values.delete === true,
    json: values.json === true,
    help: values.help === true,
  };
}
