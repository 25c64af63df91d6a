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

/** Checks the target against the stack, writes the entry; resolves to what the next `up` will do. */
export async function runRetire(o: RetireCommand, deps: RetireDeps = {}): Promise<string> {
  const pulumi = deps.pulumi ?? pulumiRunner(o.cwd);
  const stack = o.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");
  // Names and addresses are no secrets: the export without them serves.
  const proxies = stackProxies(await pulumi(["stack", "export", "--stack", stack]));
  const now = (deps.now ?? (() => new Date()))();

  // The proxies concerned, and the entry (checked by the parser the provider reads it with).
  let concerned: StackProxy[];
  let map: "retire" | "blockedAddresses";
  let entry: Record<string, string>;
  let will: string;
  if (o.kind === "retire") {
    concerned = proxies.filter((p) => p.name === o.target);
    if (concerned.length === 0) {
      const names = proxies.map((p) => p.name).join(", ") || "none";
      throw new Error(
        `stack ${stack} has no proxy named ${JSON.stringify(o.target)} (its proxies: ${names})`,
      );
    }
    map = "retire";
    entry = { reason: o.reason, before: now.toISOString() };
    will = `replaces ${o.target} (its replacement made first)`;
  } else {
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
    const until = new Date(now.getTime() + (o.forSeconds as number) * 1000);
    if (Number.isNaN(until.getTime())) throw new UsageError("--for is longer than any date");
    concerned = [...holders, ...pools];
    map = "blockedAddresses";
    entry = { reason: o.reason, since: now.toISOString(), until: until.toISOString() };
    will = `${holders.length > 0 ? `replaces ${holders.map((p) => p.name).join(", ")} (its replacement made first), and ` : ""}no address pool hands ${o.target} out until ${entry.until}`;
  }
  // Each door's namespace (`kvm:`, `kvmproxy:`).
  const keys = [...new Set(concerned.map((p) => `${namespaceOf(p)}:${map}`))].sort();
  const failuresOf = (raw: unknown, key: string) =>
    (map === "retire"
      ? parseRetirements(raw, key, now.getTime())
      : parseBlockedAddresses(raw, key, now.getTime())
    ).failures;
  const listed = (failures: ValidationFailure[]) =>
    failures.map((f) => `${f.property}: ${f.reason}`).join("; ");
  const own = failuresOf({ [o.target]: entry }, keys[0] as string);
  if (own.length > 0) throw new UsageError(`the entry would not be read: ${listed(own)}`);

  // Each key written whole in one call (no half-written entry; names and reasons pass as JSON, never as
  // a CLI path or flag), then read back: a writer in between would have dropped it, so it is written again.
  for (let attempt = 1; ; attempt++) {
    const config = await pulumi(["config", "--json", "--stack", stack]);
    const written: Record<string, { value: string; objectValue: Record<string, unknown>; secret: false }> =
      {};
    for (const key of keys) {
      const current = currentMap(config, key);
      // Blocks that are over go: the map would otherwise grow with every block.
      const kept = Object.fromEntries(
        Object.entries(current).filter(
          ([k, e]) =>
            map !== "blockedAddresses" ||
            !Object.values(parseBlockedAddresses({ [k]: e }, key, now.getTime()).values).some(
              (b) => b.until <= now.getTime(),
            ),
        ),
      );
      const objectValue = { ...kept, [o.target]: entry };
      const failures = failuresOf(objectValue, key);
      if (failures.length > 0)
        throw new Error(`${key} holds entries preview refuses; fix them first: ${listed(failures)}`);
      written[key] = { value: JSON.stringify(objectValue), objectValue, secret: false };
    }
    await pulumi(["config", "set-all", "--stack", stack, "--json", JSON.stringify(written)]);
    const after = await pulumi(["config", "--json", "--stack", stack]);
    if (keys.every((k) => isDeepStrictEqual(currentMap(after, k)[o.target], entry))) break;
    if (attempt === WRITE_ATTEMPTS)
      throw new Error(
        `${keys.join(", ")}: another writer changed the config ${WRITE_ATTEMPTS} times while this entry was written: run the command again`,
      );
  }

  const notes: string[] = [];
  const explicit = [...new Set(concerned.flatMap((p) => p.explicitProvider ?? []))];
  if (explicit.length > 0)
    notes.push(
      `made with the explicit provider ${explicit.join(", ")}, which reads ${map} only from its own arguments: pass the stack's ${PLUGIN_CONFIG_NAMESPACE}:${map} to it in the program, or the next \`up\` replaces nothing there`,
    );
  if (o.kind === "block") {
    const again = concerned.filter((p) => holdsAgainWhenReplaced(decodeState(p.outputs), o.target));
    if (again.length > 0)
      notes.push(
        `${[...new Set(again.map((p) => p.name))].join(", ")} hold ${o.target} by the program (a static address, an outgoing address, a DHCP lease of a MAC you gave, or an egress address shared through NAT): each is replaced once and its replacement holds it again; to stop using it, change the program`,
      );
  }
  return [
    `${keys.map((k) => `${k}[${JSON.stringify(o.target)}]`).join(", ")} set: the next \`pulumi up\` ${will}: ${o.reason}`,
    ...notes.map((n) => `note: ${n}`),
  ].join("\n");
}
