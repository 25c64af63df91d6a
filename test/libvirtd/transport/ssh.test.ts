import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError, TimeoutError } from "../../../provider/errors";
import { SshTransport, type SshTransportOptions } from "../../../provider/transport/ssh";
import { type TestHost, testHost } from "../../support/test-host";
import { authList, closeStream, keygen, okReply, pubKey, scratchDir, sshKeygenFingerprint } from "./helpers";

let host: TestHost;
let scratch: string;
let hostKeyFingerprint: string;

beforeAll(() => {
  host = testHost();
  scratch = scratchDir(host, "ssh-test");
  hostKeyFingerprint = sshKeygenFingerprint(host.hostKeyPath);
});

afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

function transport(over: Partial<SshTransportOptions> = {}): SshTransport {
  return new SshTransport({
    host: host.address,
    port: host.sshPort,
    user: host.sshUser,
    privateKeyPath: host.sshKeyPath,
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
  await t.close();
  if (!(err instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${String(err)}`);
  return err;
}

describe("SshTransport against the test host", () => {
  it("describes itself without secrets", () => {
    expect(transport().description).toBe(`ssh://root@${host.address}:${host.sshPort}`);
  });

  it("opens a channel that reaches libvirtd (AUTH_LIST round trip)", async () => {
    const t = transport();
    try {
      const stream = await t.open();
      expect(await authList(stream, 1)).toMatchObject(okReply(1));
      // The same channel carries further calls.
      expect(await authList(stream, 2)).toMatchObject(okReply(2));
      await closeStream(stream);
    } finally {
      await t.close();
    }
  });

  it("runs many channels concurrently on one transport", async () => {
    const t = transport();
    try {
      const streams = await Promise.all(Array.from({ length: 16 }, () => t.open()));
      const replies = await Promise.all(streams.map((s, i) => authList(s, 100 + i)));
      replies.forEach((r, i) => {
        expect(r).toMatchObject(okReply(100 + i));
      });
      await Promise.all(streams.map(closeStream));
      // The connection outlives its channels.
      const again = await t.open();
      expect(await authList(again, 5)).toMatchObject(okReply(5));
      await closeStream(again);
    } finally {
      await t.close();
    }
  });

  it("close() ends open channels, and a later open() connects again", async () => {
    const t = transport();
    const stream = await t.open();
    expect(await authList(stream, 1)).toMatchObject(okReply(1));
    const closed = new Promise<void>((resolve) => stream.once("close", () => resolve()));
    stream.on("error", () => undefined);
    await t.close();
    await closed;
    const next = await t.open();
    expect(await authList(next, 2)).toMatchObject(okReply(2));
    await closeStream(next);
    await t.close();
    // Closing twice is harmless.
    await t.close();
  });

  it("accepts a hashed known_hosts (ssh-keygen -H)", async () => {
    const file = path.join(scratch, "known_hosts.hashed");
    copyFileSync(host.knownHostsPath, file);
    execFileSync("ssh-keygen", ["-q", "-H", "-f", file], { stdio: "ignore" });
    expect(readFileSync(file, "utf8")).not.toContain(host.address);
    const t = transport({ knownHostsPath: file });
    try {
      const stream = await t.open();
      expect(await authList(stream, 3)).toMatchObject(okReply(3));
      await closeStream(stream);
    } finally {
      await t.close();
    }
  });

  it("accepts inline known_hosts content and an inline key", async () => {
    const t = transport({
      knownHostsPath: undefined,
      knownHosts: readFileSync(host.knownHostsPath, "utf8"),
      privateKeyPath: undefined,
      privateKey: readFileSync(host.sshKeyPath, "utf8"),
    });
    try {
      const stream = await t.open();
      expect(await authList(stream, 4)).toMatchObject(okReply(4));
      await closeStream(stream);
    } finally {
      await t.close();
    }
  });
});

describe("host key verification", () => {
  const hostPort = () => `${host.address}:${host.sshPort}`;

  it("refuses a host whose known key differs (possible MITM)", async () => {
    const other = path.join(scratch, "other_host_key");
    keygen(other, "ed25519");
    const err = await openError(
      transport({
        knownHostsPath: undefined,
        knownHosts: `[${host.address}]:${host.sshPort} ${pubKey(`${other}.pub`)}\n`,
      }),
    );
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain(hostPort());
    expect(err.message).toContain("ssh-ed25519");
    expect(err.message).toContain(hostKeyFingerprint);
    expect(err.message).toMatch(/differs/);
    expect(err.message).toMatch(/man-in-the-middle/);
  });

  it.each([
    ["another host only", () => `192.0.2.1 ${pubKey(host.hostKeyPath)}\n`],
    ["the right key, but under port 22 (plain host)", () => `${host.address} ${pubKey(host.hostKeyPath)}\n`],
    ["the right key, but for another port", () => `[${host.address}]:2200 ${pubKey(host.hostKeyPath)}\n`],
    ["an empty file", () => ""],
    ["only a @cert-authority line", () => `@cert-authority * ${pubKey(host.hostKeyPath)}\n`],
  ])("refuses an unknown host (%s) and says how to add it", async (_, content) => {
    const err = await openError(transport({ knownHostsPath: undefined, knownHosts: content() }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain(hostPort());
    expect(err.message).toContain("ssh-ed25519");
    expect(err.message).toContain(hostKeyFingerprint);
    expect(err.message).toContain(`ssh-keyscan -p ${host.sshPort} -t ssh-ed25519 ${host.address}`);
  });

  it("refuses a @revoked host key even when it is also listed as good", async () => {
    const known = `[${host.address}]:${host.sshPort} ${pubKey(host.hostKeyPath)}\n@revoked * ${pubKey(host.hostKeyPath)}\n`;
    const err = await openError(transport({ knownHostsPath: undefined, knownHosts: known }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain(hostKeyFingerprint);
    expect(err.message).toMatch(/@revoked/);
  });
});

describe("connection failures", () => {
  it("authentication failure is permanent and names user and host", async () => {
    const stranger = path.join(scratch, "stranger");
    keygen(stranger, "ed25519");
    const err = await openError(transport({ privateKeyPath: stranger }));
    expect(err.kind).toBe("permanent");
    expect(err.message).toContain(`as root to ${host.address}:${host.sshPort}`);
    expect(err.message).toContain(stranger);
  });

  it("connection refused is transient", async () => {
    // A loopback port that was just free: nothing listens there.
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    await new Promise((resolve) => server.close(resolve));
    const err = await openError(transport({ host: "127.0.0.1", port }));
    expect(err.kind).toBe("transient");
    expect(err.message).toContain(`ssh://root@127.0.0.1:${port}`);
    expect(err.message).toContain("ECONNREFUSED");
  });

  it("a server that never speaks SSH gives a TimeoutError", async () => {
    const sockets: net.Socket[] = [];
    const server = net.createServer((s) => sockets.push(s));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const err = await openError(transport({ host: "127.0.0.1", port, connectTimeoutMs: 300 }));
      expect(err).toBeInstanceOf(TimeoutError);
      expect(err.kind).toBe("transient");
      expect(err.message).toContain(`ssh://root@127.0.0.1:${port}`);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("a server that hangs up at once is transient", async () => {
    const server = net.createServer((s) => s.destroy());
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const err = await openError(transport({ host: "127.0.0.1", port }));
      expect(err.kind).toBe("transient");
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
