/**
 * `pulumi-kvm-proxy console <host> <domain>`: what a VM says about its boot,
 * printed once, secrets masked; for a VM that `keepOnFailure` kept after a
 * failed create. The lines come the way a create's error gets them
 * (kvm/host/inspect.ts): cloud-init's output through the guest agent, else
 * what the serial console prints while the command listens. The host is a
 * key of the stack config's `kvm:hosts`, read through the Pulumi CLI as gc
 * reads it.
 */
import { parseArgs } from "node:util";
import { messageOf } from "../errors";
import { UsageError } from "../gc/command-line";
import { type PulumiRunner, pulumiRunner } from "../gc/pulumi-cli";
import { configReader, currentStack } from "../gc/pulumi-json";
import { parseDuration } from "../kvm/duration";
import { HostPool } from "../kvm/host/hosts";
import { consoleOutputText } from "../kvm/host/inspect";
import { KvmOperations } from "../kvm/host/operations";
import { secretStrings } from "../resource/hosts-in-full";
import { readStackConfig } from "../resource/stack-config";
import { sleep } from "../timers";

/** Default `--listen`: how long the serial console is read when no agent answers. */
export const DEFAULT_LISTEN = "10s";

export const CONSOLE_USAGE = `Usage: pulumi-kvm-proxy console <host> <domain> [options]

Prints what VM <domain> on host <host> (a key of the stack config's kvm:hosts)
says about its boot, secrets masked: the last lines of cloud-init's output,
read through its guest agent, or, when no agent answers, what its serial
console prints within --listen. For a VM kept after a failed create
(keepOnFailure). Run it in the Pulumi project folder.

Options:
  --stack <name>      stack whose config provides kvm:hosts (default: the current stack)
  --cwd <dir>         the Pulumi project folder (default: .)
  --listen <dur>      how long to read the serial console without an agent (default: ${DEFAULT_LISTEN})
  -h, --help          show this help

For the console itself, interactively: virsh -c qemu+ssh://<user>@<host>/system console <domain>
(Ctrl+] leaves it).

Exit codes: 0 printed; 1 the host, the VM or its output could not be had; 2 bad usage.`;

/** What console was asked to do. */
export interface ConsoleOptions {
  host: string;
  domain: string;
  cwd: string;
  stack?: string;
  listenMs: number;
  help: boolean;
}

/** Parses console's arguments (those after `console`). Throws UsageError. */
export function parseConsoleArgs(argv: readonly string[], defaultCwd: string): ConsoleOptions {
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: true,
      options: {
        stack: { type: "string", short: "s" },
        cwd: { type: "string", short: "C" },
        listen: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (err) {
    throw new UsageError(messageOf(err));
  }
  const { values, positionals } = parsed;
  const help = values.help === true;
  const [host, domain, ...extra] = positionals;
  if (!help && (host === undefined || domain === undefined || extra.length > 0)) {
    throw new UsageError(
      "give the host (a key of kvm:hosts) and the domain, e.g. `console lab edge-1a2b3c4d`",
    );
  }
  const listenText = (values.listen as string | undefined) ?? DEFAULT_LISTEN;
  const listen = parseDuration(listenText);
  if (listen === undefined || listen < 0) {
    throw new UsageError(`--listen ${JSON.stringify(listenText)} is not a duration such as 5s or 1m`);
  }
  const stack = values.stack as string | undefined;
  if (stack === "") throw new UsageError("--stack must not be empty");
  return {
    host: host ?? "",
    domain: domain ?? "",
    cwd: (values.cwd as string | undefined) ?? defaultCwd,
    ...(stack !== undefined ? { stack } : {}),
    listenMs: listen * 1000,
    help,
  };
}

/** What console printed: the lines, or why there are none. */
export type ConsoleOutcome = { ok: true; lines: string[] } | { ok: false; reason: string };

/** Injectable edges (tests drive the real ones). */
export interface ConsoleDeps {
  pulumi?: PulumiRunner;
}

/** Reads the VM's lines. Throws when the stack config or the host cannot be had. */
export async function runConsole(options: ConsoleOptions, deps: ConsoleDeps = {}): Promise<ConsoleOutcome> {
  const pulumi = deps.pulumi ?? pulumiRunner(options.cwd);
  const stack = options.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");
  const read = configReader(await pulumi(["config", "--json", "--show-secrets", "--stack", stack]));
  const config = readStackConfig(read);
  const host = config.hosts[options.host];
  if (host === undefined) {
    const failures = config.hostFailures[options.host];
    const why =
      failures !== undefined
        ? `is misconfigured: ${failures.map((f) => `${f.property}: ${f.reason}`).join("; ")}`
        : `is not in kvm:hosts of stack ${stack} (its keys: ${Object.keys(config.hosts).join(", ") || "none"}); ` +
          "for a host given in full in the program, use virsh";
    throw new Error(`host ${JSON.stringify(options.host)} ${why}`);
  }
  const secrets = secretStrings(Object.values(config.hosts), read("kvm:sshPrivateKey"));
  const ops = new KvmOperations(new HostPool({ [host.key]: host }));
  const how = ops.inspectCommands(host.key, options.domain);
  try {
    const status = await ops.get(host.key, options.domain);
    if (status.state === "absent") {
      return { ok: false, reason: `no domain ${options.domain} on host ${host.key}` };
    }
    const header = `${options.domain} on host ${host.key}: ${status.state}`;
    const fromAgent = await ops.guestOutput(host.key, options.domain, secrets, undefined);
    if (fromAgent.length > 0) return { ok: true, lines: [header, ...fromAgent] };
    // No agent: the console gives what it prints from now on, nothing of before.
    const tail = await ops.openConsole(host.key, options.domain, status.uuid);
    if (tail === undefined) {
      return {
        ok: false,
        reason: `the guest agent does not answer and the serial console cannot be opened (the VM does not run, or another client holds it); interactively: ${how.console}`,
      };
    }
    try {
      await sleep(options.listenMs);
    } finally {
      await tail.stop();
    }
    const lines = consoleOutputText(tail.text(), secrets);
    if (lines.length === 0) {
      return {
        ok: false,
        reason: `the guest agent does not answer and the serial console printed nothing in ${options.listenMs / 1000}s; interactively: ${how.console}`,
      };
    }
    return { ok: true, lines: [header, ...lines] };
  } finally {
    await ops.hosts.closeAll();
  }
}
