/**
 * A baked image with a real Debian builder and booted proxies,
 * through the real Pulumi CLI inside the test host's namespace: two proxies
 * created at once from a stock Debian 12 image whose kvm:images entry asks
 * for a bake, the builder's user-data pointing apt at the namespace's package
 * mirror. One builder VM is started (the provider's trace); each package is
 * fetched from the mirror once; the proxies boot from the baked volume,
 * install nothing, have identities of their own and are healthy; a preview
 * shows no change; destroy leaves no proxy and no builder.
 *
 * The host side of a bake (cuts at each step, a failing builder, sharing)
 * is test/libvirtd/kvm/image-bake.test.ts, with builders that take seconds.
 */
import type { ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { HostPool } from "../../provider/kvm/host/hosts";
import { allDomains, metadataOf, poolVolumes, removeByHand, Workspace } from "../pulumi/harness";
import { startServer, stopServer } from "../support/netns-http";
import { sha256File } from "../support/sha256-file";
import { repoRoot, type TestHost, testHost } from "../support/test-host";
import { buildMirror, buildStock, mirrorUserData, UNFETCHED_RECOMMENDS } from "./images";
import { NetnsCli } from "./netns-cli";
import {
  agentFor,
  CREATE_TIMEOUT,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  nvramFiles,
  requestThrough,
  since,
  sshHostEntry,
} from "./support";

const env = inject("guest");
const USER = "crawler";
const PASSWORD = `bake-${process.pid}-P4ss`;
const PROXIES = [0, 1].map((i) => `kvmpt-baked-${process.pid}-${i}`);

let host: TestHost;
let dir: string;
const servers: ChildProcess[] = [];
let mirrorAt = "";
let mirrorLog = "";
let stockImage = "";
let imagePort = 0;
let ws: Workspace | undefined;
let cli: NetnsCli | undefined;
const timings: Record<string, number> = {};

function hostPool(): HostPool {
  return new HostPool(
    parseConfig({
      hosts: {
        local: {
          uri: `unix://${host.socketPath}`,
          pool: host.poolName,
          network: host.network,
          domainType: "qemu",
        },
      },
    }).hosts,
  );
}

beforeAll(async () => {
  host = testHost();
  for (const n of PROXIES) removeByHand(host, n);
  dir = mkdtempSync(path.join(repoRoot, ".state/bake-"));
  stockImage = buildStock("bookworm");
  const mirror = buildMirror("bookworm", stockImage);
  mirrorLog = path.join(dir, "mirror.log");
  writeFileSync(mirrorLog, "");
  // On the NAT network's gateway: the builder (on the host's network) and the proxies reach it there.
  const port = await startServer(servers, host.netns, ["files", host.networkAddress, mirror, mirrorLog]);
  mirrorAt = `${host.networkAddress}:${port}`;
  imagePort = await startServer(servers, host.netns, ["files", "127.0.0.1", path.dirname(stockImage)]);
});

afterAll(async () => {
  console.log(`bake: ${JSON.stringify(timings)}`);
  await cli?.stopAll();
  if (PROXIES.some((n) => allDomains(host).includes(n))) ws?.cleanup();
  for (const n of PROXIES) removeByHand(host, n);
  await Promise.all(servers.map((s) => stopServer(s)));
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("two proxies at once from a stock image with a bake recipe (the Pulumi CLI)", () => {
  let stockSha256 = "";
  let trace = "";
  let upOutput = "";

  beforeAll(async () => {
    stockSha256 = await sha256File(stockImage);
    ws = new Workspace("bake", { name: "kvmpt-bake", main: "test/pulumi/programs/pair" });
    ws.setConfig({
      "kvm:hosts": { local: sshHostEntry(host) },
      "kvm:images": {
        baked: {
          url: `http://127.0.0.1:${imagePort}/${path.basename(stockImage)}`,
          sha256: stockSha256,
          bake: { userData: mirrorUserData(mirrorAt) },
        },
      },
      "pair:proxies": Object.fromEntries(
        PROXIES.map((name) => [
          name,
          {
            host: "local",
            image: "baked",
            name,
            memoryMiB: 768,
            diskGiB: 4,
            // The mirror again: a proxy that tried to install anything would show in its log.
            userData: mirrorUserData(mirrorAt),
            proxy: { auth: { username: USER } },
            proxyPasswordFromSecret: true,
            healthCheck: { url: env.targetUrl, expectStatus: 204 },
            timeouts: { create: CREATE_TIMEOUT },
          },
        ]),
      ),
    });
    ws.setSecret("pair:proxyPassword", PASSWORD);
    // What names the bake's user-data by a keyed digest (a plain one would let its text be guessed).
    ws.setSecret("kvm:stateKey", "kvmpt-bake-state-key-0123456789abcdef");
    cli = new NetnsCli(env.netns, ws);
  });

  it(
    "pulumi up creates both (one builder VM bakes the image while both wait for it)",
    async () => {
      const c = cli as NetnsCli;
      const file = path.join(dir, "up.trace");
      c.extraEnv = { KVMP_TRACE_FILE: file };
      const t0 = performance.now();
      const agents = hostPool();
      // The proxies and the builder (named by the run): what the stall check watches, with the engine's events.
      const watched = new Map<string, GuestProgress>();
      const r = await c
        .watched(["up", "--yes", "--skip-preview"], {
          guests: () =>
            allDomains(host)
              .filter((d) => PROXIES.includes(d) || d.startsWith("kvmp-bake-"))
              .map((d) => {
                const g = watched.get(d) ?? new GuestProgress(agents.libvirt("local"), d);
                watched.set(d, g);
                return g;
              }),
          stallMs: GUEST_STALL_MS,
          ceilingMs: GUEST_CEILING_MS,
        })
        .finally(() => agents.closeAll());
      timings.up = since(t0);
      c.extraEnv = {};
      upOutput = r.output;
      expect(r.code, r.output.slice(-6000)).toBe(0);
      trace = readFileSync(file, "utf8");
      const builderStarts = trace
        .split("\n")
        .filter((l) => /^rpc=virDomainCreate host=\S+ dom=kvmp-bake-/.test(l));
      expect(builderStarts).toHaveLength(1);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("each proxy records the one baked volume it is backed by, and is healthy", () => {
    const outs = (ws as Workspace).proxies().map((p) => p.outputs ?? {});
    expect(outs).toHaveLength(PROXIES.length);
    const baked = new Set(outs.map((o) => o.bakedImage));
    expect([...baked]).toHaveLength(1);
    expect([...baked][0]).toMatch(/^kvmp-baked-[0-9a-f]{16}\.qcow2$/);
    for (const o of outs) expect(o.health).toMatchObject({ ok: true });
    expect(poolVolumes(host)).toContain([...baked][0]);
    // The builder, its NVRAM and its seed are gone; its console said how the bake went.
    expect(allDomains(host).filter((d) => d.startsWith("kvmp-bake-"))).toEqual([]);
    const builder = ([...baked][0] as string).replace(/^kvmp-baked-(\w+)\.qcow2$/, "kvmp-bake-$1");
    expect(nvramFiles(host, builder)).toEqual([]);
    expect(
      poolVolumes(host).filter(
        (v) => v.startsWith("kvmp-bake-") || (v.startsWith("kvmp-baked-") && v.endsWith(".partial")),
      ),
    ).toEqual([]);
  });

  it("nothing tells the bake's user-data (it holds the mirror's address): no plain digest of it in the state, an output or a VM's metadata", () => {
    const text = mirrorUserData(mirrorAt);
    const digest = createHash("sha256").update(text, "utf8").digest("hex");
    const state = (ws as Workspace).stateText();
    expect(state).toContain("userDataMac");
    expect(state).not.toContain(digest);
    for (const name of PROXIES) {
      const metadata = metadataOf(host, name) ?? "";
      expect(metadata).toMatch(/bakeUserDataMac="[0-9a-f]{64}"/);
      expect(metadata).not.toContain(digest);
    }
  });

  it("the display showed the bake's progress to the proxies waiting for it", () => {
    expect(upOutput).toMatch(/baking image on local: (booting the builder|installing packages)/);
  });

  it("each package came from the mirror once, for the builder, none of the Recommends; the proxies' first boots installed nothing", async () => {
    const fetched = readFileSync(mirrorLog, "utf8")
      .split("\n")
      .filter((l) => l.startsWith("200 ") && l.endsWith(".deb"));
    for (const p of ["squid", "qemu-guest-agent", "dante-server"])
      expect(fetched.filter((l) => new RegExp(`^200 /(\\./)?${p}_[^ ]+\\.deb$`).test(l))).toHaveLength(1);
    const counts = new Map<string, number>();
    for (const l of fetched) counts.set(l, (counts.get(l) ?? 0) + 1);
    expect([...counts].filter(([, n]) => n > 1)).toEqual([]);
    expect(fetched.join("\n")).not.toMatch(UNFETCHED_RECOMMENDS);
    const agents = hostPool();
    try {
      for (const name of PROXIES) {
        const agent = await agentFor(agents.libvirt("local"), name);
        const log = await agent.sh("cat /var/log/cloud-init-output.log");
        expect(log).not.toMatch(/installing squid|installing qemu-guest-agent|Unpacking /);
        expect((await agent.sh(`dpkg-query -W -f='\${Status}' squid`)).trim()).toBe("install ok installed");
        // A proxy of its own: its machine-id, SSH host keys and instance are not the builder's.
        expect((await agent.sh("cat /etc/machine-id")).trim()).toMatch(/^[0-9a-f]{32}$/);
        expect(await agent.sh("cloud-init query instance_id")).toContain(name);
        expect((await agent.sh("systemctl is-enabled danted || true")).trim()).not.toBe("enabled");
      }
      const ids = await Promise.all(
        PROXIES.map(async (n) =>
          (await (await agentFor(agents.libvirt("local"), n)).sh("cat /etc/machine-id")).trim(),
        ),
      );
      expect(new Set(ids).size).toBe(PROXIES.length);
    } finally {
      await agents.closeAll();
    }
  });

  it("every proxy answers 407 without the credentials and 204 with them", async () => {
    for (const p of (ws as Workspace).proxies()) {
      const url = p.outputs?.proxyUrl as string;
      expect((await requestThrough(env, url, env.targetUrl)).status).toBe("407");
      expect(
        (await requestThrough(env, url, env.targetUrl, { credentials: `${USER}:${PASSWORD}` })).status,
      ).toBe("204");
    }
  });

  it("a preview then shows no change, and destroy leaves no proxy and no builder", async () => {
    const c = cli as NetnsCli;
    await c.must("preview", "--expect-no-changes");
    await c.must("destroy", "--yes", "--skip-preview");
    const domains = allDomains(host);
    expect(domains.filter((d) => PROXIES.includes(d) || d.startsWith("kvmp-bake-"))).toEqual([]);
  });
});
