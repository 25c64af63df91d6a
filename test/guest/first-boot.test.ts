/**
 * The first boot users get, with booted guests through the real
 * Pulumi CLI run inside the test host's namespace:
 *
 * - stock images of Debian 12 and 13 (scripts/guest-image, variant stock:
 *   no squid, no qemu-guest-agent, a genericcloud image's deb822 sources),
 *   pointed by the user's cloud-config at a package mirror served inside
 *   the namespace (scripts/guest-mirror): the provider's vendor scripts
 *   install both at first boot, and each becomes a healthy authenticated
 *   proxy on a static dual-stack NIC (cloud-init 22.4 and 25 render it);
 * - Debian 12's user-data reloads squid and sleeps 20 s in its runcmd:
 *   `up` returns only after cloud-init is done, so 50 requests the moment
 *   it returns all succeed;
 * - Debian 13's user-data holds dpkg's lock from bootcmd until 30 s after
 *   the final stage's first install started waiting for it (as apt-daily and
 *   unattended-upgrades do on a stock image): the installs wait for it;
 * - a user-data that fails (a runcmd that exits 1, a package that does not
 *   exist), on the test image: the create fails naming the modules, with the
 *   guest's own lines; with keepOnFailure its VM stays for inspection,
 *   recorded and marked: `pulumi-kvm-proxy console` prints its cloud-init
 *   log (masked), preview replaces it, deleting it first, and destroy
 *   removes it;
 * - a guest without an agent that never gets ready (no keepOnFailure; a
 *   boot sector that prints on the console and powers the VM off, as no
 *   Linux guest needs booting for it): the create fails with its serial
 *   console's last lines and leaves nothing.
 */

import { type ChildProcess, execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { HostPool } from "../../provider/kvm/host/hosts";
import {
  allDomains,
  cacheVolumeOfImage,
  deleteCachedImage,
  failureText,
  poolVolumes,
  pulumiEnv,
  removeByHand,
  Workspace,
} from "../pulumi/harness";
import { bootSectorDisk } from "../support/boot-sector";
import { startServer, stopServer } from "../support/netns-http";
import { sha256File } from "../support/sha256-file";
import {
  refreshPoolByHand,
  repoRoot,
  type StaticBridge,
  staticBridgeOf,
  type TestHost,
  testHost,
} from "../support/test-host";
import {
  buildMirror,
  buildStock,
  mirrorUserData,
  STOCK_SUITES,
  testImage,
  testImageUrlFor,
  UNFETCHED_RECOMMENDS,
} from "./images";
import { NetnsCli } from "./netns-cli";
import {
  agentFor,
  CREATE_TIMEOUT,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  requestThrough,
  since,
  sshHostEntry,
} from "./support";

const env = inject("guest");
const USER = "crawler";
const PASSWORD = `first-boot-${process.pid}-P4ss`;
const CREDENTIALS = `${USER}:${PASSWORD}`;
const RELEASES = [
  { key: "d12", suite: STOCK_SUITES[0], name: `kvmpt-stock12-${process.pid}`, n: 31 },
  { key: "d13", suite: STOCK_SUITES[1], name: `kvmpt-stock13-${process.pid}`, n: 32 },
] as const;
const FAILING = `kvmpt-failing-${process.pid}`;
/**
 * A client outside allowedClients: a second address of the namespace on the
 * static bridge (one of the NAT network's would be masqueraded to the
 * bridge's own address on its way, which is allowed).
 */
const OUTSIDE_CLIENT = "192.0.2.8";
/** Has no agent to ask and no network (a boot sector, not Linux): its console is all that tells why. */
const SILENT = `kvmpt-silent-${process.pid}`;

let host: TestHost;
let bridge: StaticBridge;
let agents: HostPool;
let dir: string;
const servers: ChildProcess[] = [];
/** Per release: the stock image, its SHA-256, and the mirror's port and access log. */
const stock: Record<string, { image: string; sha256: string; port: number; log: string }> = {};
let imagePort = 0;
let ws: Workspace;
let failing: Workspace;
let cli: NetnsCli;
let failingCli: NetnsCli;
/** What the two ups did. */
let up: { seconds: number; output: string } | undefined;
let failed: { code: number; output: string } | undefined;
/** A kvm:images entry, kept in `images` for the clean-up. */
const kept = <T extends Record<string, unknown>>(image: T): T => {
  images.push(image);
  return image;
};
/** The kvm:images entries of both workspaces: the provider's cached copies go at the end (their URLs are this run's). */
const images: Record<string, unknown>[] = [];

/**
 * The python3 program that holds dpkg's frontend lock from bootcmd on, and lets it go 30 s after an
 * `apt-get install` of cloud-init's final stage has started waiting for it (as apt-daily and
 * unattended-upgrades do on a stock image), however slowly the guest boots.
 */
const HOLD_DPKG_LOCK = `import fcntl, json, os, time
f = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(f, fcntl.LOCK_EX)
def stage():
    try:
        return json.load(open("/run/cloud-init/status.json"))["v1"]["stage"]
    except Exception:
        return None
def installing():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"apt-get" and b"install" in argv:
            return True
    return False
while not (stage() == "modules-final" and installing()):
    time.sleep(0.2)
open("/run/kvmp-dpkg-lock-held", "w").write("%f\\n" % time.time())
time.sleep(30)
open("/run/kvmp-dpkg-lock-held", "a").write("%f\\n" % time.time())
`;

/** A stock image's user-data: the mirror on the static bridge as its only package source. */
function stockUserData(port: number, extra: string[]): string {
  return mirrorUserData(`${bridge.address4}:${port}`, extra);
}

function proxyArgs(r: (typeof RELEASES)[number]): Record<string, unknown> {
  const d12 = r.key === "d12";
  const extra = d12
    ? []
    : [
        "  - |",
        "    cat >/run/kvmp-hold-dpkg-lock.py <<'EOF'",
        ...HOLD_DPKG_LOCK.trimEnd()
          .split("\n")
          .map((l) => `    ${l}`),
        "    EOF",
        "    setsid python3 /run/kvmp-hold-dpkg-lock.py </dev/null >/dev/null 2>&1 &",
      ];
  const userData = `${stockUserData(stock[r.key]?.port as number, extra)}${
    d12
      ? "runcmd:\n  - [systemctl, reload, squid]\n  - [sleep, '20']\n  - [touch, /run/kvmp-runcmd-done]\n"
      : ""
  }`;
  return {
    host: "local",
    image: r.key,
    name: r.name,
    memoryMiB: 768,
    diskGiB: 4,
    userData,
    nics: [
      {
        bridge: bridge.name,
        addresses: [`192.0.2.${r.n}/${bridge.prefix4}`, `2001:db8:14::${r.n}/${bridge.prefix6}`],
        gateway4: bridge.address4,
        gateway6: bridge.address6,
      },
    ],
    proxy: {
      auth: { username: USER },
      allowedClients: [`${bridge.address4}/32`, `${bridge.address6}/128`],
      // Debian 12's proxy speaks SOCKS5 too: Dante installed from the mirror like squid.
      ...(d12 ? { socks: {} } : {}),
    },
    proxyPasswordFromSecret: true,
    healthCheck: { url: env.targetUrl, expectStatus: 204 },
    timeouts: { create: CREATE_TIMEOUT },
  };
}

function hostsConfig(): Record<string, unknown> {
  return { local: sshHostEntry(host) };
}

beforeAll(async () => {
  const { sha256: imageSha256 } = await testImage(env);
  host = testHost();
  bridge = staticBridgeOf(host);
  execFileSync("ip", ["-n", host.netns, "addr", "replace", `${OUTSIDE_CLIENT}/32`, "dev", bridge.name]);
  for (const n of [...RELEASES.map((r) => r.name), FAILING, SILENT]) removeByHand(host, n);
  dir = mkdtempSync(path.join(repoRoot, ".state/first-boot-"));
  agents = new HostPool(
    parseConfig({
      hosts: { local: { uri: `unix://${host.socketPath}`, pool: host.poolName, network: host.network } },
    }).hosts,
  );
  for (const r of RELEASES) {
    const image = buildStock(r.suite);
    const mirror = buildMirror(r.suite, image);
    const log = path.join(dir, `mirror-${r.key}.log`);
    writeFileSync(log, "");
    const port = await startServer(servers, host.netns, ["files", bridge.address4, mirror, log]);
    stock[r.key] = { image, sha256: await sha256File(image), port, log };
  }
  // The stock images over HTTP on the namespace's loopback, for the provider (which runs inside it).
  imagePort = await startServer(servers, host.netns, [
    "files",
    "127.0.0.1",
    path.dirname(stock.d12?.image as string),
  ]);

  ws = new Workspace("firstboot", { name: "kvmpt-firstboot", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    "kvm:hosts": hostsConfig(),
    "kvm:images": Object.fromEntries(
      RELEASES.map((r) => [
        r.key,
        kept({
          url: `http://127.0.0.1:${imagePort}/${path.basename(stock[r.key]?.image as string)}`,
          sha256: stock[r.key]?.sha256,
        }),
      ]),
    ),
    "pair:proxies": Object.fromEntries(RELEASES.map((r) => [r.key, proxyArgs(r)])),
  });
  ws.setSecret("pair:proxyPassword", PASSWORD);
  cli = new NetnsCli(env.netns, ws);

  // No agent to ask and no network: a boot sector that prints on the console three times, 10 s apart, then
  // powers the VM off. The create must fail as soon as the VM stops (not at its deadline), with the console's
  // last lines, masked.
  const silentDisk = bootSectorDisk(
    path.join(dir, "silent.img"),
    "kvmp-console-marker\npassword: console-hunter2\n",
    3,
  );
  failing = new Workspace("failing", { name: "kvmpt-failing", main: "test/pulumi/programs/pair" });
  failing.setConfig({
    "kvm:hosts": hostsConfig(),
    "kvm:images": {
      guest: kept({ url: testImageUrlFor(env, "first-boot"), sha256: imageSha256 }),
      silent: kept({
        url: silentDisk,
        format: "raw",
        firmware: "bios",
        sha256: await sha256File(silentDisk),
      }),
    },
    "pair:proxies": {
      failing: {
        host: "local",
        image: "guest",
        name: FAILING,
        memoryMiB: 768,
        diskGiB: 4,
        userData: [
          "#cloud-config",
          "packages: [kvmp-no-such-package]",
          "runcmd:",
          '  - [sh, -c, "echo password: kvmp-hunter3; echo kvmp-runcmd-about-to-fail; exit 1"]',
          "",
        ].join("\n"),
        timeouts: { create: CREATE_TIMEOUT },
        keepOnFailure: true,
      },
      silent: {
        host: "local",
        image: "silent",
        name: SILENT,
        memoryMiB: 512,
        diskGiB: 4,
        installGuestAgent: false,
        // A ceiling only: the create must end when the VM stops, and the test's wait fails on a stall.
        timeouts: { create: CREATE_TIMEOUT },
      },
    },
  });
  failingCli = new NetnsCli(env.netns, failing);
}, 60 * 60_000);

afterAll(async () => {
  console.log(`first boot: ${JSON.stringify({ up: up?.seconds, failedExit: failed?.code }, null, 2)}`);
  await Promise.all([cli?.stopAll(), failingCli?.stopAll()]);
  for (const w of [ws, failing]) w?.cleanup();
  for (const n of [...RELEASES.map((r) => r.name), FAILING, SILENT])
    if (host !== undefined) removeByHand(host, n);
  if (host !== undefined) for (const image of images) deleteCachedImage(host, cacheVolumeOfImage(image));
  await Promise.all(servers.map((s) => stopServer(s)));
  await agents?.closeAll();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  if (host !== undefined && bridge !== undefined) {
    execFileSync("ip", ["-n", host.netns, "addr", "del", `${OUTSIDE_CLIENT}/32`, "dev", bridge.name], {
      stdio: "ignore",
    });
  }
}, 300_000);

/** The status of one GET of the target through the proxy at `proxy` (a URL), inside the namespace. */
async function through(proxy: string, credentials?: string): Promise<string> {
  const options = { maxSeconds: 15, ...(credentials !== undefined ? { credentials } : {}) };
  return (await requestThrough(env, proxy, env.targetUrl, options)).status;
}

/** What 50 requests through Debian 12's proxy got, sent the moment its up returned. */
let atOnce: string[] = [];

/** What a pulumi run that boots guests watches: those guests (by domain name) and the engine's events. */
function watchGuests(...names: string[]) {
  return {
    guests: names.map((n) => new GuestProgress(agents.libvirt("local"), n)),
    stallMs: GUEST_STALL_MS,
    ceilingMs: GUEST_CEILING_MS,
  };
}

/** The failing workspace's up, started once: beside the stock proxies' up, or alone when only its tests run. */
let failingUp: Promise<void> | undefined;
function upFailing(): Promise<void> {
  failingUp ??= failingCli
    .watched(["up", "--yes", "--skip-preview"], watchGuests(FAILING, SILENT))
    .then((r) => {
      failed = { code: r.code, output: r.output };
    });
  return failingUp;
}

/** `pulumi-kvm-proxy console <args>` of the built package, inside the namespace, on the failing workspace's stack. */
function consoleCommand(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(
    "ip",
    [
      ...["netns", "exec", env.netns, process.execPath, path.join(repoRoot, "dist/provider/cli/main.js")],
      ...["console", ...args, "--cwd", failing.dir, "--stack", failing.stack],
    ],
    {
      cwd: repoRoot,
      env: { ...pulumiEnv(), PWD: failing.dir, PULUMI_BACKEND_URL: `file://${failing.backend}` },
      encoding: "utf8",
      timeout: 120_000,
    },
  );
  if (r.error) throw r.error;
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe("the first boot of stock images, and of user-data that fails", () => {
  it(
    "pulumi up of the stock Debian 12 and 13 proxies succeeds",
    async () => {
      const t0 = performance.now();
      // The failing workspace's up runs meanwhile: its own test below waits for it.
      upFailing().catch(() => {}); // its own test reports how it ended
      const okRun = await cli
        .watched(["up", "--yes", "--skip-preview"], watchGuests(...RELEASES.map((r) => r.name)))
        .then(async (r) => {
          up = { seconds: since(t0), output: r.output };
          // The moment up returns: 50 requests at once through the proxy whose runcmd reloaded squid and slept.
          atOnce = await Promise.all(
            Array.from({ length: 50 }, () => through("http://192.0.2.31:3128", CREDENTIALS)),
          );
          return r;
        });
      expect(okRun.code, okRun.output.slice(-6000)).toBe(0);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it(
    "the failing workspace's up fails",
    async () => {
      await upFailing();
      expect(failed?.code).not.toBe(0);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("50 requests through Debian 12's proxy the moment up returned all succeeded: its runcmd's reload and sleep were over", async () => {
    expect(atOnce).toHaveLength(50);
    expect(atOnce.filter((s) => s !== "204")).toEqual([]);
    const agent = await agentFor(agents.libvirt("local"), RELEASES[0].name);
    expect(await agent.exists("/run/kvmp-runcmd-done")).toBe(true);
  });

  it.each(RELEASES.map((r) => [r.suite, r] as const))(
    "%s's stock image got squid and the agent from the namespace's mirror, none of their Recommends, and answers 407 without and 204 with the credentials",
    async (_suite, r) => {
      const agent = await agentFor(agents.libvirt("local"), r.name);
      for (const p of ["squid", "qemu-guest-agent"]) {
        expect((await agent.sh(`dpkg-query -W -f='\${Status}' ${p}`)).trim()).toBe("install ok installed");
      }
      const fetched = readFileSync(stock[r.key]?.log as string, "utf8");
      // apt asks a flat repository for ./<file>.
      expect(fetched).toMatch(/^200 \/(\.\/)?squid_[^ ]+\.deb$/m);
      expect(fetched).toMatch(/^200 \/(\.\/)?qemu-guest-agent_[^ ]+\.deb$/m);
      expect(fetched).not.toMatch(UNFETCHED_RECOMMENDS);
      const via = (credentials?: string) => through(`http://192.0.2.${r.n}:3128`, credentials);
      expect(await via()).toBe("407");
      expect(await via(CREDENTIALS)).toBe("204");
    },
  );

  it.each(RELEASES.map((r) => [r.suite, r] as const))(
    "%s has its static dual-stack NIC as network-config describes it, and its proxy answers on the IPv6 address",
    async (_suite, r) => {
      const agent = await agentFor(agents.libvirt("local"), r.name);
      const addrs = await agent.sh("ip -o addr show scope global | awk '{print $4}'");
      expect(addrs.split("\n").filter(Boolean).sort()).toEqual(
        [`192.0.2.${r.n}/24`, `2001:db8:14::${r.n}/64`].sort(),
      );
      const code = await through(`http://[2001:db8:14::${r.n}]:3128`, CREDENTIALS);
      expect(code).toBe("204");
    },
  );

  it("Debian 12's proxy speaks SOCKS5 too (Dante from the mirror): with the credentials it reaches the target; without them, from outside allowedClients, and to a private destination it is refused", async () => {
    const r = RELEASES[0];
    const agent = await agentFor(agents.libvirt("local"), r.name);
    expect((await agent.sh(`dpkg-query -W -f='\${Status}' dante-server`)).trim()).toBe(
      "install ok installed",
    );
    expect(readFileSync(stock[r.key]?.log as string, "utf8")).toMatch(
      /^200 \/(\.\/)?dante-server_[^ ]+\.deb$/m,
    );
    const log = (await agent.readFile("/var/log/cloud-init-output.log")).toString();
    expect(log).toMatch(/kvm-proxy-squid: SOCKS5 is listening on port 1080/);
    // The proxy user is a system account no login service admits: expired since 1970, no shell.
    const account = (await agent.sh(`getent passwd ${USER}; getent shadow ${USER} | cut -d: -f8`))
      .trim()
      .split("\n");
    expect(account[0]).toMatch(
      new RegExp(`^${USER}:x:\\d+:\\d+:pulumi-kvm-proxy socks:/nonexistent:/usr/sbin/nologin$`),
    );
    expect(account[1]).toBe("1");
    const out = ws.proxies().find((p) => p.outputs?.name === r.name)?.outputs;
    expect(out?.socksUrl).toBe(`socks5://192.0.2.${r.n}:1080`);
    const socks = (url: string, o: { credentials?: string; from?: string } = {}) =>
      requestThrough(env, `socks5h://192.0.2.${r.n}:1080`, url, { maxSeconds: 15, ...o }).then(
        (x) => x.status,
      );
    expect(await socks(env.targetUrl, { credentials: CREDENTIALS })).toBe("204");
    expect(await socks(env.targetUrl)).toBe("000");
    expect(await socks(env.targetUrl, { credentials: `${USER}:wrong-password-1` })).toBe("000");
    expect(await socks(env.targetUrl, { credentials: CREDENTIALS, from: OUTSIDE_CLIENT })).toBe("000");
    expect(await socks(env.inwardUrl, { credentials: CREDENTIALS })).toBe("000");
    expect(await socks(`http://192.0.2.${r.n}:3128/`, { credentials: CREDENTIALS })).toBe("000");
  });

  it("Debian 13's installs waited for the dpkg lock its user-data held 30 s past their start, and went on", async () => {
    const agent = await agentFor(agents.libvirt("local"), RELEASES[1].name);
    const held = (await agent.readFile("/run/kvmp-dpkg-lock-held")).toString().trim().split("\n").map(Number);
    expect(held).toHaveLength(2);
    expect((held[1] as number) - (held[0] as number)).toBeGreaterThanOrEqual(29);
    const log = (await agent.readFile("/var/log/cloud-init-output.log")).toString();
    expect(log).toMatch(/Waiting for cache lock|Could not get lock \/var\/lib\/dpkg\/lock-frontend/);
    expect(log).toMatch(/kvm-proxy-squid: squid is listening on port 3128/);
  });

  it("the failing user-data failed the create naming the modules, with the guest's own lines, and, with keepOnFailure, kept its VM, saying how to look at it and what removes it", async () => {
    expect(failed).toBeDefined();
    const out = failed?.output ?? "";
    expect(out).toMatch(/cloud-init finished the guest's first boot with errors in [^\n]*scripts_user/);
    expect(out).toMatch(/package_update_upgrade_install/);
    expect(out).toMatch(/last lines of \/var\/log\/cloud-init-output\.log in the guest:/);
    expect(out).toContain("kvmp-runcmd-about-to-fail");
    expect(out).not.toContain("kvmp-hunter3");
    expect(out).toContain(`the VM ${FAILING} on host local was kept for inspection (keepOnFailure)`);
    expect(out).toContain(`\`pulumi-kvm-proxy console local ${FAILING}\``);
    expect(out).toContain(`console ${FAILING}\``);
    expect(out).toContain(
      "the next `pulumi up` replaces it (deleting it first), `pulumi destroy` deletes it",
    );
    expect(allDomains(host)).toContain(FAILING);
    const kept = failing.proxies().find((p) => p.outputs?.name === FAILING)?.outputs;
    expect(kept?.keptAfterFailure).toMatchObject({
      reason: expect.stringMatching(/cloud-init finished the guest's first boot with errors in /),
    });
    expect(kept?.uuid).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("pulumi-kvm-proxy console prints the kept VM's cloud-init log, masked", () => {
    const r = consoleCommand("local", FAILING);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${FAILING} on host local: (running|degraded|provisioning)\n`));
    expect(r.stdout).toContain("last lines of /var/log/cloud-init-output.log in the guest:");
    expect(r.stdout).toContain("kvmp-runcmd-about-to-fail");
    expect(r.stdout).toContain("password: ***");
    expect(`${r.stdout}${r.stderr}`).not.toContain("kvmp-hunter3");
  });

  it("the kept VM is replaced by the next up, deleted first, and preview says why", async () => {
    const preview = await failingCli.run("preview");
    expect(preview.code, failureText(preview)).toBe(0);
    expect(preview.output).toMatch(
      /replace \(delete first\): the VM was kept for inspection after its create failed at \S+ \(keepOnFailure\)/,
    );
    expect(preview.output).toMatch(/\+-1 to replace/);
  });

  it("pulumi destroy removes the kept VM and its volumes", async () => {
    const r = await failingCli.run("destroy", "--yes", "--skip-preview");
    expect(r.code, failureText(r)).toBe(0);
    expect(allDomains(host)).not.toContain(FAILING);
    await refreshPoolByHand(host);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${FAILING}-`))).toEqual([]);
  });

  it("a guest without an agent that never got ready failed with its serial console's last lines, masked, once it powered off", async () => {
    const out = failed?.output ?? "";
    // The wait it was in (for its address, or the readiness gate) saw the VM stop.
    expect(out).toMatch(new RegExp(`domain ${SILENT} on host local is stopped while waiting for `));
    expect(out).toMatch(new RegExp(`${SILENT}[^]*last lines of the guest's serial console:`));
    expect(out).toContain("kvmp-console-marker");
    expect(out).toContain("password: ***");
    expect(out).not.toContain("console-hunter2");
    expect(allDomains(host)).not.toContain(SILENT);
  });

  it("pulumi destroy removes the stock proxies", async () => {
    await cli.must("destroy", "--yes", "--skip-preview");
    for (const r of RELEASES) expect(allDomains(host)).not.toContain(r.name);
  });
});
