#!/usr/bin/env node
import { messageOf } from "../errors";
/**
 * The `pulumi-kvm-proxy` command (package.json "bin"): `gc`, the orphan
 * sweep; `status`, the stack's proxies read now; and `console`, a VM's boot
 * output. Exit codes: 0 done, 1 something could not be read or done, 2 bad
 * usage.
 */
import { GC_USAGE, parseGcArgs, UsageError } from "../gc/command-line";
import { formatJson, formatProblems, formatText } from "../gc/report";
import { exitCodeOf, runGc } from "../gc/sweep";
import { parseRetireArgs, RETIRE_USAGE, runRetire } from "../retire/retire-command";
import { runStatus } from "../status/collect";
import { parseStatusArgs, STATUS_USAGE } from "../status/status-command-line";
import { formatPrometheus, formatTable, formatJson as statusJson } from "../status/status-report";
import { CONSOLE_USAGE, parseConsoleArgs, runConsole } from "./console-command";

const USAGE = `Usage: pulumi-kvm-proxy <command> [options]

Commands:
  gc        list (and with --delete, delete) VMs whose owning stack no longer holds them
  status    the stack's proxies now: state, addresses, health, age, traffic and requests
  retire    replace a proxy at the next up (written to the stack config: kvm:retire)
  block     replace the proxy holding an address, and keep pools from handing it out (kvm:blockedAddresses)
  console   print a VM's boot output (cloud-init's log, or its serial console), secrets masked

Run \`pulumi-kvm-proxy <command> --help\` for a command's options.`;

type Out = (s: string) => void;
type Runner = (argv: readonly string[], out: Out, err: Out) => Promise<number>;

/**
 * A command: its options parsed (a UsageError prints the usage, exit 2),
 * `--help` answered, then run; any other failure prints its message (exit 1).
 */
function command<O extends { help: boolean }>(
  usage: string,
  parse: (argv: readonly string[], cwd: string) => O,
  run: (options: O, out: Out, err: Out) => Promise<number>,
): Runner {
  return async (argv, out, err) => {
    try {
      const options = parse(argv, process.cwd());
      if (options.help) {
        out(`${usage}\n`);
        return 0;
      }
      return await run(options, out, err);
    } catch (e) {
      const msg = messageOf(e);
      if (e instanceof UsageError) {
        err(`error: ${msg}\n\n${usage}\n`);
        return 2;
      }
      err(`error: ${msg}\n`);
      return 1;
    }
  };
}

/** `retire <proxy>` and `block <address>`: what the next up will do on stdout (exit 0), or why not (exit 1). */
const retireOrBlock = (kind: "retire" | "block") =>
  command(
    RETIRE_USAGE,
    (argv, cwd) => parseRetireArgs(kind, argv, cwd),
    async (options, out) => {
      out(`${await runRetire(options)}\n`);
      return 0;
    },
  );

const COMMANDS: Readonly<Record<string, Runner>> = {
  gc: command(GC_USAGE, parseGcArgs, async (options, out, err) => {
    const report = await runGc(options);
    out(options.json ? formatJson(report) : formatText(report));
    err(formatProblems(report.problems));
    return exitCodeOf(report);
  }),
  // The report in the form asked; what could not be read on stderr too (exit 1).
  status: command(STATUS_USAGE, parseStatusArgs, async (options, out, err) => {
    const report = await runStatus(options);
    const form = { table: formatTable, json: statusJson, prometheus: formatPrometheus }[options.format];
    out(form(report));
    const unread = [
      ...report.proxies.flatMap((p) => p.problems.map((m) => `${p.name}: ${m}`)),
      ...report.problems.map((p) => `${p.subject}: ${p.message}`),
    ];
    if (options.format !== "table") for (const line of unread) err(`error: ${line}\n`);
    return unread.length > 0 || report.proxies.some((p) => p.state === "unknown") ? 1 : 0;
  }),
  retire: retireOrBlock("retire"),
  block: retireOrBlock("block"),
  // The lines on stdout (exit 0), or why there are none on stderr (exit 1).
  console: command(CONSOLE_USAGE, parseConsoleArgs, async (options, out, err) => {
    const r = await runConsole(options);
    if (!r.ok) {
      err(`error: ${r.reason}\n`);
      return 1;
    }
    out(`${r.lines.join("\n")}\n`);
    return 0;
  }),
};

/** Runs the command line `argv` (without node and the script); resolves to the exit code. */
export async function main(argv: readonly string[], out: Out, err: Out): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    out(`${USAGE}\n`);
    return name === undefined ? 2 : 0;
  }
  const run = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (run === undefined) {
    err(`error: unknown command ${JSON.stringify(name)}\n${USAGE}\n`);
    return 2;
  }
  return run(rest, out, err);
}

if (require.main === module) {
  main(
    process.argv.slice(2),
    (s) => process.stdout.write(s),
    (s) => process.stderr.write(s),
  ).then(
    (code) => {
      process.exitCode = code;
    },
    (e) => {
      process.stderr.write(`error: ${messageOf(e)}\n`);
      process.exitCode = 1;
    },
  );
}
