/**
 * Pool refreshes while libvirt holds an asynchronous job on the pool. libvirt
 * 9.0 refuses virStoragePoolRefresh with VIR_ERR_INTERNAL_ERROR
 * "pool ... has asynchronous jobs running" while a volume is being built or
 * cloned (our overlays are builds: qemu-img runs under the job). Many creates
 * at once make that window common; refreshPool must wait it out, not fail.
 * A clone of a large volume holds the job open long enough to hit it every time.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HostPool } from "../../../provider/kvm/host/hosts";
import { refreshPool } from "../../../provider/kvm/host/volumes";
import { ErrorCode } from "../../../provider/libvirt/error-codes";
import { LibvirtError } from "../../../provider/libvirt/errors";
import { type TestHost, testHost, virshUri } from "../../support/test-host";
import { hostPool, scratchDir, TraceLog, virsh, virshQuiet } from "./ops-helpers";

const SOURCE = `kvmpt-refresh-src-${process.pid}.raw`;
const CLONE = `kvmpt-refresh-clone-${process.pid}.raw`;

let host: TestHost;
let pool: HostPool;
// A pool of its own: the clone's job blocks refreshes of its pool, and other
// test files running beside this one refresh the shared pool.
const POOL = `kvmpt-refresh-${process.pid}`;
const log = new TraceLog();

beforeAll(async () => {
  host = testHost();
  const dir = scratchDir(host, "pool-refresh");
  chmodSync(dir, 0o755);
  virsh(host, "pool-define-as", POOL, "dir", "--target", path.join(dir, "pool"));
  virsh(host, "pool-build", POOL);
  virsh(host, "pool-start", POOL);
  pool = hostPool(host, { tracer: log.tracer });
  // 512 MiB of data that does not compress or sparsify: the clone copies it all.
  const lv = pool.libvirt("local");
  const p = await lv.storagePoolLookupByName(POOL);
  const vol = await lv.storageVolCreateXml(
    p,
    `<volume><name>${SOURCE}</name><capacity>536870912</capacity><target><format type='raw'/></target></volume>`,
  );
  const chunks = (function* () {
    for (let i = 0; i < 512; i++) yield randomBytes(1024 * 1024);
  })();
  await lv.storageVolUpload(vol, chunks);
});

afterAll(async () => {
  virshQuiet(host, "vol-delete", "--pool", POOL, CLONE);
  virshQuiet(host, "vol-delete", "--pool", POOL, SOURCE);
  virshQuiet(host, "pool-destroy", POOL);
  virshQuiet(host, "pool-undefine", POOL);
  await pool.closeAll();
});

/** Starts `virsh vol-clone` in the background: libvirt holds a pool job until it ends. */
function startClone(): { child: ChildProcess; done: Promise<number> } {
  const child = spawn("virsh", ["-q", "-c", virshUri(host), "vol-clone", "--pool", POOL, SOURCE, CLONE], {
    stdio: "ignore",
  });
  const done = new Promise<number>((resolve) => child.once("exit", (code) => resolve(code ?? -1)));
  return { child, done };
}

function isJobsRunning(err: unknown): boolean {
  return (
    err instanceof LibvirtError &&
    err.code === ErrorCode.INTERNAL_ERROR &&
    /asynchronous jobs running/.test(err.libvirtMessage)
  );
}

describe("pool refresh during a pool job", () => {
  it("ten refreshes at once while a clone holds the pool all succeed once the job ends", async () => {
    const lv = pool.libvirt("local");
    const p = await lv.storagePoolLookupByName(POOL);
    const clone = startClone();
    // Positive control: a bare refresh is refused while the job runs.
    let refused = false;
    for (let i = 0; i < 200 && !refused; i++) {
      try {
        await lv.storagePoolRefresh(p);
        await new Promise((r) => setTimeout(r, 20));
      } catch (err) {
        if (!isJobsRunning(err)) throw err;
        refused = true;
      }
    }
    expect(refused).toBe(true);
    const before = log.records.length;
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => refreshPool(lv, p)));
    expect(results.filter((r) => r.status === "rejected")).toEqual([]);
    expect(await clone.done).toBe(0);
    // Each of the ten met the refusal at least once and retried past it.
    const refreshes = log.records.slice(before).filter((r) => r.call === "virStoragePoolRefresh");
    expect(refreshes.filter((r) => isJobsRunning(r.error)).length).toBeGreaterThanOrEqual(10);
    expect(refreshes.filter((r) => r.error === undefined).length).toBe(10);
    expect(virsh(host, "vol-list", POOL)).toContain(CLONE);
  });
});
