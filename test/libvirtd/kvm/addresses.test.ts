/**
 * Every address of a VM, per NIC, v4 and v6 (get's `ipAddresses` and
 * `ipv6Address`), and waitForIp's `family` and `staticAddresses`, against
 * the real libvirtd.
 *
 * Addresses appear as DHCP leases, written into the NAT network's lease
 * status file (the file libvirt's dnsmasq helper writes and libvirtd reads
 * for virDomainInterfaceAddresses(LEASE)), as in wait-for-ip.test.ts; what
 * a guest agent reports is read the same way and needs a booted guest
 * (test/guest/). The domains have no disk: QEMU runs them, no guest boots,
 * so no agent ever answers. Clock and sleep are injected.
 */
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import {
  attribute,
  childElement,
  childElements,
  parseXml,
  type XmlNode,
} from "../../../provider/kvm/domain/xml";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations, type WaitForIpOptions } from "../../../provider/kvm/host/operations";
import { shorthandNic } from "../../../provider/kvm/network/nic";
import { decodeNics } from "../../../provider/kvm/network/nic-rules";
import type { Libvirt } from "../../../provider/libvirt/libvirt";
import { type TestHost, testHost } from "../../support/test-host";
import {
  baseSpec,
  DnsmasqLeases,
  hostPool,
  imageConfig,
  makeQcow2,
  scratchDir,
  TraceLog,
  uniqueName,
  virshQuiet,
  vmVolumes,
} from "./ops-helpers";

let host: TestHost;
let leases: DnsmasqLeases;
let lv: Libvirt;
let scratch: string;
let image: ImageConfig;
const domains = new Set<string>();
const closers: (() => Promise<void>)[] = [];
const retry = { maxAttempts: 3, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 20_000 };

/**
 * A KvmOperations on a fake clock whose sleep counts polls and runs
 * `onSleep` with the poll about to follow.
 */
function opsWithPolls(onSleep: (poll: number) => void = () => {}) {
  const log = new TraceLog();
  const pool = hostPool(host, { tracer: log.tracer });
  closers.push(() => pool.closeAll());
  let t = 0;
  let polls = 0;
  const o = new KvmOperations(pool, {
    retry,
    env: {
      now: () => t,
      sleep: async (ms) => {
        t += ms;
        polls += 1;
        onSleep(polls);
      },
    },
  });
  /** Full reads (get: state, XML, addresses) so far; a probe reads addresses only. */
  const fullReads = () => log.records.filter((r) => r.call === "virDomainGetState").length;
  return { o, polls: () => polls, fullReads };
}

/** A running domain without disks, with `nics` NICs on the NAT network; their MACs, first NIC first. */
async function runningDomain(tag: string, nics = 1): Promise<{ name: string; macs: string[] }> {
  const name = uniqueName(tag);
  domains.add(name);
  const nic = `<interface type='network'><source network='${host.network}'/><model type='virtio'/></interface>`;
  const dom = await lv.domainDefineXml(`<domain type='qemu'>
  <name>${name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>${nic.repeat(nics)}</devices>
</domain>`);
  await lv.domainCreate(dom);
  const devices = childElement(parseXml(await lv.domainGetXmlDesc(dom)), "devices") as XmlNode;
  const macs = childElements(devices, "interface").map(
    (i) => attribute(childElement(i, "mac"), "address") as string,
  );
  return { name, macs };
}

/** Outside the network's DHCP range (.10-.250), so no real guest can hold them. */
const V4_A = "192.168.213.6";
const V4_B = "192.168.213.7";
const V6 = "2001:db8:213::6";

beforeAll(() => {
  host = testHost();
  leases = new DnsmasqLeases(path.join(host.stateDir, "lib/dnsmasq", `${host.networkBridge}.status`));
  const pool = hostPool(host);
  closers.push(() => pool.closeAll());
  lv = pool.libvirt("local");
  scratch = scratchDir(host, "addresses");
  const img = makeQcow2(scratch, "addr", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
});

afterAll(async () => {
  leases?.restore();
  await Promise.allSettled(closers.map((c) => c()));
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", "--nvram", d);
    for (const v of vmVolumes(d).both) virshQuiet(host, "vol-delete", "--pool", host.poolName, v);
  }
  virshQuiet(host, "vol-delete", "--pool", host.poolName, ImageCache.volumeName(image));
});

describe("get: every address per NIC", () => {
  it("reports each NIC's leased IPv4 and IPv6 in NIC order, without link-local; the IPv6 apart", async () => {
    const { o } = opsWithPolls();
    const { name, macs } = await runningDomain("all", 2);
    const [first, second] = macs as [string, string];
    leases.add(second, [V4_B], { hostname: "kvmpt-addr" });
    leases.add(first, ["fe80::6", V6, V4_A], { hostname: "kvmpt-addr" });
    const s = await o.get("local", name);
    expect(s).toMatchObject({
      state: "running",
      ipv4: V4_A,
      ipSource: "lease",
      ipv6Address: V6,
      guestAgentAnswered: false,
    });
    // The network has no IPv6 range, so libvirt knows no prefix for the IPv6 lease: the bare address.
    expect(s.ipAddresses).toEqual([
      { mac: first, addresses: [V6, `${V4_A}/24`] },
      { mac: second, addresses: [`${V4_B}/24`] },
    ]);
  });

  it("an IPv6-only guest runs, with no IPv4", async () => {
    const { o } = opsWithPolls();
    const { name, macs } = await runningDomain("v6only");
    leases.add(macs[0] as string, [V6], { hostname: "kvmpt-addr" });
    const s = await o.get("local", name);
    expect(s).toMatchObject({ state: "running", ipv6Address: V6 });
    expect(s.ipv4).toBeUndefined();
  });

  it("a stopped domain reports no addresses at all (none are asked)", async () => {
    const { o } = opsWithPolls();
    const { name, macs } = await runningDomain("stopped");
    leases.add(macs[0] as string, [V4_A], { hostname: "kvmpt-addr" });
    await lv.domainDestroy(await lv.domainLookupByName(name));
    const s = await o.get("local", name);
    expect(s.state).toBe("stopped");
    expect(s.ipAddresses).toBeUndefined();
    expect(s.ipv4).toBeUndefined();
  });
});

describe("waitForIp: family", () => {
  const wait = (o: KvmOperations, name: string, more: WaitForIpOptions) =>
    o.waitForIp("local", name, { deadlineMs: 30_000, pollMs: 1_000, ...more });

  it("ipv6 waits through an IPv4 for an IPv6, and returns on the poll after it appears", async () => {
    let mac = "";
    const p = opsWithPolls((poll) => {
      if (poll === 3) leases.add(mac, [V6], { hostname: "kvmpt-addr" });
    });
    const d = await runningDomain("fam6");
    mac = d.macs[0] as string;
    leases.add(mac, [V4_A], { hostname: "kvmpt-addr" });
    const s = await wait(p.o, d.name, { family: "ipv6" });
    expect(s).toMatchObject({ state: "running", ipv4: V4_A, ipv6Address: V6 });
    expect(p.polls()).toBe(3);
    // The first read, then the one poll 3's probe asked for: the probes looked for an IPv6, not the IPv4.
    expect(p.fullReads()).toBe(2);
  });

  it("ipv4 (the default) does not take an IPv6 for an answer; any does", async () => {
    const p = opsWithPolls();
    const d = await runningDomain("fam4");
    leases.add(d.macs[0] as string, [V6], { hostname: "kvmpt-addr" });
    await expect(wait(p.o, d.name, { deadlineMs: 3_000 })).rejects.toMatchObject({
      name: "TimeoutError",
      message: expect.stringContaining(`an IPv4 address of domain ${d.name}`),
    });
    await expect(wait(p.o, d.name, { family: "any" })).resolves.toMatchObject({ ipv6Address: V6 });
  });
});

describe("waitForIp: static addresses", () => {
  it("with no guest agent answering, the configured addresses answer at once, without a lease", async () => {
    const p = opsWithPolls();
    const d = await runningDomain("static", 2);
    const [first, second] = d.macs as [string, string];
    const s = await p.o.waitForIp("local", d.name, {
      deadlineMs: 30_000,
      staticAddresses: [
        { mac: second.toUpperCase(), addresses: ["198.51.100.2/24"] },
        { mac: first, addresses: ["203.0.113.7/24", "2001:db8:7::7/64"] },
      ],
    });
    expect(p.polls()).toBe(0);
    expect(s).toMatchObject({
      state: "running",
      ipv4: "203.0.113.7",
      ipSource: "static",
      ipv6Address: "2001:db8:7::7",
      ipAddresses: [
        { mac: second, addresses: ["198.51.100.2/24"] },
        { mac: first, addresses: ["203.0.113.7/24", "2001:db8:7::7/64"] },
      ],
    });
  });

  it("configured addresses of another family are no answer: the wait goes on", async () => {
    const p = opsWithPolls();
    const d = await runningDomain("static6");
    await expect(
      p.o.waitForIp("local", d.name, {
        deadlineMs: 3_000,
        family: "ipv6",
        staticAddresses: [{ mac: d.macs[0] as string, addresses: ["203.0.113.7/24"] }],
      }),
    ).rejects.toMatchObject({ name: "TimeoutError", message: expect.stringContaining("an IPv6 address") });
  });

  it("provision passes family and static addresses on to its wait", async () => {
    const p = opsWithPolls();
    const name = uniqueName("prov");
    domains.add(name);
    const mac = `52:54:00:7e:${((process.pid >> 8) & 0xff).toString(16).padStart(2, "0")}:${(process.pid & 0xff).toString(16).padStart(2, "0")}`;
    const s = await p.o.provision(
      { ...baseSpec("local", name, image), nics: decodeNics([shorthandNic(undefined, mac)]) },
      { deadlineMs: 60_000, family: "any", staticAddresses: [{ mac, addresses: ["2001:db8:7::8/64"] }] },
    );
    expect(s).toMatchObject({ state: "running", ipv6Address: "2001:db8:7::8" });
    expect(p.polls()).toBe(0);
  });
});
