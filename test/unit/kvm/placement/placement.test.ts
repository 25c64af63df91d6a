import { describe, expect, it } from "vitest";
import type { HostCapacity } from "../../../../provider/kvm/placement/capacity";
import {
  availableMemoryMiB,
  choosePlacement,
  type HostUsage,
  reservationCapacity,
  reservationDomain,
  reservationName,
  reservationRequest,
  roomLeft,
} from "../../../../provider/kvm/placement/placement";

const REQ = { memoryMiB: 512, vcpus: 1 };

function host(name: string, capacity: Partial<HostCapacity>, used: Partial<HostUsage> = {}): HostUsage {
  return {
    host: name,
    capacity: { concurrentCreates: 4, ...capacity },
    proxies: 0,
    memoryMiB: 0,
    vcpus: 0,
    ...used,
  };
}

/** Places `n` VMs one after another, counting each on its host, as the placer does. */
function placeMany(pool: HostUsage[], n: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const p = choosePlacement(pool, REQ);
    if ("full" in p) throw new Error(p.full);
    out.push(p.host);
    const h = pool.find((x) => x.host === p.host) as HostUsage;
    h.proxies += 1;
    h.memoryMiB += REQ.memoryMiB;
    h.vcpus += REQ.vcpus;
  }
  return out;
}

function counts(hosts: string[]): Record<string, number> {
  const c: Record<string, number> = {};
  for (const h of hosts) c[h] = (c[h] ?? 0) + 1;
  return c;
}

describe("choosePlacement", () => {
  it.each([
    [
      "the host with the most room left wins",
      [host("a", { proxies: 4 }, { proxies: 3 }), host("b", { proxies: 4 }, { proxies: 1 })],
      "b",
    ],
    [
      "room is the fraction left, not the count: 3 of 4 free beats 5 of 10 free",
      [host("a", { proxies: 10 }, { proxies: 5 }), host("b", { proxies: 4 }, { proxies: 1 })],
      "b",
    ],
    [
      "with no limits declared, the host with fewer proxies wins",
      [host("a", {}, { proxies: 3 }), host("b", {}, { proxies: 2 })],
      "b",
    ],
    ["ties go to the key that sorts first", [host("b", { proxies: 4 }), host("a", { proxies: 4 })], "a"],
    [
      "the tightest dimension counts",
      [host("a", { proxies: 10, memoryMiB: 1024 }), host("b", { proxies: 10, memoryMiB: 4096 })],
      "b",
    ],
    [
      "a host declaring no limit has all its room",
      [host("a", { proxies: 4 }, { proxies: 1 }), host("b", {})],
      "b",
    ],
    [
      "a host that cannot give the memory (free, buffers and page cache) is skipped",
      [host("a", {}, { availableMemoryMiB: 256 }), host("b", { proxies: 1 })],
      "b",
    ],
  ])("%s", (_what, pool, expected) => {
    expect(choosePlacement(pool, REQ)).toEqual({ host: expected });
  });

  it("fills capacities 2/4/6 with 12 proxies exactly", () => {
    const pool = [host("h2", { proxies: 2 }), host("h4", { proxies: 4 }), host("h6", { proxies: 6 })];
    expect(counts(placeMany(pool, 12))).toEqual({ h2: 2, h4: 4, h6: 6 });
  });

  it("puts growth on a new host and nothing else moves (placement only adds)", () => {
    const pool = [
      host("h2", { proxies: 2 }, { proxies: 2 }),
      host("h4", { proxies: 4 }, { proxies: 4 }),
      host("h6", { proxies: 6 }, { proxies: 6 }),
      host("h9", { proxies: 2 }),
    ];
    expect(placeMany(pool, 2)).toEqual(["h9", "h9"]);
  });

  it("is the same for the same state, whatever the pool's order", () => {
    const a = [host("x", { proxies: 3 }, { proxies: 1 }), host("y", { proxies: 6 }, { proxies: 2 })];
    expect(choosePlacement(a, REQ)).toEqual(choosePlacement([...a].reverse(), REQ));
  });

  it("says why no host has room: the pool and each host's free slots", () => {
    const p = choosePlacement(
      [
        host("h2", { proxies: 2 }, { proxies: 2 }),
        host("h4", { proxies: 4, memoryMiB: 2048 }, { proxies: 1, memoryMiB: 1800 }),
      ],
      REQ,
    );
    expect(p).toEqual({
      full: "no host of the pool [h2, h4] has room for 512 MiB and 1 vCPU (h2: 0 proxy slots free; h4: 3 proxy slots, 248 MiB free)",
    });
  });

  it("roomLeft is 0 when the request fills the host exactly and negative past it", () => {
    expect(roomLeft(host("a", { proxies: 2 }, { proxies: 1 }), REQ)).toBe(0);
    expect(roomLeft(host("a", { proxies: 2 }, { proxies: 2 }), REQ)).toBeLessThan(0);
  });
});

describe("reservations", () => {
  it("a reservation's capacity carries what it reserves", () => {
    for (const req of [REQ, { memoryMiB: 65536, vcpus: 32 }, { memoryMiB: 1, vcpus: 1 }]) {
      expect(reservationRequest(reservationCapacity(req))).toEqual(req);
    }
  });

  it.each([
    ["edge-1", "0123abcd"],
    ["crawl-3-deadbeef", "ffffffff"],
  ])("the name of %s's reservation gives back its domain", (domain, tag) => {
    expect(reservationDomain(reservationName(domain, tag))).toBe(domain);
  });

  it.each(["edge-1-root.qcow2", "kvmp-rsv-edge", "kvmp-placement.lock"])("%s is not a reservation", (v) => {
    expect(reservationDomain(v)).toBeUndefined();
  });
});

describe("the memory a host can give a new VM (from virNodeGetMemoryStats, KiB)", () => {
  it.each([
    [
      "free, buffers and page cache together",
      { total: 8388608, free: 102400, buffers: 51200, cached: 4194304 },
      4246,
    ],
    ["free alone when the others are not reported", { total: 8388608, free: 1048576 }, 1024],
    ["nothing without a free figure", { total: 8388608, cached: 4194304 }, undefined],
    ["nothing from no figures", {}, undefined],
  ])("%s", (_what, stats, expected) => {
    expect(availableMemoryMiB(stats)).toBe(expected);
  });

  it("a host with little free memory but gigabytes of page cache has room; one without has not", () => {
    const cached = {
      ...host("a", {}),
      availableMemoryMiB: availableMemoryMiB({ free: 102400, cached: 4194304 }),
    };
    const bare = { ...host("b", {}), availableMemoryMiB: availableMemoryMiB({ free: 102400 }) };
    expect(choosePlacement([cached], REQ)).toEqual({ host: "a" });
    expect(choosePlacement([bare], REQ)).toEqual({
      full: expect.stringContaining("b: 100 MiB host memory free") as unknown as string,
    });
  });
});
