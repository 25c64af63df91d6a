import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  durationText,
  isTransient,
  ProviderError,
  REPORT_URL,
  TimeoutError,
  UPGRADE_ACTION,
} from "../../provider/errors";
import { internalFailure } from "../../provider/kvm/validation";

describe("error classes", () => {
  it.each([
    [new ProviderError("transient", "x"), true],
    [new ProviderError("permanent", "x"), false],
    [new TimeoutError("reply to virDomainCreate", 5), true],
    [new Error("plain"), false],
    ["a string", false],
  ])("isTransient(%o) is %s", (err, expected) => {
    expect(isTransient(err)).toBe(expected);
  });

  it("a timeout names what it waited for, in human units", () => {
    expect(new TimeoutError("an IP address for kvmp-a", 1500).message).toBe(
      "timed out after 1.5 s waiting for an IP address for kvmp-a",
    );
  });

  it.each([
    ["timeouts.create", 587_000, "timed out after 9 min 47 s (timeouts.create) waiting for a healthy proxy"],
    [
      "the host's callTimeout",
      2_000,
      "timed out after 2 s (the host's callTimeout) waiting for a healthy proxy",
    ],
    [
      "customTimeouts.create",
      1_000,
      "timed out after 1 s (customTimeouts.create) waiting for a healthy proxy",
    ],
  ])("a timeout names the setting that sets it (%s)", (setting, ms, text) => {
    const err = new TimeoutError("a healthy proxy", ms, setting);
    expect(err.message).toBe(text);
    expect(err.setting).toBe(setting);
  });
});

describe("durationText", () => {
  it.each([
    [0, "0 ms"],
    [250, "250 ms"],
    [999.6, "1 s"],
    [1_000, "1 s"],
    [1_500, "1.5 s"],
    [9_950, "10 s"],
    [45_000, "45 s"],
    [60_000, "1 min"],
    [587_000, "9 min 47 s"],
    [600_000, "10 min"],
    [3_600_000, "1 h"],
    [7_500_000, "2 h 5 min"],
    [86_400_000, "1 d"],
    [97_200_000, "1 d 3 h"],
    [86_401_000, "1 d 1 s"],
    [3_660_000, "1 h 1 min"],
    [3_601_000, "1 h 1 s"],
    [-2_000, "-2 s"],
    [Number.NaN, "?"],
    [Number.POSITIVE_INFINITY, "?"],
  ])("%d ms reads %s", (ms, text) => {
    expect(durationText(ms)).toBe(text);
  });

  it("never prints a bare count of milliseconds past one second", () => {
    for (let ms = 1_000; ms < 200_000_000; ms = Math.round(ms * 1.37 + 7)) {
      expect(durationText(ms)).not.toMatch(/\bms\b/);
      expect(durationText(ms)).toMatch(/^\d+(\.\d)? (s|min|h|d)( \d+ (s|min|h))?$/);
    }
  });
});

describe("where to report, what to upgrade", () => {
  const pkg = JSON.parse(readFileSync(path.join(__dirname, "../../package.json"), "utf8")) as {
    name: string;
    bugs?: { url?: string };
    bin: Record<string, string>;
  };

  it("reports to the package's bugs URL, and an internal error names it", () => {
    expect(pkg.bugs?.url).toBe(REPORT_URL);
    expect(internalFailure(new RangeError("x"))).toBe(
      `could not be checked (internal error: RangeError); please report this at ${REPORT_URL}`,
    );
  });

  it("names the package, its plugin and the command that upgrades both", () => {
    expect(UPGRADE_ACTION).toContain(`npm install ${pkg.name}@latest`);
    expect(UPGRADE_ACTION).toContain(pkg.bin["pulumi-resource-kvmproxy"] as string);
  });
});
