/**
 * The status command's Prometheus text as Prometheus' own checker reads it:
 * promtool (Debian's prometheus package, which the test host installs
 * without starting the server) parses and lints every form the report
 * takes, names and host keys with quotes, backslashes and line breaks
 * included. The booted proxies' real figures are test/pulumi/status.test.ts's
 * and test/guest/egress-fleet.test.ts's.
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  formatPrometheus,
  type ProxyStatus,
  type StatusReport,
} from "../../../provider/status/status-report";

function promtool(text: string): { code: number | null; out: string } {
  const r = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8", timeout: 30_000 });
  if (r.error !== undefined) throw r.error;
  return { code: r.status, out: `${r.stdout}${r.stderr}`.trim() };
}

const FULL: ProxyStatus = {
  name: "edge-0",
  fleet: "edge",
  host: "hv1",
  domain: "edge-0-1a2b3c4d",
  state: "running",
  addresses: ["192.0.2.60/24", "2001:db8::60/64"],
  egressAddress: "192.0.2.60",
  health: { ok: false, reason: 'squid said "no"' },
  ageSeconds: 3600,
  rotationDue: "2026-12-12T10:00:00.000Z",
  traffic: { receivedBytes: 2 ** 40, sentBytes: 0 },
  requests: { byClass: { "1xx": 0, "2xx": 10, "3xx": 1, "4xx": 5, "5xx": 2, other: 0 }, unreadable: 3 },
  problems: [],
};

function report(proxies: ProxyStatus[]): StatusReport {
  return { project: "crawl", stack: "prod", readAt: "2026-12-07T12:00:00.000Z", proxies, problems: [] };
}

describe("the status command's Prometheus text, checked by promtool", () => {
  it("positive control: promtool refuses a counter without _total and a label left open", () => {
    expect(promtool('# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes{a="1"} 3\n').code).not.toBe(0);
    expect(promtool('# HELP x_total b\n# TYPE x_total counter\nx_total{a="1\\"} 3\n').code).not.toBe(0);
  });

  it.each<[string, ProxyStatus[]]>([
    ["every family (a fleet member with all its figures)", [FULL]],
    [
      "a stopped proxy beside a running one",
      [
        FULL,
        {
          ...FULL,
          name: "edge-1",
          state: "stopped",
          health: undefined,
          traffic: undefined,
          requests: undefined,
        },
      ],
    ],
    [
      "a proxy without a fleet, an address or an egress address",
      [{ ...FULL, fleet: undefined, addresses: [], egressAddress: undefined }],
    ],
    [
      "names and host keys with quotes, backslashes and line breaks",
      [{ ...FULL, name: 'a"b\\c\nd', fleet: "f\n# TYPE x counter", host: 'h"}x 1\n', domain: "\\" }],
    ],
    ["three members", [0, 1, 2].map((i) => ({ ...FULL, name: `edge-${i}` }))],
  ])("%s: accepted, nothing to lint", (_what, proxies) => {
    const text = formatPrometheus(report(proxies));
    expect(promtool(text)).toEqual({ code: 0, out: "" });
  });

  it("an empty stack is an empty file, which promtool accepts", () => {
    expect(promtool(formatPrometheus(report([])))).toEqual({ code: 0, out: "" });
  });
});
