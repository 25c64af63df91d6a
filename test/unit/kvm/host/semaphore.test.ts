import { describe, expect, it } from "vitest";
import { Semaphore } from "../../../../provider/kvm/host/semaphore";

describe("Semaphore", () => {
  it("holds at most its limit and lets waiters in, in arrival order", async () => {
    const s = new Semaphore(2);
    const order: number[] = [];
    let inFlight = 0;
    let most = 0;
    await Promise.all(
      [0, 1, 2, 3, 4, 5].map(async (i) => {
        const release = await s.acquire();
        order.push(i);
        inFlight += 1;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight -= 1;
        release();
      }),
    );
    expect(most).toBe(2);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    expect(s.inUse).toBe(0);
  });

  it("tells a waiter how many are ahead of it", async () => {
    const s = new Semaphore(1);
    const first = await s.acquire();
    const told: number[] = [];
    const second = s.acquire((n) => told.push(n));
    const third = s.acquire((n) => told.push(n));
    expect(told).toEqual([1, 2]);
    first();
    (await second)();
    (await third)();
    expect(s.inUse).toBe(0);
  });

  it("a release called twice frees one place only", async () => {
    const s = new Semaphore(1);
    const r = await s.acquire();
    r();
    r();
    const a = await s.acquire();
    let bIn = false;
    void s.acquire().then(() => {
      bIn = true;
    });
    await new Promise((res) => setTimeout(res, 5));
    expect(bIn).toBe(false);
    a();
  });
});
