/**
 * What a host lacks, against the real libvirtd: a create checks the host's
 * storage pool and each NIC's libvirt network (defined, started) before it
 * makes anything, and names the host and the missing object; libvirt's own
 * errors a user can meet (a network not started, no UEFI firmware to
 * select, a full pool) carry a hint before libvirt's text
 * (kvm/host/libvirt-hints.ts). Each message here is libvirt's, produced on
 * the test host.
 *
 * The full pool is a tmpfs of 8 MiB mounted in libvirtd's own mount
 * namespace (the test host runs it in one), and taken away at the end.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { HostPool } from "../../../provider/kvm/host/hosts";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { libvirtHint } from "../../../provider/kvm/host/libvirt-hints";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { shorthandNic } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import { isLibvirtError, type LibvirtError } from "../../../provider/libvirt/errors";
import { type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  hostConfigs,
  imageConfig,
  makeQcow2,
  scratchDir,
  uniqueName,
  virsh,
  virshQuiet,
} from "./ops-helpers";

let host: TestHost;
let scratch: string;
let image: ImageConfig;
const pools: HostPool[] = [];
/** Pools and networks these tests defined, for cleanup. */
const definedPools = new Set<string>();
const definedNets = new Set<string>();
const domains = new Set<string>();
/** The VMs the creates here were asked for: none may leave anything, but a failing test removes what it finds. */
const vms = new Set<string>();
const retry = { maxAttempts: 2, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 20_000 };

/** Operations on `local` with its settings changed by `change` (another pool, another network). */
function opsWith(change: { pool?: string; network?: string } = {}): KvmOperations {
  const cfg = hostConfigs(host);
  const local = cfg.local as NonNullable<(typeof cfg)["local"]>;
  const nic =
    change.network === undefined ? local.nic : { kind: "network" as const, network: change.network };
  const pool = new HostPool({ local: { ...local, ...(change.pool ? { pool: change.pool } : {}), nic } });
  pools.push(pool);
  return new KvmOperations(pool, { retry });
}

function listed(...args: string[]): string[] {
  return virsh(host, ...args)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n !== "");
}

/** What of VM `name` (and of the test's image) is on the host: domains and volumes, in `pool`. */
function leftOf(name: string, pool = host.poolName): { domains: string[]; volumes: string[] } {
  vms.add(name);
  const cached = ImageCache.volumeName(image);
  return {
    domains: listed("list", "--all", "--name").filter((d) => d === name),
    volumes: listed("vol-list", pool).filter((v) => v.startsWith(`${name}-`) || v.startsWith(cached)),
  };
}

const NOTHING = { domains: [], volumes: [] };

/** A libvirt network defined and not started (its bridge is never made). */
function inactiveNetwork(): string {
  const name = uniqueName("net");
  const bridge = `kvmpe${process.pid % 100000}${definedNets.size}`;
  const file = path.join(scratch, `${name}.xml`);
  execFileSync("sh", ["-c", `cat > '${file}'`], {
    input: `<network><name>${name}</name><bridge name='${bridge}'/></network>`,
  });
  virsh(host, "net-define", file);
  definedNets.add(name);
  return name;
}

/** libvirtd's pid: the test host runs it in its own mount namespace. */
function libvirtdPid(): string {
  return readFileSync(path.join(host.stateDir, "pids", "libvirtd.pid"), "utf8").trim();
}

async function failure(p: Promise<unknown>): Promise<Error> {
  const outcome = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(outcome).toBeInstanceOf(Error);
  return outcome as Error;
}

beforeAll(() => {
  host = testHost();
  scratch = scratchDir(host, "host-objects");
  chmodSync(scratch, 0o755);
  // 12 MiB of data: more than the full pool below holds. Never uploaded by the checks before it.
  const img = makeQcow2(scratch, `hostobj-${process.pid}`, 12);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterAll(async () => {
  await Promise.allSettled(pools.map((p) => p.closeAll()));
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
  }
  for (const p of definedPools) {
    virshQuiet(host, "pool-destroy", p);
    virshQuiet(host, "pool-undefine", p);
  }
  for (const n of definedNets) virshQuiet(host, "net-undefine", n);
  for (const name of vms) {
    for (const v of leftOf(name).volumes) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
  }
  rmSync(scratch, { recursive: true, force: true });
});

describe("a create on a host without the pool or network it needs", () => {
  it("fails before anything is made when the host has no such storage pool, naming host and pool", async () => {
    const name = uniqueName("nopool");
    const missing = uniqueName("pool");
    const before = leftOf(name);
    const err = await failure(opsWith({ pool: missing }).create(baseSpec("local", name, image)));
    expect(err.message).toContain(`host local has no storage pool "${missing}"`);
    expect(err.message).toContain("pool setting");
    expect(err).toMatchObject({ kind: "permanent" });
    expect(before).toEqual(NOTHING);
    expect(leftOf(name)).toEqual(NOTHING);
  });

  it("fails before anything is made when the pool exists but is not started", async () => {
    const name = uniqueName("stoppedpool");
    const stopped = uniqueName("pool");
    const dir = path.join(scratch, stopped);
    mkdirSync(dir);
    virsh(host, "pool-define-as", stopped, "dir", "--target", dir);
    definedPools.add(stopped);
    const err = await failure(opsWith({ pool: stopped }).create(baseSpec("local", name, image)));
    expect(err.message).toContain(`storage pool "${stopped}" on host local exists but is not active`);
    expect(err.message).toContain(`virsh pool-start ${stopped}`);
    expect(leftOf(name)).toEqual(NOTHING);
    expect(listed("list", "--all", "--name")).not.toContain(name);
  });

  it("fails before anything is made when a NIC's network does not exist, naming the NIC and the host", async () => {
    const name = uniqueName("nonet");
    const missing = uniqueName("net");
    const spec = {
      ...baseSpec("local", name, image),
      nics: decodeNics([shorthandNic({ kind: "network", network: missing }, undefined)]),
    };
    const err = await failure(opsWith().create(spec));
    expect(err.message).toContain(`nics[0].network: host local has no libvirt network "${missing}"`);
    expect(err).toMatchObject({ kind: "permanent" });
    expect(leftOf(name)).toEqual(NOTHING);
  });

  it("fails before anything is made when the host's own network is defined but not started, naming the host's setting", async () => {
    const name = uniqueName("stoppednet");
    const stopped = inactiveNetwork();
    const err = await failure(opsWith({ network: stopped }).create(baseSpec("local", name, image)));
    expect(err.message).toContain(
      `network: libvirt network "${stopped}" on host local exists but is not active`,
    );
    expect(err.message).toContain("the host's network setting");
    expect(err.message).toContain(`virsh net-start ${stopped}`);
    expect(leftOf(name)).toEqual(NOTHING);
  });
});

describe("libvirt's errors a user can meet, with a hint before libvirt's text", () => {
  /** Defines `name` from `xml` and starts it; the LibvirtError of the start. */
  async function startFailure(o: KvmOperations, name: string, xml: string): Promise<LibvirtError> {
    const lv = o.hosts.libvirt("local");
    domains.add(name);
    const dom = await lv.domainDefineXml(xml);
    const err = await failure(lv.domainCreate(dom));
    expect(isLibvirtError(err)).toBe(true);
    return err as LibvirtError;
  }

  it("a NIC on a network that is not started: libvirt's start error, and the hint to start it", async () => {
    const o = opsWith();
    const net = inactiveNetwork();
    const name = uniqueName("netdown");
    const err = await startFailure(
      o,
      name,
      `<domain type='qemu'><name>${name}</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices><interface type='network'><source network='${net}'/><model type='virtio'/></interface></devices>
</domain>`,
    );
    expect(err.libvirtMessage).toBe(`Requested operation is not valid: network '${net}' is not active`);
    expect(libvirtHint({ message: err.libvirtMessage }, "local")).toContain(`virsh net-start ${net}`);
  });

  it("UEFI firmware libvirt cannot select: libvirt's start error, and the hint to install OVMF or boot with BIOS", async () => {
    const o = opsWith();
    const name = uniqueName("nofw");
    // Secure boot with enrolled keys on an i440fx machine: no firmware descriptor on the host matches.
    const err = await startFailure(
      o,
      name,
      `<domain type='qemu'><name>${name}</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
  <os firmware='efi'><type arch='x86_64' machine='pc'>hvm</type>
    <firmware><feature enabled='yes' name='secure-boot'/><feature enabled='yes' name='enrolled-keys'/></firmware></os>
  <features><acpi/></features><devices/>
</domain>`,
    );
    expect(err.libvirtMessage).toBe("operation failed: Unable to find any firmware to satisfy 'efi'");
    const hint = libvirtHint({ message: err.libvirtMessage }, "local");
    expect(hint).toContain("OVMF");
    expect(hint).toContain('firmware: "bios"');
  });

  describe("a full pool", () => {
    let full: string;
    let dir: string;

    beforeAll(() => {
      full = uniqueName("full");
      dir = path.join(scratch, full);
      mkdirSync(dir);
      execFileSync("nsenter", [
        "-t",
        libvirtdPid(),
        "-m",
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=8m",
        "tmpfs",
        dir,
      ]);
      execFileSync("nsenter", ["-t", libvirtdPid(), "-m", "chmod", "755", dir]);
      virsh(host, "pool-create-as", full, "dir", "--target", dir);
      definedPools.add(full);
    });

    afterAll(() => {
      virshQuiet(host, "pool-destroy", full);
      definedPools.delete(full);
      try {
        execFileSync("nsenter", ["-t", libvirtdPid(), "-m", "umount", dir]);
      } catch {
        // not mounted
      }
    });

    it("a create whose image does not fit fails with the hint and libvirt's ENOSPC, and leaves no VM", async () => {
      const name = uniqueName("nospace");
      const err = await failure(opsWith({ pool: full }).create(baseSpec("local", name, image)));
      expect(err.message).toContain("the storage pool on host local is full");
      expect(err.message).toContain("pool setting");
      expect(err.message).toMatch(/No space left on device/);
      // The hint comes before libvirt's own words.
      expect(err.message.indexOf("is full")).toBeLessThan(err.message.indexOf("No space left on device"));
      expect(listed("list", "--all", "--name")).not.toContain(name);
      expect(listed("vol-list", full).filter((v) => v.startsWith(`${name}-`))).toEqual([]);
    });

    it("a volume larger than the pool's room: libvirt's create error, and the same hint", async () => {
      const lv = opsWith({ pool: full }).hosts.libvirt("local");
      const pool = await lv.storagePoolLookupByName(full);
      const vol = `${uniqueName("big")}.raw`;
      const err = await failure(
        lv.storageVolCreateXml(
          pool,
          `<volume><name>${vol}</name><capacity unit='MiB'>32</capacity><allocation unit='MiB'>32</allocation><target><format type='raw'/></target></volume>`,
        ),
      );
      expect((err as LibvirtError).libvirtMessage).toMatch(
        /^cannot allocate 33554432 bytes in file '.*': No space left on device$/,
      );
      expect(libvirtHint({ message: (err as LibvirtError).libvirtMessage }, "local")).toContain("is full");
    });
  });
});
