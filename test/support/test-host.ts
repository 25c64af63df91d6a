import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";

/** Connection facts of the running test host, as written by `scripts/test-host start`. */
export interface TestHost {
  stateDir: string;
  /** The host's network namespace, named after its state folder (kvmp-<id>). */
  netns: string;
  /** The namespace's veth address (link-local, picked at start), where sshd listens. */
  address: string;
  /** The veth's end in the root namespace (kvmp<id>) and its address. */
  vethHost: string;
  rootAddress: string;
  sshPort: number;
  sshUser: string;
  sshKeyPath: string;
  knownHostsPath: string;
  hostKeyPath: string;
  /** libvirtd's socket, reachable from the root namespace. */
  socketPath: string;
  poolName: string;
  poolPath: string;
  /** A NAT network with DHCP, inside the namespace: its bridge and the bridge's address. */
  network: string;
  networkBridge: string;
  networkAddress: string;
  networkPrefix: number;
  /**
   * The networking fixtures (NICs, static addresses, macvtap). Optional: a host.json written by a script older than
   * them lacks them (`scripts/test-host start` adds them to a running host);
   * read them through {@link staticBridgeOf} and {@link macvtapOf}, which fail
   * loudly when they are missing.
   */
  staticBridge?: StaticBridge;
  macvtap?: MacvtapFixture;
  /** The access rules' target addresses (optional as above; read through {@link targetsOf}). */
  targets?: TargetAddresses;
  /**
   * Where libvirtd's tc (scripts/test-host.d/tc-shim) logs the `<bandwidth>`
   * commands it rewrites: this kernel lacks sfq, the fw classifier and the
   * police action, so inbound limits run as htb + pfifo and outbound ones as
   * an IFB with tbf (same rates and bursts). Optional, as above.
   */
  tcShimLog?: string;
  logDir: string;
}

/**
 * Addresses on the namespace's loopback where target servers listen, which
 * guests reach through their gateways: outward ones (documentation ranges)
 * stand for the internet; inward ones (private, ULA) for the operator's
 * network, which a proxy must refuse unless `allowedDestinations` opens it.
 */
export interface TargetAddresses {
  outward4: string;
  outward6: string;
  inward4: string;
  inward6: string;
}

/**
 * A plain Linux bridge inside the namespace WITHOUT DHCP (no libvirt network,
 * no dnsmasq, no router advertisements), for guests with static addresses:
 * `<interface type="bridge"><source bridge={name}/>`. The namespace holds the
 * addresses below on it, so a guest there uses them as its gateways, a target
 * server listens on them, and the namespace reaches the guest directly (IPv4
 * and IPv6 forwarding are on in the namespace). Documentation ranges
 * (192.0.2.0/24, 2001:db8:14::/64): guests take any other address in them
 * but .224-.254 and ::e0-::ff, which test/libvirtd/network-fixtures.test.ts
 * uses.
 */
export interface StaticBridge {
  /** "kvmpbr1" */
  name: string;
  /** "192.0.2.1", prefix 24 */
  address4: string;
  prefix4: number;
  /** "2001:db8:14::1", prefix 64 */
  address6: string;
  prefix6: number;
}

/**
 * The parent of macvtap NICs (`<interface type="direct"><source dev={parent}
 * mode="bridge"/>`): a veth in the test namespace (dummy interfaces cannot be
 * created here) whose peer `farInterface` lives in a second namespace,
 * `farNetns` ("the other side", the network a macvtap guest sits on), holding
 * the far addresses; run a target there with `ip netns exec {farNetns} ...`
 * bound to them. The parent has no address of its own; the macvlan
 * `hostInterface` on it (bridge mode) holds the host addresses, through which
 * the test namespace (the Pulumi CLI, health checks, curl) reaches macvtap
 * guests in bridge mode (a macvtap never talks to its parent's own stack).
 * Guests take other addresses of 198.51.100.0/24 and 2001:db8:15::/64 (but
 * .224-.254 and ::e0-::ff, as above).
 * IPv6 on a macvtap NIC needs `trustGuestRxFilters="yes"` on the interface:
 * without it the macvtap drops the multicast neighbour solicitations for the
 * guest's addresses, and IPv6 to and from the guest fails.
 */
export interface MacvtapFixture {
  /** "kvmpmv0", in the test namespace */
  parent: string;
  /** "kvmpmvh0": a macvlan (bridge mode) on the parent, in the test namespace */
  hostInterface: string;
  /** "198.51.100.2" and "2001:db8:15::2" on hostInterface (prefixes below) */
  hostAddress4: string;
  hostAddress6: string;
  /** "kvmp-<id>-far": named after the state folder, removed by stop */
  farNetns: string;
  /** "kvmpfar0", in farNetns */
  farInterface: string;
  /** "198.51.100.1" and "2001:db8:15::1" on farInterface */
  farAddress4: string;
  prefix4: number;
  farAddress6: string;
  prefix6: number;
}

export const repoRoot = path.resolve(__dirname, "../..");

export function testHost(): TestHost {
  const dir = process.env.KVMP_TEST_HOST_DIR ?? path.join(repoRoot, ".state/test-host");
  return JSON.parse(readFileSync(path.join(dir, "host.json"), "utf8")) as TestHost;
}

/** The URI libvirt's own client (virsh) uses to reach the same daemon, for cross-checks. */
export function virshUri(host: TestHost, driver = "qemu:///system"): string {
  return `${driver}?socket=${host.socketPath}`;
}

function missingFixture(field: string): Error {
  return new Error(
    `host.json has no ${field}: the test host was started by a version of scripts/test-host without it; ` +
      "run scripts/test-host start (it adds the fixtures to a running host)",
  );
}

/** The bridge without DHCP, or a loud error naming the fix when host.json lacks it. */
export function staticBridgeOf(host: TestHost): StaticBridge {
  if (host.staticBridge === undefined) throw missingFixture("staticBridge");
  return host.staticBridge;
}

/** The target addresses, or a loud error naming the fix when host.json lacks them. */
export function targetsOf(host: TestHost): TargetAddresses {
  if (host.targets === undefined) throw missingFixture("targets");
  return host.targets;
}

/** The macvtap parent and its other side, or a loud error naming the fix when host.json lacks them. */
export function macvtapOf(host: TestHost): MacvtapFixture {
  if (host.macvtap === undefined) throw missingFixture("macvtap");
  return host.macvtap;
}

/**
 * `virsh pool-refresh` of the host's pool, waiting out "asynchronous jobs
 * running" as the provider's refreshPool does: test files running at the same
 * time upload into the same pool, and libvirt refuses a refresh meanwhile.
 */
export async function refreshPoolByHand(host: TestHost): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      execFileSync("virsh", ["-q", "-c", virshUri(host), "pool-refresh", host.poolName], {
        stdio: ["ignore", "ignore", "pipe"],
        timeout: 60_000,
      });
      return;
    } catch (err) {
      const busy = /asynchronous jobs running/.test(String((err as { stderr?: unknown }).stderr ?? err));
      if (!busy || attempt >= 300) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
