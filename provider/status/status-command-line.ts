/**
 * Command-line options of `pulumi-kvm-proxy status`, parsed with node:util
 * parseArgs (strict: unknown flags are usage errors, never ignored).
 */
import { parseArgs } from "node:util";
import { messageOf } from "../errors";
import { UsageError } from "../gc/command-line";

/** What status was asked to print. */
export interface StatusCommand {
  cwd: string;
  stack?: string;
  format: "table" | "json" | "prometheus";
  help: boolean;
}

export const STATUS_USAGE = `Usage: pulumi-kvm-proxy status [options]

Reads the stack's proxies (KvmProxy resources, ProxyFleet members included)
and asks their hosts and guests now: one row per proxy with its host, state,
addresses, egress address, health (probed now), age, when its rotation is
due, the bytes through its NICs since its VM started, and the requests its
squid answered since the boot by status class. Writes nothing: not the
state, not the hosts. Run it in the Pulumi project folder.

Options:
  --stack <name>   the stack to read (default: the current stack)
  --cwd <dir>      the Pulumi project folder (default: .)
  --json           print one JSON document instead of a table
  --prometheus     print Prometheus' text format (for a textfile collector)
  -h, --help       show this help

Exit codes: 0 every proxy was read (whatever its health); 1 something could
not be read (the stack, a host, a VM, a counter) — the rest is still
printed; 2 bad usage.`;

/** Parses status's arguments (those after `status`). Throws UsageError. */
export function parseStatusArgs(argv: readonly string[], defaultCwd: string): StatusCommand {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        stack: { type: "string", short: "s" },
        cwd: { type: "string", short: "C" },
        json: { type: "boolean" },
        prometheus: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new UsageError(messageOf(err));
  }
  if (values.json === true && values.prometheus === true) {
    throw new UsageError("--json and --prometheus are two forms of one output: give one");
  }
  const stack = values.stack as string | undefined;
  if (stack === "") throw new UsageError("--stack must not be empty");
  return {
    cwd: (values.cwd as string | undefined) ?? defaultCwd,
    ...(stack !== undefined ? { stack } : {}),
    format: values.json === true ? "json" : values.prometheus === true ? "prometheus" : "table",
    help: values.help === true,
  };
}
