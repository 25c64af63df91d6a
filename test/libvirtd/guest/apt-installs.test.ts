/**
 * The guest scripts' apt-get installs as this machine's real apt-get 2.6
 * reads them: the bake's, with the recipe's extra package names, and a stock
 * image's first boot (the guest-agent script's, alone and with squid, and
 * the proxy setup's). A package archive of our own (a flat `file:`
 * repository) holds a few packages named as Debian's are, among them a mail
 * server, a virtual name with one provider, `wmweather` beside `wmweather+`,
 * an installed `openssh-server`, and Debian 12's Recommends of squid and of
 * the agent's GLib (the MIME database and more, which a proxy never uses). apt reads it through APT_CONFIG (its own lists, status
 * and cache in a temporary folder; nothing of the machine's apt is read or
 * written) in simulation (APT::Get::Simulate): nothing is installed, the
 * network is not used, and the `Inst`/`Remv` lines say what apt would do.
 *
 * First what apt-get does with names the check takes (Debian policy's), so
 * that the guard is seen to be needed; then the builder's own apt branch,
 * cut from the generated script and run by the real sh: a name apt has no
 * package by exactly fails the bake naming it before anything is installed,
 * and real names still install.
 *
 * In the libvirtd group: it needs Debian's apt, which the test host machine
 * has and a contributor's machine (the unit group's) may not.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildBakeScript } from "../../../provider/kvm/guest/bake-script";
import { GUEST_AGENT_SCRIPT, guestAgentScript } from "../../../provider/kvm/guest/vendor-data";
import {
  buildProxySetupScript,
  PROXY_APT_PACKAGES,
  type ProxySetup,
} from "../../../provider/kvm/proxy/setup";

/** The archive: name → its extra stanza lines. */
const ARCHIVE: Record<string, string> = {
  squid: "Recommends: libcap2-bin, ca-certificates\n",
  "qemu-guest-agent": "Depends: libglib2.0-0\n",
  "libglib2.0-0": "Recommends: libglib2.0-data, shared-mime-info, xdg-user-dirs\n",
  "libglib2.0-data": "",
  "shared-mime-info": "",
  "xdg-user-dirs": "",
  "libcap2-bin": "",
  "ca-certificates": "",
  curl: "Recommends: ca-certificates\n",
  "g++": "",
  wmweather: "",
  "wmweather+": "",
  "exim4-daemon-light": "Provides: mail-transport-agent\n",
  "zlib1g-dev": "Provides: libz-dev\n",
  "openssh-server": "",
};
const INSTALLED = ["openssh-server"];
/** What installing the proxy's packages does: squid and the agent, the agent's GLib, no Recommends. */
const PROXY_INSTALL = ["Inst libglib2.0-0", "Inst qemu-guest-agent", "Inst squid"];
/** A proxy setup: what it installs does not depend on its settings. */
const SETUP: ProxySetup = {
  port: 3128,
  allowedClients: ["203.0.113.0/24"],
  allowedDestinations: [],
  ownAddresses: [],
  onLink: [],
};

let dir: string;
let env: NodeJS.ProcessEnv;

function stanza(name: string, extra = ""): string {
  return (
    `Package: ${name}\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <test@example.org>\n` +
    `Filename: pool/${name}.deb\nSize: 1\nSHA256: ${"0".repeat(64)}\nDescription: test package\n${extra}\n`
  );
}

beforeAll(() => {
  dir = mkdtempSync("/tmp/kvmp-bake-apt-");
  for (const d of ["repo", "lists/partial", "cache/archives/partial", "state", "log", "none"])
    mkdirSync(path.join(dir, d), { recursive: true });
  writeFileSync(
    path.join(dir, "repo/Packages"),
    Object.entries(ARCHIVE)
      .map(([name, extra]) => stanza(name, extra))
      .join(""),
  );
  writeFileSync(
    path.join(dir, "status"),
    INSTALLED.map((name) => stanza(name, "Status: install ok installed\n")).join(""),
  );
  writeFileSync(path.join(dir, "sources.list"), `deb [trusted=yes] file:${dir}/repo ./\n`);
  const conf: Record<string, string> = {
    "Dir::Etc::Main": "/dev/null",
    "Dir::Etc::Parts": `${dir}/none`,
    "Dir::Etc::SourceList": `${dir}/sources.list`,
    "Dir::Etc::SourceParts": `${dir}/none`,
    "Dir::Etc::Preferences": "/dev/null",
    "Dir::Etc::PreferencesParts": `${dir}/none`,
    "Dir::State": `${dir}/state`,
    "Dir::State::Lists": `${dir}/lists`,
    "Dir::State::status": `${dir}/status`,
    "Dir::Cache": `${dir}/cache`,
    "Dir::Log": `${dir}/log`,
    "Acquire::Languages": "none",
    "APT::Sandbox::User": "root",
    "Debug::NoLocking": "true",
    "APT::Get::Simulate": "true",
  };
  writeFileSync(
    path.join(dir, "apt.conf"),
    Object.entries(conf)
      .map(([k, v]) => `${k} "${v}";\n`)
      .join(""),
  );
  env = { ...process.env, APT_CONFIG: path.join(dir, "apt.conf"), DEBIAN_FRONTEND: "noninteractive" };
  execFileSync("apt-get", ["-q", "update"], { env, stdio: "ignore" });
  // The archive is what apt knows, and the machine's own lists are not.
  expect(execFileSync("apt-cache", ["pkgnames"], { env, encoding: "utf8" }).split("\n").sort()).toEqual(
    ["", ...Object.keys(ARCHIVE)].sort(),
  );
});

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** What apt-get would do: its `Inst` and `Remv` lines, package names only. */
function actions(output: string): string[] {
  return [...output.matchAll(/^(Inst|Remv) (\S+)/gm)].map((m) => `${m[1]} ${m[2]}`).sort();
}

function aptGet(args: string[]): { status: number | null; out: string } {
  const r = spawnSync("apt-get", ["-q", "-y", ...args], { env, encoding: "utf8" });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("apt-get's reading of names the check takes", () => {
  it.each<[string, string, string[]]>([
    ["a name no package has: a regular expression", "exim4-daemon-l.ght", ["Inst exim4-daemon-light"]],
    [
      "another package's name with a trailing '+': install that one",
      "curl+",
      ["Inst ca-certificates", "Inst curl"],
    ],
    ["a virtual name: its provider", "libz-dev", ["Inst zlib1g-dev"]],
    ["the name of a package ending in '+': that package, not an action", "wmweather+", ["Inst wmweather+"]],
    ["a name with a trailing '-' (refused at check): remove", "openssh-server-", ["Remv openssh-server"]],
  ])("unguarded, %s", (_, name, done) => {
    const r = aptGet(["install", name]);
    expect(r.status, r.out).toBe(0);
    expect(actions(r.out)).toEqual(done);
  });

  it("APT::Cmd::Pattern-Only stops the regular expression, not the trailing '+' or the virtual name", () => {
    const only = ["-o", "APT::Cmd::Pattern-Only=true", "install"];
    const regex = aptGet([...only, "exim4-daemon-l.ght"]);
    expect(regex.status).toBe(100);
    expect(regex.out).toContain("E: Unable to locate package exim4-daemon-l.ght");
    expect(actions(regex.out)).toEqual([]);
    expect(actions(aptGet([...only, "curl+"]).out)).toEqual(["Inst ca-certificates", "Inst curl"]);
    expect(actions(aptGet([...only, "libz-dev"]).out)).toEqual(["Inst zlib1g-dev"]);
  });
});

describe("the builder's apt branch", () => {
  /**
   * Runs the script's `apt_install` under sh with `packages` as the recipe.
   * `log` and `fail` stand in for the script's own (which write to /run and
   * start the finish unit): `fail` prints its line and exits, as the bake does.
   */
  function bake(packages: string[]): { status: number | null; out: string } {
    const script = buildBakeScript({ packages });
    const extra = /^EXTRA=".*"$/m.exec(script)?.[0];
    const install = /^apt_install\(\) \{\n[\s\S]*?\n\}$/m.exec(script)?.[0];
    expect(extra).toBeDefined();
    expect(install).toBeDefined();
    const program = `log() { echo "log: $*"; }\nfail() { echo "failed $*"; exit 1; }\n${extra}\n${install}\napt_install\n`;
    const r = spawnSync("sh", ["-c", program], { env, encoding: "utf8" });
    return { status: r.status, out: `${r.stdout}${r.stderr}` };
  }

  const unknown = (name: string) =>
    `failed apt has no package named ${name} (bake.packages must name real packages exactly: no virtual package, no pattern)`;

  it.each<[string, string[], string]>([
    ["a regular expression matching a mail server", ["exim4-daemon-l.ght"], "exim4-daemon-l.ght"],
    ["another package's name with a trailing '+'", ["curl+"], "curl+"],
    ["a virtual name with one provider", ["libz-dev"], "libz-dev"],
    ["a virtual name a mail server provides", ["mail-transport-agent"], "mail-transport-agent"],
    ["a name no package has", ["kvmp-no-such-package"], "kvmp-no-such-package"],
    ["an unknown name beside a real one", ["curl", "exim4-daemon-l.ght"], "exim4-daemon-l.ght"],
    ["a trailing '-', should one get past the check", ["openssh-server-"], "openssh-server-"],
  ])("fails the bake on %s, naming it, before installing anything", (_, packages, name) => {
    const r = bake(packages);
    expect(r.status, r.out).toBe(1);
    expect(r.out).toContain(unknown(name));
    expect(actions(r.out)).toEqual([]);
  });

  it.each<[string, string[], string[]]>([
    ["no extra package", [], []],
    [
      "a plain name (with its Recommends, as apt-get installs it)",
      ["curl"],
      ["Inst ca-certificates", "Inst curl"],
    ],
    ["g++", ["g++"], ["Inst g++"]],
    ["a package ending in '+' beside the one without", ["wmweather+"], ["Inst wmweather+"]],
    [
      "several",
      ["wmweather", "g++", "curl"],
      ["Inst ca-certificates", "Inst curl", "Inst g++", "Inst wmweather"],
    ],
  ])("installs %s exactly, with squid and the agent without their Recommends", (_, packages, extra) => {
    const r = bake(packages);
    expect(r.status, r.out).toBe(0);
    expect(r.out).not.toContain("failed");
    expect(actions(r.out)).toEqual([...PROXY_INSTALL, ...extra].sort());
  });
});

describe("a stock image's first boot", () => {
  /** Runs `apt_install` cut from `script` under sh, with stand-ins for the helpers it calls. */
  function install(script: string): { status: number | null; out: string } {
    const fn = /^apt_install\(\) \{\n[\s\S]*?\n\}$/m.exec(script)?.[0];
    expect(fn).toBeDefined();
    const program = `log() { echo "log: $*"; }\nagent_present() { return 1; }\n${fn}\napt_install\n`;
    const r = spawnSync("sh", ["-c", program], { env, encoding: "utf8" });
    return { status: r.status, out: `${r.stdout}${r.stderr}` };
  }

  it.each<[string, string, string[]]>([
    [
      "the guest-agent script, with the proxy setup's squid",
      guestAgentScript(PROXY_APT_PACKAGES),
      PROXY_INSTALL,
    ],
    ["the guest-agent script alone", GUEST_AGENT_SCRIPT, ["Inst libglib2.0-0", "Inst qemu-guest-agent"]],
    ["the proxy setup", buildProxySetupScript(SETUP), ["Inst squid"]],
  ])("%s installs its packages and their dependencies, none of their Recommends", (_, script, done) => {
    const r = install(script);
    expect(r.status, r.out).toBe(0);
    expect(actions(r.out)).toEqual(done);
  });
});
