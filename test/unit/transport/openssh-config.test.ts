/**
 * The ssh_config and command line the OpenSSH transport hands `ssh`
 * (transport/openssh-config.ts): our settings before the user's file (the
 * first value wins in ssh_config), paths quoted, and ssh's complaints read.
 */
import { describe, expect, it } from "vitest";
import {
  forwardArgs,
  openSshArgs,
  openSshConfig,
  openSshError,
  sshComplaints,
} from "../../../provider/transport/openssh-config";

const base = {
  knownHostsFiles: ["/k/known hosts", "/tmp/x/known_hosts.1"],
  connectTimeoutSeconds: 20,
  keepalive: false as const,
};

describe("the ssh_config of the OpenSSH transport", () => {
  it("puts strict host key checking and the given known_hosts before any file of the user's", () => {
    const text = openSshConfig({
      ...base,
      userConfig: "/home/u/.ssh/config-lab",
      identityAgent: "/tmp/x/agent.sock",
    });
    const lines = text.split("\n");
    const include = lines.findIndex((l) => l.startsWith("Include"));
    for (const setting of [
      "StrictHostKeyChecking yes",
      "BatchMode yes",
      "ControlMaster no",
      "UpdateHostKeys no",
    ]) {
      const at = lines.indexOf(setting);
      expect(at, setting).toBeGreaterThan(-1);
      expect(at, setting).toBeLessThan(include);
    }
    expect(lines).toContain('UserKnownHostsFile "/k/known hosts" "/tmp/x/known_hosts.1"');
    expect(lines).toContain("GlobalKnownHostsFile /dev/null");
    expect(lines).toContain('IdentityAgent "/tmp/x/agent.sock"');
    expect(lines.slice(include)).toEqual(['Include "/home/u/.ssh/config-lab"', ""]);
    expect(text).not.toMatch(/accept-new|StrictHostKeyChecking (no|ask)/);
  });

  it("reads ~/.ssh/config and /etc/ssh/ssh_config, as ssh does, when no file is named", () => {
    expect(openSshConfig(base)).toMatch(/Include ~\/\.ssh\/config\nInclude \/etc\/ssh\/ssh_config\n$/);
  });

  it("doubles % in paths (ssh expands %-tokens there, but not in an Include) and refuses quotes and line breaks", () => {
    expect(openSshConfig({ ...base, knownHostsFiles: ["/k/100%"] })).toContain(
      'UserKnownHostsFile "/k/100%%"',
    );
    expect(openSshConfig({ ...base, userConfig: "/k/100%" })).toContain('Include "/k/100%"');
    expect(() => openSshConfig({ ...base, knownHostsFiles: ['/k/"x'] })).toThrow(
      /ends a value in ssh_config/,
    );
    expect(() => openSshConfig({ ...base, userConfig: "/a\nProxyCommand evil" })).toThrow(/one line/);
  });

  it("builds the command line: port and user only when given, jump hosts with -J, the host after --", () => {
    expect(openSshArgs("/c", { host: "hv1", jump: [] }, ["-N"])).toEqual(["-F", "/c", "-N", "--", "hv1"]);
    expect(
      openSshArgs(
        "/c",
        { host: "hv1", port: 2200, user: "ops", jump: ["ssh://a@b:22", "ssh://c@d:2222"] },
        [],
      ),
    ).toEqual(["-F", "/c", "-p", "2200", "-l", "ops", "-J", "ssh://a@b:22,ssh://c@d:2222", "--", "hv1"]);
    expect(forwardArgs("/tmp/x/l.sock", "/run/libvirt/libvirt-sock")).toEqual([
      "-N",
      "-L",
      "/tmp/x/l.sock:/run/libvirt/libvirt-sock",
    ]);
    expect(() => forwardArgs("/tmp/x/l.sock", "/run/a:b")).toThrow(/contains ':'/);
  });
});

describe("reading ssh's complaints", () => {
  const changed = [
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
    "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @",
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
    "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!",
    "Someone could be eavesdropping on you right now (man-in-the-middle attack)!",
    "It is also possible that a host key has just been changed.",
    "The fingerprint for the ED25519 key sent by the remote host is",
    "SHA256:K0oaWnKRoeGq+NwEOzGn3rcI4a1yZfabcdefabcdef0.",
    "Please contact your system administrator.",
    "Add correct host key in /k/known_hosts to get rid of this message.",
    "Offending ED25519 key in /k/known_hosts:2",
    "Host key for [127.0.0.1]:2243 has changed and you have requested strict checking.",
    "Host key verification failed.",
  ].join("\r\n");

  it("keeps the lines naming the key and its fingerprint from a changed-key warning", () => {
    const said = sshComplaints(changed);
    expect(said).toContain("SHA256:K0oaWnKRoeGq+NwEOzGn3rcI4a1yZfabcdefabcdef0.");
    expect(said).toContain("Host key verification failed.");
    expect(said.some((l) => l.startsWith("@"))).toBe(false);
  });

  it("classifies: host keys and logins permanent, connection trouble transient", () => {
    expect(openSshError("ssh://h (OpenSSH)", "exit status 255", changed).kind).toBe("permanent");
    expect(
      openSshError(
        "ssh://h (OpenSSH)",
        "exit status 255",
        "No ED25519 host key is known for [b]:22 and you have requested strict checking.\nHost key verification failed.\n",
      ).message,
    ).toMatch(/refused the host key.*No ED25519 host key is known for \[b\]:22/);
    expect(openSshError("d", "exit status 255", "root@h: Permission denied (publickey).\n").kind).toBe(
      "permanent",
    );
    expect(
      openSshError(
        "d",
        "exit status 255",
        "ssh: Could not resolve hostname nope: Name or service not known\n",
      ).kind,
    ).toBe("permanent");
    expect(
      openSshError("d", "exit status 255", "ssh: connect to host h port 22: Connection refused\n").kind,
    ).toBe("transient");
  });
});
