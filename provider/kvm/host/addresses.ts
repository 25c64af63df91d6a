/**
 * Address discovery: a running guest's IPv4 from the guest agent
 * (authoritative) or, failing that, from the DHCP lease of a libvirt network
 * (may be stale for a reused MAC).
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
 */
import { isTransient } from "../../errors";
import { InterfaceAddressSource } from "../../libvirt/constants";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import type { ParsedDomain } from "../domain-xml";
import { firstRoutableIpv4 } from "../states";
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

/** One source's first routable IPv4 of the NIC with `mac`; an error as the table says. */
async function ask(
  lv: Libvirt,
  dom: Domain,
  source: Source,
  mac: string | undefined,
): Promise<{ addr: string | undefined } | { error: unknown; meaning: Meaning | undefined }> {
  try {
    return { addr: firstRoutableIpv4(await lv.domainInterfaceAddresses(dom, LIBVIRT_SOURCE[source]), mac) };
  } catch (error) {
    return { error, meaning: meaningOf(source, error) };
  }
}

/**
 * The guest's IPv4, for a domain whose state was just read as running: the
 * agent first, then the lease. An agent the live XML shows disconnected (or
 * a domain without the channel) is not asked: libvirt would only refuse.
 */
export async function guestIpv4(
  lv: Libvirt,
  dom: Domain,
  mac: string | undefined,
  agent?: ParsedDomain["guestAgent"],
): Promise<{ addr: string; source: Source } | undefined> {
  const sources: Source[] = agent === "none" || agent === "disconnected" ? ["lease"] : ["agent", "lease"];
  for (const source of sources) {
    const r = await ask(lv, dom, source, mac);
    if ("error" in r) {
      if (r.meaning === undefined) throw r.error;
      continue;
    }
    if (r.addr !== undefined) return { addr: r.addr, source };
  }
  return undefined;
}

/**
 * One cheap probe between full reads: 'found' when either source has a
 * routable IPv4; 'none' when neither has one yet; 'check' when an answer
 * may mean the domain is no longer running, which a full read then
 * classifies. A transient failure (a dropped connection) is thrown for the
 * operation's retry.
 */
export async function probeAddress(
  lv: Libvirt,
  dom: Domain,
  mac: string | undefined,
): Promise<"found" | "none" | "check"> {
  for (const source of ["agent", "lease"] as const) {
    const r = await ask(lv, dom, source, mac);
    if (!("error" in r)) {
      if (r.addr !== undefined) return "found";
      continue;
    }
    if (r.meaning === "not yet" || r.meaning === "no source") continue;
    if (r.meaning === undefined && isTransient(r.error)) throw r.error;
    return "check";
  }
  return "none";
}
