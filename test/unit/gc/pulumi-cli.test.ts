import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import { PulumiCliError, pulumiRunner } from "../../../provider/gc/pulumi-cli";

describe("pulumiRunner", () => {
  it("names a missing CLI plainly", async () => {
    const run = pulumiRunner("/", "/nonexistent/pulumi");
    const err = await run(["stack", "ls", "--json"]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PulumiCliError);
    expect(isTransient(err)).toBe(false);
    expect((err as Error).message).toBe(
      "pulumi stack ls --json failed: /nonexistent/pulumi not found: install the Pulumi CLI or put it on PATH",
    );
  });

  it("carries the exit code and never the standard output", async () => {
    // `false` ignores its arguments and exits 1 without output.
    const err = (await pulumiRunner(
      "/",
      "false",
    )(["config", "--json", "--show-secrets"]).catch((e: unknown) => e)) as PulumiCliError;
    expect(err.exitCode).toBe(1);
    expect(err.args).toEqual(["config", "--json", "--show-secrets"]);
    expect(err.message).toMatch(/^pulumi config --json --show-secrets failed \(exit 1\): /);
  });

  it("returns the standard output, the CLI's non-interactive flags before the command (never after a `--`)", async () => {
    expect(await pulumiRunner("/", "echo")(["stack", "ls"])).toBe(
      "--non-interactive --color never stack ls\n",
    );
  });
});
