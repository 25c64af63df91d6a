import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import { LibvirtConnection } from "../../../provider/libvirt/connection";
import { Procedures } from "../../../provider/libvirt/procedures";
import { SshTransport, type SshTransportOptions } from "../../../provider/transport/ssh";
import { type TestHost, testHost } from "../../support/test-host";
import {
  authList,
  closeStream,
  dropConnections,
  type ExtraSshd,
  keygen,
  okReply,
  pubKey,
  sshKeygenFingerprint,
  startExtraSshd,
} from "./helpers";

// Two sshds of our own inside the test host's namespaces: one that allows
// stream-local forwarding (with ECDSA and RSA host keys), one that refuses it so
// open() has to fall back to virt-ssh-helper.
const FORWARDING_PORT = 2224;
const NO_FORWARDING_PORT = 2223;

let host: TestHost;
let forwarding: ExtraSshd;
let noForwarding: ExtraSshd;

beforeAll(async () => {
  host = testHost();
  forwarding = await startExtraSshd(host, {
    port: FORWARDING_PORT,
    streamLocal: true,
    hostKeyTypes: ["ecdsa", "rsa"],
  });
  noForwarding = await startExtraSshd(host, {
    port: NO_FORWARDING_PORT,
    streamLocal: false,
    hostKeyTypes: ["ed25519"],
  });
});

afterAll(() => {
  forwarding?.stop();
  noForwarding?.stop();
});

function hostKey(sshd: ExtraSshd, type: string): string {
  const f = sshd.hostKeys[type];
  if (!f) throw new Error(`no ${type} host key`);
  return f;
}

function knownHostsLine(sshd: ExtraSshd, type: string): string {
  return `[${host.address}]:${sshd.port} ${pubKey(hostKey(sshd, type))}\n`;
}

function transport(sshd: ExtraSshd, over: Partial<SshTransportOptions> = {}): SshTransport {
  return new SshTransport({
    host: host.address,
    port: sshd.port,
    user: host.sshUser,
    privateKeyPath: host.sshKeyPath,
    knownHosts: knownHostsLine(sshd, Object.keys(sshd.hostKeys)[0] ?? ""),
    ...over,
  });
}

function log(sshd: ExtraSshd): string {
  return readFileSync(path.join(sshd.dir, "sshd.log"), "utf8");
}

function count(text: string, re: RegExp): number {
  return text.match(new RegExp(re.source, "g"))?.length ?? 0;
}

const ACCEPTED = /Accepted publickey for root/;
/** What sshd logs (at DEBUG1) for each refused stream-local channel. */
const DENIED = /failure direct-streamlocal@openssh\.com/;

function channelType(stream: Duplex): string {
  return (stream as Duplex & { type?: string }).type ?? "";
}

describe("stream-local forwarding", () => {
  it("opens direct-streamlocal channels to libvirtd, all on one connection", async () => {
    const before = count(log(forwarding), ACCEPTED);
    const t = transport(forwarding);
    try {
      // Concurrent first opens share one connect.
      const streams = await Promise.all(Array.from({ length: 12 }, () => t.open()));
      for (const s of streams) expect(channelType(s)).toBe("direct-streamlocal@openssh.com");
      const replies = await Promise.all(streams.map((s, i) => authList(s, 200 + i)));
      replies.forEach((r, i) => {
        expect(r).toMatchObject(okReply(200 + i));
      });
      await Promise.all(streams.map(closeStream));
      expect(count(log(forwarding), ACCEPTED) - before).toBe(1);
    } finally {
      await t.close();
    }
  });

  it.each(["ecdsa", "rsa"])(
    "verifies the host by its %s key when known_hosts holds only that type",
    async (type) => {
      const t = transport(forwarding, { knownHosts: knownHostsLine(forwarding, type) });
      try {
        const stream = await t.open();
        expect(await authList(stream, 7)).toMatchObject(okReply(7));
        await closeStream(stream);
      } finally {
        await t.close();
      }
    },
  );

  it("names the ECDSA key type and fingerprint when the known ECDSA key differs", async () => {
    const dir = path.dirname(hostKey(forwarding, "ecdsa"));
    const other = path.join(dir, "other_ecdsa");
    keygen(other, "ecdsa", "", ["-b", "521"]);
    const t = transport(forwarding, {
      knownHosts: `[${host.address}]:${forwarding.port} ${pubKey(`${other}.pub`)}\n`,
    });
    const err = await t.open().then(
      () => undefined,
      (e: unknown) => e,
    );
    await t.close();
    expect(err).toBeInstanceOf(ProviderError);
    const e = err as ProviderError;
    expect(e.kind).toBe("permanent");
    expect(e.message).toContain(`${host.address}:${forwarding.port}`);
    expect(e.message).toContain("ecdsa-sha2-nistp521");
    expect(e.message).toContain(sshKeygenFingerprint(hostKey(forwarding, "ecdsa")));
    expect(e.message).toMatch(/differs/);
  });

  it("works with hashed known_hosts lines for a non-22 port", async () => {
    const file = path.join(forwarding.dir, "known_hosts");
    writeFileSync(file, knownHostsLine(forwarding, "ecdsa") + knownHostsLine(forwarding, "rsa"));
    execFileSync("ssh-keygen", ["-q", "-H", "-f", file], { stdio: "ignore" });
    const t = transport(forwarding, { knownHosts: undefined, knownHostsPath: file });
    try {
      const stream = await t.open();
      expect(await authList(stream, 8)).toMatchObject(okReply(8));
      await closeStream(stream);
    } finally {
      await t.close();
    }
  });

  it("reconnects on the next open() after the connection dropped", async () => {
    const before = count(log(forwarding), ACCEPTED);
    const t = transport(forwarding);
    try {
      const first = await t.open();
      expect(await authList(first, 1)).toMatchObject(okReply(1));
      const gone = new Promise<void>((resolve) => first.once("close", () => resolve()));
      first.on("error", () => undefined);
      expect(dropConnections(forwarding)).toBeGreaterThan(0);
      await gone;
      const second = await t.open();
      expect(await authList(second, 2)).toMatchObject(okReply(2));
      await closeStream(second);
      expect(count(log(forwarding), ACCEPTED) - before).toBe(2);
    } finally {
      await t.close();
    }
  });

  it("carries a real libvirt connection (auth_list, connect_open, connect_get_type)", async () => {
    const conn = new LibvirtConnection({ transport: transport(forwarding), uri: "test:///default" });
    try {
      expect(await conn.call(Procedures.connectGetType, undefined)).toBe("TEST");
    } finally {
      await conn.close();
    }
  });
});

describe("fallback to virt-ssh-helper", () => {
  it("reaches libvirtd through virt-ssh-helper when stream-local forwarding is refused, asking only once per connection", async () => {
    const deniedBefore = count(log(noForwarding), DENIED);
    const t = transport(noForwarding);
    try {
      for (let serial = 1; serial <= 3; serial++) {
        const stream = await t.open();
        expect(channelType(stream)).toBe("session");
        expect(await authList(stream, serial)).toMatchObject(okReply(serial));
        await closeStream(stream);
      }
      const concurrent = await Promise.all([t.open(), t.open(), t.open()]);
      const replies = await Promise.all(concurrent.map((s, i) => authList(s, 10 + i)));
      replies.forEach((r, i) => {
        expect(r).toMatchObject(okReply(10 + i));
      });
      await Promise.all(concurrent.map(closeStream));
      expect(count(log(noForwarding), DENIED) - deniedBefore).toBe(1);
    } finally {
      await t.close();
    }
  });

  it("a real libvirt connection works through the helper", async () => {
    const conn = new LibvirtConnection({
      transport: transport(noForwarding, { driverUri: "qemu:///system" }),
      uri: "qemu:///system",
    });
    try {
      expect(await conn.call(Procedures.connectGetType, undefined)).toBe("QEMU");
    } finally {
      await conn.close();
    }
  });

  it("a failing helper surfaces as a stream error carrying its stderr", async () => {
    const t = transport(noForwarding, { driverUri: "bogus" });
    try {
      const stream = await t.open();
      const err = await new Promise<unknown>((resolve) => {
        stream.once("error", resolve);
        stream.once("close", () => resolve(undefined));
        stream.resume();
      });
      expect(err).toBeInstanceOf(ProviderError);
      expect((err as ProviderError).message).toContain("virt-ssh-helper 'bogus'");
      expect((err as ProviderError).message).toContain(`ssh://root@${host.address}:${noForwarding.port}`);
      expect((err as ProviderError).message).toMatch(/exited with status [1-9]/);
      // The helper's own complaint, from its stderr.
      expect((err as ProviderError).message).toContain("missing scheme");
    } finally {
      await t.close();
    }
  });
});
