import { describe, expect, it } from "vitest";
import { CREATE_STEPS, type Progress } from "../../../provider/kvm/progress";
import { progressText } from "../../../provider/resource/progress-text";

describe("progress text", () => {
  it.each<[Progress, string]>([
    [{ kind: "queued" }, "waiting for another create of this name to finish"],
    [{ kind: "step", step: "define" }, "defining the domain"],
    [
      { kind: "image-upload", bytes: 96 * 1024 * 1024, totalBytes: 180 * 1024 * 1024, elapsedMs: 2000 },
      "uploading the image: 96 of 180 MiB, 50 MB/s",
    ],
    [{ kind: "image-upload", bytes: 1024 * 1024, elapsedMs: 0 }, "uploading the image: 1 MiB"],
    [{ kind: "wait-ip", elapsedMs: 12_345 }, "waiting for the guest's IP address (12s)"],
    [
      { kind: "bake", host: "hv-1", phase: "installing", elapsedMs: 130_400 },
      "baking image on hv-1: installing packages (2m10s)",
    ],
    [
      { kind: "bake", host: "hv-1", phase: "booting", elapsedMs: 9_000 },
      "baking image on hv-1: booting the builder (9s)",
    ],
    [
      { kind: "bake", host: "hv-2", phase: "waiting", elapsedMs: 61_000 },
      "baking image on hv-2: another process is baking it (1m01s)",
    ],
    [{ kind: "ready", elapsedMs: 5_000 }, "waiting for the proxy to pass its health check (5s)"],
  ])("%j reads %j", (p, text) => {
    expect(progressText(p)).toBe(text);
  });

  it("words every step of create, each differently", () => {
    const texts = CREATE_STEPS.map((step) => progressText({ kind: "step", step }));
    expect(new Set(texts).size).toBe(CREATE_STEPS.length);
    for (const t of texts) expect(t).toMatch(/^[a-z]/);
  });
});
