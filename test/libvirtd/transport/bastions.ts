/**
 * Real sshds for the jump host tests, inside the test host's namespaces (as
 * helpers.ts's extra sshds): a bastion on the namespace's veth address,
 * reachable from here, and sshds bound to the namespace's loopback, which
 * nothing outside the namespace can reach: only a hop already inside can
 * (a second bastion, a target). Each has its own host key and its own
 * authorized_keys, so a hop's credentials can differ from the target's.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { TestHost } from "../../support/test-host";
import { keygen, pubKey, scratchDir, spawnSshdBesideHost, stopSshd } from "./helpers";

export interface TestSshd {
  /** Where it listens, as a client names it (and known_hosts does). */
  address: string;
  port: number;
  dir: string;
  /** Its ed25519 host key's public half, "type base64". */
  hostKey: string;
  /** The known_hosts line for it. */
  knownHostsLine: string;
  /** Its log (LogLevel VERBOSE: accepted logins, forwarding). */
  log(): string;
  /** Successful logins so far. */
  logins(): number;
  stop(): void;
}

function listening(host: TestHost, address: string, port: number): boolean {
  const r = spawnSync("ip", ["netns", "exec", host.netns, "ss", "-Hltn", `sport = :${port}`], {
    encoding: "utf8",
  });
  return r.stdout.split("\n").some((l) => l.includes(`${address}:${port}`));
}

/**
 * Starts an sshd in the test host's network and mount namespaces, listening
 * on `address:port`, accepting the public keys `authorized`.
 */
export async function startSshd(
  host: TestHost,
  opts: { address: string; port: number; authorized: string[]; name: string },
): Promise<TestSshd> {
  const dir = scratchDir(host, `${opts.name}-${opts.port}`);
  const hostKeyFile = path.join(dir, "ssh_host_ed25519_key");
  keygen(hostKeyFile, "ed25519");
  const authorizedKeys = path.join(dir, "authorized_keys");
  writeFileSync(authorizedKeys, `${opts.authorized.join("\n")}\n`, { mode: 0o600 });
  const pidFile = path.join(dir, "sshd.pid");
  const logFile = path.join(dir, "sshd.log");
  const config = path.join(dir, "sshd_config");
  writeFileSync(
    config,
    [
      `Port ${opts.port}`,
      `ListenAddress ${opts.address}`,
      `HostKey ${hostKeyFile}`,
      `PidFile ${pidFile}`,
      `AuthorizedKeysFile ${authorizedKeys}`,
      "PermitRootLogin prohibit-password",
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "UsePAM no",
      // As in scripts/test-host: the checkout may live under a world-writable /tmp.
      "StrictModes no",
      "X11Forwarding no",
      "PrintMotd no",
      "MaxSessions 64",
      "LogLevel VERBOSE",
      "",
    ].join("\n"),
  );
  spawnSshdBesideHost(host, config, logFile);
  for (let i = 0; i < 200 && !listening(host, opts.address, opts.port); i++) {
    await new Promise((res) => setTimeout(res, 50));
  }
  if (!listening(host, opts.address, opts.port))
    throw new Error(`sshd on ${opts.address}:${opts.port} did not listen`);
  const hostKey = pubKey(`${hostKeyFile}.pub`);
  const log = () => readFileSync(logFile, "utf8");
  return {
    address: opts.address,
    port: opts.port,
    dir,
    hostKey,
    knownHostsLine: `[${opts.address}]:${opts.port} ${hostKey}`,
    log,
    logins: () => log().match(/Accepted publickey for/g)?.length ?? 0,
    stop: () => stopSshd(pidFile, dir),
  };
}

/** A fresh ed25519 client key pair in `dir`: the private key's text and its public line. */
export function clientKey(dir: string, name: string): { file: string; text: string; pub: string } {
  const file = path.join(dir, name);
  keygen(file, "ed25519");
  return { file, text: readFileSync(file, "utf8"), pub: pubKey(`${file}.pub`) };
}

/** `ssh-keygen -lf` of a "type base64" public key: its SHA256 fingerprint. */
export function fingerprintOf(pub: string, dir: string): string {
  const f = path.join(dir, `fp-${Date.now()}-${Math.random().toString(16).slice(2)}.pub`);
  writeFileSync(f, `${pub}\n`);
  const out = execFileSync("ssh-keygen", ["-l", "-E", "sha256", "-f", f], { encoding: "utf8" });
  rmSync(f, { force: true });
  return out.split(/\s+/)[1] ?? "";
}
