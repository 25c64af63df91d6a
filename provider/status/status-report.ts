/**
 * What `pulumi-kvm-proxy status` reports, and its three forms: a table for
 * people, one JSON document, and Prometheus' text exposition format for a
 * node exporter's textfile collector. Pure.
 *
 * Nothing secret is in a row: names, host keys, addresses, states, counts
 * and probe reasons (which the provider already cleans of secrets), never a
 * credential. Label values are escaped as the text format asks (`\`, `"`,
 * newline), so no value can end a label or start a line of its own.
 */
import { durationText } from "../errors";
import { type SquidRequests, STATUS_CLASSES } from "../kvm/guest/squid-requests";

/** One proxy as `status` found it now. */
export interface ProxyStatus {
  /** Its name in the program (the URN's last part). */
  name: string;
  /** The ProxyFleet it is a member of, by name. */
  fleet?: string;
  host: string;
  /** The libvirt domain's name. */
  domain: string;
  /** running, degraded, stopped, failed, provisioning; `missing`: no VM of its name on its host; `unknown`: not read. */
  state: string;
  /** Every address of every NIC (CIDR), as the guest reports them. */
  addresses: string[];
  /** The address its egress check saw its requests come from, probed now. */
  egressAddress?: string;
  /** Its health check, probed now. */
  health?: { ok: boolean; reason?: string };
  /** When the VM was made (ISO 8601). */
  createdAt?: string;
  ageSeconds?: number;
  /** When its rotation's maxAge is reached (ISO 8601): the first `up` after it replaces it. */
  rotationDue?: string;
  /** Bytes through its NICs since the VM's last start, as the guest sees them. */
  traffic?: { receivedBytes: number; sentBytes: number };
  /** Requests its squid answered since the boot, by status class (kvm/guest/squid-requests.ts). */
  requests?: SquidRequests;
  /** What could not be read about it (its host, its counters, its agent). */
  problems: string[];
}

/** Everything one `status` run found. */
export interface StatusReport {
  project: string;
  stack: string;
  /** When it was read (ISO 8601). */
  readAt: string;
  proxies: ProxyStatus[];
  /** What could not be read at all (the stack, a host). */
  problems: { subject: string; message: string }[];
}

/** Byte counts for people: 1023 B, 1.5 KiB, 20.0 MiB. */
export function bytesText(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

const COLUMNS = [
  "NAME",
  "HOST",
  "STATE",
  "ADDRESSES",
  "EGRESS",
  "HEALTH",
  "AGE",
  "ROTATES IN",
  "IN",
  "OUT",
  ...STATUS_CLASSES.map((c) => c.toUpperCase()),
] as const;

/** The table: one row per proxy, then what could not be read. */
export function formatTable(report: StatusReport, now: number = Date.parse(report.readAt)): string {
  const rows = report.proxies.map((p) => [
    p.fleet !== undefined ? `${p.fleet}/${p.name}` : p.name,
    p.host,
    p.state,
    p.addresses.length > 0 ? p.addresses.join(",") : "-",
    p.egressAddress ?? "-",
    p.health === undefined ? "-" : p.health.ok ? "ok" : "failing",
    p.ageSeconds !== undefined ? durationText(p.ageSeconds * 1000) : "-",
    p.rotationDue !== undefined ? durationText(Math.max(0, Date.parse(p.rotationDue) - now)) : "-",
    p.traffic !== undefined ? bytesText(p.traffic.receivedBytes) : "-",
    p.traffic !== undefined ? bytesText(p.traffic.sentBytes) : "-",
    ...STATUS_CLASSES.map((c) => (p.requests !== undefined ? String(p.requests.byClass[c]) : "-")),
  ]);
  const widths = COLUMNS.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] as number))
      .join("  ")
      .trimEnd();
  const out = [`${report.project}/${report.stack} at ${report.readAt}`, line(COLUMNS), ...rows.map(line)];
  if (report.proxies.length === 0) out.push("(no proxies in this stack)");
  const notes = [
    ...report.proxies.flatMap((p) => [
      ...(p.health !== undefined && !p.health.ok
        ? [`${p.name}: health: ${p.health.reason ?? "failing"}`]
        : []),
      ...p.problems.map((m) => `${p.name}: ${m}`),
    ]),
    ...report.problems.map((p) => `${p.subject}: ${p.message}`),
  ];
  if (notes.length > 0) out.push("", ...notes);
  return `${out.join("\n")}\n`;
}

/** One JSON document. */
export function formatJson(report: StatusReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}

/** A label value as the text format writes it. */
export function labelValue(v: string): string {
  return v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

interface Family {
  name: string;
  type: "gauge" | "counter";
  help: string;
  samples: { labels: Record<string, string>; value: number }[];
}

/**
 * Prometheus' text format (version 0.0.4): one family per metric, each
 * sample labelled with the proxy, its fleet, host and domain. Counters are
 * the VM's own (they restart with it); nothing is stored between runs.
 */
export function formatPrometheus(report: StatusReport): string {
  const families: Family[] = [
    {
      name: "kvmproxy_info",
      type: "gauge",
      help: "A proxy of the stack, with its state and addresses.",
      samples: [],
    },
    {
      name: "kvmproxy_up",
      type: "gauge",
      help: "Whether the proxy answered its health check now.",
      samples: [],
    },
    { name: "kvmproxy_age_seconds", type: "gauge", help: "Time since the proxy's VM was made.", samples: [] },
    {
      name: "kvmproxy_rotation_due_timestamp_seconds",
      type: "gauge",
      help: "When the proxy reaches its rotation's maxAge (Unix time).",
      samples: [],
    },
    {
      name: "kvmproxy_network_receive_bytes_total",
      type: "counter",
      help: "Bytes into the proxy's VM through its NICs since its last start.",
      samples: [],
    },
    {
      name: "kvmproxy_network_transmit_bytes_total",
      type: "counter",
      help: "Bytes out of the proxy's VM through its NICs since its last start.",
      samples: [],
    },
    {
      name: "kvmproxy_http_requests_total",
      type: "counter",
      help: "Requests the proxy's squid answered since the VM booted, by status class.",
      samples: [],
    },
  ];
  const [info, up, age, due, rx, tx, requests] = families as [
    Family,
    Family,
    Family,
    Family,
    Family,
    Family,
    Family,
  ];
  for (const p of report.proxies) {
    const id = { proxy: p.name, fleet: p.fleet ?? "", host: p.host, domain: p.domain };
    info.samples.push({
      labels: {
        ...id,
        state: p.state,
        address: p.addresses.map((a) => a.replace(/\/[0-9]+$/, "")).join(","),
        egress_address: p.egressAddress ?? "",
      },
      value: 1,
    });
    if (p.health !== undefined) up.samples.push({ labels: id, value: p.health.ok ? 1 : 0 });
    if (p.ageSeconds !== undefined) age.samples.push({ labels: id, value: Math.floor(p.ageSeconds) });
    if (p.rotationDue !== undefined)
      due.samples.push({ labels: id, value: Date.parse(p.rotationDue) / 1000 });
    if (p.traffic !== undefined) {
      rx.samples.push({ labels: id, value: p.traffic.receivedBytes });
      tx.samples.push({ labels: id, value: p.traffic.sentBytes });
    }
    if (p.requests !== undefined) {
      for (const c of STATUS_CLASSES)
        requests.samples.push({ labels: { ...id, code_class: c }, value: p.requests.byClass[c] });
    }
  }
  const out: string[] = [];
  for (const f of families) {
    if (f.samples.length === 0) continue;
    out.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) {
      const labels = Object.entries(s.labels)
        .map(([k, v]) => `${k}="${labelValue(v)}"`)
        .join(",");
      out.push(`${f.name}{${labels}} ${s.value}`);
    }
  }
  return out.length > 0 ? `${out.join("\n")}\n` : "";
}
