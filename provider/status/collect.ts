/**
 * The `status` command's I/O: reads the project, the stack's config and its
 * proxies through the Pulumi CLI, then asks each proxy's host and guest now:
 * the VM's state, addresses, health and egress address as a refresh reads
 * them (the runtime's own `read`, so both say the same), and its counters
 * (kvm/host/traffic.ts). Nothing is written: not the state, not the hosts.
 * Every failure becomes a problem of its proxy or of the run, so one
 * unreachable host never hides the rest.
 */
import { messageOf } from "../errors";
import { type PulumiRunner, pulumiRunner } from "../gc/pulumi-cli";
import { configReader, currentStack } from "../gc/pulumi-json";
import { readProjectName } from "../gc/sweep";
import { parseProviderId } from "../kvm/domain/provider-id";
import type { NicCounters } from "../kvm/host/traffic";
import { olds as pluginOlds } from "../plugin/kvm-proxy-plugin";
import type { NicAddresses, ProxyHealth } from "../resource/outputs";
import { KvmProxyRuntime } from "../resource/provider";
import { ageSeconds } from "../resource/rotation";
import { type StackProxy, stackProxies } from "./stack-proxies";
import type { ProxyStatus, StatusReport } from "./status-report";

/** What `status` was asked. */
export interface StatusOptions {
  cwd: string;
  stack?: string;
}

/** Injectable edges (tests drive the real ones). */
export interface StatusDeps {
  pulumi?: PulumiRunner;
  now?: () => Date;
}

/** How many proxies are read at once: a fleet of hundreds is not read one by one, nor all at once. */
const AT_ONCE = 8;

/** Reads every proxy of the stack. Throws only when nothing can be read (no project, no stack, no config). */
export async function runStatus(options: StatusOptions, deps: StatusDeps = {}): Promise<StatusReport> {
  const pulumi = deps.pulumi ?? pulumiRunner(options.cwd);
  const project = readProjectName(options.cwd);
  const stack = options.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");
  const config = configReader(await pulumi(["config", "--json", "--show-secrets", "--stack", stack]));
  // Decrypted: a host given in full is recorded as a secret output. Never printed.
  const proxies = stackProxies(await pulumi(["stack", "export", "--show-secrets", "--stack", stack]));
  const now = (deps.now ?? (() => new Date()))();

  const runtime = new KvmProxyRuntime();
  await runtime.configure({ config: { get: config } });
  const problems: StatusReport["problems"] = [];
  try {
    const rows: ProxyStatus[] = new Array(proxies.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < proxies.length; i = next++) {
        rows[i] = await statusOf(runtime, proxies[i] as StackProxy, now.getTime());
      }
    };
    await Promise.all(Array.from({ length: Math.min(AT_ONCE, proxies.length) }, worker));
    return { project, stack, readAt: now.toISOString(), proxies: rows, problems };
  } finally {
    await runtime
      .close()
      .catch((err) => problems.push({ subject: "hosts", message: runtime.redact(messageOf(err)) }));
  }
}

/** One proxy, read now. */
async function statusOf(runtime: KvmProxyRuntime, p: StackProxy, now: number): Promise<ProxyStatus> {
  const row = await read(runtime, p, now);
  // What could not be read comes last in every form.
  const { problems, ...rest } = row;
  return { ...rest, problems };
}

async function read(runtime: KvmProxyRuntime, p: StackProxy, now: number): Promise<ProxyStatus> {
  let host: string;
  let domain: string;
  try {
    ({ host, name: domain } = parseProviderId(p.id));
  } catch (err) {
    return {
      name: p.name,
      host: "",
      domain: "",
      state: "unknown",
      addresses: [],
      problems: [messageOf(err)],
    };
  }
  const row: ProxyStatus = {
    name: p.name,
    ...(p.fleet !== undefined ? { fleet: p.fleet } : {}),
    host,
    domain,
    state: "unknown",
    addresses: [],
    problems: [],
  };
  let outs: Record<string, unknown>;
  try {
    // A plugin proxy is read as the plugin reads it: from its outputs and its inputs.
    const recorded = p.door === "plugin" ? pluginOlds(p.outputs, p.inputs) : p.outputs;
    const read = await runtime.read(p.id, recorded);
    if (read.props === undefined) {
      row.state = "missing";
      row.problems.push(
        `no VM ${domain} on host ${host}: \`pulumi refresh\` drops it, \`pulumi up\` makes it again`,
      );
      return row;
    }
    outs = read.props;
  } catch (err) {
    row.problems.push(runtime.redact(messageOf(err)));
    return row;
  }
  row.state = typeof outs.state === "string" ? outs.state : "unknown";
  row.addresses = ((outs.ipAddresses as NicAddresses[] | undefined) ?? []).flatMap((n) => n.addresses);
  if (typeof outs.egressAddress === "string") row.egressAddress = outs.egressAddress;
  const health = outs.health as ProxyHealth | undefined;
  if (health !== undefined) {
    row.health = { ok: health.ok, ...(health.reason !== undefined ? { reason: health.reason } : {}) };
  }
  const age = ageSeconds(outs.createdAt, now);
  if (typeof outs.createdAt === "string" && age !== undefined) {
    row.createdAt = outs.createdAt;
    row.ageSeconds = Math.floor(age);
    const maxAge = (outs.rotation as { maxAge?: unknown } | undefined)?.maxAge;
    if (typeof maxAge === "number") {
      row.rotationDue = new Date(Date.parse(outs.createdAt) + maxAge * 1000).toISOString();
    }
  }
  // A running VM (provisioning: running, its address not known yet) carries traffic.
  if (["running", "degraded", "provisioning"].includes(row.state))
    await countersOf(runtime, host, domain, row);
  return row;
}

/** Its NICs' bytes and its squid's requests, each or both left out with the reason. */
async function countersOf(runtime: KvmProxyRuntime, host: string, domain: string, row: ProxyStatus) {
  const ops = runtime.ops();
  try {
    const nics: NicCounters[] = await ops.nicCounters(host, domain);
    row.traffic = {
      receivedBytes: nics.reduce((n, c) => n + c.receivedBytes, 0),
      sentBytes: nics.reduce((n, c) => n + c.sentBytes, 0),
    };
  } catch (err) {
    row.problems.push(`NIC counters: ${runtime.redact(messageOf(err))}`);
  }
  try {
    const counted = await ops.squidRequests(host, domain);
    if (counted === undefined) row.problems.push("requests: the guest agent does not answer");
    else if (!counted.ok) row.problems.push(`requests: ${counted.reason}`);
    else row.requests = counted.requests;
  } catch (err) {
    row.problems.push(`requests: ${runtime.redact(messageOf(err))}`);
  }
}
