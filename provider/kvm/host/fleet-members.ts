/**
 * The members of a rotation group as the hosts hold them: our VMs owned by
 * one stack whose `fleet` tag names the group (ProxyFleet sets it), with the
 * creation time their metadata records. Rotation reads this once per group
 * and `up`: the engine asks for diffs one resource at a time, so a member's
 * diff cannot wait for the others' to learn who is oldest.
 */
import { ErrorCode } from "../../libvirt/error-codes";
import { formatProviderId } from "../domain/provider-id";
import { managedMetadata } from "./domains";
import type { HostPool } from "./hosts";
import { hasCode } from "./volumes";

/** One member: its provider ID and when it was made. */
export interface GroupMember {
  id: string;
  createdAt: string;
}

/** Which VMs belong to the group. */
export interface GroupMatch {
  project: string;
  stack: string;
  group: string;
}

/** The group's members on hosts `keys` (a host listed twice is read once). */
export async function groupMembers(
  hosts: HostPool,
  keys: readonly string[],
  match: GroupMatch,
): Promise<GroupMember[]> {
  const out: GroupMember[] = [];
  for (const key of new Set(keys)) {
    const lv = hosts.libvirt(key);
    for (const dom of await lv.connectListAllDomains(0)) {
      try {
        const m = await managedMetadata(lv, dom);
        if (m === undefined) continue;
        if (m.owner.project !== match.project || m.owner.stack !== match.stack) continue;
        if (m.tags.fleet !== match.group) continue;
        out.push({ id: formatProviderId(key, dom.name), createdAt: m.createdAt });
      } catch (err) {
        // Deleted while listed: not a member any more.
        if (!hasCode(err, ErrorCode.NO_DOMAIN)) throw err;
      }
    }
  }
  return out;
}
