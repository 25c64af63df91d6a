/**
 * One KvmProxy with the real guest image through the real Pulumi CLI: up
 * (health check: a 204 through the guest's squid), refresh, destroy. Its
 * user-data is the third format of the booted-guest tests, a MIME multipart
 * (boot.test.ts boots the cloud-config and the shell script at the same
 * time): it must reach the guest byte for byte through Pulumi's config, the
 * state and the seed.
 *
 * The CLI runs INSIDE the test host's network namespace (`ip netns exec`),
 * so the provider's health check to the guest's address stays there. The
 * provider reaches libvirt over SSH at the namespace's own veth address and
 * downloads the image over HTTP from a server on the namespace's loopback.
 * The test process itself talks to the guest only through the agent.
 */
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config";
import { HostPool } from "../../provider/kvm/host/hosts";
import { ImageCache } from "../../provider/kvm/host/image-cache";
import {
  allDomains,
  poolVolumes,
  proxyDiagnostics,
  pulumiEnv,
  type RunResult,
  removeByHand,
  virsh,
  virshQuiet,
  Workspace,
} from "../pulumi/harness";
import { type TestHost, testHost } from "../support/test-host";
import {
  agentFor,
  assertGuestAddress,
  type CloudInitOutcome,
  expectVendorScriptRan,
  nvramFiles,
  poolFilesOf,
  proxyStatus,
  since,
  waitCloudInitDone,
} from "./support";

const env = inject("guest");
const NAME = `kvmpt-guest-pulumi-${process.pid}`;
const BOUNDARY = "===kvmp-guest-test-boundary===";
/** A MIME multipart user-data: a cloud-config part (squid for the NAT network) and a shell-script part. */
const USER_DATA = [
  `Content-Type: multipart/mixed; boundary="${BOUNDARY}"`,
  "MIME-Version: 1.0",
  "",
  `--${BOUNDARY}`,
  'Content-Type: text/cloud-config; charset="us-ascii"',
  "MIME-Version: 1.0",
  "Content-Transfer-Encoding: 7bit",
  'Content-Disposition: attachment; filename="squid.cfg"',
  "",
  "#cloud-config",
  "write_files:",
  "  - path: /etc/squid/conf.d/kvmp-guest-test.conf",
  "    content: |",
  "      http_access allow localnet",
  "runcmd:",
  '  - [sh, -c, "systemctl reload squid || systemctl restart squid"]',
  "",
  `--${BOUNDARY}`,
  'Content-Type: text/x-shellscript; charset="us-ascii"',
  "MIME-Version: 1.0",
  "Content-Transfer-Encoding: 7bit",
  'Content-Disposition: attachment; filename="marker.sh"',
  "",
  "#!/bin/sh",
  `echo mime-script-part-${process.pid} > /var/lib/kvmp-guest-test-mime`,
  "",
  `--${BOUNDARY}--`,
  "",
].join("\n");

/** The user-data as given: gzip of the MIME multipart (deterministic bytes: no name, mtime 0). */
const USER_DATA_GZIP = gzipSync(Buffer.from(USER_DATA, "utf8"));

let host: TestHost;
let ws: Workspace;
/** A libvirt client of the test's own (unix socket), for the guest agent. */
let agentPool: HostPool;
/** What `pulumi up` reported. */
let upOutputs: { ip: string; seconds: number } | undefined;
/** cloud-init's outcome in the guest. */
let cloudInit: CloudInitOutcome | undefined;

/** CLI runs not finished yet (stopped by PID in afterAll, e.g. after a test timed out). */
const running = new Set<ChildProcess>();

/** Runs the Pulumi CLI inside the namespace, asynchronously (the CLI waits on a guest boot). */
function pulumiInNetns(...args: string[]): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      "ip",
      [
        "netns",
        "exec",
        env.netns,
        "pulumi",
        ...args,
        "--stack",
        ws.stack,
        "--non-interactive",
        "--color",
        "never",
      ],
      {
        cwd: ws.dir,
        // PULUMI_DEBUG_COMMANDS enables --event-log.
        env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}`, PULUMI_DEBUG_COMMANDS: "true" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    running.add(child);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.once("error", reject);
    child.once("close", (code) => {
      running.delete(child);
      resolve({ code: code ?? -1, stdout, stderr, output: `${stdout}\n${stderr}` });
    });
  });
}

async function mustPulumi(...args: string[]): Promise<RunResult> {
  const r = await pulumiInNetns(...args);
  if (r.code !== 0) throw new Error(`pulumi ${args.join(" ")} exited ${r.code}:\n${r.output}`);
  return r;
}

function proxyOutputs(): Record<string, unknown> {
  const proxies = ws.proxies();
  expect(proxies).toHaveLength(1);
  return proxies[0]?.outputs ?? {};
}

const cachedImage = () =>
  ImageCache.volumeName({
    url: env.imageUrlInNetns,
    format: "qcow2",
    sha256: env.imageSha256,
  });

beforeAll(() => {
  host = testHost();
  removeByHand(host, NAME);
  agentPool = new HostPool(
    parseConfig({
      hosts: { local: { uri: `unix://${host.socketPath}`, pool: host.poolName, network: host.network } },
    }).hosts,
  );
  ws = new Workspace("guest", { name: "kvmpt-guest", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    "kvm:hosts": {
      remote: {
        uri: `ssh://${host.sshUser}@${host.address}:${host.sshPort}`,
        privateKeyPath: host.sshKeyPath,
        knownHostsPath: host.knownHostsPath,
        domainType: "qemu",
        pool: host.poolName,
        network: host.network,
      },
    },
    "kvm:images": { guest: { url: env.imageUrlInNetns, sha256: env.imageSha256 } },
    "pair:proxies": {
      edge: {
        host: "remote",
        image: "guest",
        name: NAME,
        // gzip-compressed, as binary user-data must be given: base64 (cloud-init decompresses it).
        userDataBase64: USER_DATA_GZIP.toString("base64"),
        memoryMiB: 768,
        vcpus: 1,
        diskGiB: 4,
        healthCheck: { url: env.targetUrl, expectStatus: 204 },
        timeouts: { create: "14m" },
      },
    },
  });
});

afterAll(async () => {
  console.log(
    `pulumi guest: ${JSON.stringify({ up: upOutputs ?? "pulumi up did not finish", cloudInit }, null, 2)}`,
  );
  for (const child of running) {
    const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
    // SIGINT: the CLI cancels the update gracefully; SIGKILL if it does not end.
    if (child.pid !== undefined) process.kill(child.pid, "SIGINT");
    const timer = setTimeout(() => child.pid !== undefined && process.kill(child.pid, "SIGKILL"), 60_000);
    await closed;
    clearTimeout(timer);
  }
  // destroy reaches libvirt over SSH only (no guest traffic), so the root namespace is fine.
  if (allDomains(host).includes(NAME)) ws.cleanup();
  removeByHand(host, NAME);
  virshQuiet(host, "vol-delete", "--pool", host.poolName, cachedImage());
  virshQuiet(host, "vol-delete", "--pool", host.poolName, `${cachedImage()}.partial`);
  await agentPool.closeAll();
}, 300_000);

describe("a KvmProxy on the real guest image, through the Pulumi CLI", () => {
  it("pulumi up boots it, downloads the image over HTTP and passes the 204 health check, showing its progress", async () => {
    const t0 = performance.now();
    const events = path.join(ws.dir, "up-events.jsonl");
    await mustPulumi("up", "--yes", "--skip-preview", "--event-log", events);
    const seconds = since(t0);

    // Status lines for the upload and both waits reached the engine, on the proxy's URN.
    const statuses = proxyDiagnostics(events).filter((d) => d.ephemeral);
    expect(statuses.map((d) => d.urn)).toEqual(statuses.map(() => expect.stringMatching(/::edge$/)));
    const messages = statuses.map((d) => d.message);
    expect(messages).toContainEqual(expect.stringMatching(/^uploading the image: \d+ of \d+ MiB/));
    expect(messages).toContainEqual(expect.stringMatching(/^waiting for the guest's IP address \(\d+s\)$/));
    expect(messages).toContainEqual(
      expect.stringMatching(/^waiting for the proxy to pass its health check \(\d+s\)$/),
    );

    const out = proxyOutputs();
    expect(out.state).toBe("running");
    expect(out.domainName).toBe(NAME);
    const ip = assertGuestAddress(env, out.ipAddress as string | undefined);
    expect(out.proxyUrl).toBe(`http://${ip}:3128`);
    upOutputs = { ip, seconds };

    // The guest's agent reports that address.
    const agent = await agentFor(agentPool.libvirt("local"), NAME);
    expect(await agent.ipv4Addresses()).toContain(ip);
    // The squid answers the target's 204 (probed inside the namespace).
    expect(await proxyStatus(env, ip)).toBe("204");
    // The image came from the HTTP server, into the host's cache, under its URL's entry.
    expect(poolVolumes(host)).toContain(cachedImage());
  });

  it("the gzip-compressed MIME multipart given as userDataBase64 reaches the guest byte for byte, and both parts were applied", async () => {
    const agent = await agentFor(agentPool.libvirt("local"), NAME);
    cloudInit = await waitCloudInitDone(agent, 600_000);
    // cloud-init keeps the user-data as the datasource gave it: the gzip bytes.
    const userData = await agent.readFile("/var/lib/cloud/instance/user-data.txt");
    expect(userData.equals(USER_DATA_GZIP)).toBe(true);
    expect(gunzipSync(userData).toString("utf8")).toBe(USER_DATA);
    expect((await agent.readFile("/var/lib/kvmp-guest-test-mime")).toString()).toBe(
      `mime-script-part-${process.pid}\n`,
    );
    expect((await agent.readFile("/etc/squid/conf.d/kvmp-guest-test.conf")).toString()).toBe(
      "http_access allow localnet\n",
    );
  });

  it("gets the guest-agent script as vendor-data, and cloud-init finishes without errors", async () => {
    expect(cloudInit).toBeDefined();
    const agent = await agentFor(agentPool.libvirt("local"), NAME);
    await expectVendorScriptRan(agent, cloudInit as CloudInitOutcome);
  });

  it("pulumi refresh shows it running with its IP", async () => {
    expect(upOutputs).toBeDefined();
    const r = await mustPulumi("refresh", "--yes", "--skip-preview");
    expect(r.output).not.toMatch(/deleted/);
    const out = proxyOutputs();
    expect(out.state).toBe("running");
    expect(out.ipAddress).toBe(upOutputs?.ip);
    expect(out.proxyUrl).toBe(`http://${upOutputs?.ip}:3128`);
  });

  it("pulumi destroy leaves no domain, no per-VM volume and no NVRAM file", async () => {
    expect(allDomains(host)).toContain(NAME);
    // UEFI (the default firmware): libvirt made an NVRAM file for it.
    expect(nvramFiles(host, NAME)).toEqual([`${NAME}_VARS.fd`]);
    await mustPulumi("destroy", "--yes", "--skip-preview");
    expect(ws.proxies()).toEqual([]);
    expect(allDomains(host)).not.toContain(NAME);
    virsh(host, "pool-refresh", host.poolName);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${NAME}-`))).toEqual([]);
    expect(poolFilesOf(host, NAME)).toEqual([]);
    expect(nvramFiles(host, NAME)).toEqual([]);
  });
});
