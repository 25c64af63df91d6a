/**
 * `pulumi-kvm-proxy retire <proxy>` and `pulumi-kvm-proxy block <address>`:
 * the shortcuts that write `kvm:retire` and `kvm:blockedAddresses` into the
 * stack config (resource/retirement.ts), where they stay reviewable, after
 * checking that the stack has such a proxy or address. They replace
 * nothing themselves: the next `pulumi preview` shows the replacement and
 * why, the next `pulumi up` makes it.
 */
import { parseArgs } from "node:util";
import { messageOf } from "../errors";
import { UsageError } from "../gc/command-line";
import { type PulumiRunner, pulumiRunner } from "../gc/pulumi-cli";
import { currentStack } from "../gc/pulumi-json";
import { parseDuration } from "../kvm/duration";
import { inPool } from "../kvm/network/address-pool";
import { canonicalIp } from "../kvm/network/ip";
import { decodeState } from "../resource/recorded-state";
import { addressesHeld, reasonProblem } from "../resource/retirement";
import { stackProxies } from "../status/stack-proxies";

/** What was asked. */
export interface RetireCommand {
  kind: "retire" | "block";
  /** The proxy's name (retire) or the address (block). */
  target: string;
  reason: string;
  /** block: for how long, seconds. */
  forSeconds?: number;
  stack?: string;
  cwd: string;
  help: boolean;
}

export const RETIRE_USAGE = `Usage: pulumi-kvm-proxy retire <proxy> --reason <text> [options]
       pulumi-kvm-proxy block <address> --reason <text> --for <duration> [options]

retire: the proxy of that name (a KvmProxy, or a ProxyFleet member such as
edge-2) is replaced at the next \`pulumi up\`; its replacement is made first.
Written to the stack config as kvm:retire.<proxy> = {reason, before: now}.

block: the proxy holding the address (a NIC's, or the egress address its
check saw) is replaced at the next \`pulumi up\`, and no address pool hands
the address out for the duration (e.g. 7d, 12h). Written to the stack config
as kvm:blockedAddresses.<address> = {reason, until}.

Either checks first that the stack has such a proxy or address, and prints
what the next \`up\` will do; \`pulumi preview\` shows it with the reason.
(kvmproxy: instead of kvm: for a stack whose config uses the plugin's namespace.)

Options:
  --reason <text>    why (one line, shown at preview)
  --for <duration>   block: how long the address stays out of service
  --stack <name>     the stack (default: the current stack)
  --cwd <dir>        the Pulumi project folder (default: .)
  -h, --help         show this help

Exit codes: 0 written; 1 the stack could not be read or has no such proxy or
address; 2 bad usage.`;

/** Parses the arguments after `retire` or `block`. Throws UsageError. */
export function parseRetireArgs(
  kind: "retire" | "block",
  argv: readonly string[],
  cwd: string,
): RetireCommand {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: true,
      options: {
        reason: { type: "string" },
        for: { type: "string" },
        stack: { type: "string", short: "s" },
        cwd: { type: "string", short: "C" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new UsageError(messageOf(err));
  }
  const base = { kind, cwd: (values.cwd as string | undefined) ?? cwd };
  if (values.help === true) return { ...base, target: "", reason: "", help: true };
  if (positionals.length !== 1) {
    throw new UsageError(`${kind} takes one ${kind === "retire" ? "proxy name" : "address"}`);
  }
  const target = positionals[0] as string;
  const reason = (values.reason as string | undefined) ?? "";
  const problem = reasonProblem(reason);
  if (problem !== undefined) throw new UsageError(`--reason ${problem}`);
  const stack = values.stack as string | undefined;
  if (stack === "") throw new UsageError("--stack must not be empty");
  let forSeconds: number | undefined;
  if (kind === "block") {
    const address = canonicalIp(target);
    if (address === undefined)
      throw new UsageError(`${JSON.stringify(target)} is not an IPv4 or IPv6 address`);
    const text = values.for as string | undefined;
    forSeconds = text === undefined ? undefined : parseDuration(text);
    if (forSeconds === undefined || forSeconds <= 0) {
      throw new UsageError(
        "--for must be a duration such as 7d or 12h: how long the address stays out of service",
      );
    }
    return {
      ...base,
      target: address,
      reason,
      forSeconds,
      ...(stack !== undefined ? { stack } : {}),
      help: false,
    };
  }
  if (values.for !== undefined) throw new UsageError("--for applies to block only");
  return { ...base, target, reason, ...(stack !== undefined ? { stack } : {}), help: false };
}

/** Injectable edges (tests drive the real CLI). */
export interface RetireDeps {
  pulumi?: PulumiRunner;
  now?: () => Date;
}

/** The stack's config namespace: the plugin's when its config uses it, else the dynamic provider's. */
function namespaceOf(configJson: string): "kvm" | "kvmproxy" {
  const keys = Object.keys(JSON.parse(configJson) as Record<string, unknown>);
  return keys.some((k) => k.startsWith("kvmproxy:")) && !keys.some((k) => k.startsWith("kvm:"))
    ? "kvmproxy"
    : "kvm";
}

/** Checks the target against the stack, writes the entry; resolves to what the next `up` will do. */
export async function runRetire(o: RetireCommand, deps: RetireDeps = {}): Promise<string> {
  const pulumi = deps.pulumi ?? pulumiRunner(o.cwd);
  const stack = o.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");
  // Names and addresses are no secrets: the export without them serves.
  const proxies = stackProxies(await pulumi(["stack", "export", "--stack", stack]));
  const ns = namespaceOf(await pulumi(["config", "--json", "--stack", stack]));
  const now = (deps.now ?? (() => new Date()))();
  const set = async (path: string, value: string) =>
    pulumi(["config", "set", "--stack", stack, "--path", "--type", "string", path, value]);

  if (o.kind === "retire") {
    if (!proxies.some((p) => p.name === o.target)) {
      const names = proxies.map((p) => p.name).join(", ") || "none";
      throw new Error(
        `stack ${stack} has no proxy named ${JSON.stringify(o.target)} (its proxies: ${names})`,
      );
    }
    const key = `${ns}:retire[${JSON.stringify(o.target)}]`;
    await set(`${key}.reason`, o.reason);
    await set(`${key}.before`, now.toISOString());
    return `${key} set: the next \`pulumi up\` replaces ${o.target} (its replacement made first): ${o.reason}`;
  }

  const holders = proxies.filter((p) => addressesHeld(decodeState(p.outputs)).includes(o.target));
  const pools = proxies.filter((p) =>
    (decodeState(p.outputs).nics ?? []).some(
      (n) => n.addressPool !== undefined && inPool(n.addressPool, o.target),
    ),
  );
  if (holders.length === 0 && pools.length === 0) {
    throw new Error(
      `no proxy of stack ${stack} holds ${o.target} or takes addresses from a pool that has it: nothing to block`,
    );
  }
  const until = new Date(now.getTime() + (o.forSeconds as number) * 1000).toISOString();
  const key = `${ns}:blockedAddresses[${JSON.stringify(o.target)}]`;
  await set(`${key}.reason`, o.reason);
  await set(`${key}.until`, until);
  const who =
    holders.length > 0
      ? `replaces ${holders.map((p) => p.name).join(", ")} (its replacement made first), and `
      : "";
  return `${key} set: the next \`pulumi up\` ${who}no address pool hands ${o.target} out until ${until}: ${o.reason}`;
}
