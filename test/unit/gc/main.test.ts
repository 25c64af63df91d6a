import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli as run } from "../../support/run-cli";

const empty = mkdtempSync(path.join(os.tmpdir(), "kvmp-gc-"));
afterAll(() => rmSync(empty, { recursive: true, force: true }));

describe("the pulumi-kvm-proxy command", () => {
  it("prints its usage: exit 0 when asked, 2 without a command", async () => {
    expect(await run("--help")).toMatchObject({ code: 0, out: expect.stringContaining("gc ") });
    expect((await run()).code).toBe(2);
  });

  it("refuses an unknown command with exit 2", async () => {
    const r = await run("sweep");
    expect(r.code).toBe(2);
    expect(r.err).toContain('unknown command "sweep"');
  });

  it("gc --help prints the options and exit codes", async () => {
    const r = await run("gc", "--help");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/--delete/);
    expect(r.out).toMatch(/Exit codes: 0 done; 1 /);
  });

  it("a bad gc option is a usage error (exit 2) that shows gc's usage", async () => {
    const r = await run("gc", "--min-age", "soon");
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^error: --min-age "soon" is not a duration/);
    expect(r.err).toContain("Usage: pulumi-kvm-proxy gc");
  });

  it("outside a Pulumi project gc fails with exit 1 before running anything", async () => {
    const r = await run("gc", "--cwd", empty);
    expect(r.code).toBe(1);
    expect(r.err).toBe(
      `error: no Pulumi.yaml in ${empty}: run gc in the Pulumi project folder or pass --cwd\n`,
    );
    expect(r.out).toBe("");
  });
});
