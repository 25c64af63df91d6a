/**
 * Renders a gc report: a table (every domain that is not held and belongs to
 * the judged projects) with a summary, or one JSON document with every
 * domain. Pure: returns text, the CLI prints it.
 */
import type { Verdict } from "./classify";
import type { GcReport, Problem, Row } from "./sweep";

/** `1d3h`, `2h5m`, `4m12s`, `15m`, `9s`; a negative age (clock skew) as `-9s`. */
export function formatAge(ms: number): string {
  if (!Number.isFinite(ms)) return "?";
  if (ms < 0) return `-${formatAge(-ms)}`;
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const two = (a: number, ua: string, b: number, ub: string) => (b > 0 ? `${a}${ua}${b}${ub}` : `${a}${ua}`);
  if (d > 0) return two(d, "d", h, "h");
  if (h > 0) return two(h, "h", m, "m");
  if (m > 0) return two(m, "m", s % 60, "s");
  return `${s}s`;
}

/** Verdicts the table shows; held and other projects' domains only count in the summary. */
const SHOWN: readonly Verdict[] = ["orphan", "unknown", "too-young", "unknown-backend"];

function status(row: Row): string {
  if (row.deleted !== undefined) return "deleted";
  return row.verdict;
}

function ownerStack(row: Row, project: string): string {
  const o = row.domain.metadata.owner;
  return o.project === project ? o.stack : `${o.project}/${o.stack}`;
}

/** Left-aligned columns separated by two spaces. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

function count(report: GcReport, v: Verdict): number {
  return report.rows.filter((r) => r.verdict === v).length;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** The human-readable report (stdout). Problems are rendered separately by {@link formatProblems}. */
export function formatText(report: GcReport): string {
  const shown = report.rows.filter((r) => SHOWN.includes(r.verdict));
  const out: string[] = [];
  if (shown.length > 0) {
    out.push(
      formatTable(
        ["HOST", "DOMAIN", "STACK", "URN", "AGE", "STATUS", "REASON"],
        shown.map((r) => [
          r.domain.host,
          r.domain.name,
          ownerStack(r, report.project),
          r.domain.metadata.owner.urn,
          formatAge(r.ageMs),
          status(r),
          r.reason,
        ]),
      ),
      "",
    );
  }
  const orphans = count(report, "orphan");
  out.push(
    `${plural(report.rows.length, "managed VM")} on ${plural(report.hosts.length, "host")} ` +
      `(project ${report.project}, hosts from stack ${report.stack}): ` +
      `${plural(orphans, "orphan")}, ${count(report, "held")} held, ${count(report, "unknown")} unknown, ` +
      `${count(report, "too-young")} younger than ${formatAge(report.minAgeMs)}, ` +
      `${count(report, "other-project")} of other projects` +
      (count(report, "unknown-backend") > 0
        ? `, ${count(report, "unknown-backend")} of other backends (not judged).`
        : "."),
  );
  if (report.deleteRequested) {
    for (const r of report.rows.filter((x) => x.deleted !== undefined)) {
      const vols = r.deleted?.volumesRemoved ?? [];
      out.push(
        `deleted ${r.domain.host}/${r.domain.name}${vols.length > 0 ? ` and volumes ${vols.join(", ")}` : ""}`,
      );
    }
    const deleted = report.rows.filter((r) => r.deleted !== undefined).length;
    out.push(`Deleted ${deleted} of ${plural(orphans, "orphan")}.`);
  } else if (orphans > 0) {
    out.push(
      `Dry run: nothing deleted. Rerun with --delete to delete ${orphans === 1 ? "it" : `these ${orphans}`}.`,
    );
  }
  for (const b of report.builders) {
    out.push(
      b.removed !== undefined
        ? `removed leftover bake builder ${b.host}/${b.name}${b.removed.length > 1 ? ` (and ${b.removed.slice(1).join(", ")})` : ""}`
        : `leftover bake builder ${b.host}/${b.name}: a bake cut short left it; --delete removes it and its seed`,
    );
  }
  return `${out.join("\n")}\n`;
}

/** One `error:` line per problem (stderr). */
export function formatProblems(problems: readonly Problem[]): string {
  return problems.map((p) => `error: ${p.scope} ${p.subject}: ${p.message}\n`).join("");
}

/** The JSON document: every domain, with its verdict, and every problem. */
export function formatJson(report: GcReport): string {
  return `${JSON.stringify(
    {
      project: report.project,
      stack: report.stack,
      hosts: report.hosts,
      minAgeSeconds: report.minAgeMs / 1000,
      delete: report.deleteRequested,
      domains: report.rows.map((r) => ({
        host: r.domain.host,
        domain: r.domain.name,
        uuid: r.domain.uuid,
        providerId: r.domain.providerId,
        project: r.domain.metadata.owner.project,
        stack: r.domain.metadata.owner.stack,
        urn: r.domain.metadata.owner.urn,
        createdAt: r.domain.metadata.createdAt,
        ageSeconds: Math.floor(r.ageMs / 1000),
        verdict: r.verdict,
        reason: r.reason,
        ...(r.deleted !== undefined ? { deleted: true, volumesRemoved: r.deleted.volumesRemoved } : {}),
      })),
      builders: report.builders,
      problems: report.problems,
    },
    null,
    2,
  )}\n`;
}
