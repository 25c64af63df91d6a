/**
 * Cut the connection at every libvirt call that create and delete make, then
 * rerun, and count with virsh what is left: zero leaked domains, volumes and
 * cached-image markers, and one running domain after the rerun of create.
 *
 * The cut points are not a hand-written list: a clean create and delete are
 * recorded through the wire relay when this file is collected, and every call
 * in those sequences becomes a case, so a new call in create becomes a new
 * cut point by itself. Each create case starts from an empty image cache so
 * its sequence (upload included) is the recorded one; the test checks that the
 * call at the cut index is the recorded call.
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
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
  TraceLog,
  uniqueName,
  virsh,
} from "../kvm/ops-helpers";
import {
  domainsWith,
  dropCachedImage,
  type Leftovers,
  leftovers,
  NO_LEFTOVERS,
  type Outcome,
  outcomeOf,
  RELAYED,
  relayedOps,
  removeAllWith,
  writeResults,
} from "./support";

const host = testHost();
const dir = scratchDir(host, "cut-points");
const relay = new WireRelay({ target: host.socketPath, dir });

// A 1 MiB image: more than one upload packet, cheap enough to upload per case.
const source = makeQcow2(dir, `cut-points-${process.pid}`, 1, 16);
const image = imageConfig({ url: source.path, sha256: source.sha256 });
const cacheName = ImageCache.volumeName(image);

/** Names end in "-c" so that no case's name is a prefix of another's. */
const caseName = (): string => `${uniqueName("cut")}-c`;
const spec = (name: string): CreateSpec => ({ ...baseSpec(RELAYED, name, image), diskGiB: 1 });

async function record(): Promise<{ create: string[]; delete: string[] }> {
  await relay.start();
  dropCachedImage(host, cacheName);
  const name = caseName();
  const creator = relayedOps(host, relay.socketPath);
  relay.reset();
  await creator.create(spec(name));
  const create = relay.callNames;
  await creator.hosts.closeAll();
  const deleter = relayedOps(host, relay.socketPath);
  relay.reset();
  await deleter.delete(RELAYED, name, ownedBy(name));
  const del = relay.callNames;
  await deleter.hosts.closeAll();
  relay.reset();
  return { create, delete: del };
}

// The suite factory is async (vitest awaits it while collecting): the cases are generated from this recording.
describe("cut points", async () => {
  const recorded = await record();

  interface Row {
    operation: "create" | "delete";
    index: number;
    call: string;
    mode: "before" | "after";
    reconnect: "refused" | "allowed";
    first: Outcome;
    rerun: Outcome | undefined;
    imageUploadsOnRerun: number | undefined;
    leftovers: Leftovers;
  }
  const rows: Row[] = [];

  const ours = `${PREFIX}cut-${process.pid}-`;

  // A failed case must not leave its VM to the next one (or to other suites).
  afterEach(() => {
    relay.reset();
    removeAllWith(host, ours);
  });

  afterAll(async () => {
    writeResults("cut-points", rows);
    dropCachedImage(host, cacheName);
    await relay.stop();
  });

  const modes = ["before", "after"] as const;
  const reconnects = ["refused", "allowed"] as const;

  function cutAt(index: number, mode: "before" | "after", reconnect: "refused" | "allowed"): void {
    relay.reset();
    relay.refuseAfterCut = reconnect === "refused";
    relay.onCall = (c) => (c.index === index ? { kind: "cut", mode } : undefined);
  }

  describe("recorded sequences", () => {
    it("create and delete make the calls the cut points are generated from", () => {
      // Sanity of the recording, not a fixed list: the sequences must hold the steps the tables cover.
      expect(recorded.create.slice(0, 2)).toEqual(["auth_list", "connect_open"]);
      expect(recorded.create).toContain("storage_vol_upload");
      expect(recorded.create).toContain("domain_define_xml");
      expect(recorded.create).toContain("domain_create");
      expect(recorded.delete).toContain("domain_undefine_flags");
      expect(recorded.delete).toContain("storage_vol_delete");
    });
  });

  const createCases = modes.flatMap((mode) =>
    reconnects.flatMap((reconnect) =>
      recorded.create.map((call, index) => ({ index, call, mode, reconnect })),
    ),
  );

  describe("create cut at every call, then create again, then delete", () => {
    for (const { index, call, mode, reconnect } of createCases)
      it(`#${index} ${call}, cut ${mode}, reconnection ${reconnect}`, async () => {
        dropCachedImage(host, cacheName);
        const name = caseName();
        cutAt(index, mode, reconnect);
        const cutRun = relayedOps(host, relay.socketPath);
        const first = await outcomeOf(cutRun.create(spec(name)));
        await cutRun.hosts.closeAll();
        expect(relay.calls[index]?.name).toBe(call);
        expect(relay.cuts).toBe(1);
        // Refused: the create cannot heal and must say so as a transient failure; allowed: it heals by itself.
        expect(first.result).toBe(reconnect === "refused" ? "transient" : "ok");

        relay.reset();
        const log = new TraceLog();
        const rerun = relayedOps(host, relay.socketPath, { tracer: log.tracer });
        const second = await outcomeOf(rerun.create(spec(name)));
        const uploads = log.uploads(cacheName);
        expect(second).toEqual({ result: "ok" });
        expect(domainsWith(host, name)).toEqual([name]);
        expect(virsh(host, "domstate", name).trim()).toBe("running");
        await rerun.delete(RELAYED, name, ownedBy(name));
        await rerun.hosts.closeAll();

        const left = leftovers(host, name, cacheName, source.sha256);
        rows.push({
          operation: "create",
          index,
          call,
          mode,
          reconnect,
          first,
          rerun: second,
          imageUploadsOnRerun: uploads,
          leftovers: left,
        });
        expect(left).toEqual(NO_LEFTOVERS);
      });
  });

  const deleteCases = modes.flatMap((mode) =>
    reconnects.flatMap((reconnect) =>
      recorded.delete.map((call, index) => ({ index, call, mode, reconnect })),
    ),
  );

  describe("delete cut at every call, then delete again", () => {
    for (const { index, call, mode, reconnect } of deleteCases)
      it(`#${index} ${call}, cut ${mode}, reconnection ${reconnect}`, async () => {
        const name = caseName();
        const maker = relayedOps(host, relay.socketPath);
        relay.reset();
        await maker.create(spec(name));
        await maker.hosts.closeAll();

        cutAt(index, mode, reconnect);
        const cutRun = relayedOps(host, relay.socketPath);
        const first = await outcomeOf(cutRun.delete(RELAYED, name, ownedBy(name)));
        await cutRun.hosts.closeAll();
        expect(relay.calls[index]?.name).toBe(call);
        expect(relay.cuts).toBe(1);
        expect(first.result).toBe(reconnect === "refused" ? "transient" : "ok");

        relay.reset();
        let second: Outcome | undefined;
        if (first.result !== "ok") {
          const rerun = relayedOps(host, relay.socketPath);
          second = await outcomeOf(rerun.delete(RELAYED, name, ownedBy(name)));
          await rerun.hosts.closeAll();
          expect(second).toEqual({ result: "ok" });
        }
        const left = leftovers(host, name, cacheName, source.sha256);
        rows.push({
          operation: "delete",
          index,
          call,
          mode,
          reconnect,
          first,
          rerun: second,
          imageUploadsOnRerun: undefined,
          leftovers: left,
        });
        expect(left).toEqual(NO_LEFTOVERS);
      });
  });
});
