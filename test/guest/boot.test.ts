/**
 * A real guest (the Debian image of scripts/guest-image) booted by
 * KvmOperations on the test host under TCG in beforeAll; the tests then read
 * what it did through the guest agent and probe its squid from inside the
 * test host's network namespace.
 *
 * - cloud-config (UEFI): the history's bug. The user's cloud-config has its
 *   own `packages:` and `runcmd:`, and a vendorData part (write_files, a key
 *   the user-data does not use) is configured: the guest-agent vendor script
 *   and the vendorData must both still be applied.
 *
 * The other user-data formats boot through the Pulumi CLI on guests other
 * files boot anyway: a shell script under BIOS firmware in tls.test.ts, a
 * MIME multipart in pulumi.test.ts.
 *
 * The image is downloaded by the provider over HTTP from a server inside the
 * namespace (on its veth address), pinned by SHA-256.
 */
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { type ImageConfig, parseImage } from "../../provider/kvm/config/image";
import { perVmVolumeNames } from "../../provider/kvm/domain/names";
import { GUEST_AGENT_SCRIPT, GUEST_AGENT_SCRIPT_FILENAME } from "../../provider/kvm/guest/vendor-data";
import { HostPool } from "../../provider/kvm/host/hosts";
import { ImageCache } from "../../provider/kvm/host/image-cache";
import {
  type CreateResult,
  type CreateSpec,
  KvmOperations,
  type VmStatus,
} from "../../provider/kvm/host/operations";
import { shorthandNic } from "../../provider/kvm/network/nic";
import { decodeNics } from "../../provider/kvm/network/nic-rules";
import { Failures } from "../../provider/kvm/validation";
import { allDomains, deleteCachedImage, poolVolumes, removeByHand } from "../pulumi/harness";
import { refreshPoolByHand, type TestHost, testHost } from "../support/test-host";
import { WaitTimeout, watchWhile } from "../support/wait-until";
import { testImage } from "./images";
import {
  agentFor,
  assertGuestAddress,
  type CloudInitOutcome,
  CreateProgress,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  type GuestAgent,
  GuestProgress,
  nvramFiles,
  poolFilesOf,
  since,
  waitCloudInitDone,
  waitForProxyStatus,
} from "./support";

const env = inject("guest");
/** The test image's SHA-256 (read in beforeAll, once the image is built). */
let imageSha256 = "";
const HOST = "local";
/**
 * A boot's waits fail when nothing the test can see of the guest (the
 * create's progress, then the domain's state, its serial console, agent,
 * cloud-init's stage and logs) has changed for GUEST_STALL_MS, or at
 * GUEST_CEILING_MS, far above a normal boot.
 */
const STALL_MS = GUEST_STALL_MS;
const CEILING_MS = GUEST_CEILING_MS;

let host: TestHost;
let pool: HostPool;
let ops: KvmOperations;

// ---------------------------------------------------------------------------
// The guest
// ---------------------------------------------------------------------------

const tag = `${process.pid}`;

/** The history's bug: a real cloud-config with its own packages and runcmd (squid is in the image). */
const CLOUD_CONFIG_USER_DATA = `#cloud-config
# kvmp guest test ${tag}: a cloud-config with its own packages: and runcmd:
# (UTF-8 kept byte for byte: café, Ünïcödé, 日本語)
packages:
  - squid
runcmd:
  - [sh, -c, "printf 'http_access allow localnet\\n' > /etc/squid/conf.d/kvmp-guest-test.conf"]
  - [sh, -c, "systemctl reload squid || systemctl restart squid"]
  - [sh, -c, "echo kvmp-user-runcmd-ran | tee /var/lib/kvmp-guest-test-runcmd"]
`;

const VENDOR_MARKER = "/var/lib/kvmp-guest-test/vendor-data-marker";
const VENDOR_MARKER_CONTENT = `vendorData applied (${tag})\n`;
/** Configured vendorData: text/plain #cloud-config with write_files, which the user-data does not use. */
const VENDOR_DATA = `#cloud-config
write_files:
  - path: ${VENDOR_MARKER}
    permissions: '0644'
    content: ${JSON.stringify(VENDOR_MARKER_CONTENT)}
`;

interface Guest {
  name: string;
  firmware: "uefi" | "bios";
  userData: string;
  vendorData?: string;
}

const guests = {
  cloudConfig: {
    name: `kvmpt-guest-cc-${tag}`,
    firmware: "uefi",
    userData: CLOUD_CONFIG_USER_DATA,
    vendorData: VENDOR_DATA,
  },
} satisfies Record<string, Guest>;
type GuestKey = keyof typeof guests;

function image(firmware: "uefi" | "bios"): ImageConfig {
  const f = new Failures();
  const img = parseImage(undefined, { url: env.imageUrlFromRoot, sha256: imageSha256, firmware }, f);
  f.throwIfAny();
  return img as ImageConfig;
}

function spec(g: Guest): CreateSpec {
  return {
    host: HOST,
    name: g.name,
    image: image(g.firmware),
    imageRef: env.imageUrlFromRoot,
    memoryMiB: 768,
    vcpus: 1,
    diskGiB: 4,
    userData: g.userData,
    ...(g.vendorData !== undefined ? { vendorData: g.vendorData } : {}),
    owner: {
      project: "kvmpt-guest",
      stack: "test",
      urn: `urn:pulumi:test::kvmpt-guest::kvm:Proxy::${g.name}`,
    },
    specHash: createHash("sha256").update(g.name).digest("hex"),
    proxyPort: 3128,
    nics: decodeNics([shorthandNic(undefined, undefined)]),
  };
}

/** What one boot produced; the tests assert on it. */
interface Booted {
  created: CreateResult;
  /** What waitForIp returned. */
  ready: VmStatus;
  agent: GuestAgent;
  /** The last status of GET targetUrl through the guest's squid (from inside the namespace). */
  proxy: string;
  cloudInit: CloudInitOutcome;
  seconds: { ip: number; agent: number; proxy204: number; cloudInitDone: number };
  /** The guest's progress as the waits last read it (printed at the end). */
  lastProgress: unknown;
}

const boots = new Map<GuestKey, Promise<Booted>>();

async function boot(g: Guest): Promise<Booted> {
  const t0 = performance.now();
  const lv = ops.hosts.libvirt(HOST);
  // The whole boot shares one ceiling; each wait fails on its own stall.
  const left = () => Math.max(0, CEILING_MS - (performance.now() - t0));
  const creating = new CreateProgress();
  const created = await watchWhile(
    (signal) => ops.create(spec(g), { signal, onProgress: creating.listener }),
    {
      what: `the create of ${g.name}`,
      progress: () => creating.read(),
      stallMs: STALL_MS,
      ceilingMs: left(),
    },
  );
  const progress = new GuestProgress(lv, g.name, { console: true, agent: true });
  try {
    const wait = () => progress.bounds({ stallMs: STALL_MS, ceilingMs: left() });
    const ready = await watchWhile(
      (signal) => ops.waitForIp(HOST, g.name, { deadlineMs: left(), pollMs: 2_000, signal }),
      { what: `an IPv4 address of ${g.name} (waitForIp)`, ...wait() },
    );
    const ip = since(t0);
    const agent = await agentFor(lv, g.name);
    await agent.waitReady(wait());
    const agentUp = since(t0);
    // A proxy that never answers 204 fails its own test (with the wait's error as the status), not the boot's others.
    const proxy = await waitForProxyStatus(env, assertGuestAddress(env, ready.ipv4), "204", wait()).catch(
      (err: unknown) => {
        if (err instanceof WaitTimeout) return err.message;
        throw err;
      },
    );
    const proxy204 = since(t0);
    const cloudInit = await waitCloudInitDone(agent, wait());
    return {
      created,
      ready,
      agent,
      proxy,
      cloudInit,
      seconds: { ip, agent: agentUp, proxy204, cloudInitDone: since(t0) },
      lastProgress: await progress.read(),
    };
  } finally {
    await progress.stop();
  }
}

function booted(key: GuestKey): Promise<Booted> {
  const b = boots.get(key);
  if (b === undefined) throw new Error(`guest ${key} was never started`);
  return b;
}

beforeAll(async () => {
  ({ sha256: imageSha256 } = await testImage(env));
  host = testHost();
  const hosts = parseConfig({
    hosts: {
      [HOST]: {
        uri: `unix://${host.socketPath}`,
        domainType: "qemu",
        pool: host.poolName,
        network: host.network,
      },
    },
  }).hosts;
  pool = new HostPool(hosts);
  ops = new KvmOperations(pool);
  for (const [key, g] of Object.entries(guests) as [GuestKey, Guest][]) {
    // Leftovers of an interrupted run with the same PID would be reused: start clean.
    removeByHand(host, g.name);
    const p = boot(g);
    p.catch(() => {}); // reported by the tests that await it
    boots.set(key, p);
  }
  // The tests below read the result.
  await Promise.allSettled(boots.values());
}, GUEST_TEST_TIMEOUT_MS);

afterAll(async () => {
  const timings: Record<string, unknown> = {};
  for (const [key, p] of boots) {
    const r = await p.then(
      (b) => ({
        ...b.seconds,
        cloudInit: b.cloudInit,
        lastProgress: b.lastProgress,
      }),
      (e: unknown) => `failed: ${e instanceof Error ? e.message : String(e)}`,
    );
    timings[`${key} (${guests[key].firmware})`] = r;
  }
  console.log(
    `guest boots (seconds from create) and cloud-init's result:\n${JSON.stringify(timings, null, 2)}`,
  );
  for (const g of Object.values(guests)) {
    try {
      await ops.delete(HOST, g.name);
    } catch {
      removeByHand(host, g.name);
    }
  }
  // The cached image this file downloaded (one entry: firmware is not part of it).
  deleteCachedImage(host, ImageCache.volumeName(image("uefi")));
  await pool.closeAll();
}, 300_000);

// ---------------------------------------------------------------------------

describe("a cloud-config with its own packages: and runcmd: (UEFI), plus vendorData", () => {
  it("reaches the guest byte for byte", async () => {
    const b = await booted("cloudConfig");
    const got = await b.agent.readFile("/var/lib/cloud/instance/user-data.txt");
    expect(got.equals(Buffer.from(CLOUD_CONFIG_USER_DATA, "utf8"))).toBe(true);
    // The user's runcmd ran.
    expect((await b.agent.readFile("/var/lib/kvmp-guest-test-runcmd")).toString()).toBe(
      "kvmp-user-runcmd-ran\n",
    );
  });

  it("still gets the guest-agent vendor script, and the script ran", async () => {
    const b = await booted("cloudConfig");
    const script = await b.agent.readFile(
      `/var/lib/cloud/instance/scripts/vendor/${GUEST_AGENT_SCRIPT_FILENAME}`,
    );
    expect(script.toString("utf8")).toBe(GUEST_AGENT_SCRIPT);
    // The script's own lines in cloud-init's output log: it found the image's
    // agent and (re)started it; cloud-init recorded no failure of scripts_vendor.
    const log = (await b.agent.readFile("/var/log/cloud-init-output.log")).toString("utf8");
    expect(log).toContain("kvm-proxy-guest-agent: qemu-guest-agent already present; not installing");
    const started = log.indexOf("kvm-proxy-guest-agent: qemu-guest-agent enabled and started");
    expect(started).toBeGreaterThanOrEqual(0);
    // cloud-init's order: vendor scripts (cc_scripts_vendor) before the user's runcmd (scripts_user).
    expect(log.indexOf("kvmp-user-runcmd-ran")).toBeGreaterThan(started);
    expect(b.cloudInit.errors.filter((e) => /vendor/i.test(e))).toEqual([]);
  });

  it("applies the configured vendorData part (write_files, a key the user-data does not use)", async () => {
    const b = await booted("cloudConfig");
    expect((await b.agent.readFile(VENDOR_MARKER)).toString("utf8")).toBe(VENDOR_MARKER_CONTENT);
  });

  it("reports its IP through the agent, and waitForIp returns it", async () => {
    const b = await booted("cloudConfig");
    await expectAgentIp("cloudConfig", b);
  });

  it("proxies through squid: 204 from the target, inside the namespace", async () => {
    const b = await booted("cloudConfig");
    expect(b.proxy).toBe("204");
  });

  it("booted under UEFI", async () => {
    const b = await booted("cloudConfig");
    await expectFirmware(guests.cloudConfig.name, b, "uefi");
  });
});

describe("delete", () => {
  it("removes each guest's domain, per-VM volumes and NVRAM file", async () => {
    for (const key of Object.keys(guests) as GuestKey[]) await booted(key).catch(() => undefined);
    for (const g of Object.values(guests)) {
      const r = await ops.delete(HOST, g.name);
      expect(r.domainRemoved).toBe(true);
      expect(r.volumesRemoved.sort()).toEqual(perVmVolumeNames(g.name, spec(g).owner.urn).sort());
    }
    const names = Object.values(guests).map((g) => g.name);
    expect(allDomains(host).filter((d) => names.includes(d))).toEqual([]);
    await refreshPoolByHand(host);
    expect(poolVolumes(host).filter((v) => names.some((n) => v.startsWith(`${n}-`)))).toEqual([]);
    for (const n of names) {
      expect(poolFilesOf(host, n)).toEqual([]);
      expect(nvramFiles(host, n)).toEqual([]);
    }
  });
});

// ---------------------------------------------------------------------------

/** waitForIp's address is a NAT address the agent reports; a later get takes it from the agent. */
async function expectAgentIp(key: GuestKey, b: Booted): Promise<void> {
  expect(b.ready.state).toBe("running");
  const ip = assertGuestAddress(env, b.ready.ipv4);
  expect(await b.agent.ipv4Addresses()).toContain(ip);
  const now = await ops.get(HOST, guests[key].name);
  expect(now.ipSource).toBe("agent");
  expect(now.ipv4).toBe(ip);
  expect(now.mac).toBe(b.created.mac);
}

async function expectFirmware(name: string, b: Booted, firmware: "uefi" | "bios"): Promise<void> {
  const status = await ops.get(HOST, name);
  expect(status.domain?.firmware).toBe(firmware);
  // The guest's own view: /sys/firmware/efi exists only when it booted through UEFI.
  expect(await b.agent.exists("/sys/firmware/efi")).toBe(firmware === "uefi");
  // libvirt keeps an NVRAM file for UEFI domains only.
  expect(nvramFiles(host, name).length > 0).toBe(firmware === "uefi");
}
