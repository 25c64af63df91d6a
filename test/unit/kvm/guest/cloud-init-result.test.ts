/**
 * cloud-init's outcome as the provider reads it from a guest
 * (provider/kvm/guest/cloud-init-result.ts), and the in-guest health probe's
 * output (provider/kvm/guest/guest-probe.ts). The errors are as cloud-init 22.4
 * (Debian 12) and 25.1 (Debian 13) wrote them on the test guests.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  failureText,
  lastLines,
  parseResult,
  redactGuestLines,
  runningStage,
} from "../../../../provider/kvm/guest/cloud-init-result";
import {
  GUEST_PROBE_PROGRAM,
  guestProbeArgs,
  parseGuestProbe,
} from "../../../../provider/kvm/guest/guest-probe";

describe("cloud-init's result", () => {
  it("is a success without errors", () => {
    expect(parseResult('{"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0]", "errors": []}}')).toEqual({
      errors: [],
      failedModules: [],
    });
  });

  it.each<[string, string[]]>([
    [
      "('package-update-upgrade-install', ProcessExecutionError(\"Unexpected error while running command.\"))",
      ["package_update_upgrade_install"],
    ],
    [
      "('scripts-user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))",
      ["scripts_user"],
    ],
    ["('resizefs', ProcessExecutionError(\"...resize2fs...\"))", ["resizefs"]],
    ["running module scripts_user failed", ["scripts_user"]],
    ["something cloud-init said", []],
  ])("names the module of %s", (error, modules) => {
    expect(parseResult(JSON.stringify({ v1: { errors: [error] } }))?.failedModules).toEqual(modules);
  });

  it.each(["", "not json", "[]", '{"v2": {}}', "null"])("is not cloud-init's result: %j", (text) => {
    expect(parseResult(text)).toBeUndefined();
  });

  it("reads the stage that runs from status.json", () => {
    expect(runningStage('{"v1": {"stage": "modules-final", "init": {}}}')).toBe("modules-final");
    expect(runningStage('{"v1": {"stage": null}}')).toBeUndefined();
    expect(runningStage("garbage")).toBeUndefined();
  });

  it("says which modules failed, what cloud-init said and the guest's own last lines", () => {
    const text = failureText(
      { errors: ["('scripts-user', RuntimeError('Runparts: 1 failures'))"], failedModules: ["scripts_user"] },
      ["kvmp-runcmd-about-to-fail"],
    );
    expect(text.split("\n")).toEqual([
      "cloud-init finished the guest's first boot with errors in scripts_user:",
      "  ('scripts-user', RuntimeError('Runparts: 1 failures'))",
      "last lines of /var/log/cloud-init-output.log in the guest:",
      "  | kvmp-runcmd-about-to-fail",
    ]);
  });
});

describe("the guest's lines in an error", () => {
  it.each([
    ["fetching https://user:s3cret@mirror/x", "fetching https://***:***@mirror/x"],
    ["password: hunter2-abc", "password: ***"],
    ["PASSWD=abc", "PASSWD=***"],
    ["token = abcd", "token = ***"],
    ["key kvmp-configured-secret here", "key *** here"],
    ["nothing to hide", "nothing to hide"],
  ])("redacts %j", (line, redacted) => {
    expect(redactGuestLines(line, ["kvmp-configured-secret"])).toBe(redacted);
  });

  it("keeps the last lines, each cut to 400 characters", () => {
    const text = `${Array.from({ length: 50 }, (_, i) => `line ${i}`).join("\n")}\n${"x".repeat(500)}\n\n`;
    const lines = lastLines(text, 3);
    expect(lines.slice(0, 2)).toEqual(["line 48", "line 49"]);
    expect(lines[2]).toHaveLength(401);
  });
});

describe("the in-guest health probe", () => {
  it("is a Python 3 program python3 compiles, taking the port, the URL and the bounds", () => {
    execFileSync("python3", ["-c", `import ast, sys; ast.parse(sys.stdin.read())`], {
      input: GUEST_PROBE_PROGRAM,
    });
    expect(guestProbeArgs(3128, "http://203.0.113.80/", { deadlineMs: 5_000, bodyBytes: 4096 })).toEqual([
      "-c",
      GUEST_PROBE_PROGRAM,
      "3128",
      "http://203.0.113.80/",
      "5000",
      "4096",
      "no complete answer within 5 s",
    ]);
  });

  it.each([
    [
      'status 204\nvia 1.1 kvm-proxy-abc (squid/5.7)\nx-cache MISS from kvm-proxy-abc\nbody ""\n',
      0,
      { status: 204, via: "1.1 kvm-proxy-abc (squid/5.7)", xCache: "MISS from kvm-proxy-abc", body: "" },
    ],
    [
      'status 200\nvia \nx-cache \nbody "203.0.113.7\\n{\\"ip\\": 1} \\u00e9"\n',
      0,
      { status: 200, via: "", xCache: "", body: '203.0.113.7\n{"ip": 1} \u00e9' },
    ],
    ["status 403\nvia \nx-cache \n", 0, { status: 403, via: "", xCache: "", body: "" }],
    ["status 200\nbody not-json\n", 0, { status: 200, via: "", xCache: "", body: "" }],
    [
      "error URLError: <urlopen error [Errno 111] Connection refused>\n",
      0,
      { error: "URLError: <urlopen error [Errno 111] Connection refused>" },
    ],
    ["", 1, { error: "the probe in the guest printed no status (exit 1)" }],
  ])("reads %j", (out, code, reply) => {
    expect(parseGuestProbe(out, code)).toEqual(reply);
  });
});
