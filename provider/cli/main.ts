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

/** Runs the command line `argv` (without node and the script); resolves to the exit code. */
export async function main(
  argv: readonly string[],
  out: (s: string) => void,
  err: (s: string) => void,
): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "help" || command === "--help" || command === "-h") {
    out(`${USAGE}\n`);
    return command === undefined ? 2 : 0;
  }
  if (command === "console") return consoleCommand(rest, out, err);
  if (command === "status") return statusCommand(rest, out, err);
  if (command === "retire" || command === "block") return retireCommand(command, rest, out, err);
  if (command !== "gc") {
    err(`error: unknown command ${JSON.stringify(command)}\n${USAGE}\n`);
    return 2;
  }
  try {
    const options = parseGcArgs(rest, process.cwd());
    if (options.help) {
      out(`${GC_USAGE}\n`);
      return 0;
    }
    const report = await runGc(options);
    out(options.json ? formatJson(report) : formatText(report));
    err(formatProblems(report.problems));
    return exitCodeOf(report);
  } catch (e) {
    const msg = messageOf(e);
    if (e instanceof UsageError) {
      err(`error: ${msg}\n\n${GC_USAGE}\n`);
      return 2;
    }
    err(`error: ${msg}\n`);
    return 1;
  }
}

/** `status`: the report on stdout in the form asked; what could not be read on stderr too (exit 1). */
async function statusCommand(
  argv: readonly string[],
  out: (s: string) => void,
  err: (s: string) => void,
): Promise<number> {
  try {
    const options = parseStatusArgs(argv, process.cwd());
    if (options.help) {
      out(`${STATUS_USAGE}\n`);
      return 0;
    }
    const report = await runStatus(options);
    const form = { table: formatTable, json: statusJson, prometheus: formatPrometheus }[options.format];
    out(form(report));
    const unread = [
      ...report.proxies.flatMap((p) => p.problems.map((m) => `${p.name}: ${m}`)),
      ...report.problems.map((p) => `${p.subject}: ${p.message}`),
    ];
    if (options.format !== "table") for (const line of unread) err(`error: ${line}\n`);
    return unread.length > 0 || report.proxies.some((p) => p.state === "unknown") ? 1 : 0;
  } catch (e) {
    const msg = messageOf(e);
    if (e instanceof UsageError) {
      err(`error: ${msg}\n\n${STATUS_USAGE}\n`);
      return 2;
    }
    err(`error: ${msg}\n`);
    return 1;
  }
}

/** `retire <proxy>` and `block <address>`: what the next up will do on stdout (exit 0), or why not (exit 1). */
async function retireCommand(
  kind: "retire" | "block",
  argv: readonly string[],
  out: (s: string) => void,
  err: (s: string) => void,
): Promise<number> {
  try {
    const options = parseRetireArgs(kind, argv, process.cwd());
    if (options.help) {
      out(`${RETIRE_USAGE}\n`);
      return 0;
    }
    out(`${await runRetire(options)}\n`);
    return 0;
  } catch (e) {
    const msg = messageOf(e);
    if (e instanceof UsageError) {
      err(`error: ${msg}\n\n${RETIRE_USAGE}\n`);
      return 2;
    }
    err(`error: ${msg}\n`);
    return 1;
  }
}

/** `console <host> <domain>`: the lines on stdout (exit 0), or why there are none on stderr (exit 1). */
async function consoleCommand(
  argv: readonly string[],
  out: (s: string) => void,
  err: (s: string) => void,
): Promise<number> {
  try {
    const options = parseConsoleArgs(argv, process.cwd());
    if (options.help) {
      out(`${CONSOLE_USAGE}\n`);
      return 0;
    }
    const r = await runConsole(options);
    if (!r.ok) {
      err(`error: ${r.reason}\n`);
      return 1;
    }
    out(`${r.lines.join("\n")}\n`);
    return 0;
  } catch (e) {
    const msg = messageOf(e);
    if (e instanceof UsageError) {
      err(`error: ${msg}\n\n${CONSOLE_USAGE}\n`);
      return 2;
    }
    err(`error: ${msg}\n`);
    return 1;
  }
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
