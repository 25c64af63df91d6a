/**
 * Address discovery: a running guest's addresses from the guest agent
 * (authoritative) or, failing that, from the DHCP leases of a libvirt network
 * (may be stale for a reused MAC); and the wait for one (waitForIp).
 *
 * One table says what each error of these queries means, for both the full
 * read (get: the domain's state was read just before) and the cheap probe
 * between full reads (waitForIp: nothing else was read):
 * - "not yet": the agent is not answering yet (booting guest);
 * - "no source": this domain has no such source (no agent channel, a NIC
 *   not on a libvirt network with DHCP): asking again changes nothing;
 * - "maybe stopped": libvirt says the operation is invalid for the domain,
 *   which it says both for "domain is not running" and "agent not
 *   connected", or the domain is gone. A full read has just seen the state
 *   and takes it as "no address now"; a probe asks for a full read.
 * Anything else: a transient error goes to the operation's retry; a
 * permanent one fails the full read and makes the probe ask for a full read.
 *
 * A NIC with static addresses on a network without DHCP has no lease, ever:
 * while no guest agent answers, its configured addresses are the answer
 * (see {@link settledStatus}).
 */
import { isTransient, ProviderError, TimeoutError } from "../../errors";
import { InterfaceAddressSource } from "../../libvirt/constants";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain, DomainInterface } from "../../libvirt/types";
import type { ParsedDomain } from "../domain/domain-xml";
import {
  addressesByMac,
  firstGlobalIpv6,
  firstRoutableIpv4,
  type NicAddresses,
  type ProxyState,
} from "../domain/states";
import { bare } from "../network/ip";
import { type ProgressListener, report } from "../progress";
import { domainByUuid } from "./domains";
import type { HostPool } from "./hosts";
import type { OperationContext, RetryEnv } from "./retry";
import { sleep } from "./retry";
import type { VmStatus } from "./vm";
import { hasCode } from "./volumes";

type Source = "agent" | "lease";
type Meaning = "not yet" | "no source" | "maybe stopped";

/** What an error of an address query means, by source and libvirt code (see the header). */
const ADDRESS_ERRORS: Readonly<Record<Source, ReadonlyMap<number, Meaning>>> = {
  agent: new Map<number, Meaning>([
    [ErrorCode.AGENT_UNRESPONSIVE, "not yet"],
    [ErrorCode.AGENT_UNSYNCED, "not yet"],
    [ErrorCode.OPERATION_TIMEOUT, "not yet"],
    [ErrorCode.ARGUMENT_UNSUPPORTED, "no source"], // no agent channel in the domain
    [ErrorCode.OPERATION_UNSUPPORTED, "no source"],
    [ErrorCode.NO_SUPPORT, "no source"],
    [ErrorCode.NO_NETWORK, "no source"],
    [ErrorCode.OPERATION_INVALID, "maybe stopped"],
    [ErrorCode.NO_DOMAIN, "maybe stopped"],
  ]),
  lease: new Map<number, Meaning>([
    [ErrorCode.ARGUMENT_UNSUPPORTED, "no source"],
    [ErrorCode.OPERATION_UNSUPPORTED, "no source"],
    [ErrorCode.NO_SUPPORT, "no source"],
    [ErrorCode.NO_NETWORK, "no source"], // the NIC is on a bridge, not a libvirt network
    [ErrorCode.OPERATION_INVALID, "maybe stopped"],
    [ErrorCode.NO_DOMAIN, "maybe stopped"],
  ]),
};

function meaningOf(source: Source, err: unknown): Meaning | undefined {
  return hasCode(err, ...ADDRESS_ERRORS[source].keys()) ? ADDRESS_ERRORS[source].get(err.code) : undefined;
}

const LIBVIRT_SOURCE = { agent: InterfaceAddressSource.AGENT, lease: InterfaceAddressSource.LEASE } as const;

/** One source's interfaces; an error as the table says. */
async function ask(
  lv: Libvirt,
  dom: Domain,
  source: Source,
): Promise<{ ifaces: DomainInterface[] } | { error: unknown; meaning: Meaning | undefined }> {
  try {
    return { ifaces: await lv.domainInterfaceAddresses(dom, LIBVIRT_SOURCE[source]) };
  } catch (error) {
    return { error, meaning: meaningOf(source, error) };
  }
}

/** What a running guest reports, from {@link guestAddresses}. */
export interface GuestAddresses {
  /** The first routable IPv4 (the NIC with the domain's MAC first) and where it came from. */
  ipv4?: { addr: string; source: Source };
  /** The first global IPv6 (the NIC with the domain's MAC first). */
  ipv6?: string;
  /** Every usable address per NIC of the domain (states.ts `addressesByMac`). */
  ipAddresses: NicAddresses[];
  /** True when the guest agent answered, even with no address: its word is final. */
  agentAnswered: boolean;
}

/**
 * The guest's addresses, for a domain whose state was just read as running:
 * the agent first, then the leases, asked exactly as for its IPv4 alone (the
 * lease only when the agent gave no routable IPv4), so reading every address
 * costs no extra call. A NIC the agent reported nothing usable for takes the
 * lease's addresses. An agent the live XML shows disconnected (or a domain
 * without the channel) is not asked: libvirt would only refuse.
 */
export async function guestAddresses(
  lv: Libvirt,
  dom: Domain,
  domain: Pick<ParsedDomain, "mac" | "guestAgent" | "interfaces">,
): Promise<GuestAddresses> {
  const { mac, guestAgent } = domain;
  const sources: Source[] =
    guestAgent === "none" || guestAgent === "disconnected" ? ["lease"] : ["agent", "lease"];
  const used: DomainInterface[] = [];
  const out: GuestAddresses = { ipAddresses: [], agentAnswered: false };
  for (const source of sources) {
    const r = await ask(lv, dom, source);
    if ("error" in r) {
      if (r.meaning === undefined) throw r.error;
      continue;
    }
    if (source === "agent") out.agentAnswered = true;
    const reported = new Set(addressesByMac(used).map((n) => n.mac));
    used.push(...r.ifaces.filter((i) => !reported.has(i.hwaddr?.toLowerCase() ?? "")));
    const addr = firstRoutableIpv4(r.ifaces, mac);
    if (addr !== undefined) {
      out.ipv4 = { addr, source };
      break;
    }
  }
  const macs = domain.interfaces.flatMap((i) => (i.mac === undefined ? [] : [i.mac]));
  out.ipAddresses = addressesByMac(used, macs.length > 0 ? macs : undefined);
  const ipv6 = firstGlobalIpv6(used, mac);
  if (ipv6 !== undefined) out.ipv6 = ipv6;
  return out;
}

/** The address fields of a VmStatus for what {@link guestAddresses} read. */
export function addressFields(
  a: GuestAddresses,
): Pick<VmStatus, "ipv4" | "ipSource" | "ipv6Address" | "ipAddresses" | "guestAgentAnswered"> {
  return {
    ...(a.ipv4 !== undefined ? { ipv4: a.ipv4.addr, ipSource: a.ipv4.source } : {}),
    ...(a.ipv6 !== undefined ? { ipv6Address: a.ipv6 } : {}),
    ipAddresses: a.ipAddresses,
    guestAgentAnswered: a.agentAnswered,
  };
}

/** Which address a wait is for: an IPv4 (the default), a global IPv6, or either. */
export type AddressFamily = "ipv4" | "ipv6" | "any";

const FAMILY_WORDS: Readonly<Record<AddressFamily, string>> = {
  ipv4: "an IPv4 address",
  ipv6: "an IPv6 address",
  any: "an IPv4 or IPv6 address",
};

function hasFamily(s: Pick<VmStatus, "ipv4" | "ipv6Address">, family: AddressFamily): boolean {
  const v4 = s.ipv4 !== undefined;
  const v6 = s.ipv6Address !== undefined;
  return family === "ipv4" ? v4 : family === "ipv6" ? v6 : v4 || v6;
}

/**
 * One cheap probe between full reads: 'found' when either source has an
 * address of `family`; 'none' when neither has one yet; 'check' when an
 * answer may mean the domain is no longer running, which a full read then
 * classifies. A transient failure (a dropped connection) is thrown for the
 * operation's retry.
 */
export async function probeAddress(
  lv: Libvirt,
  dom: Domain,
  mac: string | undefined,
  family: AddressFamily = "ipv4",
): Promise<"found" | "none" | "check"> {
  for (const source of ["agent", "lease"] as const) {
    const r = await ask(lv, dom, source);
    if (!("error" in r)) {
      const found = { ipv4: firstRoutableIpv4(r.ifaces, mac), ipv6Address: firstGlobalIpv6(r.ifaces, mac) };
      if (hasFamily(found, family)) return "found";
      continue;
    }
    if (r.meaning === "not yet" || r.meaning === "no source") continue;
    if (r.meaning === undefined && isTransient(r.error)) throw r.error;
    return "check";
  }
  return "none";
}

/**
 * `status` with the configured `staticAddresses` (CIDR, per MAC) filled in
 * where the guest reported none: the NICs' addresses, the IPv4 and IPv6 (of
 * the domain's first NIC first; the IPv4's source then `static`), and the
 * state `running` when that gives the VM an address.
 */
export function withStaticAddresses(status: VmStatus, staticAddresses: readonly NicAddresses[]): VmStatus {
  const reported = status.ipAddresses ?? [];
  const added = staticAddresses
    .map((n) => ({ mac: n.mac.toLowerCase(), addresses: [...n.addresses] }))
    .filter((n) => n.addresses.length > 0 && !reported.some((r) => r.mac === n.mac));
  const ipAddresses = [...reported, ...added];
  const primaryFirst = [...added].sort((a, b) => Number(b.mac === status.mac) - Number(a.mac === status.mac));
  const configured = primaryFirst.flatMap((n) => n.addresses.map(bare));
  const v4 = configured.find((a) => !a.includes(":"));
  const v6 = configured.find((a) => a.includes(":"));
  const out: VmStatus = { ...status, ipAddresses };
  if (out.ipv4 === undefined && v4 !== undefined) {
    out.ipv4 = v4;
    out.ipSource = "static";
  }
  if (out.ipv6Address === undefined && v6 !== undefined) out.ipv6Address = v6;
  if (out.state === "provisioning" && (out.ipv4 !== undefined || out.ipv6Address !== undefined)) {
    out.state = "running";
  }
  return out;
}

/**
 * The status a wait for `family` returns, or undefined to wait on: the
 * status itself once it has such an address; else, while no guest agent
 * answers (nothing will ever lease a static address), the status with the
 * configured static addresses when they include one.
 */
export function settledStatus(
  status: VmStatus,
  family: AddressFamily,
  staticAddresses: readonly NicAddresses[] | undefined,
): VmStatus | undefined {
  if (hasFamily(status, family)) return status;
  if (staticAddresses === undefined || status.guestAgentAnswered === true) return undefined;
  const filled = withStaticAddresses(status, staticAddresses);
  return hasFamily(filled, family) ? filled : undefined;
}

/** Options of KvmOperations.waitForIp. */
export interface WaitForIpOptions {
  /** Overall deadline (default 5 min). */
  deadlineMs?: number;
  /** The setting the deadline comes from, named in its timeout message (e.g. `timeouts.create`). */
  deadlineName?: string;
  /** Pause between polls (default 1 s). */
  pollMs?: number;
  signal?: AbortSignal;
  /** Receives the time waited so far at each poll. */
  onProgress?: ProgressListener;
  /** What to wait for (default `ipv4`, a routable IPv4). */
  family?: AddressFamily;
  /** The NICs' configured static addresses (CIDR, per MAC): the answer while no guest agent answers. */
  staticAddresses?: readonly NicAddresses[];
}

/** How often {@link waitForAddress} does a full read between its cheap address probes. */
const FULL_READ_MS = 5_000;

/** What {@link waitForAddress} needs of the operations (KvmOperations is one). */
export interface AddressWaitHost {
  readonly env: RetryEnv;
  readonly hosts: HostPool;
  now(): number;
  retrying<T>(ctx: OperationContext, fn: (attempt: number) => Promise<T>, signal?: AbortSignal): Promise<T>;
  get(hostKey: string, name: string, known?: { uuid?: string }): Promise<VmStatus>;
}

/**
 * KvmOperations.waitForIpFrom's loop: from a status just read, waits
 * until {@link settledStatus} has an answer. Between full reads (get: state,
 * XML and addresses, 3-4 calls) it polls only the addresses: the guest
 * agent, then the DHCP lease (2 calls), so a short poll interval stays
 * cheap. A full read happens when a probe finds an address (to return the
 * whole status), when a probe fails in a way that may mean the domain
 * changed state, and every {@link FULL_READ_MS} in any case (a paused or
 * crashed guest answers probes like a booting one). At the default 1 s
 * interval a wait costs about 2.2-2.4 calls per second.
 */
export async function waitForAddress(
  ops: AddressWaitHost,
  from: VmStatus,
  options: WaitForIpOptions,
): Promise<VmStatus> {
  const { host: hostKey, name } = from;
  const family = options.family ?? "ipv4";
  const deadlineMs = options.deadlineMs ?? 300_000;
  const pollMs = options.pollMs ?? 1_000;
  const wait = ops.env.sleep ?? sleep;
  const started = ops.now();
  const fullEvery = Math.max(1, Math.round(FULL_READ_MS / pollMs));
  const ctx: OperationContext = { operation: "wait for IP", host: hostKey, domain: name };
  let status = from;
  for (let poll = 1; ; poll++) {
    if (status.state !== "running" && status.state !== "provisioning") {
      throw new KvmStateError(hostKey, name, status.state, FAMILY_WORDS[family]);
    }
    const settled = settledStatus(status, family, options.staticAddresses);
    if (settled !== undefined) return settled;
    if (ops.now() - started + pollMs > deadlineMs) {
      throw new TimeoutError(
        `${FAMILY_WORDS[family]} of domain ${name} on host ${hostKey} (guest agent or DHCP lease)`,
        deadlineMs,
        options.deadlineName,
      );
    }
    report(options.onProgress, { kind: "wait-ip", elapsedMs: ops.now() - started });
    await wait(pollMs, options.signal);
    if (poll % fullEvery !== 0 && status.uuid !== undefined) {
      const dom = domainByUuid(name, status.uuid);
      const lv = ops.hosts.libvirt(hostKey);
      const mac = status.mac;
      const probe = await ops.retrying(ctx, () => probeAddress(lv, dom, mac, family));
      if (probe === "none") continue;
    }
    // The UUID read last time saves the lookup by name (see get).
    status = await ops.get(hostKey, name, status.uuid === undefined ? {} : { uuid: status.uuid });
  }
}

/** The VM is in a state the caller cannot wait through. Permanent. */
export class KvmStateError extends ProviderError {
  readonly host: string;
  readonly domain: string;
  readonly state: ProxyState;

  constructor(host: string, domain: string, state: ProxyState, waitingFor: string) {
    super("permanent", `domain ${domain} on host ${host} is ${state} while waiting for ${waitingFor}`);
    this.host = host;
    this.domain = domain;
    this.state = state;
  }
}
