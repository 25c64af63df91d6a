/**
 * The host side of a bake (kvm/host/image-bake.ts) against the real libvirtd
 * and QEMU, with builders that take seconds: the "stock image" is a raw disk
 * whose boot sector follows the builder's protocol and nothing else
 * (test/support/boot-sector.ts). It waits 10 s (the BIOS's int 15h), prints
 * the lines a real builder's finish script prints on COM1 (the domain's
 * serial console), and powers the VM off through the q35 chipset's ACPI
 * port. Everything the provider does is real: the
 * lease, the volumes, the domain, the console, the state polls. What the
 * builder installs is proven with a real Debian builder in
 * test/guest/bake.test.ts.
 *
 * - A bake cut at each of its steps (builder define, boot, shutdown, volume
 *   keep), as a process that dies there leaves it: no clean-up, and no
 *   connection, so the lease's heartbeat stops. The next bake takes the
 *   stale lease over and converges, and at the end only the complete baked
 *   volume is left (no builder, no seed, no marker, no NVRAM).
 * - A builder that reports a failure: the bake fails permanently with the
 *   builder's lines and leaves nothing.
 * - Creates of one process waiting on the same bake share one builder.
 */
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BakeRecipe } from "../../../provider/kvm/config/image";
import type { HostPool } from "../../../provider/kvm/host/hosts";
import { BAKE_STEPS, type BakeStep, bakeNames, ImageBaker } from "../../../provider/kvm/host/image-bake";
import { type CachedImage, ImageCache } from "../../../provider/kvm/host/image-cache";
import type { Progress } from "../../../provider/kvm/progress";
import { bootSectorDisk } from "../../support/boot-sector";
import { refreshPoolByHand, type TestHost, testHost } from "../../support/test-host";
import {
  CuttableTransports,
  hostPool,
  imageConfig,
  scratchDir,
  sha256File,
  virsh,
  virshQuiet,
} from "./ops-helpers";

/** Short lease timings: a dead holder's lease is taken over within seconds. */
const LEASE = { heartbeatMs: 300, staleMs: 3_000, pollMs: 200 };
const RECIPE: BakeRecipe = { packages: [] };

let host: TestHost;
let dir: string;

/** A builder's disk: a boot sector that waits, prints `text` on COM1 and powers off. */
function builderDisk(name: string, text: string): string {
  return bootSectorDisk(path.join(dir, `${name}.img`), text);
}

/** The image of a builder disk, BIOS, raw, with the recipe. */
function bakedImage(file: string) {
  const image = imageConfig({ url: file, sha256: sha256File(file), format: "raw" });
  return { ...image, firmware: "bios" as const, bake: RECIPE };
}

async function locationOf(hosts: HostPool) {
  const lv = hosts.libvirt("local");
  const pool = await hosts.pool("local");
  if (pool === undefined) throw new Error("no pool");
  return { host: "local", lv, pool, hostConfig: hosts.config("local") };
}

function poolVolumes(): string[] {
  return virsh(host, "vol-list", host.poolName)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n !== "");
}

function domainState(name: string): string {
  const all = virsh(host, "list", "--all", "--name")
    .split("\n")
    .map((l) => l.trim());
  return all.includes(name) ? virsh(host, "domstate", name).trim() : "absent";
}

/** The cached stock image (uploaded once, by a pool of its own). */
async function cachedStock(image: ReturnType<typeof bakedImage>): Promise<CachedImage> {
  const hosts = hostPool(host);
  try {
    return await new ImageCache().ensure(await locationOf(hosts), image);
  } finally {
    await hosts.closeAll();
  }
}

const made: { volumes: string[]; domains: string[] } = { volumes: [], domains: [] };

/** The image cached, and the names of its bake (removed after the file). */
async function prepared(image: ReturnType<typeof bakedImage>) {
  const stock = await cachedStock(image);
  const names = bakeNames(stock.name, RECIPE);
  made.volumes.push(stock.name, names.volume, names.marker, names.seed);
  made.domains.push(names.builder);
  return { stock, names };
}

beforeAll(() => {
  host = testHost();
  dir = scratchDir(host, "bake");
});

afterAll(() => {
  for (const d of made.domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  for (const v of made.volumes) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
});

describe("a bake on the real libvirtd, with boot-sector builders", () => {
  it("converges after a cut at builder-define, boot, shutdown and keep, leaving only the complete baked volume", async () => {
    const image = bakedImage(builderDisk("cuts", "kvmp-bake-result: ok\n"));
    const { stock, names } = await prepared(image);
    const request = { image, stock };
    const ours = () =>
      poolVolumes()
        .filter((v) => [names.volume, names.marker, names.seed].includes(v))
        .sort();
    const left: Record<string, { volumes: string[]; builder: string }> = {};

    for (const cut of BAKE_STEPS) {
      // A process that dies has no connection left: its lease's heartbeat stops with it.
      const transports = new CuttableTransports();
      const hosts = hostPool(host, { transportFor: transports.factory });
      let reached: () => void = () => undefined;
      const atCut = new Promise<void>((resolve) => {
        reached = resolve;
      });
      const bake = new ImageBaker({ lease: LEASE, pollMs: 500 }).ensure(await locationOf(hosts), request, {
        onStep: (s: BakeStep) => {
          if (s !== cut) return;
          reached();
          // The process dies here: nothing after this runs, no clean-up.
          return new Promise<void>(() => undefined);
        },
      });
      // A bake that fails before the cut fails the test with its own error rather than hanging it.
      await Promise.race([
        atCut,
        bake.then(() => {
          throw new Error(`the bake finished before its cut at ${cut}`);
        }),
      ]);
      bake.catch(() => undefined);
      transports.kill();
      await refreshPoolByHand(host);
      left[cut] = { volumes: ours(), builder: domainState(names.builder) };
    }
    const all = [names.volume, names.marker, names.seed].sort();
    expect(left).toEqual({
      "builder-define": { volumes: [names.marker], builder: "absent" },
      boot: { volumes: all, builder: "running" },
      shutdown: { volumes: all, builder: "shut off" },
      keep: { volumes: all, builder: "absent" },
    });

    const hosts = hostPool(host);
    try {
      const loc = await locationOf(hosts);
      const baked = await new ImageBaker({ lease: LEASE, pollMs: 500 }).ensure(loc, request);
      expect(baked).toMatchObject({ name: names.volume, baked: true, virtualSize: stock.virtualSize });
      await refreshPoolByHand(host);
      expect(ours()).toEqual([names.volume]);
      expect(domainState(names.builder)).toBe("absent");
      // The baked volume is a qcow2 over the cached image.
      const xml = virsh(host, "vol-dumpxml", "--pool", host.poolName, names.volume);
      expect(xml).toContain(`<path>${stock.path}</path>`);
      // Found complete by a later bake (another process): nothing is baked again.
      const again = await new ImageBaker({ lease: LEASE }).ensure(loc, request);
      expect(again).toMatchObject({ name: names.volume, baked: false });
    } finally {
      await hosts.closeAll();
    }
  }, 480_000);

  it.each([
    [
      "reports a failure: with the reason and the builder's own lines",
      "kvmp-bake-log: E: Unable to locate package kvmp-no-such-package\nkvmp-bake-result: failed the packages could not be installed with apt-get\n",
      /^baking image file:\/\/\S+ on host local failed: the packages could not be installed with apt-get; the builder's last lines:\nE: Unable to locate package kvmp-no-such-package$/,
    ],
    [
      "stops without a result line: with its console's last lines",
      "the builder's disk was full\n",
      /failed: it stopped without saying how the install went; the builder's last lines:\n(.*\n)*the builder's disk was full$/,
    ],
  ])(
    "a builder that %s, the bake fails permanently and leaves nothing",
    async (_, text, message) => {
      const image = bakedImage(builderDisk(`fails-${text.length}`, text));
      const { stock, names } = await prepared(image);
      const hosts = hostPool(host);
      try {
        const err = await new ImageBaker({ lease: LEASE, pollMs: 500 })
          .ensure(await locationOf(hosts), { image, stock })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(Error);
        expect((err as { kind?: string }).kind).toBe("permanent");
        expect((err as Error).message).toMatch(message);
        await refreshPoolByHand(host);
        expect(poolVolumes().filter((v) => [names.volume, names.marker, names.seed].includes(v))).toEqual([]);
        expect(domainState(names.builder)).toBe("absent");
      } finally {
        await hosts.closeAll();
      }
    },
    120_000,
  );

  it("three creates of one process needing the same bake share one builder, and each sees its progress", async () => {
    const image = bakedImage(builderDisk("shared", "kvmp-bake-result: ok\n"));
    const { stock, names } = await prepared(image);
    const hosts = hostPool(host);
    try {
      const loc = await locationOf(hosts);
      const baker = new ImageBaker({ lease: LEASE, pollMs: 500 });
      let defines = 0;
      const seen: Progress[][] = [[], [], []];
      const results = await Promise.all(
        seen.map((progress) =>
          baker.ensure(
            loc,
            { image, stock },
            {
              onStep: (s) => {
                if (s === "builder-define") defines++;
              },
              onProgress: (p) => progress.push(p),
            },
          ),
        ),
      );
      expect(defines).toBe(1);
      expect(results.filter((r) => r.baked)).toHaveLength(1);
      expect(new Set(results.map((r) => r.name))).toEqual(new Set([names.volume]));
      for (const progress of seen) {
        expect(progress.some((p) => p.kind === "bake" && p.host === "local" && p.phase === "booting")).toBe(
          true,
        );
      }
    } finally {
      await hosts.closeAll();
    }
  }, 120_000);
});
