/**
 * How far a Pulumi engine run has got, read from its event log
 * (`--event-log`): what a watched CLI run counts as progress. Pure but for
 * reading the file.
 */
import { existsSync, readFileSync } from "node:fs";

/**
 * How far an engine run has got, from its event log: how many events, and
 * the distinct status lines the provider sent without the numbers that
 * change with time alone ("(42s)", "2m10s", "35 MB/s").
 */
export function engineProgress(eventLog: string): { events: number; lines: number } {
  if (!existsSync(eventLog)) return { events: 0, lines: 0 };
  const lines = new Set<string>();
  let events = 0;
  for (const line of readFileSync(eventLog, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    let event: { diagnosticEvent?: { ephemeral?: boolean; message?: string } };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      continue; // a line being written
    }
    const d = event.diagnosticEvent;
    if (d?.ephemeral === true) {
      lines.add((d.message ?? "").replace(/\d+m\d{2}s|\b\d+s\b|, \d+ MB\/s/g, "#"));
    } else {
      events++;
    }
  }
  return { events, lines: lines.size };
}
