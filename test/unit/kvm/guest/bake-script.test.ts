/**
 * The bake's guest side as text (kvm/guest/bake-script.ts): the key that
 * names a bake, the result line the builder prints, and the scripts as the
 * real sh parses them. test/guest/bake.test.ts runs them on booted builders.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import type { BakeRecipe } from "../../../../provider/kvm/config/image";
import {
  BAKE_RESULT_PREFIX,
  bakeKey,
  buildBakeScript,
  parseBakeResult,
} from "../../../../provider/kvm/guest/bake-script";

const STOCK = "kvmp-image-0123456789abcdef.qcow2";
const RECIPE: BakeRecipe = { packages: ["htop"], userDataMac: "a".repeat(64) };

describe("bakeKey", () => {
  it("is 16 hex and the same for the same stock image and recipe", () => {
    expect(bakeKey(STOCK, RECIPE)).toMatch(/^[0-9a-f]{16}$/);
    expect(bakeKey(STOCK, { ...RECIPE })).toBe(bakeKey(STOCK, RECIPE));
  });

  it.each<[string, string, BakeRecipe]>([
    ["another stock image", "kvmp-image-fedcba9876543210.qcow2", RECIPE],
    ["another package", STOCK, { ...RECIPE, packages: ["jq"] }],
    ["no extra package", STOCK, { ...RECIPE, packages: [] }],
    ["another user-data", STOCK, { ...RECIPE, userDataMac: "b".repeat(64) }],
    ["no user-data", STOCK, { packages: ["htop"] }],
  ])("changes with %s", (_, stock, recipe) => {
    expect(bakeKey(stock, recipe)).not.toBe(bakeKey(STOCK, RECIPE));
  });
});

describe("the builder's script", () => {
  it("parses with the real sh, as does the finish script it writes", () => {
    const script = buildBakeScript(RECIPE);
    execFileSync("sh", ["-n"], { input: script });
    const finish = /<<'KVMP_EOF'\n([\s\S]*?)\nKVMP_EOF/.exec(script)?.[1];
    expect(finish).toMatch(/^#!\/bin\/sh/);
    execFileSync("sh", ["-n"], { input: finish });
  });

  it("installs squid and the agent without their Recommends, the recipe's packages with theirs, and Dante only where the release has it, left off", () => {
    const script = buildBakeScript({ packages: ["htop", "jq"] });
    expect(script).toContain('EXTRA="htop jq"');
    expect(script).toMatch(
      /--no-upgrade install --no-install-recommends squid qemu-guest-agent \|\| return 1\n/,
    );
    expect(script).toMatch(
      /if \[ -n "\$EXTRA" \]; then\n\t\tapt-get [^\n]* --no-upgrade install \$EXTRA \|\| return 1/,
    );
    expect(script).toMatch(/install --no-install-recommends dante-server/);
    expect(script).toMatch(/apt-cache show dante-server[\s\S]*systemctl disable --now danted/);
  });

  // Run by the real apt-get and sh in test/libvirtd/guest/apt-installs.test.ts.
  it("has apt-get install only names apt has a package by exactly, and never read one as a regular expression", () => {
    const script = buildBakeScript({ packages: ["htop"] });
    expect(script).toMatch(
      /-q update \|\| return 1\n\tknown=\$\(apt-cache pkgnames\) \|\| return 1\n\tfor p in \$EXTRA; do\n\t\tprintf '%s\\n' "\$known" \| grep -qxF -- "\$p" \|\|\n\t\t\tfail "apt has no package named \$p /,
    );
    expect(script).toMatch(/-o APT::Cmd::Pattern-Only=true -q -y --no-upgrade install \$EXTRA \|\| return 1/);
  });

  it("cleans the instance state before it powers off, and prints the result last", () => {
    const script = buildBakeScript(RECIPE);
    for (const step of [
      "cloud-init clean --logs --seed",
      ": >/etc/machine-id",
      "/etc/ssh/ssh_host_*",
      "/etc/netplan/50-cloud-init.yaml",
      "rm -rf /var/lib/apt/lists/*",
      "/var/log/journal/*",
    ])
      expect(script).toContain(step);
    const tail = script.slice(script.indexOf("sync\n"));
    expect(tail).toMatch(
      new RegExp(`^sync\\necho "${BAKE_RESULT_PREFIX}\\$result" >/dev/ttyS0\\nsystemctl poweroff`),
    );
  });
});

describe("parseBakeResult", () => {
  it.each<[string, string, ReturnType<typeof parseBakeResult>]>([
    ["nothing printed", "[  OK  ] Started ssh.service\r\n", undefined],
    ["ok", `Cloud-init v. 22.4\r\n${BAKE_RESULT_PREFIX}ok\r\n[  OK  ] Stopped\r\n`, { ok: true }],
    [
      "a failure with the log lines before it",
      `kvmp-bake-log: E: Unable to locate package nope\nnoise\n${BAKE_RESULT_PREFIX}failed the packages could not be installed with apt-get\n`,
      {
        ok: false,
        reason: "the packages could not be installed with apt-get",
        lines: ["E: Unable to locate package nope"],
      },
    ],
    ["the last result line", `${BAKE_RESULT_PREFIX}failed early\n${BAKE_RESULT_PREFIX}ok\n`, { ok: true }],
    [
      "a failure without a reason",
      `${BAKE_RESULT_PREFIX}failed\n`,
      { ok: false, reason: "no reason given", lines: [] },
    ],
  ])("reads %s", (_, text, result) => {
    expect(parseBakeResult(text)).toEqual(result);
  });
});
