/**
 * Fleets through a real Pulumi CLI: placement by capacity over a
 * pool of hosts, two stacks sharing one pool, the create limit per host, and
 * rotation in batches. The "hosts" are host keys with storage pools of their
 * own on the one test daemon: capacity counts a host entry's VMs by the
 * storage pool their disks are in. Nothing boots (an empty image), so a
 * healthy member here is a running domain.
 */
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { METADATA_NAMESPACE } from "../../provider/kvm/domain/metadata";
import { HostPool } from "../../provider/kvm/host/hosts";
import { KvmOperations } from "../../provider/kvm/host/operations";
import { squidPasswordHash } from "../../provider/kvm/proxy/password-hash";
import { memberPassword } from "../../provider/program/proxy-auth";
import { staticBridgeOf, type TestHost, testHost, virshUri } from "../support/test-host";
import {
  cacheVolumeOf,
  failureText,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  virsh,
  virshQuiet,
  Workspace,
} from "./harness";

const run = promisify(execFile);
const PID = process.pid;
/** The examples/fleet members' passwords derive from it. */
const MEMBER_SECRET = `fleet-members-${PID}-secret`;

let host: TestHost;
const pools: string[] = [];
const workspaces: Workspace[] = [];

/** A storage pool of its own on the test daemon: one more "host". */
function makePool(tag: string): string {
  const name = `kvmpt-f${PID}-${tag}`;
  const dir = path.join(path.dirname(host.poolPath), name);
  mkdirSync(dir, { recursive: true });
  virsh(host, "pool-define-as", name, "dir", "--target", dir);
  virsh(host, "pool-start", name);
  pools.push(name);
  return name;
}

function volumesOf(pool: string): string[] {
  return virsh(host, "vol-list", pool)
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n !== "");
}

/** Our domains whose root disk is in `pool` (the test's fleets only). */
function domainsIn(pool: string): string[] {
  return volumesOf(pool)
    .filter((v) => v.endsWith("-root.qcow2"))
    .map((v) => v.replace(/-[0-9a-f]{8}-root\.qcow2$/, ""))
    .sort();
}

function removePool(pool: string): void {
  for (const v of volumesOf(pool)) {
    const dom = v.replace(/-[0-9a-f]{8}-(root\.qcow2|seed\.iso)$/, "");
    if (dom !== v) {
      virshQuiet(host, "destroy", dom);
      virshQuiet(host, "undefine", dom);
    }
    virshQuiet(host, "vol-delete", "--pool", pool, v);
  }
  virshQuiet(host, "pool-destroy", pool);
  virshQuiet(host, "pool-undefine", pool);
  rmSync(path.join(path.dirname(host.poolPath), pool), { recursive: true, force: true });
}

/** `kvm:hosts` entries, one per pool, each with its capacity. */
function hostsConfig(entries: Record<string, { pool: string; capacity?: Record<string, number> }>) {
  const hosts: Record<string, unknown> = {};
  for (const [key, e] of Object.entries(entries)) {
    hosts[key] = {
      uri: `unix://${host.socketPath}`,
      domainType: "qemu",
      network: host.network,
      pool: e.pool,
      ...(e.capacity !== undefined ? { capacity: e.capacity } : {}),
    };
  }
  return { "kvm:hosts": hosts, "kvm:images": { tiny: { url: TEST_IMAGE, firmware: "bios" } } };
}

function fleetStack(tag: string, config: Record<string, unknown>): Workspace {
  const ws = new Workspace(tag, { name: "kvmpt-fleet", main: "test/pulumi/programs/fleet" });
  workspaces.push(ws);
  ws.setConfig(config);
  return ws;
}

function fleets(defs: Record<string, { size: number; hosts: string[]; rotation?: unknown }>) {
  return {
    "fleet:fleets": Object.fromEntries(
      Object.entries(defs).map(([name, d]) => [name, { ...d, proxy: { image: "tiny", ...TEST_PROXY_ARGS } }]),
    ),
  };
}

/** A value of `stack export --show-secrets`: a secret's plaintext (JSON), or the value itself. */
function revealed(v: unknown): unknown {
  const plaintext = (v as { plaintext?: unknown } | undefined)?.plaintext;
  return typeof plaintext === "string" ? JSON.parse(plaintext) : v;
}

function tally(hosts: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const h of hosts) out[h] = (out[h] ?? 0) + 1;
  return out;
}

/** The reservations left in any of the test's pools (there must be none once an `up` ends). */
function reservationsLeft(): string[] {
  return pools.flatMap((p) => volumesOf(p).filter((v) => v.startsWith("kvmp-rsv-")));
}

/** The steps a `preview --json` plans for KvmProxy resources, by operation (unchanged ones are not listed). */
function plannedOps(ws: Workspace): Record<string, number> {
  const r = ws.mustRun("preview", "--json");
  const steps = (JSON.parse(r.stdout) as { steps?: { op: string; urn: string }[] }).steps ?? [];
  return tally(steps.filter((s) => s.urn.includes("KvmProxy")).map((s) => s.op));
}

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) ws.cleanup();
  for (const p of pools) removePool(p);
});

describe("placement by capacity", () => {
  it("places 12 over capacities 2/4/6 as 2/4/6; growing to 14 with a 4th host creates exactly 2 there and moves nothing; past the pool's room fails naming it and leaks nothing", () => {
    const [a, b, c, d] = ["a", "b", "c", "d"].map(makePool) as [string, string, string, string];
    const three = {
      small: { pool: a, capacity: { proxies: 2 } },
      medium: { pool: b, capacity: { proxies: 4 } },
      large: { pool: c, capacity: { proxies: 6 } },
    };
    const name = `pl${PID}`;
    const ws = fleetStack("fleet-place", {
      ...hostsConfig(three),
      ...fleets({ [name]: { size: 12, hosts: ["small", "medium", "large"] } }),
    });
    ws.up();
    const first = ws.outputs() as { ids: Record<string, string[]>; hosts: Record<string, string[]> };
    expect(tally(first.hosts[name] ?? [])).toEqual({ small: 2, medium: 4, large: 6 });
    expect([domainsIn(a).length, domainsIn(b).length, domainsIn(c).length]).toEqual([2, 4, 6]);
    expect(reservationsLeft()).toEqual([]);

    // A 4th host and two more members: two creates, nothing else planned.
    ws.setConfig({
      ...hostsConfig({ ...three, extra: { pool: d, capacity: { proxies: 2 } } }),
      ...fleets({ [name]: { size: 14, hosts: ["small", "medium", "large", "extra"] } }),
    });
    expect(plannedOps(ws)).toEqual({ create: 2 });
    ws.up();
    const grown = ws.outputs() as { ids: Record<string, string[]>; hosts: Record<string, string[]> };
    expect(grown.ids[name]?.slice(0, 12)).toEqual(first.ids[name]);
    expect(grown.hosts[name]?.slice(12)).toEqual(["extra", "extra"]);
    expect(domainsIn(d)).toHaveLength(2);

    // Every slot taken: the 15th member fails at create, naming the pool and its free slots.
    ws.setConfig(fleets({ [name]: { size: 15, hosts: ["small", "medium", "large", "extra"] } }));
    const full = ws.run("up", "--yes", "--skip-preview");
    expect(full.code).not.toBe(0);
    expect(full.output).toMatch(
      /no host of the pool \[small, medium, large, extra\] has room for 128 MiB and 1 vCPU \(small: 0 proxy slots, \d+ MiB host memory free; medium: 0 proxy slots, \d+ MiB host memory free; large: 0 proxy slots, \d+ MiB host memory free; extra: 0 proxy slots, \d+ MiB host memory free\)/,
    );
    expect([a, b, c, d].map((p) => domainsIn(p).length)).toEqual([2, 4, 6, 2]);
    expect(reservationsLeft()).toEqual([]);
    expect(ws.proxies()).toHaveLength(14);

    ws.setConfig(fleets({ [name]: { size: 14, hosts: ["small", "medium", "large", "extra"] } }));
    ws.destroy();
    expect([a, b, c, d].flatMap(domainsIn)).toEqual([]);
    expect([a, b, c, d].flatMap(volumesOf).filter((v) => v !== cacheVolumeOf(TEST_IMAGE))).toEqual([]);
  });
});

describe("two stacks on one pool", () => {
  it("one after the other, each counts the other's proxies", () => {
    const [x, y] = ["x", "y"].map(makePool) as [string, string];
    const cfg = hostsConfig({
      x: { pool: x, capacity: { proxies: 2 } },
      y: { pool: y, capacity: { proxies: 2 } },
    });
    const one = fleetStack("fleet-seq-a", {
      ...cfg,
      ...fleets({ [`sa${PID}`]: { size: 3, hosts: ["x", "y"] } }),
    });
    const two = fleetStack("fleet-seq-b", {
      ...cfg,
      ...fleets({ [`sb${PID}`]: { size: 1, hosts: ["x", "y"] } }),
    });
    one.up();
    two.up();
    expect([domainsIn(x).length, domainsIn(y).length]).toEqual([2, 2]);
    two.setConfig(fleets({ [`sb${PID}`]: { size: 2, hosts: ["x", "y"] } }));
    const full = two.run("up", "--yes", "--skip-preview");
    expect(full.code).not.toBe(0);
    expect(full.output).toContain("no host of the pool [x, y] has room");
    expect([domainsIn(x).length, domainsIn(y).length]).toEqual([2, 2]);
    expect(reservationsLeft()).toEqual([]);
    two.setConfig(fleets({ [`sb${PID}`]: { size: 1, hosts: ["x", "y"] } }));
    two.destroy();
    one.destroy();
  });

  it("at the same instant, never over-commit a host: 6 asked of 4 slots gives 4", async () => {
    const [x, y] = ["u", "v"].map(makePool) as [string, string];
    const cfg = hostsConfig({
      x: { pool: x, capacity: { proxies: 2 } },
      y: { pool: y, capacity: { proxies: 2 } },
    });
    const one = fleetStack("fleet-par-a", {
      ...cfg,
      ...fleets({ [`pa${PID}`]: { size: 3, hosts: ["x", "y"] } }),
    });
    const two = fleetStack("fleet-par-b", {
      ...cfg,
      ...fleets({ [`pb${PID}`]: { size: 3, hosts: ["x", "y"] } }),
    });
    const results = await Promise.all([
      one.runAsync(["up", "--yes", "--skip-preview"]),
      two.runAsync(["up", "--yes", "--skip-preview"]),
    ]);
    const all = results.map((r) => r.output).join("\n");
    expect([domainsIn(x).length, domainsIn(y).length], all).toEqual([2, 2]);
    // Two members found no room, in one stack or across both.
    expect(all).toContain("no host of the pool [x, y] has room");
    expect(new Set(all.match(/KvmProxy \S+ \*\*creating failed\*\*/g)).size).toBe(2);
    expect(one.proxies().length + two.proxies().length).toBe(4);
    expect(reservationsLeft()).toEqual([]);
    one.destroy();
    two.destroy();
    expect([x, y].flatMap(domainsIn)).toEqual([]);
  });
});

describe("creates in flight per host", () => {
  it("concurrentCreates 2 with --parallel 20: never more than 2 of 10 creates in flight on the host, and 2 do overlap", () => {
    const pool = makePool("cc");
    const name = `cc${PID}`;
    const ws = fleetStack("fleet-cc", {
      ...hostsConfig({ one: { pool, capacity: { concurrentCreates: 2 } } }),
      ...fleets({ [name]: { size: 10, hosts: ["one"] } }),
    });
    const trace = path.join(ws.dir, "up.trace");
    ws.extraEnv = { KVMP_TRACE_FILE: trace };
    ws.mustRun("up", "--yes", "--skip-preview", "--parallel", "20");
    const lines = readFileSync(trace, "utf8").split("\n");
    const domains = domainsIn(pool);
    expect(domains).toHaveLength(10);
    // A create is in flight from the first call naming its domain to its virDomainCreate.
    const spans = domains.map((dom) => {
      const names = (l: string) =>
        l.includes(`name="${dom}"`) || l.includes(`dom=${dom} `) || l.includes(`vol=${dom}-`);
      const start = lines.findIndex(names);
      const end = lines.findIndex((l) => l.startsWith("rpc=virDomainCreate ") && l.includes(`dom=${dom} `));
      expect(start, dom).toBeGreaterThanOrEqual(0);
      expect(end, dom).toBeGreaterThan(start);
      return [start, end] as const;
    });
    let most = 0;
    for (let i = 0; i < lines.length; i++) {
      most = Math.max(most, spans.filter(([s, e]) => s <= i && i <= e).length);
    }
    expect(most).toBe(2);
    ws.destroy();
  });
});

/** Sets a domain's recorded creation time (what rotation measures age from), as if it were made then. */
function backdate(dom: string, createdAt: string): void {
  const xml = virsh(host, "metadata", dom, METADATA_NAMESPACE).replace(
    /createdAt="[^"]+"/,
    `createdAt="${createdAt}"`,
  );
  virsh(host, "metadata", dom, METADATA_NAMESPACE, "--key", "kvmp", "--set", xml, "--config", "--live");
}

/** `pulumi up` while the running domains named `prefix*` are counted every 100 ms: its result and the fewest seen. */
async function upCountingRunning(ws: Workspace, prefix: string) {
  let fewest = Number.POSITIVE_INFINITY;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      fewest = Math.min(fewest, await runningOf(prefix));
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const r = await ws.runAsync(["up", "--yes", "--skip-preview"]);
  sampling = false;
  await sampler;
  return { r, fewest };
}

async function runningOf(prefix: string): Promise<number> {
  const { stdout } = await run("virsh", ["-q", "-c", virshUri(host), "list", "--state-running", "--name"]);
  return stdout.split("\n").filter((n) => n.startsWith(prefix)).length;
}

describe("rotation", () => {
  it("four members older than maxAge, batch 2: two ups replace 2 and 2, oldest first (never the newest replacements), never fewer than 4 running", async () => {
    const pool = makePool("rot");
    const name = `rot${PID}`;
    const ws = fleetStack("fleet-rot", {
      ...hostsConfig({ one: { pool } }),
      ...fleets({ [name]: { size: 4, hosts: ["one"], rotation: { maxAge: "1h", batch: 2 } } }),
    });
    ws.up();
    const ids = () => (ws.outputs() as { ids: Record<string, string[]> }).ids[name] ?? [];
    const before = ids();
    // Members made 30, 25, 20 and 15 days ago: member 0 is the oldest.
    before.forEach((id, i) => {
      const dom = id.split("/").pop() as string;
      backdate(dom, new Date(Date.now() - (30 - 5 * i) * 86_400_000).toISOString());
    });
    ws.mustRun("refresh", "--yes", "--skip-preview");

    const rounds: number[][] = [];
    let current = before;
    for (let up = 0; up < 2; up++) {
      const preview = ws.mustRun("preview", "--diff");
      expect(
        preview.output.match(/rotating: \d+ d( \d+ (h|min|s))? old, over its maxAge of 1 h \(/g),
        preview.output,
      ).toHaveLength(2);
      const { r, fewest } = await upCountingRunning(ws, `${name}-`);
      expect(r.code, failureText(r)).toBe(0);
      expect(fewest).toBeGreaterThanOrEqual(4);
      const next = ids();
      rounds.push(next.flatMap((id, i) => (id !== current[i] ? [i] : [])));
      current = next;
    }
    expect(rounds).toEqual([
      [0, 1],
      [2, 3],
    ]);
    expect(plannedOps(ws)).toEqual({});
    ws.destroy();
    expect(domainsIn(pool)).toEqual([]);
  });
});

describe("address pools", () => {
  const RANGE = "192.0.2.113-192.0.2.117/24";
  const POOL_ADDRESSES = ["192.0.2.113", "192.0.2.114", "192.0.2.115", "192.0.2.116", "192.0.2.117"];

  /** The fleet stack's config: `size` members on host "one" (storage pool `pool`), their NIC on the pool. */
  function pooledFleet(pool: string, name: string, size: number) {
    const nics = [
      { bridge: staticBridgeOf(host).name, addressPool: { ranges: [RANGE] }, gateway4: "192.0.2.1" },
    ];
    return {
      ...hostsConfig({ one: { pool } }),
      "fleet:fleets": {
        [name]: {
          size,
          hosts: ["one"],
          rotation: { maxAge: "1h", batch: 1 },
          proxy: { image: "tiny", ...TEST_PROXY_ARGS, nics },
        },
      },
    };
  }

  /** Each member's pool address, by member name, as the state records it. */
  function addressesOf(ws: Workspace): Record<string, string> {
    return Object.fromEntries(
      ws
        .proxies()
        .map((p) => [
          String(p.urn).replace(/.*::/, ""),
          (((p.outputs?.nics ?? []) as { addresses: string[] }[])[0]?.addresses[0] ?? "").replace(
            /\/24$/,
            "",
          ),
        ]),
    );
  }

  it("a fleet of 3 on a pool of 5: distinct addresses, stable, another stack never shares one, two rotations onto addresses no member held with never fewer than 3 running, all 5 free after destroy; a fleet too big is refused at preview", async () => {
    const pool = makePool("addr");
    const name = `ap${PID}`;
    const ws = fleetStack("fleet-addr", pooledFleet(pool, name, 3));
    ws.up();
    const first = addressesOf(ws);
    expect(Object.keys(first).sort()).toEqual([`${name}-0`, `${name}-1`, `${name}-2`]);
    expect(Object.values(first).sort()).toEqual(POOL_ADDRESSES.slice(0, 3));
    expect(plannedOps(ws)).toEqual({});

    // Another stack on the same host and segment takes the next free address, never one of these.
    const other = fleetStack("fleet-addr2", pooledFleet(pool, `aq${PID}`, 1));
    other.up();
    expect(Object.values(addressesOf(other))).toEqual([POOL_ADDRESSES[3]]);
    other.destroy();

    // Too big for the pool with a rotation batch: refused at preview, nothing made.
    const big = fleetStack("fleet-addr3", pooledFleet(pool, `ar${PID}`, 5));
    const refused = big.run("preview");
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain(
      "nics[0].addressPool holds 5 addresses per family; 5 members and a batch of 1 replacements need 6",
    );
    expect(domainsIn(pool).filter((d) => d.startsWith(`ar${PID}`))).toEqual([]);

    // Members made 3, 2 and 1 days ago; two ups each replace the oldest, created before its predecessor goes.
    Object.keys(first)
      .sort()
      .forEach((member, i) => {
        const id = ws.proxies().find((p) => String(p.urn).endsWith(`::${member}`))?.id as string;
        backdate(id.split("/").pop() as string, new Date(Date.now() - (3 - i) * 86_400_000).toISOString());
      });
    ws.mustRun("refresh", "--yes", "--skip-preview");
    let held = first;
    const seen = new Set(Object.values(first));
    for (const round of [0, 1]) {
      const { r, fewest } = await upCountingRunning(ws, `${name}-`);
      expect(r.code, failureText(r)).toBe(0);
      expect(fewest).toBeGreaterThanOrEqual(3);
      const now = addressesOf(ws);
      const moved = Object.keys(now).filter((m) => now[m] !== held[m]);
      expect(moved, `round ${round}`).toEqual([`${name}-${round}`]);
      const fresh = now[`${name}-${round}`] as string;
      expect(Object.values(held)).not.toContain(fresh);
      expect(POOL_ADDRESSES).toContain(fresh);
      expect(new Set(Object.values(now)).size).toBe(3);
      seen.add(fresh);
      held = now;
    }
    // The pool was walked through: the two replacements took the two addresses the fleet had not used.
    expect([...seen].sort()).toEqual(POOL_ADDRESSES);

    ws.destroy();
    const config = hostsConfig({ one: { pool } });
    const probe = new KvmOperations(new HostPool(parseConfig({ hosts: config["kvm:hosts"] }).hosts));
    try {
      const taken = await probe.addresses.taken(`bridge:${staticBridgeOf(host).name}`, ["one"]);
      expect(POOL_ADDRESSES.filter((a) => !taken.has(a))).toHaveLength(5);
    } finally {
      await probe.hosts.closeAll();
    }
  });
});

describe("examples/fleet", () => {
  it("(TypeScript, the library's ProxyFleet) places 3 over capacities 2 and 1, each with a password of its own derived from one secret, and destroys them", () => {
    const [a, b] = ["ea", "eb"].map(makePool) as [string, string];
    const ws = new Workspace("fleet-example", {
      name: "kvmpt-fleet-example",
      main: "examples/fleet",
      typescript: true,
    });
    workspaces.push(ws);
    ws.setConfig({
      ...hostsConfig({
        "lab-a": { pool: a, capacity: { proxies: 2 } },
        "lab-b": { pool: b, capacity: { proxies: 1 } },
      }),
      "fleet:hosts": ["lab-a", "lab-b"],
      "fleet:size": 3,
      "fleet:image": "tiny",
      "fleet:proxy": TEST_PROXY_ARGS,
      "fleet:maxAge": "7d",
    });
    ws.setSecret("fleet:memberSecret", MEMBER_SECRET);
    ws.up();
    const out = ws.outputs() as { ids: string[]; hosts: string[] };
    expect(tally(out.hosts)).toEqual({ "lab-a": 2, "lab-b": 1 });
    // Each member's squid checks its own password's hash (salted with its URN); the state holds no password.
    expect(ws.stateText()).not.toContain(MEMBER_SECRET);
    const members = (
      JSON.parse(ws.mustRun("stack", "export", "--show-secrets").stdout) as {
        deployment: { resources: { type: string; urn: string; outputs?: Record<string, unknown> }[] };
      }
    ).deployment.resources.filter((r) => r.type === "pulumi-nodejs:dynamic:KvmProxy");
    expect(members.map((m) => m.urn.replace(/.*::/, "")).sort()).toEqual(["crawl-0", "crawl-1", "crawl-2"]);
    for (const m of members) {
      const member = m.urn.replace(/.*::/, "");
      const password = memberPassword(MEMBER_SECRET, member);
      expect(ws.stateText()).not.toContain(password);
      expect(revealed(m.outputs?.proxyPasswordHash)).toBe(squidPasswordHash(password, "crawler", m.urn));
      expect(revealed(m.outputs?.proxy)).toMatchObject({ auth: { username: "crawler" } });
    }
    expect(new Set(members.map((m) => revealed(m.outputs?.proxyPasswordHash))).size).toBe(3);
    expect(out.ids.map((id) => id.replace(/-\d-[0-9a-f]{8}$/, ""))).toEqual(
      out.hosts.map((h) => `kvm://${h}/crawl`),
    );
    expect([domainsIn(a).length, domainsIn(b).length]).toEqual([2, 1]);
    ws.destroy();
    expect([a, b].flatMap(domainsIn)).toEqual([]);
  });
});
