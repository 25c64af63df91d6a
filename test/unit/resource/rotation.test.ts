import { describe, expect, it } from "vitest";
import { ageSeconds, type Member, oldestDue, RotationRounds } from "../../../provider/resource/rotation";

const NOW = Date.parse("2026-12-01T12:00:00Z");
const daysAgo = (d: number) => new Date(NOW - d * 86_400_000).toISOString();
const WEEK = 7 * 86_400;
const FLEET = { maxAge: WEEK, batch: 2, group: "crawl", size: 6 };

/** A fleet whose member i was made `ages[i]` days ago. */
const fleet = (ages: number[]): Member[] =>
  ages.map((d, i) => ({ id: `kvm://h/m${i}`, createdAt: daysAgo(d) }));

/** Every member's turn, one after the other (as the engine asks for diffs), and how often the hosts were read. */
async function oneUp(rounds: RotationRounds, members: Member[], failRead = false) {
  let reads = 0;
  const read = async () => {
    reads += 1;
    if (failRead) throw new Error("host unreachable");
    return members;
  };
  const granted: boolean[] = [];
  for (const m of members) granted.push(await rounds.turn(FLEET, m, read, NOW));
  return { granted, reads };
}

describe("RotationRounds", () => {
  it("replaces the batch oldest due members of a group, whatever order their diffs come in", async () => {
    const { granted } = await oneUp(new RotationRounds(), fleet([8, 12, 9, 30, 10, 3]));
    expect(granted).toEqual([false, true, false, true, false, false]);
  });

  it("reads the group's members from the hosts once per up, and only when a member is due", async () => {
    expect((await oneUp(new RotationRounds(), fleet([8, 12, 9, 30, 10, 3]))).reads).toBe(1);
    expect((await oneUp(new RotationRounds(), fleet([1, 2, 3]))).reads).toBe(0);
  });

  it("three ups over six due members replace 2, 2, 2", async () => {
    let members = fleet([8, 9, 10, 11, 12, 13]);
    const replaced: number[] = [];
    for (let up = 0; up < 3; up++) {
      const { granted } = await oneUp(new RotationRounds(), members);
      replaced.push(granted.filter(Boolean).length);
      members = members.map((m, i) => (granted[i] ? { ...m, createdAt: daysAgo(0) } : m));
    }
    expect(replaced).toEqual([2, 2, 2]);
  });

  it("when the members cannot be read, still replaces at most batch (in diff order)", async () => {
    const { granted } = await oneUp(new RotationRounds(), fleet([8, 12, 9, 30, 10, 3]), true);
    expect(granted).toEqual([true, true, false, false, false, false]);
  });

  it("a proxy without a group rotates once due, without reading any host", async () => {
    const r = new RotationRounds();
    const read = () => Promise.reject(new Error("not called"));
    expect(await r.turn({ maxAge: WEEK, batch: 1 }, { id: "p", createdAt: daysAgo(8) }, read, NOW)).toBe(
      true,
    );
  });

  it.each([
    ["unknown creation time", undefined],
    ["unparseable creation time", "yesterday"],
    ["younger than maxAge", daysAgo(6)],
  ])("does not rotate a proxy with %s", async (_what, createdAt) => {
    const r = new RotationRounds();
    expect(await r.turn(FLEET, { id: "p", createdAt }, async () => [], NOW)).toBe(false);
  });
});

describe("oldestDue", () => {
  it("breaks ties between equal ages by ID", () => {
    const same = daysAgo(9);
    const members = ["c", "a", "b"].map((id) => ({ id, createdAt: same }));
    expect([...oldestDue(members, FLEET, NOW)]).toEqual(["a", "b"]);
  });
});

describe("ages", () => {
  it("ageSeconds measures from an ISO time", () => {
    expect(ageSeconds(daysAgo(1), NOW)).toBe(86_400);
    expect(ageSeconds(42, NOW)).toBeUndefined();
  });
});
