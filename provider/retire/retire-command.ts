/**
 * `pulumi-kvm-proxy retire <proxy>` and `pulumi-kvm-proxy block <address>`:
 * the shortcuts that write `kvm:retire` and `kvm:blockedAddresses` into the
 * stack config (resource/retirement.ts), where they stay reviewable, after
 * checking that the stack has such a proxy or address. They replace
 * nothing themselves: the next `pulumi preview` shows the replacement and
 * why, the next `pulumi up` makes it.
 */
import { isDeepStrictEqual, parseArgs } from "node:util";
import { messageOf } from "../errors";
import { UsageError } from "../gc/command-line";
import { type PulumiRunner, pulumiRunner } from "../gc/pulumi-cli";
import { currentStack } from "../gc/pulumi-json";
import { parseDuration } from "../kvm/duration";
import { inPool } from "../kvm/network/address-pool";
import { canonicalIp } from "../kvm/network/ip";
import type { ValidationFailure } from "../kvm/validation";
import { decodeState } from "../resource/recorded-state";
import {
  addressesHeld,
  holdsAgainWhenReplaced,
  parseBlockedAddresses,
  parseRetirements,
  reasonProblem,
} from "../resource/retirement";
import { decodeConfigValue } from "../resource/stack-config";
import { PLUGIN_CONFIG_NAMESPACE } from "../schema/config-namespace";
import { type StackProxy, stackProxies } from "../status/stack-proxies";

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
as kvm:blockedAddresses.<address> = {reason, since: now, until}.

Either checks first that the stack has such a proxy or address, and prints
what the next \`up\` will do; \`pulumi preview\` shows it with the reason.
(kvmproxy: in place of kvm: for the provider plugin's proxies, in any language.)

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

/** The config namespace a proxy's door reads its entries from. */
function namespaceOf(p: StackProxy): "kvm" | "kvmproxy" {
  return p.door === "plugin" ? PLUGIN_CONFIG_NAMESPACE : "kvm";
}

/**
 * The map `key` holds now (`pulumi config --json`), to add an entry to: its
 * structured value, or the JSON text a `config set` without `--path` wrote
 * (the provider reads both). A secret or a value that is no map is refused:
 * writing the whole map back would lose or expose it.
 */
function currentMap(configJson: string, key: string): Record<string, unknown> {
  const doc = JSON.parse(configJson) as Record<
    string,
    { objectValue?: unknown; value?: unknown; secret?: boolean }
  >;
  const entry = doc[key];
  if (entry === undefined) return {};
  if (entry.secret === true)
    throw new Error(`${key} is a secret value: edit it with \`pulumi config set --secret\``);
  const v = entry.objectValue ?? decodeConfigValue(entry.value);
  if (typeof v !== "object" || v === null || Array.isArray(v))
    throw new Error(
      `${key} is not a map of entries: make it one (\`pulumi config set --path '${key}["<key>"].reason' ...\`) by hand first`,
    );
  return v as Record<string, unknown>;
}

/** How many times an entry is written again when another writer changed the map in between. */
const WRITE_ATTEMPTS = 3;

/** What a command writes: the map, its entry, the proxies it concerns and what the next `up` will do. */
interface Planned {
  map: "retire" | "blockedAddresses";
  entry: Record<string, string>;
  concerned: StackProxy[];
  will: string;
}

/** The entry for `o` against the stack's proxies; throws when the stack has no such proxy or address. */
function planned(o: RetireCommand, stack: string, proxies: readonly StackProxy[], now: Date): Planned {
  if (o.kind === "retire") {
    const concerned = proxies.filter((p) => p.name === o.target);
    if (concerned.length === 0) {
      const names = proxies.map((p) => p.name).join(", ") || "none";
      throw new Error(
        `stack ${stack} has no proxy named ${JSON.stringify(o.target)} (its proxies: ${names})`,
      );
    }
    return {
      map: "retire",
      entry: { reason: o.reason, before: now.toISOString() },
      concerned,
      will: `replaces ${o.target} (its replacement made first)`,
    };
  }
  const states = proxies.map((p) => ({ p, state: decodeState(p.outputs) }));
  const holders = states.filter((x) => addressesHeld(x.state).includes(o.target)).map((x) => x.p);
  const pools = states
    .filter((x) =>
      (x.state.nics ?? []).some((n) => n.addressPool !== undefined && inPool(n.addressPool, o.target)),
    )
    .map((x) => x.p);
  if (holders.length === 0 && pools.length === 0) {
    throw new Error(
      `no proxy of stack ${stack} holds ${o.target} or takes addresses from a pool that has it: nothing to block`,
    );
  }
  const until = new Date(now.getTime() + (o.forSeconds as number) * 1000);
  if (Number.isNaN(until.getTime())) throw new UsageError("--for is longer than any date");
  const replaces =
    holders.length > 0
      ? `replaces ${holders.map((p) => p.name).join(", ")} (its replacement made first), and `
      : "";
  return {
    map: "blockedAddresses",
    entry: { reason: o.reason, since: now.toISOString(), until: until.toISOString() },
    concerned: [...holders, ...pools],
    will: `${replaces}no address pool hands ${o.target} out until ${until.toISOString()}`,
  };
}

/** The failures preview would name in `raw`, read as config map `key` of `map` at `now`. */
function failuresOf(map: Planned["map"], raw: unknown, key: string, now: number): ValidationFailure[] {
  return (map === "retire" ? parseRetirements(raw, key, now) : parseBlockedAddresses(raw, key, now)).failures;
}

function listed(failures: readonly ValidationFailure[]): string {
  return failures.map((f) => `${f.property}: ${f.reason}`).join("; ");
}

/**
 * Writes `entry` under `target` into each config map of `keys`, each map
 * whole in one call (no half-written entry; names and reasons pass as JSON,
 * never as a CLI path or flag), then reads it back: a writer in between
 * would have dropped it, so it is written again.
 */
async function written(
  pulumi: PulumiRunner,
  stack: string,
  keys: readonly string[],
  plan: Planned,
  target: string,
  now: number,
): Promise<void> {
  // A block that is over goes: the map would otherwise grow with every block.
  const over = (key: string, k: string, e: unknown) =>
    plan.map === "blockedAddresses" &&
    Object.values(parseBlockedAddresses({ [k]: e }, key, now).values).some((b) => b.until <= now);
  for (let attempt = 1; ; attempt++) {
    const config = await pulumi(["config", "--json", "--stack", stack]);
    const maps: Record<string, { value: string; objectValue: Record<string, unknown>; secret: false }> = {};
    for (const key of keys) {
      const kept = Object.entries(currentMap(config, key)).filter(([k, e]) => !over(key, k, e));
      const objectValue = { ...Object.fromEntries(kept), [target]: plan.entry };
      const failures = failuresOf(plan.map, objectValue, key, now);
      if (failures.length > 0)
        throw new Error(`${key} holds entries preview refuses; fix them first: ${listed(failures)}`);
      maps[key] = { value: JSON.stringify(objectValue), objectValue, secret: false };
    }
    await pulumi(["config", "set-all", "--stack", stack, "--json", JSON.stringify(maps)]);
    const after = await pulumi(["config", "--json", "--stack", stack]);
    if (keys.every((k) => isDeepStrictEqual(currentMap(after, k)[target], plan.entry))) return;
    if (attempt === WRITE_ATTEMPTS)
      throw new Error(
        `${keys.join(", ")}: another writer changed the config ${WRITE_ATTEMPTS} times while this entry was written: run the command again`,
      );
  }
}

/** Checks the target against the stack, writes the entry; resolves to what the next `up` will do. */
export async function runRetire(o: RetireCommand, deps: RetireDeps = {}): Promise<string> {
  const pulumi = deps.pulumi ?? pulumiRunner(o.cwd);
  const stack = o.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");
  // Names and addresses are no secrets: the export without them serves.
  const proxies = stackProxies(await pulumi(["stack", "export", "--stack", stack]));
  const now = (deps.now ?? (() => new Date()))();
  const plan = planned(o, stack, proxies, now);
  // Each door's namespace (`kvm:`, `kvmproxy:`).
  const keys = [...new Set(plan.concerned.map((p) => `${namespaceOf(p)}:${plan.map}`))].sort();
  const own = failuresOf(plan.map, { [o.target]: plan.entry }, keys[0] as string, now.getTime());
  if (own.length > 0) throw new UsageError(`the entry would not be read: ${listed(own)}`);
  await written(pulumi, stack, keys, plan, o.target, now.getTime());

  const notes: string[] = [];
  const explicit = [...new Set(plan.concerned.flatMap((p) => p.explicitProvider ?? []))];
  if (explicit.length > 0)
    notes.push(
      `made with the explicit provider ${explicit.join(", ")}, which reads ${plan.map} only from its own arguments: pass the stack's ${PLUGIN_CONFIG_NAMESPACE}:${plan.map} to it in the program, or the next \`up\` replaces nothing there`,
    );
  if (o.kind === "block") {
    const again = plan.concerned.filter((p) => holdsAgainWhenReplaced(decodeState(p.outputs), o.target));
    if (again.length > 0)
      notes.push(
        `${[...new Set(again.map((p) => p.name))].join(", ")} hold ${o.target} by the program (a static address, an outgoing address, a DHCP lease of a MAC you gave, or an egress address shared through NAT): each is replaced once and its replacement holds it again; to stop using it, change the program`,
      );
  }
  return [
    `${keys.map((k) => `${k}[${JSON.stringify(o.target)}]`).join(", ")} set: the next \`pulumi up\` ${plan.will}: ${o.reason}`,
    ...notes.map((n) => `note: ${n}`),
  ].join("\n");
}
