import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import { SshTransport, type SshTransportOptions } from "../../../provider/transport/ssh";
import { type TestHost, testHost } from "../../support/test-host";
import { authList, authorize, closeStream, errorText, keygen, okReply, scratchDir } from "./helpers";

const PASSPHRASE = "s3cret passphrase for kvmp";
const WRONG_PASSPHRASE = "not-the-passphrase-42";

let host: TestHost;
let scratch: string;
let passKey: string;
const cleanups: Array<() => void> = [];
/** Every error this file provokes, checked for leaks at the end. */
const seenErrors: unknown[] = [];

beforeAll(() => {
  host = testHost();
  scratch = scratchDir(host, "ssh-creds");
  passKey = path.join(scratch, "id_pass");
  keygen(passKey, "ed25519", PASSPHRASE);
  cleanups.push(authorize(host, readFileSync(`${passKey}.pub`, "utf8")));
});

afterAll(() => {
  for (const c of cleanups.reverse()) c();
  rmSync(scratch, { recursive: true, force: true });
});

function transport(over: Partial<SshTransportOptions>): SshTransport {
  return new SshTransport({
    host: host.address,
    port: host.sshPort,
    user: host.sshUser,
    knownHostsPath: host.knownHostsPath,
    ...over,
  });
}

async function openError(t: SshTransport): Promise<ProviderError> {
  const err = await t.open().then(
    async (s) => {
      await closeStream(s);
      return undefined;
    },
    (e: unknown) => e,
  );
  seenErrors.push(err);
  if (!(err instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${String(err)}`);
  return err;
}

async function reachesLibvirtd(t: SshTransport, serial: number): Promise<void> {
  const stream = await t.open();
  expect(await authList(stream, serial)).toMatchObject(okReply(serial));
  await closeStream(stream);
}

describe("lazy credentials heal without a restart", () => {
  it("a missing key file is transient, and the same transport works once it appears", async () => {
    const keyPath = path.join(scratch, "late_key");
    const t = transport({ privateKeyPath: keyPath });
    try {
      const err = await openError(t);
      expect(err.kind).toBe("transient");
      expect(err.message).toContain(keyPath);
      // Still missing: still transient, read again.
      expect((await openError(t)).kind).toBe("transient");
      copyFileSync(host.sshKeyPath, keyPath);
      chmodSync(keyPath, 0o600);
      await reachesLibvirtd(t, 11);
    } finally {
      await t.close();
    }
  });

  it("a missing known_hosts file is transient, and heals the same way", async () => {
    const khPath = path.join(scratch, "late_known_hosts");
    const t = transport({ privateKeyPath: host.sshKeyPath, knownHostsPath: khPath });
    try {
      const err = await openError(t);
      expect(err.kind).toBe("transient");
      expect(err.message).toContain(khPath);
      copyFileSync(host.knownHostsPath, khPath);
      await reachesLibvirtd(t, 12);
    } finally {
      await t.close();
    }
  });

  it("after a success the loaded key is cached: removing the file does not break reconnects", async () => {
    const keyPath = path.join(scratch, "cached_key");
    copyFileSync(host.sshKeyPath, keyPath);
    const t = transport({ privateKeyPath: keyPath });
    try {
      await reachesLibvirtd(t, 13);
      await t.close();
      rmSync(keyPath);
      await reachesLibvirtd(t, 14);
    } finally {
      await t.close();
    }
  });

  it("a missing ssh-agent socket is transient", async () => {
    const err = await openError(transport({ agentSocket: path.join(scratch, "no-agent.sock") }));
    expect(err.kind).toBe("transient");
    expect(err.message).toContain("no-agent.sock");
  });
});

describe("keys", () => {
  it("a corrupt key is permanent and names the file", async () => {
    const corrupt = path.join(scratch, "corrupt_key");
    const lines = readFileSync(host.sshKeyPath, "utf8").split("\n");
    writeFileSync(corrupt, lines.map((l, i) => (i === 2 ? l.split("").reverse().join("") : l)).join("\n"));
    const err = await openError(transport({ privateKeyPath: corrupt }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain(corrupt);
  });

  it("a key with a passphrase works", async () => {
    const t = transport({ privateKeyPath: passKey, passphrase: PASSPHRASE });
    try {
      await reachesLibvirtd(t, 21);
    } finally {
      await t.close();
    }
  });

  it.each([
    ["a wrong passphrase", WRONG_PASSPHRASE, /wrong passphrase/],
    ["no passphrase", undefined, /encrypted but no passphrase/],
  ])("%s is permanent and names the file", async (_, passphrase, message) => {
    const err = await openError(transport({ privateKeyPath: passKey, passphrase }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toMatch(message);
    expect(err.message).toContain(passKey);
  });

  it("an ssh-agent socket works", async () => {
    const sock = path.join(scratch, "agent.sock");
    const out = execFileSync("ssh-agent", ["-s", "-a", sock], { encoding: "utf8" });
    const pid = Number(/SSH_AGENT_PID=(\d+)/.exec(out)?.[1]);
    expect(pid).toBeGreaterThan(0);
    try {
      const add = spawnSync("ssh-add", [host.sshKeyPath], {
        env: { ...process.env, SSH_AUTH_SOCK: sock },
        encoding: "utf8",
      });
      expect(add.status).toBe(0);
      const t = transport({ agentSocket: sock });
      try {
        await reachesLibvirtd(t, 22);
      } finally {
        await t.close();
      }
      // An agent without the right key: authentication fails, permanently.
      spawnSync("ssh-add", ["-D"], { env: { ...process.env, SSH_AUTH_SOCK: sock } });
      const err = await openError(transport({ agentSocket: sock }));
      expect(err.kind).toBe("permanent");
      expect(err.message).toContain(`as root to ${host.address}:${host.sshPort}`);
      expect(err.message).toContain(sock);
    } finally {
      process.kill(pid, "SIGTERM");
    }
  });

  it("an inline key with a passphrase works, and a wrong one fails permanently", async () => {
    const privateKey = readFileSync(passKey, "utf8");
    const t = transport({ privateKey, passphrase: PASSPHRASE });
    try {
      await reachesLibvirtd(t, 23);
    } finally {
      await t.close();
    }
    const err = await openError(transport({ privateKey, passphrase: WRONG_PASSPHRASE }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain("inline private key");
  });
});

describe("secrets", () => {
  it("no error raised in this file contains key text or a passphrase", () => {
    const secrets = [PASSPHRASE, WRONG_PASSPHRASE];
    for (const file of [passKey, host.sshKeyPath]) {
      for (const line of readFileSync(file, "utf8").split("\n")) {
        if (line.length > 0 && !line.startsWith("-----")) secrets.push(line);
      }
    }
    expect(seenErrors.length).toBeGreaterThanOrEqual(8);
    for (const err of seenErrors) {
      const text = `${errorText(err)}\n${inspect(err, { depth: 5 })}`;
      for (const s of secrets) expect(text).not.toContain(s);
    }
  });
});
