/**
 * What a running VM carries, read live for the `status` command: its NICs'
 * byte and packet counters from the host (virDomainInterfaceStats, no guest
 * help needed) and the requests its squid answered since the boot (counted
 * in the guest through its agent, guest/squid-requests.ts). Nothing here is
 * stored: counters that changed at every refresh would make every drift run
 * show changes.
 */
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import { parseDomainXml } from "../domain/domain-xml";
import { GUEST_PROBE_INTERPRETER } from "../guest/guest-probe";
import { parseSquidRequests, type SquidRequests, squidRequestsArgs } from "../guest/squid-requests";
import { runInGuest } from "./guest-agent";
import { hasCode } from "./volumes";

/** One NIC's counters, as the guest sees them (received: into the VM), since the VM's last start. */
export interface NicCounters {
  mac: string;
  receivedBytes: number;
  sentBytes: number;
  receivedPackets: number;
  sentPackets: number;
}

/** How long the count in the guest may read logs, ms (its program ends itself then). */
export const SQUID_COUNT_DEADLINE_MS = 15_000;
/** Beyond that deadline: the interpreter's start and the agent's polls, ms. */
const RUN_MARGIN_MS = 10_000;

/**
 * The counters of every NIC of `dom` (asked by MAC, which libvirt accepts
 * for the device); empty when the domain is not running.
 */
export async function nicCounters(lv: Libvirt, dom: Domain): Promise<NicCounters[]> {
  const parsed = parseDomainXml(await lv.domainGetXmlDesc(dom));
  const out: NicCounters[] = [];
  for (const nic of parsed.interfaces) {
    if (nic.mac === undefined) continue;
    try {
      const s = await lv.domainInterfaceStats(dom, nic.mac);
      // -1: the hypervisor does not count it (counted as nothing, never subtracted).
      const counted = (n: number) => Math.max(0, n);
      out.push({
        mac: nic.mac,
        receivedBytes: counted(s.rxBytes),
        sentBytes: counted(s.txBytes),
        receivedPackets: counted(s.rxPackets),
        sentPackets: counted(s.txPackets),
      });
    } catch (err) {
      // Not running (stopped since the XML was read): it carries nothing now.
      if (hasCode(err, ErrorCode.OPERATION_INVALID)) return [];
      throw err;
    }
  }
  return out;
}

/**
 * The requests the guest's squid answered since the boot, by status class,
 * or why they could not be counted; undefined when the agent does not answer.
 */
export async function squidRequests(
  lv: Libvirt,
  dom: Domain,
  signal?: AbortSignal,
): Promise<{ ok: true; requests: SquidRequests } | { ok: false; reason: string } | undefined> {
  const run = await runInGuest(lv, dom, GUEST_PROBE_INTERPRETER, squidRequestsArgs(SQUID_COUNT_DEADLINE_MS), {
    timeoutMs: SQUID_COUNT_DEADLINE_MS + RUN_MARGIN_MS,
    ...(signal !== undefined ? { signal } : {}),
  });
  return run === undefined ? undefined : parseSquidRequests(run.stdout.toString("utf8"), run.exitcode);
}
