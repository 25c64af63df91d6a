import { execFileSync } from "node:child_process";
import { chmodSync, createReadStream, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ProviderError, TimeoutError } from "../../../provider/errors";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { buildDomainXml } from "../../../provider/kvm/domain/domain-xml";
import { METADATA_NAMESPACE } from "../../../provider/kvm/domain/metadata";
import {
  bakeBuilderName,
  bakedImageVolumeName,
  bakeSeedVolumeName,
  partialMarkerVolumeName,
} from "../../../provider/kvm/domain/names";
import { KvmStateError } from "../../../provider/kvm/host/addresses";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { CREATE_STEPS, KvmOperations } from "../../../provider/kvm/host/operations";
import { ProvisionError } from "../../../provider/kvm/host/provision";
import { KvmOperationError } from "../../../provider/kvm/host/retry";
import { shorthandNic } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import { DomainMetadataType } from "../../../provider/libvirt/constants";
import { type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  CuttableTransports,
  hostConfigs,
  hostPool,
  ImageServer,
  imageConfig,
  makeQcow2,
  ownedBy,
  scratchDir,
  sha256File,
  TraceLog,
  uniqueName,
  virsh,
  virshQuiet,
  vmVolumes,
} from "./ops-helpers";

let host: TestHost;
let scratch: string;
let server: ImageServer;
/** Every domain name and cache volume the tests may have created, for cleanup. */
const domains = new Set<string>();
const cacheVolumes = new Set<string>();
const pools: HostPool[] = [];

// Fast, bounded retries: the tests assert behaviour, not timing.
const retry = { maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 30_000 };

function ops(options: { pool?: HostPool; images?: ImageCache } = {}): KvmOperations {
  const pool = options.pool ?? hostPool(host);
  pools.push(pool);
  return new KvmOperations(pool, { retry, ...(options.images ? { images: options.images } : {}) });
}

/** A fresh folder inside this run's scratch folder (removed with it). */
function subdir(prefix: string): string {
  return mkdtempSync(path.join(scratch, `${prefix}-`));
}

function track(name: string): string {
  domains.add(name);
  return name;
}

function trackImage(image: ImageConfig): string {
  const name = ImageCache.volumeName(image);
  cacheVolumes.add(name);
  return name;
}

function poolVolumes(): string[] {
  return virsh(host, "vol-list", host.poolName)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n !== "");
}

function volumesOf(name: string): string[] {
  return poolVolumes()
    .filter((v) => v.startsWith(`${name}-`))
    .sort();
}

function domainState(name: string): string {
  return virsh(host, "domstate", name).trim();
}

function domainsNamed(name: string): string[] {
  return virsh(host, "list", "--all", "--name")
    .split("\n")
    .map((l) => l.trim())
    .filter((n) => n === name);
}

function removeDomainByHand(name: string): void {
  virshQuiet(host, "destroy", name);
  virshQuiet(host, "undefine", "--nvram", name);
  for (const v of volumesOf(name)) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
}

let sharedImage: ImageConfig;
let sharedSha: string;

beforeAll(async () => {
  host = testHost();
  scratch = scratchDir(host, "kvm-ops");
  // QEMU (as libvirt-qemu) must traverse into a test pool under it; mkdtemp makes 0700 folders.
  chmodSync(scratch, 0o755);
  const img = makeQcow2(scratch, "shared", 2);
  sharedSha = img.sha256;
  sharedImage = imageConfig({ url: img.path, sha256: img.sha256 });
  trackImage(sharedImage);
  server = new ImageServer();
  await server.start();
});

afterAll(async () => {
  await Promise.allSettled(pools.map((p) => p.closeAll()));
  await server?.stop();
  for (const d of domains) removeDomainByHand(d);
  for (const v of cacheVolumes) {
    virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
    virshQuiet(host, "vol-delete", "--pool", host.poolName, partialMarkerVolumeName(v));
  }
  rmSync(scratch, { recursive: true, force: true });
  // Nothing of ours may remain in the pool.
  expect(
    poolVolumes().filter(
      (v) => [...domains].some((d) => v.startsWith(`${d}-`)) || cacheVolumes.has(v.replace(/\.partial$/, "")),
    ),
  ).toEqual([]);
});

afterEach(async () => {
  await Promise.allSettled(pools.splice(0).map((p) => p.closeAll()));
});

describe("create", () => {
  it("twice gives one running domain; the second only finds it", async () => {
    const o = ops();
    const name = track(uniqueName("twice"));
    const first = await o.create(baseSpec("local", name, sharedImage));
    const second = await o.create(baseSpec("local", name, sharedImage));
    expect(first.defined).toBe(true);
    expect(second.defined).toBe(false);
    expect(second.uuid).toBe(first.uuid);
    expect(second.mac).toBe(first.mac);
    expect(first.mac).toMatch(/^52:54:00(:[0-9a-f]{2}){3}$/);
    expect(first.providerId).toBe(`kvm://local/${name}`);
    expect(domainsNamed(name)).toEqual([name]);
    expect(domainState(name)).toBe("running");
    expect(volumesOf(name)).toEqual(vmVolumes(name).both);
  });

  it("starts an existing domain that was stopped, without redefining it", async () => {
    const o = ops();
    const name = track(uniqueName("restart"));
    const first = await o.create(baseSpec("local", name, sharedImage));
    virsh(host, "destroy", name);
    expect(domainState(name)).toBe("shut off");
    const again = await o.create(baseSpec("local", name, sharedImage));
    expect(again).toMatchObject({ defined: false, uuid: first.uuid });
    expect(domainState(name)).toBe("running");
  });

  it("builds the overlay as qcow2 compat 1.1 over the cached image, with capacity max(image, disk)", async () => {
    const o = ops();
    const name = track(uniqueName("overlay"));
    await o.create({ ...baseSpec("local", name, sharedImage), diskGiB: 2 });
    const xml = virsh(host, "vol-dumpxml", "--pool", host.poolName, vmVolumes(name).root);
    expect(xml).toContain("<compat>1.1</compat>");
    expect(xml).toMatch(/<capacity unit='bytes'>2147483648<\/capacity>/);
    expect(xml).toContain(path.join(host.poolPath, ImageCache.volumeName(sharedImage)));
    // The domain's disks are files at the paths libvirt reported, never volume references.
    const dom = virsh(host, "dumpxml", name);
    expect(dom).toContain(`<source file='${path.join(host.poolPath, vmVolumes(name).root)}'`);
    expect(dom).toContain(`<source file='${path.join(host.poolPath, vmVolumes(name).seed)}'`);
    expect(dom).not.toMatch(/type='volume'/);
  });

  it("uses the image's virtual size when the requested disk is smaller", async () => {
    const dir = subdir("big-virtual");
    const img = makeQcow2(dir, "bigvirt", 1, 3 * 1024);
    const image = imageConfig({ url: img.path, sha256: img.sha256 });
    trackImage(image);
    const o = ops();
    const name = track(uniqueName("virtsize"));
    await o.create({ ...baseSpec("local", name, image), diskGiB: 1 });
    const xml = virsh(host, "vol-dumpxml", "--pool", host.poolName, vmVolumes(name).root);
    expect(xml).toMatch(/<capacity unit='bytes'>3221225472<\/capacity>/);
  });

  it("converges after being cut short before each step in turn", async () => {
    const o = ops();
    const name = track(uniqueName("steps"));
    for (const failAt of CREATE_STEPS) {
      const err = await o
        .create(baseSpec("local", name, sharedImage), {
          onStep: (s) => {
            if (s === failAt) throw new Error(`injected failure before ${s}`);
          },
        })
        .catch((e: unknown) => e);
      expect(err, failAt).toBeInstanceOf(KvmOperationError);
      expect((err as KvmOperationError).message).toContain(`injected failure before ${failAt}`);
      const done = await o.create(baseSpec("local", name, sharedImage));
      expect(done.uuid).toMatch(/^[0-9a-f-]{36}$/);
      expect(domainsNamed(name), failAt).toEqual([name]);
      expect(domainState(name), failAt).toBe("running");
      expect(volumesOf(name), failAt).toEqual(vmVolumes(name).both);
      // This test's image only: files running beside it have markers of their own.
      const marker = partialMarkerVolumeName(ImageCache.volumeName(sharedImage));
      expect(
        poolVolumes().filter((v) => v === marker),
        failAt,
      ).toEqual([]);
      await o.delete("local", name, ownedBy(name));
    }
  });

  it("retries transparently when the connection drops before any step", async () => {
    const cuts = new CuttableTransports();
    const o = ops({ pool: hostPool(host, { transportFor: cuts.factory }) });
    const name = track(uniqueName("drop"));
    for (const dropAt of CREATE_STEPS) {
      let dropped = false;
      const done = await o.create(baseSpec("local", name, sharedImage), {
        onStep: (s) => {
          if (s === dropAt && !dropped) {
            dropped = true;
            cuts.cut();
          }
        },
      });
      expect(dropped, dropAt).toBe(true);
      expect(done.uuid, dropAt).toMatch(/^[0-9a-f-]{36}$/);
      expect(domainsNamed(name), dropAt).toEqual([name]);
      expect(domainState(name), dropAt).toBe("running");
      expect(volumesOf(name), dropAt).toEqual(vmVolumes(name).both);
      await o.delete("local", name, ownedBy(name));
    }
  });

  it("after a failed attempt, converges only onto its own domain: another owner's of the same name is refused and left as it was", async () => {
    const o = ops();
    const name = track(uniqueName("taken"));
    const mine = baseSpec("local", name, sharedImage);
    // Another stack's create looks first (no domain yet), then fails transiently
    // once; meanwhile the first owner's create defines the domain.
    const other = baseSpec("local", name, sharedImage);
    other.owner = { project: "kvmpt", stack: "other", urn: "urn:pulumi:other::kvmpt::kvm:Proxy::late" };
    let failed = false;
    let first: { uuid: string } | undefined;
    const err = await o
      .create(other, {
        onStep: async (s) => {
          if (s === "seed-upload" && !failed) {
            failed = true;
            first = await o.create(mine);
            throw new ProviderError("transient", "injected: connection reset");
          }
        },
      })
      .catch((e: unknown) => e);
    expect(failed).toBe(true);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect((err as KvmOperationError).kind).toBe("permanent");
    expect((err as KvmOperationError).message).toContain(
      `domain ${name} already exists on host local and belongs to ${mine.owner.urn}`,
    );
    expect(domainsNamed(name)).toEqual([name]);
    expect(domainState(name)).toBe("running");
    expect(virsh(host, "domuuid", name).trim()).toBe(first?.uuid);
    // Its own owner converges onto it as before.
    expect((await o.create(mine)).uuid).toBe(first?.uuid);
    await o.delete("local", name, ownedBy(name));
  });

  it("refuses to converge onto its own owner's domain built from other inputs (another spec hash)", async () => {
    const o = ops();
    const name = track(uniqueName("respec"));
    const first = await o.create(baseSpec("local", name, sharedImage));
    const changed = { ...baseSpec("local", name, sharedImage), specHash: "0".repeat(64) };
    const err = await o.create(changed).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect((err as KvmOperationError).message).toMatch(/was built from other inputs/);
    expect(virsh(host, "domuuid", name).trim()).toBe(first.uuid);
    await o.delete("local", name, ownedBy(name));
  });

  it("provision looks the domain up once before its define; a retry after a cut looks again and keeps the one define", async () => {
    const log = new TraceLog();
    const cuts = new CuttableTransports();
    const o = ops({ pool: hostPool(host, { transportFor: cuts.factory, tracer: log.tracer }) });
    const name = track(uniqueName("absent"));
    let dropped = false;
    const done = await o.provision(baseSpec("local", name, sharedImage), {
      waitForIp: false,
      // After the define: the retry must find the domain the first attempt defined.
      onStep: (s) => {
        if (s === "start" && !dropped) {
          dropped = true;
          cuts.cut();
        }
      },
    });
    expect(dropped).toBe(true);
    const calls = log.records.map((r) => r.call);
    const firstDefine = calls.indexOf("virDomainDefineXML");
    expect(firstDefine).toBeGreaterThan(-1);
    expect(calls.slice(0, firstDefine).filter((c) => c === "virDomainLookupByName")).toHaveLength(1);
    expect(calls.slice(firstDefine)).toContain("virDomainLookupByName");
    expect(calls.filter((c) => c === "virDomainDefineXML")).toHaveLength(1);
    // The live XML read after the start is the status's: no second read.
    expect(calls.filter((c) => c === "virDomainGetXMLDesc")).toHaveLength(1);
    expect(domainsNamed(name)).toEqual([name]);
    expect(domainState(name)).toBe("running");
    expect(done.uuid).toBe(virsh(host, "domuuid", name).trim());
    expect(done.domain?.name).toBe(name);
    expect(done.domain?.mac).toBe(done.mac);
    await o.delete("local", name, ownedBy(name));
  });

  it("fails at once, not at its deadline, when the VM stops while its readiness gate waits, and rolls it back", async () => {
    const o = ops();
    const name = track(uniqueName("stops"));
    const err = await o
      .provision(baseSpec("local", name, sharedImage), {
        waitForIp: false,
        // Far past this test's own timeout: only the state watch ends the gate in time.
        deadlineMs: 600_000,
        stateWatchMs: 200,
        // A gate that waits as long as it is allowed to: the guest powers off meanwhile.
        ready: (_status, _left, signal) => {
          virshQuiet(host, "destroy", name);
          return new Promise((_resolve, reject) =>
            signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
          );
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProvisionError);
    expect((err as ProvisionError).rolledBack).toBe(true);
    expect((err as ProvisionError).cause).toBeInstanceOf(KvmStateError);
    expect((err as Error).message).toContain(
      `domain ${name} on host local is stopped while waiting for the guest to become ready`,
    );
    expect(domainsNamed(name)).toEqual([]);
    expect(volumesOf(name)).toEqual([]);
  });

  it("with keepOnFailure, leaves a VM whose readiness gate failed as it is, saying so; a cancel still rolls back", async () => {
    const o = ops();
    const kept = track(uniqueName("kept"));
    const err = await o
      .provision(baseSpec("local", kept, sharedImage), {
        waitForIp: false,
        keepOnFailure: true,
        ready: () => Promise.reject(new ProviderError("permanent", "the health check never passed")),
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProvisionError);
    expect(err).toMatchObject({ kept: true, rolledBack: false, status: { name: kept } });
    expect((err as Error).message).toBe(
      `create of kvm://local/${kept} failed and the VM was kept for inspection: the health check never passed`,
    );
    expect(domainState(kept)).toBe("running");
    expect(volumesOf(kept).length).toBeGreaterThan(0);
    await o.delete("local", kept, ownedBy(kept));
    expect(domainsNamed(kept)).toEqual([]);

    const cancelled = track(uniqueName("kept-cancel"));
    const cancel = new AbortController();
    const cut = await o
      .provision(baseSpec("local", cancelled, sharedImage), {
        waitForIp: false,
        keepOnFailure: true,
        signal: cancel.signal,
        ready: (_status, _left, signal) => {
          const ended = new Promise<void>((_resolve, reject) =>
            signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
          );
          cancel.abort(new Error("cancelled by the engine"));
          return ended;
        },
      })
      .catch((e: unknown) => e);
    expect(cut).toMatchObject({ kept: false, rolledBack: true });
    expect(domainsNamed(cancelled)).toEqual([]);
    expect(volumesOf(cancelled)).toEqual([]);
  });

  it("stops where it is when its signal aborts: waiting for the image, no later step runs and nothing of the VM is made", async () => {
    const log = new TraceLog();
    const o = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const name = track(uniqueName("abort"));
    const img = makeQcow2(subdir("held"), "held", 2);
    const url = `/held-${process.pid}.qcow2`;
    server.files.set(url, img.path);
    server.holdAfter.set(url, 64 * 1024);
    const image = imageConfig({ url: server.url(url), sha256: img.sha256 });
    const volume = trackImage(image);
    const deadline = new AbortController();
    const reason = new TimeoutError("the create to finish (the test's deadline)", 1_000);
    // Abort once the image download is under way and stalled: create is then inside the image step.
    server.onHeld = () => deadline.abort(reason);
    const steps: string[] = [];
    const err = await o
      .create(baseSpec("local", name, image), { signal: deadline.signal, onStep: (s) => void steps.push(s) })
      .catch((e: unknown) => e);
    server.onHeld = undefined;
    expect(err).toBe(reason);
    expect(steps).toEqual(["lookup-domain", "pool", "image"]);
    expect(log.records.map((r) => r.call)).not.toContain("virDomainDefineXML");
    expect(domainsNamed(name)).toEqual([]);
    expect(volumesOf(name)).toEqual([]);
    // The shared upload ran on without this create; cut it short: the next create must upload again.
    server.releaseHeld();
    server.holdAfter.delete(url);
    const loc = { host: "local", pool: { name: host.poolName, uuid: "" } };
    for (let i = 0; i < 300 && o.images.uploading(loc, volume); i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(o.images.uploading(loc, volume)).toBe(false);
    const done = await o.create(baseSpec("local", name, image));
    expect(done.imageUploaded).toBe(true);
    expect(sha256File(path.join(host.poolPath, volume))).toBe(img.sha256);
    await o.delete("local", name, ownedBy(name));
  });

  it("rewrites the seed with user-data byte for byte on every create that defines the domain, whatever seed the name already has", async () => {
    const o = ops();
    const name = track(uniqueName("seed"));
    const iso = path.join(host.poolPath, vmVolumes(name).seed);
    /** A file of the seed, or why the seed cannot be read. */
    const read = (f: string): Buffer | string => {
      try {
        return execFileSync("isoinfo", ["-R", "-i", iso, "-x", `/${f}`], { stdio: "pipe" });
      } catch (err) {
        return `unreadable seed: ${(err as Error).message}`;
      }
    };
    // Each create finds the domain gone and the seed volume left as `before` made it.
    const creates: [string, () => Promise<void>, string][] = [
      ["no seed yet", async () => {}, "#cloud-config\n# ünïcode and\r\nCRLF kept\nversion: 1.10\n"],
      [
        "the seed of a domain removed by hand, its bytes overwritten in place",
        async () => {
          virsh(host, "destroy", name);
          virsh(host, "undefine", "--nvram", name);
          writeFileSync(iso, Buffer.alloc(statSync(iso).size, 0x5a));
        },
        "#cloud-config\nhostname: second\n",
      ],
      [
        "the empty seed of a create cut short before its upload",
        async () => {
          await o.delete("local", name, ownedBy(name));
          const err = await o
            .create(baseSpec("local", name, sharedImage), {
              onStep: (s) => {
                if (s === "seed-upload") throw new Error("injected failure before seed-upload");
              },
            })
            .catch((e: unknown) => e);
          expect(err).toBeInstanceOf(KvmOperationError);
          expect(volumesOf(name)).toContain(vmVolumes(name).seed);
          expect(domainsNamed(name)).toEqual([]);
        },
        "#!/bin/sh\necho third\n",
      ],
    ];
    for (const [before, prepare, text] of creates) {
      await prepare();
      const userData = Buffer.from(text, "utf8");
      const made = await o.create({ ...baseSpec("local", name, sharedImage), userData });
      expect(made.defined, before).toBe(true);
      expect(read("user-data"), before).toEqual(userData);
      expect(read("meta-data").toString(), before).toContain(`instance-id: "${name}"`);
      expect(read("vendor-data").toString(), before).toContain("qemu-guest-agent");
    }
  });

  it("writes a raw network-config into the seed byte for byte", async () => {
    const name = track(uniqueName("netcfg"));
    // What no typed field makes: comments, CRLF, unicode, a bond; passed as given.
    const networkConfig = "# ünïcode\r\nversion: 2\nbonds:\n  bond0: {interfaces: [ens3, ens4]}\n";
    await ops().create({ ...baseSpec("local", name, sharedImage), networkConfig });
    const iso = path.join(host.poolPath, vmVolumes(name).seed);
    const read = (f: string) => execFileSync("isoinfo", ["-R", "-i", iso, "-x", `/${f}`], { stdio: "pipe" });
    expect(read("network-config")).toEqual(Buffer.from(networkConfig, "utf8"));
  });
});

describe("image cache", () => {
  it("two VMs created at once from an http image share one upload; the cached bytes equal the source", async () => {
    const dir = subdir("http-img");
    const img = makeQcow2(dir, "http", 3);
    server.files.set("/img/http.qcow2", img.path);
    // Through a redirect, pinned by sha256.
    const image = imageConfig({ url: server.url("/redirect/img/http.qcow2"), sha256: img.sha256 });
    const volName = trackImage(image);
    const log = new TraceLog();
    const o = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const a = track(uniqueName("share-a"));
    const b = track(uniqueName("share-b"));
    const [ra, rb] = await Promise.all([
      o.create(baseSpec("local", a, image)),
      o.create(baseSpec("local", b, image)),
    ]);
    expect(log.uploads(volName)).toBe(1);
    expect([ra.imageUploaded, rb.imageUploaded].sort()).toEqual([false, true]);
    // A third VM later reuses it without uploading.
    const c = track(uniqueName("share-c"));
    const rc = await o.create(baseSpec("local", c, image));
    expect(rc.imageUploaded).toBe(false);
    expect(log.uploads(volName)).toBe(1);
    expect(sha256File(path.join(host.poolPath, volName))).toBe(img.sha256);
    expect(poolVolumes()).not.toContain(partialMarkerVolumeName(volName));
    // Cached images outlive their VMs.
    await o.delete("local", a, ownedBy(a));
    await o.delete("local", b, ownedBy(b));
    await o.delete("local", c, ownedBy(c));
    expect(poolVolumes()).toContain(volName);
  });

  it("a create on a connection that saw the image complete asks libvirt nothing about it; removed by hand, the next create looks again and uploads anew; another connection looks again", async () => {
    const dir = subdir("known-img");
    const img = makeQcow2(dir, "known", 2);
    const image = imageConfig({ url: img.path });
    const volName = trackImage(image);
    const asking = new Set(["virStorageVolLookupByName", "virStorageVolGetInfo", "virStorageVolGetPath"]);
    /** Calls that ask about the image volume or its marker. */
    const askedAbout = (log: TraceLog) =>
      log.records.filter((r) => asking.has(r.call) && r.fields.some((f) => f.includes(volName))).length;
    const log = new TraceLog();
    const o = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const [a, b, c, d] = ["known-a", "known-b", "known-c", "known-d"].map((n) => track(uniqueName(n))) as [
      string,
      string,
      string,
      string,
    ];
    expect((await o.create(baseSpec("local", a, image))).imageUploaded).toBe(true);
    const asked = askedAbout(log);
    expect(asked).toBeGreaterThan(0);
    expect((await o.create(baseSpec("local", b, image))).imageUploaded).toBe(false);
    expect(askedAbout(log)).toBe(asked);

    virsh(host, "vol-delete", "--pool", host.poolName, volName);
    const rc = await o.create(baseSpec("local", c, image));
    expect(rc.imageUploaded).toBe(true);
    expect(log.uploads(volName)).toBe(2);
    expect(sha256File(path.join(host.poolPath, volName))).toBe(img.sha256);

    const other = new TraceLog();
    const o2 = ops({ pool: hostPool(host, { tracer: other.tracer }) });
    expect((await o2.create(baseSpec("local", d, image))).imageUploaded).toBe(false);
    expect(askedAbout(other)).toBeGreaterThan(0);
    for (const n of [a, b, c, d]) await o.delete("local", n, ownedBy(n));
  });

  it("an http body cut half-way is not reused: the next create uploads again", async () => {
    const dir = subdir("cut-img");
    const img = makeQcow2(dir, "cut", 3);
    server.files.set("/img/cut.qcow2", img.path);
    // Unpinned: only the announced length can tell the body was cut.
    const image = imageConfig({ url: server.url("/img/cut.qcow2") });
    const volName = trackImage(image);
    server.cutAfter.set("/img/cut.qcow2", 1536 * 1024);
    const log = new TraceLog();
    const o = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const name = track(uniqueName("cut"));
    const err = await o.create(baseSpec("local", name, image)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect(domainsNamed(name)).toEqual([]);
    server.cutAfter.delete("/img/cut.qcow2");
    const done = await o.create(baseSpec("local", name, image));
    expect(done.imageUploaded).toBe(true);
    expect(log.uploads(volName)).toBeGreaterThanOrEqual(2);
    expect(sha256File(path.join(host.poolPath, volName))).toBe(img.sha256);
    expect(poolVolumes()).not.toContain(partialMarkerVolumeName(volName));
  });

  it("an upload whose process died mid-way (no cleanup) leaves a marker, and the next process re-uploads", async () => {
    const dir = subdir("dead-img");
    const img = makeQcow2(dir, "dead", 3);
    const image = imageConfig({ url: `file://${img.path}` });
    const volName = trackImage(image);
    const cuts = new CuttableTransports();
    // The source kills the transport once 1.5 MiB went out, like a process dying.
    const dying = new ImageCache({
      open: async () => {
        const stream = createReadStream(img.path, { highWaterMark: 256 * 1024 });
        let seen = 0;
        stream.on("data", (c) => {
          seen += (c as Buffer).length;
          if (seen >= 1536 * 1024 && !cuts.killed) cuts.kill();
        });
        return { stream, length: fileSize(img.path) };
      },
    });
    const first = ops({ pool: hostPool(host, { transportFor: cuts.factory }), images: dying });
    const name = track(uniqueName("dead"));
    await expect(first.create(baseSpec("local", name, image))).rejects.toBeInstanceOf(ProviderError);
    // The dead process left the image volume and its marker behind.
    expect(poolVolumes()).toEqual(expect.arrayContaining([volName, partialMarkerVolumeName(volName)]));
    const log = new TraceLog();
    const second = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const done = await second.create(baseSpec("local", name, image));
    expect(done.imageUploaded).toBe(true);
    expect(log.uploads(volName)).toBe(1);
    expect(sha256File(path.join(host.poolPath, volName))).toBe(img.sha256);
    expect(poolVolumes()).not.toContain(partialMarkerVolumeName(volName));
  });

  it("a sha256 mismatch aborts the upload and leaves nothing in the pool", async () => {
    const dir = subdir("bad-sha");
    const img = makeQcow2(dir, "badsha", 2);
    const image = imageConfig({ url: img.path, sha256: "0".repeat(64) });
    const volName = trackImage(image);
    const o = ops();
    const name = track(uniqueName("badsha"));
    const err = await o.create(baseSpec("local", name, image)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect((err as KvmOperationError).kind).toBe("permanent");
    expect((err as Error).message).toMatch(/sha256 [0-9a-f]{64}, expected 0{64}/);
    expect(poolVolumes().filter((v) => v.startsWith(volName))).toEqual([]);
    expect(domainsNamed(name)).toEqual([]);
  });

  it("pruneImages removes cached and baked images no managed domain uses, and a cut bake's builder (which gc lists), and keeps the rest", async () => {
    const dir = subdir("prune");
    // A pool of its own: prune sweeps a whole pool, and the shared one holds other tests' images.
    const poolName = uniqueName("pool");
    const poolDir = path.join(dir, "pool");
    // QEMU (as libvirt-qemu) must traverse to the pool; mkdtemp makes 0700 folders.
    chmodSync(dir, 0o755);
    virsh(host, "pool-define-as", poolName, "dir", "--target", poolDir);
    virsh(host, "pool-build", poolName);
    virsh(host, "pool-start", poolName);
    const cfg = hostConfigs(host);
    const local = cfg.local as (typeof cfg)["local"] & object;
    let otherBuilder: string | undefined;
    const pruneVols = () =>
      virsh(host, "vol-list", poolName)
        .split("\n")
        .map((l) => l.trim().split(/\s+/)[0] ?? "")
        .filter((n) => n !== "");
    try {
      const used = makeQcow2(dir, "used", 1);
      const unused = makeQcow2(dir, "unused", 1);
      const usedImage = imageConfig({ url: used.path });
      const unusedImage = imageConfig({ url: unused.path });
      const usedVol = trackImage(usedImage);
      const unusedVol = trackImage(unusedImage);
      const o = ops({ pool: new HostPool({ local: { ...local, pool: poolName } }) });
      const keep = track(uniqueName("prune-keep"));
      const gone = track(uniqueName("prune-gone"));
      await o.create(baseSpec("local", keep, usedImage));
      await o.create(baseSpec("local", gone, unusedImage));
      await o.delete("local", gone, ownedBy(gone));
      // A stale marker of an image nobody uses goes too.
      const staleMarker = partialMarkerVolumeName(
        ImageCache.volumeName(imageConfig({ url: "/nowhere/stale.qcow2" })),
      );
      const markerXml = path.join(dir, "marker.xml");
      writeFileSync(markerXml, `<volume><name>${staleMarker}</name><capacity>1</capacity></volume>`);
      virsh(host, "vol-create", poolName, markerXml);
      // What a bake cut short left: its baked volume, the builder (defined, shut off) and its seed.
      const key = "0123456789abcdef";
      const otherKey = "fedcba9876543210";
      for (const v of [bakedImageVolumeName(key), bakeSeedVolumeName(key)]) {
        writeFileSync(markerXml, `<volume><name>${v}</name><capacity>1</capacity></volume>`);
        virsh(host, "vol-create", poolName, markerXml);
      }
      const builderXml = path.join(dir, "builder.xml");
      const defineBuilder = (k: string, disk: string) => {
        writeFileSync(
          builderXml,
          `<domain type="qemu"><name>${bakeBuilderName(k)}</name><memory unit="MiB">64</memory><os><type arch="x86_64">hvm</type></os>` +
            `<devices><disk type="file" device="disk"><source file="${disk}"/><target dev="vda" bus="virtio"/></disk></devices></domain>`,
        );
        virsh(host, "define", builderXml);
      };
      defineBuilder(key, path.join(poolDir, bakedImageVolumeName(key)));
      // A builder booting from another pool (its marker there) is another pool's bake, perhaps between
      // its define and its start: left alone, even when this pool holds a baked volume of its key.
      otherBuilder = bakeBuilderName(otherKey);
      writeFileSync(
        markerXml,
        `<volume><name>${bakedImageVolumeName(otherKey)}</name><capacity>1</capacity></volume>`,
      );
      virsh(host, "vol-create", poolName, markerXml);
      defineBuilder(otherKey, path.join(dir, "elsewhere", bakedImageVolumeName(otherKey)));
      // gc lists the leftover builder (and only it) without removing it.
      expect(await o.leftoverBuilders("local", { remove: false })).toEqual([
        { name: bakeBuilderName(key), removed: [] },
      ]);
      expect(domainsNamed(bakeBuilderName(key))).toEqual([bakeBuilderName(key)]);
      const removed = await o.pruneImages("local");
      expect(removed.sort()).toEqual(
        [
          unusedVol,
          staleMarker,
          bakedImageVolumeName(key),
          bakeSeedVolumeName(key),
          bakeBuilderName(key),
          bakedImageVolumeName(otherKey),
        ].sort(),
      );
      expect(domainsNamed(bakeBuilderName(key))).toEqual([]);
      expect(domainsNamed(otherBuilder)).toEqual([otherBuilder]);
      expect(pruneVols().sort()).toEqual([...vmVolumes(keep).both, usedVol].sort());
      await o.delete("local", keep, ownedBy(keep));
      // Nothing in use any more: the last image goes too.
      expect(await o.pruneImages("local")).toEqual([usedVol]);
      expect(pruneVols()).toEqual([]);
    } finally {
      for (const v of (() => {
        try {
          return pruneVols();
        } catch {
          return [];
        }
      })())
        virshQuiet(host, "vol-delete", "--pool", poolName, v);
      if (otherBuilder !== undefined) virshQuiet(host, "undefine", otherBuilder);
      virshQuiet(host, "pool-destroy", poolName);
      virshQuiet(host, "pool-undefine", poolName);
    }
  });
});

function fileSize(file: string): number {
  return statSync(file).size;
}

describe("delete", () => {
  it("twice succeeds; the second finds nothing to do", async () => {
    const o = ops();
    const name = track(uniqueName("del2"));
    await o.create(baseSpec("local", name, { ...sharedImage, firmware: "uefi" }));
    const first = await o.delete("local", name, ownedBy(name));
    expect(first.domainRemoved).toBe(true);
    expect(first.volumesRemoved.sort()).toEqual(vmVolumes(name).both);
    const second = await o.delete("local", name, ownedBy(name));
    expect(second).toEqual({ domainRemoved: false, volumesRemoved: [] });
    expect(domainsNamed(name)).toEqual([]);
    expect(volumesOf(name)).toEqual([]);
    // UEFI domains keep an NVRAM file; undefine removed it.
    expect(virsh(host, "list", "--all", "--name")).not.toContain(name);
  });

  it("with an owner, leaves another owner's domain and an unmanaged one alone, volumes included, and removes its own", async () => {
    const o = ops();
    const name = track(uniqueName("delown"));
    const spec = baseSpec("local", name, sharedImage);
    await o.create(spec);
    const other = "urn:pulumi:other::kvmpt::kvm:Proxy::someone-else";
    const volumes = vmVolumes(name).both;
    expect(await o.delete("local", name, { owner: other })).toEqual({
      domainRemoved: false,
      volumesRemoved: [],
      noop: "not-ours",
      foreignOwner: spec.owner.urn,
    });
    expect(domainState(name)).toBe("running");
    expect(volumesOf(name)).toEqual(volumes);
    // Without our metadata the domain is nobody's we know: left alone too.
    virsh(host, "metadata", name, METADATA_NAMESPACE, "--remove", "--live", "--config");
    expect(await o.delete("local", name, { owner: spec.owner.urn })).toMatchObject({
      noop: "not-ours",
      foreignOwner: "unmanaged",
    });
    expect(domainState(name)).toBe("running");
    expect(volumesOf(name)).toEqual(volumes);
    removeDomainByHand(name);
    await o.create(spec);
    const own = await o.delete("local", name, { owner: spec.owner.urn });
    expect(own.domainRemoved).toBe(true);
    expect(own.volumesRemoved.sort()).toEqual(volumes);
    expect(domainsNamed(name)).toEqual([]);
  });

  it("succeeds after the volumes were removed by hand with virsh vol-delete", async () => {
    const o = ops();
    const name = track(uniqueName("delhand"));
    await o.create(baseSpec("local", name, sharedImage));
    virsh(host, "destroy", name);
    virsh(host, "vol-delete", "--pool", host.poolName, vmVolumes(name).root);
    virsh(host, "vol-delete", "--pool", host.poolName, vmVolumes(name).seed);
    const r = await o.delete("local", name, ownedBy(name));
    expect(r).toEqual({ domainRemoved: true, volumesRemoved: [] });
    expect(domainsNamed(name)).toEqual([]);
  });

  it("succeeds after the volume files were removed behind libvirt's back (no pool refresh)", async () => {
    const o = ops();
    const name = track(uniqueName("delrm"));
    await o.create(baseSpec("local", name, sharedImage));
    virsh(host, "destroy", name);
    rmSync(path.join(host.poolPath, vmVolumes(name).root));
    rmSync(path.join(host.poolPath, vmVolumes(name).seed));
    const r = await o.delete("local", name, ownedBy(name));
    expect(r.domainRemoved).toBe(true);
    expect(domainsNamed(name)).toEqual([]);
    expect(volumesOf(name)).toEqual([]);
  });

  it("on a host not in the configuration is a successful no-op", async () => {
    const o = ops();
    await expect(o.delete("gone-host", "whatever")).resolves.toEqual({
      domainRemoved: false,
      volumesRemoved: [],
      noop: "host-not-configured",
    });
  });

  it("with the host's pool missing removes the domain and reports the pool as a no-op", async () => {
    const cfg = hostConfigs(host);
    const local = cfg.local as (typeof cfg)["local"] & object;
    const pool = new HostPool({ local: { ...local, pool: "kvmpt-ops-no-such-pool" } });
    const o = ops({ pool });
    await expect(o.delete("local", uniqueName("nopool"))).resolves.toEqual({
      domainRemoved: false,
      volumesRemoved: [],
      noop: "pool-missing",
    });
  });
});

describe("get", () => {
  it("maps libvirt states: provisioning while running without an IP, stopped, absent", async () => {
    const o = ops();
    const name = track(uniqueName("get"));
    const created = await o.create(baseSpec("local", name, sharedImage));
    const running = await o.get("local", name);
    // The guest here boots no OS: no agent, no lease, so no IP yet.
    expect(running).toMatchObject({ state: "provisioning", uuid: created.uuid, mac: created.mac });
    expect(running.ipv4).toBeUndefined();
    expect(running.metadata?.owner.stack).toBe("test");
    expect(running.metadata?.image.url).toBe(sharedImage.url);
    expect(running.domain?.diskPath).toBe(path.join(host.poolPath, vmVolumes(name).root));
    virsh(host, "destroy", name);
    expect((await o.get("local", name)).state).toBe("stopped");
    await o.delete("local", name, ownedBy(name));
    expect(await o.get("local", name)).toEqual({ host: "local", name, state: "absent" });
  });

  it("with the UUID the state recorded, reads the domain now of that name: one made again, none when the UUID's was renamed", async () => {
    const o = ops();
    const name = track(uniqueName("uuid"));
    const first = await o.create(baseSpec("local", name, sharedImage));
    await o.delete("local", name, ownedBy(name));
    const second = await o.create(baseSpec("local", name, sharedImage));
    expect(second.uuid).not.toBe(first.uuid);
    expect(await o.get("local", name, { uuid: first.uuid })).toMatchObject({
      uuid: second.uuid,
      state: "provisioning",
    });
    await o.setTags("local", name, { team: "edge" }, { uuid: first.uuid });
    expect((await o.get("local", name, { uuid: second.uuid })).metadata?.tags).toEqual({ team: "edge" });

    // libvirt renames a shut-off domain only; the UUID then names the other one.
    const renamed = track(uniqueName("uuid-renamed"));
    virsh(host, "destroy", name);
    virsh(host, "domrename", name, renamed);
    expect(await o.get("local", name, { uuid: second.uuid })).toEqual({
      host: "local",
      name,
      state: "absent",
    });
    expect(await o.get("local", renamed)).toMatchObject({ uuid: second.uuid, state: "stopped" });
  });

  it("fails permanently for a host not in the configuration", async () => {
    const o = ops();
    const err = await o.get("gone-host", "x").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect((err as KvmOperationError).kind).toBe("permanent");
    expect((err as Error).message).toMatch(/host "gone-host" is not in the provider configuration/);
  });

  it("reports a running VM with the first routable IPv4 (libvirt's test driver fakes an address)", async () => {
    const cfg = hostConfigs(host);
    const local = cfg.local as (typeof cfg)["local"] & object;
    const pool = new HostPool({ t: { ...local, key: "t", driverUri: "test:///default" } });
    const o = ops({ pool });
    const lv = pool.libvirt("t");
    const name = uniqueName("testdrv");
    const spec = baseSpec("t", name, sharedImage);
    const dom = await lv.domainDefineXml(
      buildDomainXml({
        name,
        domainType: "qemu",
        memoryMiB: 128,
        vcpus: 1,
        firmware: "bios",
        diskPath: "/tmp/kvmpt-none.qcow2",
        seedPath: "/tmp/kvmpt-none.iso",
        nics: decodeNics([shorthandNic({ kind: "network", network: "default" }, undefined)]),
        metadata: {
          owner: spec.owner,
          image: { ref: "x", url: sharedImage.url, format: "qcow2" },
          specHash: spec.specHash,
          createdAt: new Date(0).toISOString(),
          proxyPort: 3128,
          diskGiB: 1,
          tags: {},
        },
      }),
    );
    await lv.domainCreate(dom);
    const status = await o.get("t", name);
    expect(status).toMatchObject({ state: "running", ipv4: "192.168.122.23", ipSource: "agent" });
    expect(await o.waitForIp("t", name, { deadlineMs: 1000, pollMs: 10 })).toMatchObject({
      state: "running",
    });
    // The test driver refuses the NVRAM undefine flag; delete falls back.
    await expect(o.delete("t", name)).resolves.toMatchObject({ domainRemoved: true });
    expect((await o.get("t", name)).state).toBe("absent");
  });

  it("waitForIp gives up with a TimeoutError naming what it waited for", async () => {
    let t = 0;
    const pool = hostPool(host);
    pools.push(pool);
    const o = new KvmOperations(pool, {
      retry,
      env: {
        now: () => t,
        sleep: async (ms) => {
          t += ms;
        },
      },
    });
    const name = track(uniqueName("wait"));
    await o.create(baseSpec("local", name, sharedImage));
    const err = await o
      .waitForIp("local", name, { deadlineMs: 30_000, pollMs: 5_000 })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({
      name: "TimeoutError",
      kind: "transient",
      waitingFor: `an IPv4 address of domain ${name} on host local (guest agent or DHCP lease)`,
    });
    await o.delete("local", name, ownedBy(name));
  });
});

describe("list", () => {
  it("finds managed domains on every host and ignores foreign ones", async () => {
    const o = ops();
    const mine = track(uniqueName("list"));
    const foreign = track(uniqueName("foreign"));
    await o.create(baseSpec("local", mine, sharedImage));
    const xmlFile = path.join(scratch, "foreign.xml");
    writeFileSync(
      xmlFile,
      `<domain type='qemu'><name>${foreign}</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os>` +
        `<metadata><other:x xmlns:other='https://example.com/other'/></metadata></domain>`,
    );
    virsh(host, "define", xmlFile);
    const listed = await o.list();
    const names = listed.vms.map((v) => `${v.host}/${v.name}`);
    // Both hosts reach the same daemon: the VM shows up once per host key.
    expect(names).toContain(`local/${mine}`);
    expect(names).toContain(`remote/${mine}`);
    expect(names.some((n) => n.endsWith(`/${foreign}`))).toBe(false);
    expect(listed.skipped.filter((s) => s.name === mine || s.name === foreign)).toEqual([]);
    const vm = listed.vms.find((v) => v.host === "local" && v.name === mine);
    expect(vm?.providerId).toBe(`kvm://local/${mine}`);
    expect(vm?.metadata.proxyPort).toBe(3128);
    virsh(host, "undefine", foreign);
    await o.delete("local", mine, ownedBy(mine));
  });

  it("fails when a host cannot be reached", async () => {
    const cfg = hostConfigs(host);
    const local = cfg.local as (typeof cfg)["local"] & object;
    const pool = new HostPool({
      ...cfg,
      dead: {
        ...local,
        key: "dead",
        endpoint: { kind: "unix", socketPath: path.join(scratch, "no-such-sock") },
      },
    });
    const o = ops({ pool });
    const err = await o.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect((err as KvmOperationError).host).toBe("dead");
  });
});

describe("over SSH", () => {
  it("creates, reads, lists and deletes a VM on the ssh:// host", async () => {
    const log = new TraceLog();
    const o = ops({ pool: hostPool(host, { tracer: log.tracer }) });
    const name = track(uniqueName("ssh"));
    const created = await o.create(baseSpec("remote", name, sharedImage));
    expect(created.providerId).toBe(`kvm://remote/${name}`);
    expect(domainState(name)).toBe("running");
    expect((await o.get("remote", name)).state).toBe("provisioning");
    const meta = await o.hosts
      .libvirt("remote")
      .domainGetMetadata(
        await o.hosts.libvirt("remote").domainLookupByName(name),
        DomainMetadataType.ELEMENT,
        METADATA_NAMESPACE,
      );
    expect(meta).toContain(name);
    await o.delete("remote", name);
    expect(domainsNamed(name)).toEqual([]);
    expect(volumesOf(name)).toEqual([]);
    expect(log.lines.some((l) => l.startsWith("rpc=virConnectOpen host=remote"))).toBe(true);
    expect(log.lines.some((l) => l.startsWith(`rpc=virDomainCreate host=remote dom=${name} `))).toBe(true);
    expect(sharedSha).toMatch(/^[0-9a-f]{64}$/);
  });
});
