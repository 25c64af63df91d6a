import { describe, expect, it } from "vitest";
import { parseSquidRequests, squidRequestsArgs } from "../../../../provider/kvm/guest/squid-requests";

const COUNTS = { "1xx": 0, "2xx": 7, "3xx": 1, "4xx": 3, "5xx": 2, other: 1 };

describe("reading the count squid's access log gave in the guest", () => {
  it("the counts by class and the lines it could not read", () => {
    expect(parseSquidRequests(`${JSON.stringify({ byClass: COUNTS, unreadable: 4 })}\n`, 0)).toEqual({
      ok: true,
      requests: { byClass: COUNTS, unreadable: 4 },
    });
  });

  it.each([
    [
      "the program's own reason",
      "error no access log at /var/log/squid/access.log\n",
      "no access log at /var/log/squid/access.log",
    ],
    ["nothing printed", "", "the count in the guest printed no result (exit 1)"],
    ["not JSON", "Traceback (most recent call last):", "the count in the guest printed no result (exit 1)"],
    [
      "a class missing",
      JSON.stringify({ byClass: { ...COUNTS, "5xx": undefined }, unreadable: 0 }),
      "the count in the guest printed no 5xx count",
    ],
    [
      "a negative count",
      JSON.stringify({ byClass: { ...COUNTS, "2xx": -1 }, unreadable: 0 }),
      "the count in the guest printed no 2xx count",
    ],
    [
      "a fraction",
      JSON.stringify({ byClass: { ...COUNTS, "4xx": 1.5 }, unreadable: 0 }),
      "the count in the guest printed no 4xx count",
    ],
    [
      "no unreadable count",
      JSON.stringify({ byClass: COUNTS }),
      "the count in the guest printed an unexpected result",
    ],
    ["null", "null", "the count in the guest printed an unexpected result"],
  ])("%s: a reason, never made-up counts", (_what, stdout, reason) => {
    expect(parseSquidRequests(stdout, 1)).toEqual({ ok: false, reason });
  });

  it("the program gets the log's path and its deadline as arguments, nothing of the user's", () => {
    const args = squidRequestsArgs(15_000);
    expect(args.slice(2)).toEqual(["/var/log/squid/access.log", "15000"]);
    expect(args[0]).toBe("-c");
  });
});
