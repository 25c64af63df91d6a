import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../../provider/kvm/config/host-config";
import { CallTracer } from "../../../../provider/kvm/host/call-tracer";
import {
  buildTransport,
  expandHome,
  HostNotConfiguredError,
  HostPool,
} from "../../../../provider/kvm/host/hosts";
import { SshTransport } from "../../../../provider/transport/ssh";
import type { Transport } from "../../../../provider/transport/types";
import { UnixSocketTransport } from "../../../../provider/transport/unix";

const config = parseConfig({
  hosts: {
    local: { uri: "unix:///run/kvmp/libvirt-sock", domainType: "qemu" },
    edge: {
      uri: "ssh://ops@edge.example.com:2222?socket=/run/libvirt/libvirt-sock",
      driverUri: "qemu:///system",
      privateKeyPath: "~/.ssh/id_ed25519",
      knownHostsPath: "/etc/kvmp/known_hosts",
    },
  },
});

describe("buildTransport", () => {
  it("builds a unix socket transport for unix:// hosts", () => {
    const t = buildTransport(config.hosts.local as never);
    expect(t).toBeInstanceOf(UnixSocketTransport);
    expect((t as UnixSocketTransport).path).toBe("/run/kvmp/libvirt-sock");
  });

  it("builds an SSH transport with the URI's user, port, socket and the driver URI", () => {
    const t = buildTransport(config.hosts.edge as never) as SshTransport;
    expect(t).toBeInstanceOf(SshTransport);
    expect(t).toMatchObject({
      host: "edge.example.com",
      port: 2222,
      user: "ops",
      socketPath: "/run/libvirt/libvirt-sock",
      driverUri: "qemu:///system",
    });
    expect(t.description).toBe("ssh://ops@edge.example.com:2222");
  });
});

describe("expandHome", () => {
  it("expands a leading ~/ only", () => {
    expect(expandHome("~/.ssh/known_hosts")).toBe(path.join(os.homedir(), ".ssh/known_hosts"));
    expect(expandHome("/etc/x")).toBe("/etc/x");
    expect(expandHome("a/~/b")).toBe("a/~/b");
  });
});

/** Transports that count opens and never connect anywhere. */
function countingTransports() {
  const built: string[] = [];
  const closed: string[] = [];
  const factory = (h: { key: string }): Transport => {
    built.push(h.key);
    return {
      description: `fake:${h.key}`,
      open: async (): Promise<Duplex> => {
        throw new Error("not used");
      },
      close: async () => {
        closed.push(h.key);
      },
    };
  };
  return { built, closed, factory };
}

describe("HostPool", () => {
  it("shares one lazily built connection per host among all callers", () => {
    const t = countingTransports();
    const pool = new HostPool(config.hosts, {
      transportFor: t.factory as never,
      tracer: new CallTracer({ level: 0 }),
    });
    expect(t.built).toEqual([]);
    const a = pool.libvirt("local");
    expect(pool.libvirt("local")).toBe(a);
    expect(pool.connection("local")).toBe(pool.connection("local"));
    expect(pool.connection("local").uri).toBe("qemu:///system");
    expect(pool.connection("local").connected).toBe(false);
    pool.libvirt("edge");
    expect(t.built).toEqual(["local", "edge"]);
  });

  it("closes every connection with closeAll and builds fresh ones afterwards", async () => {
    const t = countingTransports();
    const pool = new HostPool(config.hosts, {
      transportFor: t.factory as never,
      tracer: new CallTracer({ level: 0 }),
    });
    const first = pool.connection("local");
    pool.connection("edge");
    await pool.closeAll();
    expect(t.closed.sort()).toEqual(["edge", "local"]);
    expect(pool.connection("local")).not.toBe(first);
  });

  it("names the configured hosts when asked for an unknown one", () => {
    const pool = new HostPool(config.hosts, { tracer: new CallTracer({ level: 0 }) });
    expect(pool.has("edge")).toBe(true);
    expect(pool.has("gone")).toBe(false);
    expect(pool.has("toString")).toBe(false);
    const err = (() => {
      try {
        pool.libvirt("gone");
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(HostNotConfiguredError);
    expect(err).toMatchObject({
      kind: "permanent",
      host: "gone",
      message: 'host "gone" is not in the provider configuration (configured: local, edge)',
    });
  });
});
