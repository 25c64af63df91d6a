/**
 * `pulumi-kvm-proxy console <host> <domain>`: its command line and the
 * failures it reports before reaching a host. What it prints from a booted
 * guest is proven in test/guest/first-boot.test.ts.
 */
import { describe, expect, it } from "vitest";
import { parseConsoleArgs, runConsole } from "../../../provider/cli/console-command";
import { runCli as run } from "../../support/run-cli";

describe("pulumi-kvm-proxy console", () => {
  it("is listed in the command's usage, and --help prints its own with the interactive virsh command", async () => {
    expect((await run("--help")).out).toMatch(/^ {2}console +print a VM's boot output/m);
    const r = await run("console", "--help");
    expect(r.code).toBe(0);
    expect(r.out).toContain("Usage: pulumi-kvm-proxy console <host> <domain> [options]");
    expect(r.out).toContain("virsh -c qemu+ssh://<user>@<host>/system console <domain>");
  });

  it.each<[string, string[], RegExp]>([
    ["without the domain", ["lab"], /give the host \(a key of kvm:hosts\) and the domain/],
    ["with a third word", ["lab", "edge-1", "more"], /give the host/],
    [
      "with a --listen that is no duration",
      ["lab", "edge-1", "--listen", "soon"],
      /--listen "soon" is not a duration/,
    ],
    ["with an unknown option", ["lab", "edge-1", "--follow"], /Unknown option '--follow'/],
  ])("is a usage error (exit 2) %s", async (_what, argv, reason) => {
    const r = await run("console", ...argv);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(reason);
    expect(r.err).toContain("Usage: pulumi-kvm-proxy console");
  });

  it("reads the serial console for 10 s by default, or --listen", () => {
    expect(parseConsoleArgs(["lab", "edge-1"], "/p")).toEqual({
      host: "lab",
      domain: "edge-1",
      cwd: "/p",
      listenMs: 10_000,
      help: false,
    });
    expect(parseConsoleArgs(["lab", "edge-1", "--listen", "1m", "--stack", "dev"], "/p")).toMatchObject({
      listenMs: 60_000,
      stack: "dev",
    });
  });

  it("names the hosts of kvm:hosts when the host is not one of them (a host given in full: virsh)", async () => {
    const pulumi = async (args: readonly string[]) =>
      args[0] === "stack"
        ? JSON.stringify([{ name: "dev", current: true }])
        : JSON.stringify({ "kvm:hosts": { objectValue: { lab: { uri: "unix:///run/x/libvirt-sock" } } } });
    await expect(runConsole(parseConsoleArgs(["edge", "edge-1"], "/p"), { pulumi })).rejects.toThrow(
      'host "edge" is not in kvm:hosts of stack dev (its keys: lab); for a host given in full in the program, use virsh',
    );
  });
});
