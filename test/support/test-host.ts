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
  logDir: string;
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
