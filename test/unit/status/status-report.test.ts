import { describe, expect, it } from "vitest";
import {
  bytesText,
  formatJson,
  formatPrometheus,
  formatTable,
  labelValue,
  type ProxyStatus,
  type StatusReport,
} from "../../../provider/status/status-report";

const READ_AT = "2026-12-07T12:00:00.000Z";

function proxy(over: Partial<ProxyStatus> = {}): ProxyStatus {
  return {
    name: "edge-0",
    fleet: "edge",
    host: "hv1",
    domain: "edge-0-1a2b3c4d",
    state: "running",
    addresses: ["192.0.2.60/24", "2001:db8::60/64"],
    egressAddress: "192.0.2.60",
    health: { ok: true },
    createdAt: "2026-12-05T10:00:00.000Z",
    ageSeconds: 2 * 86_400 + 2 * 3600,
    rotationDue: "2026-12-12T10:00:00.000Z",
    traffic: { receivedBytes: 3 * 1024 * 1024, sentBytes: 1536 },
    requests: { byClass: { "1xx": 0, "2xx": 10, "3xx": 1, "4xx": 5, "5xx": 2, other: 0 }, unreadable: 0 },
    problems: [],
    ...over,
  };
}

function report(proxies: ProxyStatus[], problems: StatusReport["problems"] = []): StatusReport {
  return { project: "crawl", stack: "prod", readAt: READ_AT, proxies, problems };
}

describe("the figures people read", () => {
  it.each([
    [0, "0 B"],
    [1023, "1023 B"],
    [1024, "1.0 KiB"],
    [1536, "1.5 KiB"],
    [20 * 1024 * 1024, "20.0 MiB"],
    [5 * 1024 ** 4, "5.0 TiB"],
  ])("%i bytes: %s", (n, text) => {
    expect(bytesText(n)).toBe(text);
  });
});

describe("the table", () => {
  it("a row per proxy named fleet/member, aligned under its header, with what failed beneath", () => {
    const t = formatTable(
      report(
        [
          proxy(),
          proxy({
            name: "solo",
            fleet: undefined,
            state: "degraded",
            addresses: [],
            egressAddress: undefined,
            health: { ok: false, reason: "squid did not answer within 5s" },
            rotationDue: undefined,
            traffic: undefined,
            requests: undefined,
            problems: ["requests: the guest agent does not answer"],
          }),
        ],
        [{ subject: "hv2", message: "connection refused" }],
      ),
    );
    const lines = t.split("\n");
    expect(lines[0]).toBe(`crawl/prod at ${READ_AT}`);
    expect(lines[1]).toMatch(/^NAME {2,}HOST {2,}STATE/);
    expect(lines[2]).toMatch(
      /^edge\/edge-0 +hv1 +running +192\.0\.2\.60\/24,2001:db8::60\/64 +192\.0\.2\.60 +ok +2 d 2 h +4 d 22 h +3\.0 MiB +1\.5 KiB +0 +10 +1 +5 +2 +0$/,
    );
    expect(lines[3]).toMatch(/^solo +hv1 +degraded +- +- +failing +2 d 2 h +- +- +- +- +- +- +- +- +-$/);
    // Columns line up: HOST starts where every row's host does.
    const col = (lines[1] as string).indexOf("HOST");
    expect((lines[2] as string).slice(col, col + 3)).toBe("hv1");
    expect((lines[3] as string).slice(col, col + 3)).toBe("hv1");
    expect(lines.slice(5)).toEqual([
      "solo: health: squid did not answer within 5s",
      "solo: requests: the guest agent does not answer",
      "hv2: connection refused",
      "",
    ]);
  });

  it("says so when the stack has no proxy", () => {
    expect(formatTable(report([]))).toContain("(no proxies in this stack)");
  });
});

describe("JSON", () => {
  it("is the report itself", () => {
    const r = report([proxy()]);
    expect(JSON.parse(formatJson(r))).toEqual(r);
  });
});

describe("Prometheus' text format", () => {
  it("one family each with HELP and TYPE, a sample per proxy, requests per status class", () => {
    const text = formatPrometheus(report([proxy()]));
    const id = 'proxy="edge-0",fleet="edge",host="hv1",domain="edge-0-1a2b3c4d"';
    expect(text.split("\n")).toEqual([
      "# HELP kvmproxy_info A proxy of the stack, with its state and addresses.",
      "# TYPE kvmproxy_info gauge",
      `kvmproxy_info{${id},state="running",address="192.0.2.60,2001:db8::60",egress_address="192.0.2.60"} 1`,
      "# HELP kvmproxy_up Whether the proxy answered its health check now.",
      "# TYPE kvmproxy_up gauge",
      `kvmproxy_up{${id}} 1`,
      "# HELP kvmproxy_age_seconds Time since the proxy's VM was made.",
      "# TYPE kvmproxy_age_seconds gauge",
      `kvmproxy_age_seconds{${id}} 180000`,
      "# HELP kvmproxy_rotation_due_timestamp_seconds When the proxy reaches its rotation's maxAge (Unix time).",
      "# TYPE kvmproxy_rotation_due_timestamp_seconds gauge",
      `kvmproxy_rotation_due_timestamp_seconds{${id}} ${Date.parse("2026-12-12T10:00:00.000Z") / 1000}`,
      "# HELP kvmproxy_network_receive_bytes_total Bytes into the proxy's VM through its NICs since its last start.",
      "# TYPE kvmproxy_network_receive_bytes_total counter",
      `kvmproxy_network_receive_bytes_total{${id}} 3145728`,
      "# HELP kvmproxy_network_transmit_bytes_total Bytes out of the proxy's VM through its NICs since its last start.",
      "# TYPE kvmproxy_network_transmit_bytes_total counter",
      `kvmproxy_network_transmit_bytes_total{${id}} 1536`,
      "# HELP kvmproxy_http_requests_total Requests the proxy's squid answered since the VM booted, by status class.",
      "# TYPE kvmproxy_http_requests_total counter",
      ...["1xx", "2xx", "3xx", "4xx", "5xx", "other"].map(
        (c, i) => `kvmproxy_http_requests_total{${id},code_class="${c}"} ${[0, 10, 1, 5, 2, 0][i]}`,
      ),
      "",
    ]);
  });

  it("leaves out what was not read rather than writing a zero: a stopped proxy is only its info", () => {
    const text = formatPrometheus(
      report([
        proxy({
          state: "stopped",
          health: undefined,
          ageSeconds: undefined,
          rotationDue: undefined,
          traffic: undefined,
          requests: undefined,
        }),
      ]),
    );
    expect(text.split("\n").filter((l) => !l.startsWith("#") && l !== "")).toEqual([
      'kvmproxy_info{proxy="edge-0",fleet="edge",host="hv1",domain="edge-0-1a2b3c4d",state="stopped",address="192.0.2.60,2001:db8::60",egress_address="192.0.2.60"} 1',
    ]);
    expect(formatPrometheus(report([]))).toBe("");
  });

  it.each([
    ['a"b', 'a\\"b'],
    ["a\\b", "a\\\\b"],
    ["a\nb", "a\\nb"],
    ['\\"\n', '\\\\\\"\\n'],
    ["plain-name_0", "plain-name_0"],
  ])("a label value %j is written %j: it can neither end the label nor start a line", (v, written) => {
    expect(labelValue(v)).toBe(written);
    const text = formatPrometheus(report([proxy({ name: v })]));
    expect(text.split("\n").filter((l) => l.startsWith("kvmproxy_info"))).toHaveLength(1);
  });
});
