/**
 * What a watched Pulumi run counts as progress (test/guest/engine-progress.ts):
 * the provider's status lines count once each without their elapsed times,
 * so a create that only reports the time passing shows no progress.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { Progress } from "../../../provider/kvm/progress";
import { progressText } from "../../../provider/resource/progress-text";
import { engineProgress } from "../../guest/engine-progress";

const dir = mkdtempSync(path.join(tmpdir(), "kvmpt-engine-progress-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function logOf(name: string, events: unknown[], partial = ""): string {
  const file = path.join(dir, name);
  writeFileSync(file, `${events.map((e) => JSON.stringify(e)).join("\n")}\n${partial}`);
  return file;
}

const status = (p: Progress) => ({ diagnosticEvent: { ephemeral: true, message: progressText(p) } });

describe("engineProgress", () => {
  it("is zero before the log exists", () => {
    expect(engineProgress(path.join(dir, "absent.jsonl"))).toEqual({ events: 0, lines: 0 });
  });

  it("counts a status line that differs only in its elapsed time once", () => {
    const waiting = [1_000, 61_000, 125_000].flatMap((elapsedMs) => [
      status({ kind: "wait-ip", elapsedMs }),
      status({ kind: "first-boot", elapsedMs, agent: false }),
      status({ kind: "bake", host: "local", phase: "booting", elapsedMs }),
      status({ kind: "ready", elapsedMs }),
    ]);
    expect(engineProgress(logOf("time.jsonl", waiting))).toEqual({ events: 0, lines: 4 });
  });

  it("counts a new stage, a new phase and more bytes as new lines", () => {
    const moving = [
      status({
        kind: "image-upload",
        bytes: 10 * 1024 * 1024,
        totalBytes: 300 * 1024 * 1024,
        elapsedMs: 1_000,
      }),
      status({
        kind: "image-upload",
        bytes: 90 * 1024 * 1024,
        totalBytes: 300 * 1024 * 1024,
        elapsedMs: 9_000,
      }),
      status({ kind: "first-boot", elapsedMs: 5_000, stage: "init" }),
      status({ kind: "first-boot", elapsedMs: 9_000, stage: "modules-final" }),
      status({ kind: "bake", host: "local", phase: "installing", elapsedMs: 200_000 }),
    ];
    expect(engineProgress(logOf("moving.jsonl", moving))).toEqual({ events: 0, lines: 5 });
  });

  it("counts the engine's other events one by one, and skips a line still being written", () => {
    const file = logOf(
      "events.jsonl",
      [{ resourcePreEvent: {} }, { diagnosticEvent: { message: "lasting" } }, { resOutputsEvent: {} }],
      '{"resourcePreEv',
    );
    expect(engineProgress(file)).toEqual({ events: 3, lines: 0 });
  });
});
