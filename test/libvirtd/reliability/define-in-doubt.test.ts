/**
 * A domain define that outlives its RPC deadline (libvirtd slow, not dead)
 * still lands later. Seen once for real: the rollback looked the name up
 * before the define landed, found nothing, and the domain leaked. The relay
 * stalls domain_define_xml past the deadline while letting later calls
 * through, which is exactly that timing.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import type { CreateSpec } from "../../../provider/kvm/host/operations";
import { testHost } from "../../support/test-host";
import { WireRelay } from "../../support/wire-relay";
import {
  baseSpec,
  imageConfig,
  makeQcow2,
  ownedBy,
  PREFIX,
  scratchDir,
  uniqueName,
  virsh,
} from "../kvm/ops-helpers";
import {
  domainsWith,
  dropCachedImage,
  leftovers,
  NO_LEFTOVERS,
  RELAYED,
  relayedOps,
  removeAllWith,
  volumesWith,
} from "./support";

const host = testHost();
const dir = scratchDir(host, "define-in-doubt");
const relay = new WireRelay({ target: host.socketPath, dir });
const source = makeQcow2(dir, `define-in-doubt-${process.pid}`, 1, 16);
const image = imageConfig({ url: source.path, sha256: source.sha256 });
const cacheName = ImageCache.volumeName(image);
const ours = `${PREFIX}doubt-${process.pid}-`;
const caseName = (): string => `${uniqueName("doubt")}-d`;
const spec = (name: string): CreateSpec => baseSpec(RELAYED, name, image);

/** Deadline of each call, and how long the relay holds the define: well past the deadline. */
const CALL_TIMEOUT_MS = 1_500;
const STALL_MS = 4_000;

function stallDefine(): void {
  relay.reset();
  relay.onCall = (c) => (c.name === "domain_define_xml" ? { kind: "stall", ms: STALL_MS } : undefined);
}

/** Resolves once libvirtd has answered the stalled define: from then on it has landed. */
const defineLanded = () => relay.until((r) => r.direction === "to-client" && r.name === "domain_define_xml");

beforeAll(() => relay.start());
afterEach(() => {
  relay.reset();
  removeAllWith(host, ours);
});
afterAll(async () => {
  dropCachedImage(host, cacheName);
  await relay.stop();
});

describe("a define that outlives its deadline", () => {
  it("is waited for by the rollback's delete, which then removes it: nothing leaks", async () => {
    const name = caseName();
    stallDefine();
    // One attempt: the create gives up at the define's deadline, as a create out of retries does.
    const ops = relayedOps(host, relay.socketPath, {
      callTimeoutMs: CALL_TIMEOUT_MS,
      retry: { maxAttempts: 1 },
      ops: { defineGraceMs: 60_000, definePollMs: 100 },
    });
    await expect(ops.create(spec(name))).rejects.toMatchObject({
      kind: "transient",
      waitingFor: "reply to virDomainDefineXML",
    });
    // The rollback (what the resource does after a failed create).
    const rolledBack = await ops.delete(RELAYED, name, ownedBy(name));
    expect(rolledBack.domainRemoved).toBe(true);
    await defineLanded();
    await ops.hosts.closeAll();
    expect(domainsWith(host, name)).toEqual([]);
    expect(leftovers(host, name, cacheName, source.sha256)).toEqual(NO_LEFTOVERS);
  });

  it("is adopted by the create's own retry instead of defined twice", async () => {
    const name = caseName();
    stallDefine();
    const ops = relayedOps(host, relay.socketPath, {
      callTimeoutMs: CALL_TIMEOUT_MS,
      retry: { maxAttempts: 3, initialDelayMs: 5, maxDelayMs: 5 },
      ops: { defineGraceMs: 60_000, definePollMs: 100 },
    });
    const created = await ops.create(spec(name));
    expect(created.defined).toBe(false);
    expect(relay.callNames.filter((c) => c === "domain_define_xml")).toHaveLength(1);
    expect(domainsWith(host, name)).toEqual([name]);
    expect(virsh(host, "domstate", name).trim()).toBe("running");
    await ops.delete(RELAYED, name, ownedBy(name));
    await ops.hosts.closeAll();
    expect(leftovers(host, name, cacheName, source.sha256)).toEqual(NO_LEFTOVERS);
  });

  it("when it has not landed within the grace, delete removes the rest and fails transiently; the next run finishes", async () => {
    const name = caseName();
    stallDefine();
    // A grace far shorter than the stall: the define lands after delete gave up waiting.
    const ops = relayedOps(host, relay.socketPath, {
      callTimeoutMs: CALL_TIMEOUT_MS,
      retry: { maxAttempts: 1 },
      ops: { defineGraceMs: 200, definePollMs: 50 },
    });
    await expect(ops.create(spec(name))).rejects.toMatchObject({ kind: "transient" });
    const err = await ops.delete(RELAYED, name, ownedBy(name)).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "transient", operation: "delete" });
    expect((err as Error).message).toMatch(/define of domain .* timed out and had not landed/);
    expect(volumesWith(host, name)).toEqual([]);
    await defineLanded();
    await ops.hosts.closeAll();
    // The leak the error warned about is real, and the next run (a fresh process) removes it.
    expect(domainsWith(host, name)).toEqual([name]);
    relay.reset();
    const next = relayedOps(host, relay.socketPath);
    expect((await next.delete(RELAYED, name, ownedBy(name))).domainRemoved).toBe(true);
    await next.hosts.closeAll();
    expect(leftovers(host, name, cacheName, source.sha256)).toEqual(NO_LEFTOVERS);
  });
});
