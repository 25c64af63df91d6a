/**
 * The paths the OpenSSH transport hands `ssh` (transport/openssh-config.ts
 * openSshPathProblem): each row is a path and how OpenSSH, asked with the
 * real `ssh -G` (which prints how it parsed its config and command line
 * without connecting), reads it as the transport writes it. The rule accepts
 * exactly the paths ssh reads as themselves, and the builders refuse the
 * others; a "word" is a path ssh -G prints as written but OpenSSH gives a
 * meaning of its own at connect (ssh.c: IdentityAgent none, SSH_AUTH_SOCK,
 * $NAME; readconf.c: UserKnownHostsFile none).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  forwardArgs,
  type OpenSshPathKind,
  openSshConfig,
  openSshPathProblem,
  sshConfigValue,
} from "../../../provider/transport/openssh-config";

type Reading = "same" | "other" | "word";

// biome-ignore lint/suspicious/noTemplateCurlyInString: OpenSSH's environment variable syntax, written as a user would
const HOME = "${HOME}";

/** `{dir}` stands for a folder of the test's own (an Include names a file there). */
const ROWS: [OpenSshPathKind, string, Reading][] = [
  ["knownHostsPath", "/k/known hosts", "same"],
  ["knownHostsPath", "/k/tab\there", "same"],
  ["knownHostsPath", "/k/100%", "same"],
  ["knownHostsPath", "/k/%h", "same"],
  ["knownHostsPath", "/k/#not-a-comment", "same"],
  ["knownHostsPath", "/k/it's", "same"],
  ["knownHostsPath", "-starts-with-a-dash", "same"],
  ["knownHostsPath", "relative/known_hosts", "same"],
  ["knownHostsPath", "/k/ünïcödé", "same"],
  ["knownHostsPath", "/k/a\\b", "same"],
  ["knownHostsPath", "/k/$HOME", "same"],
  ["knownHostsPath", "/k/~root", "same"],
  ["knownHostsPath", "./none", "same"],
  ["knownHostsPath", '/k/say"hi', "other"],
  ["knownHostsPath", "/k/a\\\\b", "other"],
  ["knownHostsPath", "/k/a\\'b", "other"],
  ["knownHostsPath", "/k/ends\\", "other"],
  ["knownHostsPath", `/k/${HOME}`, "other"],
  ["knownHostsPath", "~root/known_hosts", "other"],
  ["knownHostsPath", "NONE", "other"],
  ["knownHostsPath", "none", "word"],
  ["agentSocket", "/run/agent sock", "same"],
  ["agentSocket", "/run/100%", "same"],
  ["agentSocket", "/run/a\\b", "same"],
  ["agentSocket", "/run/$HOME", "same"],
  ["agentSocket", "NONE", "same"],
  ["agentSocket", `/run/${HOME}`, "other"],
  ["agentSocket", "~root/agent.sock", "other"],
  ["agentSocket", "/run/a\\\\b", "other"],
  ["agentSocket", "none", "word"],
  ["agentSocket", "SSH_AUTH_SOCK", "word"],
  ["agentSocket", "$SSH_AUTH_SOCK", "word"],
  ["sshConfig", "{dir}/with space/config", "same"],
  ["sshConfig", "{dir}/100%/config", "same"],
  ["sshConfig", "{dir}/%h/config", "same"],
  ["sshConfig", `{dir}/${HOME}/config`, "same"],
  ["sshConfig", "{dir}/it's/config", "same"],
  ["sshConfig", "{dir}/#hash/config", "same"],
  ["sshConfig", "{dir}/g[1]/config", "other"],
  ["sshConfig", "{dir}/z?/config", "other"],
  ["sshConfig", "{dir}/s*/config", "other"],
  ["sshConfig", "{dir}/b\\x/config", "other"],
  ["sshConfig", '{dir}/say"hi/config', "other"],
  ["sshConfig", "kvmp-relative/config", "other"],
  ["sshConfig", "~root/kvmp-no-such-config", "other"],
  ["socket", "/run/libvirt/libvirt-sock", "same"],
  ["socket", "/run/a b", "same"],
  ["socket", "/run/it's", "same"],
  ["socket", "/run/#x", "same"],
  ["socket", "/run/$HOME", "same"],
  ["socket", "/run/ünïcödé", "same"],
  ["socket", "/run/a:b", "other"],
  ["socket", "/run/a\\b", "other"],
  ["socket", "/run/%h", "other"],
  ["socket", "/run/100%", "other"],
  ["socket", `/run/${HOME}`, "other"],
];

/** Folders that sort before the pattern an Include would match, or that it matches instead. */
const DECOYS: Record<string, string> = {
  "{dir}/g[1]/config": "{dir}/g1/config",
  "{dir}/z?/config": "{dir}/z!/config",
  "{dir}/s*/config": "{dir}/s!/config",
  "{dir}/b\\x/config": "{dir}/bx/config",
};

const dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-ssh-paths-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What `ssh -G` prints for `keyword` (the rest of its line), run in `dir`; undefined when ssh refused. */
function sshG(args: string[], keyword: string): string | undefined {
  const r = spawnSync("ssh", ["-G", ...args, "kvmp-host"], {
    cwd: dir,
    encoding: "utf8",
    env: { ...process.env, LC_ALL: "C" },
  });
  if (r.status !== 0) return undefined;
  const line = r.stdout.split("\n").find((l) => l.startsWith(`${keyword} `));
  return line?.slice(keyword.length + 1);
}

let files = 0;
/** A one-line ssh_config in the test's folder. */
function configFile(line: string): string {
  const file = path.join(dir, `ssh_config.${files++}`);
  writeFileSync(file, `${line}\n`);
  return file;
}

/** A file for an Include, naming a User of its own. */
function includeFile(p: string, user: string): void {
  mkdirSync(path.dirname(p), { recursive: true });
  writeFileSync(p, `User ${user}\n`);
}

const BASE = { knownHostsFiles: ["/dev/null"], connectTimeoutSeconds: 5, keepalive: false as const };
const KEYWORD = { knownHostsPath: "UserKnownHostsFile", agentSocket: "IdentityAgent", sshConfig: "Include" };

describe("what ssh reads of the paths the OpenSSH transport hands it", () => {
  it.each(ROWS)("%s %j: %s", (kind, raw, reading) => {
    const p = raw.replaceAll("{dir}", dir);
    const problem = openSshPathProblem(kind, p);
    expect(problem === undefined, problem).toBe(reading === "same");
    let read: string | undefined;
    let want = p;
    if (kind === "socket") {
      const spec = `/tmp/kvmp-l.sock:${p}`;
      if (problem === undefined) expect(forwardArgs("/tmp/kvmp-l.sock", p)).toEqual(["-N", "-L", spec]);
      else expect(() => forwardArgs("/tmp/kvmp-l.sock", p)).toThrow(problem);
      read = sshG(["-F", "/dev/null", "-L", spec], "localforward /tmp/kvmp-l.sock");
    } else {
      const line = `${KEYWORD[kind]} ${sshConfigValue(kind, p)}`;
      const input =
        kind === "knownHostsPath"
          ? { ...BASE, knownHostsFiles: [p] }
          : kind === "agentSocket"
            ? { ...BASE, identityAgent: p }
            : { ...BASE, userConfig: p };
      if (problem === undefined) expect(openSshConfig(input).split("\n")).toContain(line);
      else expect(() => openSshConfig(input)).toThrow(problem);
      if (kind === "sshConfig") {
        want = `kvmp-include-${files}`;
        if (path.isAbsolute(p)) includeFile(p, want);
        else includeFile(path.join(dir, p), want);
        const decoy = DECOYS[raw];
        if (decoy !== undefined) includeFile(decoy.replaceAll("{dir}", dir), "kvmp-decoy");
        read = sshG(["-F", configFile(line)], "user");
      } else read = sshG(["-F", configFile(line)], KEYWORD[kind].toLowerCase());
    }
    if (reading === "other") expect(read).not.toBe(want);
    else expect(read).toBe(want);
  });
});
