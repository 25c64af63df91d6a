/**
 * An egress fleet with booted guests, through the real Pulumi CLI
 * run inside the test host's namespace: a ProxyFleet of 1 with a rotation
 * (batch 1, after an hour) that never comes due here, whose NIC takes its
 * static address from a pool of 5 on the namespace's bridge without DHCP
 * (kvmpbr1), with an egress check against an IP echo in the namespace. This
 * proves with real squids that nothing stops answering while a member is
 * replaced. A pool member's replacement for failing health, retirement, a
 * blocked address or rotation is the same create-then-delete; which members
 * a rotation or a retirement replaces, in which order and batches over
 * several ups, and the pool never handing a blocked address out are the
 * pulumi group's (test/pulumi/fleet.test.ts, test/pulumi/retire.test.ts,
 * without booted guests).
 *
 * - Each member's `egressAddress` is the address its pool gave it: the echo
 *   saw the proxy's requests come from there.
 * - `pulumi-kvm-proxy status` (run in the namespace) reports the member's
 *   address, egress and health, the bytes of 5 MiB pulled through it within
 *   5% on its NIC's counters, and its requests by status class exactly
 *   (answers of the target's own 404 and 503 included); promtool accepts its
 *   Prometheus text.
 * - A member's VM destroyed from libvirt's side shows as stopped in
 *   `refresh --preview-only` (nothing recorded); after a refresh, `up`
 *   starts the same VM again (same UUID, same address), answering.
 * - A member whose squid is stopped in the guest is recorded degraded by
 *   refresh, with since when; `up` before its healthCheck.replaceAfter
 *   (30s) only probes it again, the first `up` after it replaces it
 *   make-before-break (the engine creates the replacement before it deletes
 *   the failing VM) on an address no member held.
 * - A member whose egress address `pulumi-kvm-proxy block` blocked is
 *   replaced at the next `up`, whatever its rotation's turn. While that `up`
 *   runs, a request through every pool address is sent each second from the
 *   namespace: never fewer than the fleet's size answer through squid (the
 *   replacement is created and passes its health check before its
 *   predecessor goes). The replacement takes an address no member held, and
 *   the namespace's neighbour table never sees one address at two MACs.
 * - After destroy, no domain holds an address of the pool.
 *
 * The members admit the namespace's bridge address without auth
 * (publicClientsWithoutAuth, a /32), so the sampler needs no password. It
 * starts beside the stock first boot (vitest.config.mts): its ups get the
 * time first-boot's have.
 */
import { execFile, execFileSync, spawnSync } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { HostPool } from "../../provider/kvm/host/hosts";
import { KvmOperations } from "../../provider/kvm/host/operations";
import {
  allDomains,
  cacheVolumeOfImage,
  deleteCachedImage,
  failureText,
  MAKE_BEFORE_BREAK,
  pulumiEnv,
  removeByHand,
  stepsOf,
  virsh,
  Workspace,
} from "../pulumi/harness";
import { repoRoot, type StaticBridge, staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import { waitUntil } from "../support/wait-until";
import { testImage, testImageUrlFor } from "./images";
import { NetnsCli } from "./netns-cli";
import {
  CREATE_TIMEOUT,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  since,
  testHostLibvirt,
} from "./support";

const run = promisify(execFile);
const env = inject("guest");
const IMAGE_URL = testImageUrlFor(env, "egress-fleet");
const FLEET = `egf${process.pid}`;
/** The fleet's size: what every second of a replacement must keep answering. */
const SIZE = 1;
const POOL = ["192.0.2.60", "192.0.2.61", "192.0.2.62", "192.0.2.63", "192.0.2.64"];
const RANGE = "192.0.2.60-192.0.2.64/24";

let host: TestHost;
let bridge: StaticBridge;
let ws: Workspace;
let cli: NetnsCli;
let libvirt: ReturnType<typeof testHostLibvirt> | undefined;
const timings: Record<string, number> = {};

function hostsConfig() {
  return {
    local: {
      uri: `unix://${host.socketPath}`,
      domainType: "qemu",
      pool: host.poolName,
      network: host.network,
    },
  };
}

/** The fleet's members as the state records them: name, address, MAC, egress. */
function members(): { name: string; address: string; mac: string; egress?: string; domain: string }[] {
  return ws
    .proxies()
    .map((p) => {
      const o = p.outputs ?? {};
      const nic = (o.nics as { addresses: string[]; mac: string }[])[0];
      return {
        name: String(p.urn).replace(/.*::/, ""),
        address: (nic?.addresses[0] ?? "").replace(/\/24$/, ""),
        mac: nic?.mac ?? "",
        ...(typeof o.egressAddress === "string" ? { egress: o.egressAddress } : {}),
        domain: String(o.domainName),
      };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** How many pool addresses answer a request through squid now (from the namespace), and the MAC each has. */
async function sample(): Promise<{ healthy: number; macs: Map<string, string> }> {
  const codes = await Promise.all(
    POOL.map(async (a) => {
      try {
        const { stdout } = await run("ip", [
          ...["netns", "exec", env.netns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"],
          ...["--max-time", "3", "--noproxy", "", "-x", `http://${a}:3128`, env.targetUrl],
        ]);
        return stdout.trim();
      } catch (err) {
        return (err as { stdout?: string }).stdout?.trim() || "000";
      }
    }),
  );
  const macs = new Map<string, string>();
  const neigh = execFileSync("ip", ["-n", env.netns, "neigh", "show", "dev", bridge.name], {
    encoding: "utf8",
  });
  for (const line of neigh.split("\n")) {
    const m = /^(\S+) lladdr (\S+)/.exec(line);
    if (m !== null && POOL.includes(m[1] as string)) macs.set(m[1] as string, (m[2] as string).toLowerCase());
  }
  return { healthy: codes.filter((c) => c === "204").length, macs };
}

const MIB = 1024 * 1024;
/** The members' healthCheck.replaceAfter: the shortest accepted. */
const REPLACE_AFTER_S = 30;

/** A command run in member `domain` by its guest agent, not waited for. */
function inGuest(domain: string, path: string, ...args: string[]): void {
  virsh(
    host,
    "qemu-agent-command",
    domain,
    JSON.stringify({ execute: "guest-exec", arguments: { path, arg: args } }),
  );
}

/** `pulumi-kvm-proxy <args>` on the stack, run inside the namespace (status's probes reach the guests from there). */
async function runCli(...args: string[]): Promise<string> {
  const cmd = [process.execPath, path.join(repoRoot, "dist/provider/cli/main.js")];
  const { stdout } = await run(
    "ip",
    ["netns", "exec", env.netns, ...cmd, ...args, "--cwd", ws.dir, "--stack", ws.stack],
    { env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` }, timeout: 300_000 },
  ).catch((err: { stdout?: string; stderr?: string }) => {
    throw new Error(`pulumi-kvm-proxy ${args.join(" ")} failed: ${err.stderr ?? ""}\n${err.stdout ?? ""}`);
  });
  return stdout;
}

/** `pulumi-kvm-proxy status` of the stack. */
function statusText(...args: string[]): Promise<string> {
  return runCli("status", ...args);
}

interface StatusRow {
  name: string;
  traffic?: { receivedBytes: number; sentBytes: number };
  requests?: { byClass: Record<string, number>; unreadable: number };
  [key: string]: unknown;
}

/** The status row of member `name`. */
async function statusOf(name: string): Promise<StatusRow> {
  const rows = (JSON.parse(await statusText("--json")) as { proxies: StatusRow[] }).proxies;
  const row = rows.find((r) => r.name === name);
  if (row === undefined) throw new Error(`status has no row for ${name}: ${JSON.stringify(rows)}`);
  return row;
}

/** Every domain of the fleet at each look (a replacement's domain is named by the run), with the engine's events. */
function watchMembers() {
  const watched = new Map<string, GuestProgress>();
  return {
    guests: () =>
      allDomains(host)
        .filter((d) => d.startsWith(`${FLEET}-`))
        .map((d) => {
          const g = watched.get(d) ?? new GuestProgress((libvirt as NonNullable<typeof libvirt>).lv, d);
          watched.set(d, g);
          return g;
        }),
    stallMs: GUEST_STALL_MS,
    ceilingMs: GUEST_CEILING_MS,
  };
}

beforeAll(async () => {
  const { sha256: imageSha256 } = await testImage(env);
  host = testHost();
  bridge = staticBridgeOf(host);
  for (let i = 0; i < SIZE; i++) removeByHand(host, `${FLEET}-${i}`);
  ws = new Workspace("guest-fleet", { name: "kvmpt-guest-fleet", main: "test/pulumi/programs/fleet" });
  ws.setConfig({
    "kvm:hosts": hostsConfig(),
    "kvm:images": { guest: { url: IMAGE_URL, sha256: imageSha256 } },
    "fleet:fleets": {
      [FLEET]: {
        size: SIZE,
        hosts: ["local"],
        rotation: { maxAge: "1h", batch: 1 },
        proxy: {
          image: "guest",
          memoryMiB: 512,
          diskGiB: 4,
          timeouts: { create: CREATE_TIMEOUT },
          nics: [{ bridge: bridge.name, addressPool: { ranges: [RANGE] }, gateway4: bridge.address4 }],
          proxy: { allowedClients: [`${bridge.address4}/32`], publicClientsWithoutAuth: true },
          healthCheck: { url: env.targetUrl, expectStatus: 204, replaceAfter: `${REPLACE_AFTER_S}s` },
          egressCheck: { url: env.whoamiUrl },
        },
      },
    },
  });
  cli = new NetnsCli(env.netns, ws);
  libvirt = testHostLibvirt(host);
});

afterAll(async () => {
  console.log(`egress fleet: ${JSON.stringify(timings)}`);
  await cli?.stopAll();
  await libvirt?.close();
  if (allDomains(host).some((d) => d.startsWith(`${FLEET}-`))) ws.cleanup();
  for (const d of allDomains(host).filter((n) => n.startsWith(`${FLEET}-`))) removeByHand(host, d);
  if (host !== undefined) deleteCachedImage(host, cacheVolumeOfImage({ url: IMAGE_URL }));
}, 300_000);

describe(`an egress fleet of ${SIZE} on an address pool of ${POOL.length}, booted`, () => {
  it(
    "pulumi up boots the fleet on addresses of the pool, one per member; each member's egressAddress is its address",
    async () => {
      const t0 = performance.now();
      await cli.mustWatched(["up", "--yes", "--skip-preview"], watchMembers());
      timings.up = since(t0);
      const m = members();
      expect(m.map((x) => x.name)).toEqual(Array.from({ length: SIZE }, (_, i) => `${FLEET}-${i}`));
      expect(new Set(m.map((x) => x.address)).size).toBe(SIZE);
      for (const x of m) {
        expect(POOL).toContain(x.address);
        expect(x.egress, x.name).toBe(x.address);
      }
      expect((await sample()).healthy).toBe(SIZE);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it(
    "status: after 5 MiB and 10 requests through the member (3 answered 404 and 2 answered 503 by the target), its bytes within 5% and its requests exact; promtool accepts its Prometheus text",
    async () => {
      const m = members()[0] as ReturnType<typeof members>[number];
      const before = await statusOf(m.name);
      expect(before).toMatchObject({
        fleet: FLEET,
        host: "local",
        domain: m.domain,
        state: "running",
        addresses: expect.arrayContaining([`${m.address}/24`]),
        egressAddress: m.address,
        health: { ok: true },
        problems: [],
      });
      const through = async (path: string) => {
        const { stdout } = await run("ip", [
          ...[
            "netns",
            "exec",
            env.netns,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download}",
          ],
          ...[
            "--max-time",
            "60",
            "--noproxy",
            "",
            "-x",
            `http://${m.address}:3128`,
            new URL(path, env.whoamiUrl).href,
          ],
        ]);
        return stdout.trim();
      };
      for (let i = 0; i < 5; i++) expect(await through(`/bytes/${MIB}`)).toBe(`200 ${MIB}`);
      for (let i = 0; i < 3; i++) expect(await through("/status/404")).toMatch(/^404 /);
      for (let i = 0; i < 2; i++) expect(await through("/status/503")).toMatch(/^503 /);
      const after = await statusOf(m.name);
      const delta = (c: string) =>
        (after.requests?.byClass[c] as number) - (before.requests?.byClass[c] as number);
      // status's own read probes through squid too: the health check's URL (204) and the egress check's (200).
      expect(
        Object.fromEntries(["1xx", "2xx", "3xx", "4xx", "5xx", "other"].map((c) => [c, delta(c)])),
      ).toEqual({
        "1xx": 0,
        "2xx": 5 + 2,
        "3xx": 0,
        "4xx": 3,
        "5xx": 2,
        other: 0,
      });
      expect(after.requests?.unreadable).toBe(0);
      // The 5 MiB came into the VM from the target and went out of it to the client.
      const received = (after.traffic?.receivedBytes as number) - (before.traffic?.receivedBytes as number);
      const sent = (after.traffic?.sentBytes as number) - (before.traffic?.sentBytes as number);
      timings.statusBytes = received;
      for (const [what, n] of [
        ["received", received],
        ["sent", sent],
      ] as const) {
        expect(n, what).toBeGreaterThanOrEqual(5 * MIB);
        expect(n, what).toBeLessThanOrEqual(5 * MIB * 1.05);
      }
      const text = await statusText("--prometheus");
      const check = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
      expect(`${check.stdout}${check.stderr}`.trim()).toBe("");
      expect(check.status).toBe(0);
      expect(text).toMatch(
        new RegExp(
          `^kvmproxy_http_requests_total\\{proxy="${m.name}",[^}]*code_class="4xx"\\} ${after.requests?.byClass["4xx"]}$`,
          "m",
        ),
      );
      expect(text).toMatch(new RegExp(`^kvmproxy_up\\{proxy="${m.name}",[^}]*\\} 1$`, "m"));
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it(
    "a member's VM destroyed from libvirt's side: refresh --preview-only shows it stopped and records nothing; after refresh, up starts the same VM again on its address",
    async () => {
      const before = members();
      const m = before[0] as (typeof before)[number];
      const uuid = virsh(host, "domuuid", m.domain).trim();
      virsh(host, "destroy", m.domain);
      const shown = await cli.must("refresh", "--preview-only", "--diff");
      expect(shown.output).toMatch(/~ state\s*: "running" => "stopped"/);
      expect(ws.proxies().find((p) => String(p.urn).endsWith(`::${m.name}`))?.outputs?.state).toBe("running");
      await cli.must("refresh", "--yes", "--skip-preview");
      expect(ws.proxies().find((p) => String(p.urn).endsWith(`::${m.name}`))?.outputs?.state).toBe("stopped");
      const t0 = performance.now();
      const r = await cli.watched(["up", "--yes", "--skip-preview", "--json"], watchMembers());
      timings.restarted = since(t0);
      expect(r.code, failureText(r)).toBe(0);
      expect(stepsOf(r.stdout, m.name)).toEqual(["update"]);
      expect(virsh(host, "domuuid", m.domain).trim()).toBe(uuid);
      expect(members()).toEqual(before);
      expect(ws.proxies().find((p) => String(p.urn).endsWith(`::${m.name}`))?.outputs?.state).toBe("running");
      expect((await sample()).healthy).toBe(SIZE);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it(
    "a member whose squid stopped: refresh records it degraded and since when; the next up before healthCheck.replaceAfter probes it again in place, the first after it replaces it (the replacement created, then the failing VM deleted) on a fresh address",
    async () => {
      const before = members();
      const sick = before[0] as (typeof before)[number];
      inGuest(sick.domain, "/usr/bin/systemctl", "stop", "squid");
      await waitUntil({
        what: `squid in ${sick.domain} to stop answering`,
        check: async () => ({ done: (await sample()).healthy === 0, value: undefined }),
        progress: async () => "",
        stallMs: 120_000,
        ceilingMs: 120_000,
        pollMs: 1_000,
      });
      await cli.must("refresh", "--yes", "--skip-preview");
      const recorded = ws.proxies().find((p) => String(p.urn).endsWith(`::${sick.name}`))?.outputs ?? {};
      const health = recorded.health as { ok: boolean; failingSince?: string; reason?: string };
      expect(recorded.state).toBe("degraded");
      expect(health).toMatchObject({ ok: false });
      const failingAt = Date.parse(health.failingSince as string);
      expect(failingAt).toBeLessThanOrEqual(Date.now());
      // Before the threshold: an update in place (probed again), no replacement.
      const early = await cli.must("preview", "--json");
      const earlyOps = (JSON.parse(early.stdout) as { steps?: { op: string; urn: string }[] }).steps ?? [];
      expect(earlyOps.filter((st) => st.urn.endsWith(`::${sick.name}`)).map((st) => st.op)).toEqual([
        "update",
      ]);
      await new Promise((r) =>
        setTimeout(r, Math.max(0, failingAt + REPLACE_AFTER_S * 1000 - Date.now() + 1_000)),
      );
      const t0 = performance.now();
      const r = await cli.watched(["up", "--yes", "--skip-preview", "--json"], watchMembers());
      timings.failingReplaced = since(t0);
      expect(r.code, failureText(r)).toBe(0);
      const ops = stepsOf(r.stdout, sick.name);
      // Make-before-break: the replacement is created (and passed its health check) before the failing VM goes.
      expect(ops).toEqual(MAKE_BEFORE_BREAK("health"));
      expect(r.output).toContain("replacing: failing its health check since");
      const held = members();
      const fresh = held.find((x) => x.name === sick.name) as (typeof held)[number];
      expect(fresh.domain).not.toBe(sick.domain);
      expect(before.map((b) => b.address)).not.toContain(fresh.address);
      expect(allDomains(host)).not.toContain(sick.domain);
      const after = ws.proxies().find((p) => String(p.urn).endsWith(`::${sick.name}`))?.outputs ?? {};
      expect(after).toMatchObject({ state: "running", health: { ok: true } });
      expect((after.health as { failingSince?: string }).failingSince).toBeUndefined();
      expect((await sample()).healthy).toBe(SIZE);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it(
    "a member whose egress address is blocked (pulumi-kvm-proxy block): replaced at the next up, whatever its rotation's turn, while every second the fleet's size answers through squid (make-before-break); the replacement takes an address no member held; no address is ever seen at two MACs",
    async () => {
      const before = members();
      const m = before[0] as (typeof before)[number];
      const blocked = await runCli(
        "block",
        m.egress as string,
        "--reason",
        "403s from example.com",
        "--for",
        "1d",
      );
      expect(blocked).toContain(`replaces ${m.name}`);
      const seenAt = new Map<string, Set<string>>();
      let fewest = Number.POSITIVE_INFINITY;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const s = await sample();
          fewest = Math.min(fewest, s.healthy);
          for (const [a, mac] of s.macs) seenAt.set(a, new Set([...(seenAt.get(a) ?? []), mac]));
          await new Promise((r) => setTimeout(r, 1_000));
        }
      })();
      const t0 = performance.now();
      const r = await cli.watched(["up", "--yes", "--skip-preview", "--json"], watchMembers()).finally(() => {
        sampling = false; // a failed wait stops the sampler too
      });
      timings.blockedReplaced = since(t0);
      await sampler;
      expect(r.code, failureText(r)).toBe(0);
      expect(stepsOf(r.stdout, m.name)).toEqual(MAKE_BEFORE_BREAK("blockedAddresses"));
      expect(r.output).toContain(`replacing: its address ${m.egress} is blocked until`);
      expect(fewest).toBeGreaterThanOrEqual(SIZE);
      const held = members();
      const fresh = held.find((x) => x.name === m.name) as (typeof before)[number];
      expect(before.map((b) => b.address)).not.toContain(fresh.address);
      expect(fresh.egress).toBe(fresh.address);
      expect(held.map((x) => x.address)).not.toContain(m.address);
      for (const [address, macs] of seenAt) expect([...macs], address).toHaveLength(1);
      // And the MAC the namespace sees at each member's address is that member's.
      const last = await sample();
      for (const x of held) expect(last.macs.get(x.address), x.name).toBe(x.mac);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("pulumi destroy leaves no domain of the fleet and every address of the pool free", async () => {
    await cli.must("destroy", "--yes", "--skip-preview");
    expect(allDomains(host).filter((d) => d.startsWith(`${FLEET}-`))).toEqual([]);
    const probe = new KvmOperations(new HostPool(parseConfig({ hosts: hostsConfig() }).hosts));
    try {
      const taken = await probe.addresses.taken(`bridge:${bridge.name}`, ["local"]);
      expect(POOL.filter((a) => taken.has(a))).toEqual([]);
    } finally {
      await probe.hosts.closeAll();
    }
  });
});
