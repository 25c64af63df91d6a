/**
 * Libvirt calls of whole Pulumi runs, counted from the provider's trace file
 * (KVMP_TRACE_FILE): an `up` of five proxies uploads the image once, a no-op
 * preview makes no call at all, and a refresh makes three calls per proxy
 * plus the connection handshake. Counts, never times.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestHost, testHost } from "../support/test-host";
import {
  cacheVolumeOf,
  domainsOfStack,
  E2E_ROOT,
  hostsConfig,
  pulumiEnv,
  removeByHand,
  TEST_PROXY_ARGS,
  virshQuiet,
  Workspace,
} from "./harness";

const HANDSHAKE = new Set(["virAuthList", "virConnectOpen", "virConnectClose"]);

let host: TestHost;
let ws: Workspace;
let image: string;

interface Line {
  call: string;
  host: string;
  /** The domain the call names (dom= or name=), if any. */
  domain?: string;
  text: string;
}

/**
 * Runs `pulumi <args>` on the workspace's stack with the trace going to a
 * fresh file; returns its lines. Throws when the run wrote no trace file: the
 * provider then traced nowhere, and no count of its calls can be trusted.
 */
function traced(tag: string, ...args: string[]): Line[] {
  const file = path.join(ws.dir, `${tag}.trace`);
  rmSync(file, { force: true });
  const r = spawnSync("pulumi", [...args, "--stack", ws.stack, "--non-interactive", "--color", "never"], {
    cwd: ws.dir,
    env: { ...pulumiEnv(), PWD: ws.dir, PULUMI_BACKEND_URL: `file://${ws.backend}`, KVMP_TRACE_FILE: file },
    encoding: "utf8",
    timeout: 600_000,
  });
  if (r.status !== 0)
    throw new Error(`pulumi ${args.join(" ")} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  if (!existsSync(file)) throw new Error(`pulumi ${args.join(" ")} wrote no trace to ${file}`);
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((text) => {
      const m = /^rpc=(\S+) host=(\S+)(?:.* (?:dom|name)=("?)([^"\s]+)\3)?/.exec(text);
      if (!m) throw new Error(`not a trace line: ${text}`);
      return { call: m[1] as string, host: m[2] as string, ...(m[4] ? { domain: m[4] } : {}), text };
    });
}

const names = Array.from({ length: 5 }, (_, i) => `calls-${i + 1}`);
let domains: string[] = [];

beforeAll(() => {
  host = testHost();
  const dir = path.join(E2E_ROOT, "images");
  mkdirSync(dir, { recursive: true });
  // An image of this file's own, so the cache starts cold and the upload count is ours.
  image = path.join(dir, `calls-${process.pid}.qcow2`);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", image, "64M"]);
  ws = new Workspace("calls", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    ...hostsConfig(host),
    "kvm:images": { tiny: { url: image, firmware: "bios" } },
    "pair:proxies": Object.fromEntries(
      names.map((n) => [n, { host: "local", image: "tiny", ...TEST_PROXY_ARGS }]),
    ),
  });
});

afterAll(() => {
  ws?.cleanup();
  if (host !== undefined && ws !== undefined)
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  if (image !== undefined) {
    virshQuiet(host, "vol-delete", "--pool", host.poolName, cacheVolumeOf(image));
    rmSync(image, { force: true });
  }
});

describe("libvirt calls of Pulumi runs, five proxies on one host", () => {
  it("up creates the five and uploads the image once", () => {
    const lines = traced("up", "up", "--yes", "--skip-preview");
    domains = Object.values(ws.outputs().names as Record<string, string>).sort();
    expect(domains).toHaveLength(5);
    const uploads = lines.filter((l) => l.call === "virStorageVolUpload");
    const imageVolume = cacheVolumeOf(image);
    expect(uploads.filter((l) => l.text.includes(`/${imageVolume} `))).toHaveLength(1);
    // The rest are the five seed ISOs.
    expect(uploads.filter((l) => / vol=\S+-seed\.iso /.test(l.text))).toHaveLength(5);
    expect(lines.filter((l) => l.call === "virDomainDefineXML")).toHaveLength(5);
    // The host's storage pool is looked up once for the five (host/pools.ts), not once per proxy.
    expect(lines.filter((l) => l.call === "virStoragePoolLookupByName")).toHaveLength(1);
    // 10 calls per proxy (domain lookup; overlay and seed created; seed upload; define, start, XML,
    // console, state, addresses) and 14 per host (handshake 2, pool 1, pool started 1, the NIC's
    // network found and started 2; the image cache: lookups of the volume and its marker 3, the
    // marker's info 1, marker and volume created 2, upload 1, marker removed 1). Creates after the
    // first ask nothing about the image (remembered) nor the pool's and network's state (checked once
    // per connection, kvm/host/hosts.ts passedOnce), and no volume's path is asked for: a dir pool's
    // volume key is its path (volumes.ts volumePath).
    expect(lines.length).toBe(5 * 10 + 14);
    expect(lines.filter((l) => l.call === "virStoragePoolIsActive")).toHaveLength(1);
    expect(lines.filter((l) => l.call === "virNetworkIsActive")).toHaveLength(1);
    expect(lines.filter((l) => l.call === "virStorageVolGetPath")).toEqual([]);
    expect(lines.filter((l) => l.call === "virDomainCreate")).toHaveLength(5);
    for (const d of domains) {
      const calls = lines.filter((l) => l.domain === d).map((l) => l.call);
      // One lookup by name (the adoption check; create trusts it): after it, the UUID names the domain.
      expect(
        calls.filter((c) => c === "virDomainLookupByName"),
        d,
      ).toEqual(["virDomainLookupByName"]);
      // One XML read (create's, after the start), handed on to the status read.
      expect(
        calls.filter((c) => c === "virDomainGetXMLDesc"),
        d,
      ).toEqual(["virDomainGetXMLDesc"]);
    }
  });

  it("a preview with nothing changed makes no libvirt call for its proxies, while the same run traces a read", () => {
    expect(domains).toHaveLength(5);
    // A read-only proxy (KvmProxy.get: read even by a preview) of one of the
    // five, through a second key for the same host: its calls, named by that
    // key, show this preview's provider traced to the file.
    const hosts = hostsConfig(host)["kvm:hosts"] as Record<string, unknown>;
    ws.setConfig({
      "kvm:hosts": { ...hosts, probe: hosts.local },
      "pair:adopt": { probe: `kvm://probe/${domains[0]}` },
    });
    try {
      const lines = traced("preview", "preview", "--expect-no-changes");
      expect(lines.filter((l) => l.host === "probe").length).toBeGreaterThan(0);
      expect(lines.filter((l) => l.host !== "probe").map((l) => l.text)).toEqual([]);
    } finally {
      ws.setConfig({ "kvm:hosts": hosts, "pair:adopt": {} });
    }
  });

  it("a refresh makes three calls per proxy (state, XML, addresses) plus one handshake", () => {
    expect(domains).toHaveLength(5);
    const lines = traced("refresh", "refresh", "--yes", "--skip-preview");
    const handshake = lines.filter((l) => HANDSHAKE.has(l.call));
    expect(handshake.map((l) => l.call).sort()).toEqual(["virAuthList", "virConnectOpen"]);
    const perDomain = new Map<string, string[]>();
    for (const l of lines.filter((x) => !HANDSHAKE.has(x.call))) {
      expect(l.domain, l.text).toBeDefined();
      perDomain.set(l.domain as string, [...(perDomain.get(l.domain as string) ?? []), l.call]);
    }
    expect([...perDomain.keys()].sort()).toEqual(domains);
    for (const [d, calls] of perDomain) {
      // No lookup by name: the state's UUID names the domain. The agent is not
      // connected (nothing boots), so only the DHCP lease is asked for addresses.
      expect(calls.sort(), d).toEqual([
        "virDomainGetState",
        "virDomainGetXMLDesc",
        "virDomainInterfaceAddresses",
      ]);
    }
    expect(
      lines.filter((l) => l.call === "virDomainInterfaceAddresses").every((l) => / source=0 /.test(l.text)),
    ).toBe(true);
  });

  it("a refresh after a proxy was recreated by hand under the same name finds the new domain by name", () => {
    expect(domains).toHaveLength(5);
    const victim = domains[0] as string;
    const oldUuid = (ws.proxies().find((p) => p.outputs?.domainName === victim)?.outputs?.uuid ??
      "") as string;
    expect(oldUuid).toMatch(/^[0-9a-f-]{36}$/);
    // Same XML, new UUID: what `virsh undefine` and `virsh define` of a dumped XML gives.
    const xmlFile = path.join(ws.dir, "victim.xml");
    execFileSync("bash", [
      "-c",
      `virsh -q -c "$0" dumpxml --inactive "$1" | grep -v '<uuid>' > "$2" && virsh -q -c "$0" destroy "$1" >/dev/null && virsh -q -c "$0" undefine "$1" >/dev/null && virsh -q -c "$0" define "$2" >/dev/null`,
      `qemu:///system?socket=${host.socketPath}`,
      victim,
      xmlFile,
    ]);
    const lines = traced("refresh2", "refresh", "--yes", "--skip-preview");
    const victimCalls = lines.filter((l) => l.domain === victim).map((l) => l.call);
    // The stale UUID misses, the lookup by name finds the new domain; it is not running, so no address call.
    expect(victimCalls).toEqual([
      "virDomainGetState",
      "virDomainLookupByName",
      "virDomainGetState",
      "virDomainGetXMLDesc",
    ]);
    const after = ws.proxies().find((p) => p.outputs?.domainName === victim)?.outputs;
    expect(after?.uuid).not.toBe(oldUuid);
    expect(after?.uuid).toMatch(/^[0-9a-f-]{36}$/);
    expect(after?.state).toBe("stopped");
  });
});
