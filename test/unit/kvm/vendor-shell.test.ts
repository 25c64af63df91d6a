/**
 * The shell functions the vendor scripts share (kvm/vendor-shell.ts),
 * run by the real sh with a systemctl on PATH that answers `is-enabled` as
 * told and records what it was asked.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ENABLE_FUNCTION } from "../../../provider/kvm/vendor-shell";

const dir = mkdtempSync(path.join(tmpdir(), "kvmpt-vendor-shell-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `enable_unit squid` against a systemctl whose is-enabled prints `state` and exits `code`; returns its calls. */
function enableUnit(state: string, code: number): string[] {
  const calls = path.join(dir, `calls-${state || "none"}-${code}`);
  const bin = path.join(dir, `bin-${state || "none"}-${code}`);
  execFileSync("mkdir", ["-p", bin]);
  writeFileSync(
    path.join(bin, "systemctl"),
    `#!/bin/sh\necho "$*" >>${calls}\n[ "$1" = is-enabled ] && { [ -n "${state}" ] && echo "${state}"; exit ${code}; }\nexit 0\n`,
  );
  chmodSync(path.join(bin, "systemctl"), 0o755);
  writeFileSync(calls, "");
  execFileSync("sh", ["-c", `log() { :; }\n${ENABLE_FUNCTION}\nenable_unit squid`], {
    env: { PATH: `${bin}:/usr/bin:/bin` },
  });
  return readFileSync(calls, "utf8").split("\n").filter(Boolean);
}

describe("enable_unit", () => {
  it.each([
    ["enabled", 0, ["is-enabled squid"]],
    ["static", 0, ["is-enabled squid"]],
    ["disabled", 1, ["is-enabled squid", "enable squid"]],
    ["masked", 1, ["is-enabled squid", "enable squid"]],
    ["enabled-runtime", 0, ["is-enabled squid", "enable squid"]],
    ["", 1, ["is-enabled squid", "enable squid"]],
  ])("is-enabled saying %j (exit %i): systemctl is asked %j", (state, code, calls) => {
    expect(enableUnit(state, code)).toEqual(calls);
  });
});
