/**
 * The fault-injecting relay itself, against the real libvirtd: it forwards
 * faithfully, names calls, and each fault does what the reliability tests
 * rely on (the daemon really executes an "after" cut; a "before" cut never
 * reaches it; a refused reconnection fails; stream cuts stop an upload).
 */
import { Readable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ErrorCode } from "../../../provider/libvirt/error-codes";
import { LibvirtError } from "../../../provider/libvirt/errors";
import { UnixSocketTransport } from "../../../provider/transport/unix";
import { testHost } from "../../support/test-host";
import { WireRelay } from "../../support/wire-relay";
import {
  connect,
  rawVolumeXml,
  removeDomain,
  removeVolume,
  uefiDomainXml,
  uniqueName,
  virsh,
} from "../libvirt/support";

const host = testHost();
const relay = new WireRelay({ target: host.socketPath });
const made: { domains: string[]; volumes: string[] } = { domains: [], volumes: [] };

function viaRelay() {
  return connect(() => new UnixSocketTransport(relay.socketPath), { callTimeoutMs: 10_000 });
}

function domainNames(): string[] {
  return virsh(["list", "--all", "--name"])
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
}

beforeAll(() => relay.start());
afterAll(() => relay.stop());
afterEach(async () => {
  relay.reset();
  const { conn, lv } = connect(() => new UnixSocketTransport(host.socketPath));
  for (const d of made.domains.splice(0)) await removeDomain(lv, d);
  for (const v of made.volumes.splice(0)) await removeVolume(lv, v);
  await conn.close();
});

describe("wire relay", () => {
  it("forwards calls and replies unchanged and names every call in order", async () => {
    const { conn, lv } = viaRelay();
    expect(await lv.connectGetType()).toBe("QEMU");
    // Every call got exactly one reply, matched by serial.
    const replies = relay.records.filter((r) => r.direction === "to-client");
    expect(replies.map((r) => r.serial)).toEqual(relay.calls.map((c) => c.serial));
    await conn.close();
    expect(relay.callNames).toEqual([
      "auth_list",
      "connect_open",
      "connect_supports_feature",
      "connect_get_type",
      "connect_close",
    ]);
  });

  it("cut before: the call never reaches libvirtd and the caller sees a transient error", async () => {
    const name = uniqueName("relay-before");
    made.domains.push(name);
    relay.onCall = (c) => (c.name === "domain_define_xml" ? { kind: "cut", mode: "before" } : undefined);
    const { conn, lv } = viaRelay();
    const err = await lv.domainDefineXml(uefiDomainXml(name)).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "transient" });
    expect(relay.cuts).toBe(1);
    expect(domainNames()).not.toContain(name);
    await conn.close();
  });

  it("cut after: libvirtd executes the call but the reply never arrives", async () => {
    const name = uniqueName("relay-after");
    made.domains.push(name);
    relay.onCall = (c) => (c.name === "domain_define_xml" ? { kind: "cut", mode: "after" } : undefined);
    const { conn, lv } = viaRelay();
    const err = await lv.domainDefineXml(uefiDomainXml(name)).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "transient" });
    expect(domainNames()).toContain(name);
    await conn.close();
  });

  it("refuses reconnection after a cut when asked, and heals when allowed again", async () => {
    relay.refuseAfterCut = true;
    relay.onCall = (c) =>
      c.name === "connect_get_type" && c.conn === 0 ? { kind: "cut", mode: "before" } : undefined;
    const { conn, lv } = viaRelay();
    await expect(lv.connectGetType()).rejects.toMatchObject({ kind: "transient" });
    await expect(lv.connectGetType()).rejects.toMatchObject({ kind: "transient" });
    expect(relay.connections).toBe(2);
    relay.refusing = false;
    expect(await lv.connectGetType()).toBe("QEMU");
    await conn.close();
  });

  it("answers a call with a crafted remote_error", async () => {
    relay.onCall = (c) =>
      c.name === "connect_get_type"
        ? { kind: "error", code: ErrorCode.OPERATION_TIMEOUT, domain: 10, message: "crafted by the relay" }
        : undefined;
    const { conn, lv } = viaRelay();
    const err = await lv.connectGetType().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({ code: ErrorCode.OPERATION_TIMEOUT, libvirtMessage: "crafted by the relay" });
    // The connection stays usable: only that call was answered by the relay.
    relay.onCall = undefined;
    expect(await lv.connectGetType()).toBe("QEMU");
    await conn.close();
  });

  it("stalls one call past its deadline while later calls pass, then forwards it", async () => {
    const name = uniqueName("relay-stall");
    made.domains.push(name);
    relay.onCall = (c) => (c.name === "domain_define_xml" ? { kind: "stall", ms: 1_500 } : undefined);
    const { conn, lv } = viaRelay();
    await expect(lv.domainDefineXml(uefiDomainXml(name), { timeoutMs: 200 })).rejects.toMatchObject({
      kind: "transient",
      name: "TimeoutError",
    });
    // Meanwhile the daemon answers other calls: the define has not landed yet.
    await expect(lv.domainLookupByName(name)).rejects.toMatchObject({ code: ErrorCode.NO_DOMAIN });
    // Then it lands (libvirtd's reply reaches the client, which dropped the call): the case a rollback must wait for.
    await relay.until((r) => r.direction === "to-client" && r.name === "domain_define_xml");
    expect((await lv.domainLookupByName(name)).name).toBe(name);
    await conn.close();
  });

  it("cuts an upload after K bytes of stream data", async () => {
    const vol = uniqueName("relay-upload");
    made.volumes.push(vol);
    const { conn, lv } = viaRelay();
    const pool = await lv.storagePoolLookupByName(host.poolName);
    const v = await lv.storageVolCreateXml(pool, rawVolumeXml(vol, 1));
    relay.streamFault = { kind: "cut-at-byte", atByte: 100_000 };
    const data = Buffer.alloc(1_000_000, 7);
    await expect(lv.storageVolUpload(v, Readable.from([data]))).rejects.toMatchObject({ kind: "transient" });
    expect(relay.streamBytes).toBe(100_000);
    expect(relay.cuts).toBe(1);
    await conn.close();
  });
});
