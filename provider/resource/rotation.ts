/**
 * Rotation: a proxy older than its `maxAge` is replaced, at most `batch` of
 * a group (a ProxyFleet's members) per `up`, oldest first. The engine asks
 * for diffs one resource at a time, so a member cannot wait to see the
 * others' ages: the first due member of a group to be diffed has the group's
 * members read from the hosts (kvm/host/fleet-members.ts), and the `batch`
 * oldest due among them are the ones replaced in this `up`; later members
 * look the choice up. Deterministic for a given state of the hosts: the
 * preview and the update choose the same proxies.
 */

/** The rotation settings a proxy carries (check-placement.ts). */
export interface RotationSettings {
  /** Seconds. */
  maxAge: number;
  batch: number;
  group?: string;
  size?: number;
}

/** A member of a group: its provider ID and when it was made. */
export interface Member {
  id: string;
  createdAt: string;
}

/** The age of a proxy made at `createdAt`, in seconds, or undefined when unknown. */
export function ageSeconds(createdAt: unknown, now: number = Date.now()): number | undefined {
  if (typeof createdAt !== "string") return undefined;
  const t = Date.parse(createdAt);
  return Number.isNaN(t) ? undefined : (now - t) / 1000;
}

/** The IDs of the `batch` oldest members older than `maxAge` (ties by ID). */
export function oldestDue(members: readonly Member[], settings: RotationSettings, now: number): Set<string> {
  const due = members
    .map((m) => ({ ...m, t: Date.parse(m.createdAt) }))
    .filter((m) => !Number.isNaN(m.t) && (now - m.t) / 1000 > settings.maxAge)
    .sort((a, b) => a.t - b.t || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return new Set(due.slice(0, settings.batch).map((m) => m.id));
}

/** Decides, per group, which of its proxies due for rotation are replaced in this `up`. */
export class RotationRounds {
  /** Per group: the IDs chosen, or the count granted when the members could not be read. */
  private readonly chosen = new Map<string, Promise<Set<string> | undefined>>();
  private readonly granted = new Map<string, number>();

  /**
   * One member's turn: true when it is replaced in this `up`. `members`
   * reads the group from its hosts; it is called once per group, and only
   * when a member is due. When it fails, the first `batch` due members to
   * ask are replaced (arrival order, still at most `batch`).
   */
  async turn(
    settings: RotationSettings,
    self: { id: string; createdAt: unknown },
    members: () => Promise<Member[]>,
    now: number = Date.now(),
  ): Promise<boolean> {
    const age = ageSeconds(self.createdAt, now);
    if (age === undefined || age <= settings.maxAge) return false;
    const group = settings.group;
    if (group === undefined) return true;
    let chosen = this.chosen.get(group);
    if (chosen === undefined) {
      const me = { id: self.id, createdAt: self.createdAt as string };
      chosen = members().then(
        (list) => oldestDue(list.some((m) => m.id === me.id) ? list : [...list, me], settings, now),
        () => undefined,
      );
      this.chosen.set(group, chosen);
    }
    const set = await chosen;
    if (set !== undefined) return set.has(self.id);
    const n = this.granted.get(group) ?? 0;
    if (n >= settings.batch) return false;
    this.granted.set(group, n + 1);
    return true;
  }
}
