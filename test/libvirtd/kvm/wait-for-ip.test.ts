/**
 * waitForIp's poll schedule against the real libvirtd: how many polls and
 * libvirt calls pass between a guest's address appearing and waitForIp
 * returning it, and between a domain stopping and waitForIp reporting that.
 *
 * The address appears as a DHCP lease: the test writes an entry for the
 * domain's MAC into the network's lease status file, the file libvirt's
 * dnsmasq lease helper writes and libvirtd reads for
 * virDomainInterfaceAddresses(LEASE). Booting a guest to get a real lease
 * takes minutes under TCG and cannot be timed to a poll (test/guest/ does
 * that end to end). Clock and sleep are injected: no wall-clock waits.
 */
import { chmodSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ImageConfig } from "../../../provider/kvm/config/image";
import { ImageCache } from "../../../provider/kvm/host/image-cache";
import { KvmOperations } from "../../../provider/kvm/host/operations";
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
  virsh,
  virshQuiet,
  vmVolumes,
} from "./ops-helpers";

let host: TestHost;
let scratch: string;
let image: ImageConfig;
let leases: DnsmasqLeases;
const domains = new Set<string>();
const closers: (() => Promise<void>)[] = [];

const retry = { maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 30_000 };
/** Outside the network's DHCP range (.10-.250), so no real guest can hold it. */
const LEASED_IP = "192.168.213.5";

/**
 * A KvmOperations whose sleep counts polls, advances a fake clock, and runs
 * `onSleep` with the poll about to follow and the fake time the sleep began.
 */
function opsWithPolls(onSleep: (poll: number, sleepBegan: number) => void) {
  const log = new TraceLog();
  const pool = hostPool(host, { tracer: log.tracer });
  closers.push(() => pool.closeAll());
  let t = 0;
  /** Index into log.records where each poll's calls begin. */
  const pollStarts: number[] = [];
  /** The interval of each sleep. */
  const sleeps: number[] = [];
  const o = new KvmOperations(pool, {
    retry,
    env: {
      now: () => t,
      sleep: async (ms) => {
        const began = t;
        t += ms;
        sleeps.push(ms);
        pollStarts.push(log.records.length);
        onSleep(pollStarts.length, began);
      },
    },
  });
  /** The libvirt calls of poll `n` (1-based): those made after the n-th sleep, up to the next. */
  const callsOfPoll = (n: number): string[] =>
    log.records.slice(pollStarts[n - 1], pollStarts[n] ?? log.records.length).map((r) => r.call);
  return { o, log, sleeps, polls: () => pollStarts.length, callsOfPoll, now: () => t };
}

async function startedDomain(
  o: KvmOperations,
  tag: string,
): Promise<{ name: string; mac: string; uuid: string }> {
  const name = uniqueName(tag);
  domains.add(name);
  await o.create(baseSpec("local", name, image));
  const status = await o.get("local", name);
  expect(status.state).toBe("provisioning");
  return { name, mac: status.mac as string, uuid: status.uuid as string };
}

/** A cheap poll: the agent's addresses, then the lease's. */
const PROBE = ["virDomainInterfaceAddresses", "virDomainInterfaceAddresses"];
/** get() with the UUID known of a domain that is not running: no lookup, no address calls. */
const INACTIVE_READ = ["virDomainGetState", "virDomainGetXMLDesc"];

beforeAll(() => {
  host = testHost();
  scratch = scratchDir(host, "wait-ip");
  chmodSync(scratch, 0o755);
  const img = makeQcow2(scratch, "wait", 1);
  image = imageConfig({ url: img.path, sha256: img.sha256 });
  const bridge = /<bridge name='([^']+)'/.exec(virsh(host, "net-dumpxml", host.network))?.[1];
  if (bridge === undefined) throw new Error(`network ${host.network} has no bridge`);
  leases = new DnsmasqLeases(path.join(host.stateDir, "lib/dnsmasq", `${bridge}.status`));
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
  rmSync(scratch, { recursive: true, force: true });
});

describe("waitForIp poll schedule", () => {
  it("returns on the first poll after the lease appears; between full reads a poll is 2 calls", async () => {
    const LEASE_DURING_SLEEP = 7;
    let mac = "";
    const p = opsWithPolls((poll) => {
      if (poll === LEASE_DURING_SLEEP)
        leases.add(mac, [LEASED_IP], { hostname: "kvmpt-lease", replace: true });
    });
    const d = await startedDomain(p.o, "lease");
    mac = d.mac;
    // Full reads (get) of this domain as it is now, as yardsticks: by name
    // (waitForIp's first), then with the UUID known (its later ones); 3-5 calls:
    // lookup, state, XML, then the agent's and/or the lease's addresses.
    let before = p.log.records.length;
    await p.o.get("local", d.name);
    const firstRead = p.log.records.slice(before).map((r) => r.call);
    before = p.log.records.length;
    await p.o.get("local", d.name, { uuid: d.uuid });
    const fullRead = p.log.records.slice(before).map((r) => r.call);
    expect(fullRead).not.toContain("virDomainLookupByName");
    before = p.log.records.length;
    const status = await p.o.waitForIp("local", d.name, { deadlineMs: 120_000, pollMs: 1_000 });
    expect(status).toMatchObject({ state: "running", ipv4: LEASED_IP, ipSource: "lease" });
    // Noticed by the poll right after the sleep during which it appeared: no further sleep.
    expect(p.polls()).toBe(LEASE_DURING_SLEEP);
    // The initial full read, then per poll: address probes, with a full read every 5th (5 s at 1 s).
    expect(p.log.records.slice(before, before + firstRead.length).map((r) => r.call)).toEqual(firstRead);
    for (const n of [1, 2, 3, 4, 6]) expect(p.callsOfPoll(n)).toEqual(PROBE);
    expect(p.callsOfPoll(5)).toEqual(fullRead);
    // The poll that finds it reads the whole status once to return it.
    expect(p.callsOfPoll(7)).toEqual([...PROBE, ...fullRead]);
  });

  it("a domain that stops while waiting is reported by the next poll, not the next full read", async () => {
    let name = "";
    const p = opsWithPolls((poll) => {
      if (poll === 2) virsh(host, "destroy", name);
    });
    const d = await startedDomain(p.o, "stops");
    name = d.name;
    const err = await p.o
      .waitForIp("local", d.name, { deadlineMs: 120_000, pollMs: 1_000 })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "KvmStateError", state: "stopped" });
    expect(p.polls()).toBe(2);
    // The agent probe says "not running", so the poll falls through to a full read.
    expect(p.callsOfPoll(2)).toEqual(["virDomainInterfaceAddresses", ...INACTIVE_READ]);
  });

  it("the default interval is 1 s, so an address is noticed within 1 s of appearing", async () => {
    let mac = "";
    let appearedAt: number | undefined;
    const p = opsWithPolls((poll, sleepBegan) => {
      if (poll !== 3) return;
      leases.add(mac, [LEASED_IP], { hostname: "kvmpt-lease", replace: true });
      // It may appear at any moment of this sleep; the worst case is its start, right after the last poll.
      appearedAt = sleepBegan;
    });
    const d = await startedDomain(p.o, "default");
    mac = d.mac;
    await expect(p.o.waitForIp("local", d.name)).resolves.toMatchObject({ ipv4: LEASED_IP });
    const returnedAt = p.now();
    expect(appearedAt).toBeDefined();
    // On the fake clock: noticed by the first poll after it appeared, at most one interval later.
    expect(returnedAt - (appearedAt ?? Number.NaN)).toBeLessThanOrEqual(1_000);
    expect(p.polls()).toBe(3);
    expect(p.sleeps).toEqual([1_000, 1_000, 1_000]);
  });
});
