/**
 * Image uploads cut at many offsets of the stream never leave a cached image
 * that a later create uses: the next create uploads again, and the cached
 * file then holds exactly the source's bytes (sha256).
 *
 * Offsets: 0, inside the first packet, exactly at the first packet boundary,
 * mid-way, the last byte, all data sent but the finish not (cut before the
 * finish packet), and finish sent but its confirmation dropped; the rest are
 * spread by a seeded generator (KVMPT_UPLOAD_SEED, printed). Packet
 * boundaries come from a clean upload recorded through the relay.
 */
import { statSync } from "node:fs";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import type { CreateSpec } from "../../../provider/kvm/host/operations";
import { PacketStatus, PacketType } from "../../../provider/libvirt/constants";
import { testHost } from "../../support/test-host";
import { type StreamFault, WireRelay } from "../../support/wire-relay";
import {
  baseSpec,
  imageConfig,
  makeQcow2,
  ownedBy,
  PREFIX,
  scratchDir,
  sha256File,
  TraceLog,
  uniqueName,
} from "../kvm/ops-helpers";
import {
  dropCachedImage,
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
const dir = scratchDir(host, "upload-cuts");
const relay = new WireRelay({ target: host.socketPath, dir });
// About 3 MiB: a dozen 256 KiB packets, so cuts land in many different packets.
const source = makeQcow2(dir, `upload-cuts-${process.pid}`, 3, 16);
const size = statSync(source.path).size;
const image = imageConfig({ url: source.path, sha256: source.sha256 });
const cacheName = ImageCache.volumeName(image);
const ours = `${PREFIX}upcut-${process.pid}-`;
const caseName = (): string => `${uniqueName("upcut")}-u`;
const spec = (name: string): CreateSpec => baseSpec(RELAYED, name, image);

const SEED = Number(process.env.KVMPT_UPLOAD_SEED ?? 20261129) >>> 0;

/** mulberry32: a small seeded generator, so a failing offset can be replayed. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Sizes of the image upload's data packets, from a clean create through the relay. */
async function recordPackets(): Promise<number[]> {
  await relay.start();
  dropCachedImage(host, cacheName);
  const name = caseName();
  relay.reset();
  const ops = relayedOps(host, relay.socketPath);
  await ops.create(spec(name));
  await ops.delete(RELAYED, name, ownedBy(name));
  await ops.hosts.closeAll();
  // The first upload of a create is the image's (the seed ISO follows).
  const uploadCall = relay.calls.find((c) => c.name === "storage_vol_upload");
  const packets = relay.records
    .filter(
      (r) =>
        r.direction === "to-daemon" &&
        r.conn === uploadCall?.conn &&
        r.serial === uploadCall?.serial &&
        r.type === PacketType.STREAM &&
        r.status === PacketStatus.CONTINUE,
    )
    .map((r) => r.bodyBytes);
  relay.reset();
  return packets;
}

interface Cut {
  label: string;
  fault: StreamFault;
}

function cuts(packets: number[]): Cut[] {
  const first = packets[0] ?? 0;
  const fixed: Cut[] = [
    { label: "offset 0", fault: { kind: "cut-at-byte", atByte: 0 } },
    { label: "inside the first packet", fault: { kind: "cut-at-byte", atByte: Math.floor(first / 3) } },
    { label: "first packet boundary", fault: { kind: "cut-at-byte", atByte: first } },
    { label: "mid-way", fault: { kind: "cut-at-byte", atByte: Math.floor(size / 2) } },
    { label: "last byte", fault: { kind: "cut-at-byte", atByte: size - 1 } },
    { label: "all data, before the finish", fault: { kind: "cut-at-finish", mode: "before" } },
    { label: "finish sent, confirmation dropped", fault: { kind: "cut-at-finish", mode: "after" } },
  ];
  const random = seeded(SEED);
  const spread: Cut[] = [];
  while (fixed.length + spread.length < 22) {
    const at = 1 + Math.floor(random() * (size - 2));
    spread.push({ label: "seeded", fault: { kind: "cut-at-byte", atByte: at } });
  }
  return [...fixed, ...spread];
}

interface Row {
  label: string;
  atByte: number | string;
  reconnect: "refused" | "allowed";
  first: Outcome;
  uploadsAfterCut: number;
  cachedSha256Matches: boolean;
  corruptReuse: number;
}
const rows: Row[] = [];

describe("uploads cut at many offsets", async () => {
  const packets = await recordPackets();
  const cases = cuts(packets);
  console.log(
    `upload-cuts: image ${size} bytes in ${packets.length} packets; seed ${SEED}; offsets ${cases
      .map((c) => (c.fault.kind === "cut-at-byte" ? c.fault.atByte : `finish-${c.fault.mode}`))
      .join(", ")}`,
  );

  afterEach(() => {
    relay.reset();
    removeAllWith(host, ours);
  });

  afterAll(async () => {
    writeResults("upload-cuts", rows);
    dropCachedImage(host, cacheName);
    await relay.stop();
  });

  it("the recording saw the whole image in more than two packets", () => {
    expect(packets.length).toBeGreaterThan(2);
    expect(packets.reduce((a, b) => a + b, 0)).toBe(size);
  });

  for (const reconnect of ["refused", "allowed"] as const) {
    for (const { label, fault } of cases) {
      const at = fault.kind === "cut-at-byte" ? `byte ${fault.atByte}` : `finish ${fault.mode}`;
      it(`${label} (${at}), reconnection ${reconnect}`, async () => {
        dropCachedImage(host, cacheName);
        const name = caseName();
        relay.reset();
        relay.streamFault = fault;
        relay.refuseAfterCut = reconnect === "refused";
        const log = new TraceLog();
        const cutRun = relayedOps(host, relay.socketPath, { tracer: log.tracer });
        const first = await outcomeOf(cutRun.create(spec(name)));
        await cutRun.hosts.closeAll();
        expect(relay.cuts).toBe(1);
        if (fault.kind === "cut-at-byte") expect(relay.streamBytesAtCut).toBe(fault.atByte);

        let uploads: number;
        if (reconnect === "refused") {
          // The create could not heal; the next one (a new process) must upload again.
          expect(first.result).toBe("transient");
          relay.reset();
          const next = new TraceLog();
          const rerun = relayedOps(host, relay.socketPath, { tracer: next.tracer });
          expect(await outcomeOf(rerun.create(spec(name)))).toEqual({ result: "ok" });
          await rerun.delete(RELAYED, name, ownedBy(name));
          await rerun.hosts.closeAll();
          uploads = next.uploads(cacheName);
        } else {
          // The create's own retry uploads again: the cut one plus a complete one.
          expect(first).toEqual({ result: "ok" });
          await cutRun.delete(RELAYED, name, ownedBy(name));
          await cutRun.hosts.closeAll();
          uploads = log.uploads(cacheName) - 1;
        }
        const matches = sha256File(`${host.poolPath}/${cacheName}`) === source.sha256;
        const left = leftovers(host, name, cacheName, source.sha256);
        rows.push({
          label,
          atByte: fault.kind === "cut-at-byte" ? fault.atByte : `finish ${fault.mode}`,
          reconnect,
          first,
          uploadsAfterCut: uploads,
          cachedSha256Matches: matches,
          corruptReuse: uploads === 0 || !matches ? 1 : 0,
        });
        expect(uploads).toBe(1);
        expect(matches).toBe(true);
        expect(left).toEqual(NO_LEFTOVERS);
      });
    }
  }
});
