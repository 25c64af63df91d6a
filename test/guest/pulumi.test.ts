/**
 * One KvmProxy with the real guest image through the real Pulumi CLI: up
 * (health check: a 204 through the guest's squid, with its credentials),
 * the proxy's access rules, refresh (degraded while squid is stopped),
 * destroy. Its user-data is the third format of the booted-guest tests, a
 * MIME multipart (boot.test.ts boots the cloud-config and the shell script
 * at the same time), gzip-compressed and given as userDataBase64: it must
 * reach the guest byte for byte through Pulumi's config, the state and the
 * seed. It says nothing about squid: the provider's vendor-data sets the
 * proxy up (authentication, an allowed client range, an outgoing address).
 *
 * The CLI runs INSIDE the test host's network namespace (`ip netns exec`).
 * The provider reaches libvirt over SSH at the namespace's own veth address,
 * health-checks the guest on the host's NAT network through that SSH
 * connection (healthCheck.via "host", the default there: the trace shows
 * the direct-tcpip channel), and
 * downloads the image over HTTP from a server on the namespace's loopback.
 * The test process itself talks to the guest only through the agent.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../provider/kvm/config/host-config";
import { HostPool } from "../../provider/kvm/host/hosts";
import { ImageCache } from "../../provider/kvm/host/image-cache";
import { squidPasswordHash } from "../../provider/kvm/proxy/password-hash";
import { buildProxySetupScript, type ProxySetup } from "../../provider/kvm/proxy/setup";
import {
  allDomains,
  deleteCachedImage,
  poolVolumes,
  proxyDiagnostics,
  removeByHand,
  vmVolumeNames,
  Workspace,
} from "../pulumi/harness";
import { refreshPoolByHand, type TestHost, testHost } from "../support/test-host";
import { testImage, testImageUrlFor } from "./images";
import { NetnsCli } from "./netns-cli";
import {
  agentFor,
  assertGuestAddress,
  type CloudInitOutcome,
  CREATE_TIMEOUT,
  expectVendorScriptRan,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  nvramFiles,
  poolFilesOf,
  proxyRequest,
  since,
  sshHostEntry,
  waitCloudInitDone,
} from "./support";

const env = inject("guest");
/** The test image's SHA-256 (read in beforeAll, once the image is built). */
let imageSha256 = "";
const NAME = `kvmpt-guest-pulumi-${process.pid}`;
const BOUNDARY = "===kvmp-guest-test-boundary===";
/** The proxy's credentials (the password from secret config, never in the program or the state). */
const PROXY_USER = "crawler";
const PROXY_PASSWORD = `pw-${process.pid}-S3cr3t!`;
/** The only client the proxy admits: the NAT gateway (where the CLI and the probes come from). */
const ALLOWED_CLIENT = env.gateway;
/** A second address of the namespace on the NAT bridge: a client outside allowedClients. */
const OUTSIDE_CLIENT = `${env.subnetPrefix}2`;
/** An address the guest adds to its NIC (outside the DHCP range): the proxy's outgoing address. */
const OUTGOING = `${env.subnetPrefix}5`;
/**
 * A MIME multipart user-data with nothing about squid: a cloud-config part
 * with its own packages: and runcmd: (the history's bug: vendor cloud-config
 * keys would be dropped by cloud-init's merge) and a shell-script part.
 */
const USER_DATA = [
  `Content-Type: multipart/mixed; boundary="${BOUNDARY}"`,
  "MIME-Version: 1.0",
  "",
  `--${BOUNDARY}`,
  'Content-Type: text/cloud-config; charset="us-ascii"',
  "MIME-Version: 1.0",
  "Content-Transfer-Encoding: 7bit",
  'Content-Disposition: attachment; filename="user.cfg"',
  "",
  "#cloud-config",
  "packages:",
  "  - openssh-server",
  "runcmd:",
  `  - [sh, -c, "ip addr add ${OUTGOING}/24 dev $(ip -o -4 route show default | awk '{print $5; exit}')"]`,
  '  - [sh, -c, "echo kvmp-user-runcmd-ran > /var/lib/kvmp-guest-test-runcmd"]',
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

const CREDENTIALS = `${PROXY_USER}:${PROXY_PASSWORD}`;
/** What the provider must have set the guest's squid up with (the seed carries the hash, never the password). */
function expectedSetup(): ProxySetup {
  const urn = `urn:pulumi:${ws.stack}::kvmpt-guest::pulumi-nodejs:dynamic:KvmProxy::edge`;
  return {
    port: 3128,
    auth: { username: PROXY_USER, passwordHash: squidPasswordHash(PROXY_PASSWORD, PROXY_USER, urn) },
    allowedClients: [`${ALLOWED_CLIENT}/32`],
    allowedDestinations: [],
    ownAddresses: [],
    onLink: [],
    outgoingAddress: OUTGOING,
  };
}

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

/** The CLI inside the namespace (made in beforeAll). */
let cli: NetnsCli;

function proxyOutputs(): Record<string, unknown> {
  const proxies = ws.proxies();
  expect(proxies).toHaveLength(1);
  return proxies[0]?.outputs ?? {};
}

const imageUrl = () => testImageUrlFor(env, "pulumi");

const cachedImage = () =>
  ImageCache.volumeName({
    url: imageUrl(),
    format: "qcow2",
    sha256: imageSha256,
  });

/** The proxy's arguments (the program's config), with `more` merged over them. */
function edgeArgs(more: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    host: "remote",
    image: "guest",
    name: NAME,
    // gzip-compressed, as binary user-data must be given: base64 (cloud-init decompresses it).
    userDataBase64: USER_DATA_GZIP.toString("base64"),
    memoryMiB: 768,
    vcpus: 1,
    diskGiB: 4,
    healthCheck: { url: env.targetUrl, expectStatus: 204 },
    timeouts: { create: CREATE_TIMEOUT },
    proxy: {
      auth: { username: PROXY_USER },
      allowedClients: [`${ALLOWED_CLIENT}/32`],
      outgoingAddress: OUTGOING,
    },
    proxyPasswordFromSecret: true,
    ...more,
  };
}

beforeAll(async () => {
  ({ sha256: imageSha256 } = await testImage(env));
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
      remote: sshHostEntry(host),
    },
    "kvm:images": { guest: { url: imageUrl(), sha256: imageSha256 } },
    "pair:proxies": { edge: edgeArgs() },
  });
  ws.setSecret("pair:proxyPassword", PROXY_PASSWORD);
  cli = new NetnsCli(env.netns, ws);
  // The client outside allowedClients: a second address of the namespace on the NAT bridge.
  execFileSync("ip", ["-n", env.netns, "addr", "replace", `${OUTSIDE_CLIENT}/32`, "dev", host.networkBridge]);
});

afterAll(async () => {
  console.log(
    `pulumi guest: ${JSON.stringify({ up: upOutputs ?? "pulumi up did not finish", cloudInit }, null, 2)}`,
  );
  await cli?.stopAll();
  // destroy reaches libvirt over SSH only (no guest traffic), so the root namespace is fine.
  if (allDomains(host).includes(NAME)) ws.cleanup();
  removeByHand(host, NAME);
  execFileSync("ip", ["-n", env.netns, "addr", "del", `${OUTSIDE_CLIENT}/32`, "dev", host.networkBridge], {
    stdio: "ignore",
  });
  deleteCachedImage(host, cachedImage());
  await agentPool.closeAll();
}, 300_000);

describe("a KvmProxy on the real guest image, through the Pulumi CLI", () => {
  it(
    "pulumi up boots it, downloads the image over HTTP and passes the 204 health check, showing its progress",
    async () => {
      const t0 = performance.now();
      const events = path.join(ws.dir, "up-events.jsonl");
      await cli.mustWatched(["up", "--yes", "--skip-preview", "--event-log", events], {
        guests: [new GuestProgress(agentPool.libvirt("local"), NAME)],
        stallMs: GUEST_STALL_MS,
        ceilingMs: GUEST_CEILING_MS,
      });
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
      // The squid answers the target's 204 to the allowed client with the credentials (probed inside the namespace).
      expect((await proxyRequest(env, ip, env.targetUrl, { credentials: CREDENTIALS })).status).toBe("204");
      // The URL with the credentials is a secret output; the plain one carries none.
      expect(ws.outputs().urlsWithCredentials).toEqual({
        edge: `http://${PROXY_USER}:${encodeURIComponent(PROXY_PASSWORD)}@${ip}:3128`,
      });
      expect(String(out.proxyUrl)).not.toContain(PROXY_PASSWORD);
      // The image came from the HTTP server, into the host's cache, under its URL's entry.
      expect(poolVolumes(host)).toContain(cachedImage());
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("the gzip-compressed MIME multipart given as userDataBase64 reaches the guest byte for byte, and both parts were applied", async () => {
    const agent = await agentFor(agentPool.libvirt("local"), NAME);
    // The create waited for cloud-init already: this wait is a formality, failing on a stall of the guest.
    const progress = new GuestProgress(agentPool.libvirt("local"), NAME, { agent: true });
    cloudInit = await waitCloudInitDone(
      agent,
      progress.bounds({ stallMs: GUEST_STALL_MS, ceilingMs: 10 * 60_000 }),
    );
    // cloud-init keeps the user-data as the datasource gave it: the gzip bytes.
    const userData = await agent.readFile("/var/lib/cloud/instance/user-data.txt");
    expect(userData.equals(USER_DATA_GZIP)).toBe(true);
    expect(gunzipSync(userData).toString("utf8")).toBe(USER_DATA);
    expect((await agent.readFile("/var/lib/kvmp-guest-test-mime")).toString()).toBe(
      `mime-script-part-${process.pid}\n`,
    );
    expect((await agent.readFile("/var/lib/kvmp-guest-test-runcmd")).toString()).toBe(
      "kvmp-user-runcmd-ran\n",
    );
  });

  it("gets the guest-agent script and the proxy setup as vendor-data, both ran, and cloud-init finishes without errors", async () => {
    expect(cloudInit).toBeDefined();
    const agent = await agentFor(agentPool.libvirt("local"), NAME);
    await expectVendorScriptRan(agent, cloudInit as CloudInitOutcome, buildProxySetupScript(expectedSetup()));
  });

  describe("the proxy the provider set up, whatever the user-data", () => {
    it("asks a client without credentials for them (407) and admits it with them", async () => {
      const ip = upOutputs?.ip as string;
      const bare = await proxyRequest(env, ip, env.targetUrl);
      expect(bare.status).toBe("407");
      const wrong = await proxyRequest(env, ip, env.targetUrl, { credentials: `${PROXY_USER}:wrong` });
      expect(wrong.status).toBe("407");
      expect((await proxyRequest(env, ip, env.targetUrl, { credentials: CREDENTIALS })).status).toBe("204");
    });

    it("refuses a client outside allowedClients (403), even with the credentials", async () => {
      const ip = upOutputs?.ip as string;
      const outside = await proxyRequest(env, ip, env.targetUrl, {
        credentials: CREDENTIALS,
        from: OUTSIDE_CLIENT,
      });
      expect(outside.status).toBe("403");
    });

    it("goes outward only: with the credentials, a private address, a CONNECT to a private :443, the VM's own address, its gateway and the metadata address are refused", async () => {
      const ip = upOutputs?.ip as string;
      const refused = async (url: string, connect = false) =>
        (await proxyRequest(env, ip, url, { credentials: CREDENTIALS, connect })).status;
      // Positive control: the private target answers inside the namespace; through the proxy the outward one does.
      expect((await proxyRequest(env, ip, env.targetUrl, { credentials: CREDENTIALS })).status).toBe("204");
      expect(await refused(env.inwardUrl)).toBe("403");
      expect(await refused(`http://${env.inwardTlsAddress}/`, true)).toBe("403");
      expect(await refused(`http://${ip}:8080/`)).toBe("403");
      expect(await refused(`http://${env.gateway}:8080/`)).toBe("403");
      expect(await refused("http://169.254.169.254/latest/meta-data/")).toBe("403");
    });

    it("connects out from outgoingAddress: the target sees that source", async () => {
      const ip = upOutputs?.ip as string;
      const r = await proxyRequest(env, ip, env.whoamiUrl, { credentials: CREDENTIALS });
      expect(r).toMatchObject({ status: "200", body: OUTGOING });
    });

    it("keeps the password out of the state and the seed: only its salted hash is on the host", () => {
      expect(ws.stateText()).not.toContain(PROXY_PASSWORD);
      const seed = readFileSync(path.join(host.poolPath, vmVolumeNames(host, NAME)[1] as string));
      expect(seed.includes(Buffer.from(PROXY_PASSWORD))).toBe(false);
      expect(seed.includes(Buffer.from(`${PROXY_USER}:${expectedSetup().auth?.passwordHash}`))).toBe(true);
    });

    it("shows as degraded at the next refresh while squid is stopped, and running again once it is back", async () => {
      const agent = await agentFor(agentPool.libvirt("local"), NAME);
      await agent.sh("systemctl stop squid");
      await cli.must("refresh", "--yes", "--skip-preview");
      const down = proxyOutputs();
      expect(down.state).toBe("degraded");
      expect(down.health).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/ECONNREFUSED|not as squid/),
      });
      await agent.sh("systemctl start squid");
      await cli.must("refresh", "--yes", "--skip-preview");
      const back = proxyOutputs();
      expect(back.state).toBe("running");
      expect(back.health).toMatchObject({ ok: true });
    });
  });

  it("pulumi refresh shows it running with its IP, and its health probe, through the host, adds no libvirt call", async () => {
    expect(upOutputs).toBeDefined();
    const trace = path.join(ws.dir, "refresh.trace");
    cli.extraEnv = { KVMP_TRACE_FILE: trace };
    const r = await cli.must("refresh", "--yes", "--skip-preview").finally(() => {
      cli.extraEnv = {};
    });
    expect(r.output).not.toMatch(/deleted/);
    const out = proxyOutputs();
    expect(out.state).toBe("running");
    expect(out.health).toMatchObject({ ok: true });
    expect(out.ipAddress).toBe(upOutputs?.ip);
    expect(out.proxyUrl).toBe(`http://${upOutputs?.ip}:3128`);
    // The state by the recorded UUID, the live XML, the addresses (agent): the probe went to the guest, not libvirt.
    const handshake = new Set([
      "virAuthList",
      "virConnectOpen",
      "virConnectClose",
      "virConnectSupportsFeature",
    ]);
    const traced = readFileSync(trace, "utf8");
    // The probe went through the host's SSH connection (healthCheck.via is "host" on its NAT network).
    const ip = String(upOutputs?.ip).replaceAll(".", "\\.");
    expect(traced).toMatch(new RegExp(`^tcp=direct-tcpip host=remote to=${ip}:3128 [0-9.]+ms$`, "m"));
    const calls = traced
      .split("\n")
      .flatMap((l) => /^rpc=(\S+) /.exec(l)?.slice(1) ?? [])
      .filter((c) => !handshake.has(c));
    expect(calls.sort()).toEqual(["virDomainGetState", "virDomainGetXMLDesc", "virDomainInterfaceAddresses"]);
  });

  it("an egressCheck added is an update in place: the echo inside the namespace saw the outgoing address (asked inside the guest: the proxy has auth), at up and at refresh", async () => {
    ws.setConfig({ "pair:proxies": { edge: edgeArgs({ egressCheck: { url: env.whoamiUrl } }) } });
    const preview = await cli.must("preview", "--diff");
    expect(preview.output).toMatch(/~ pulumi-nodejs:dynamic:KvmProxy: \(update\)/);
    expect(preview.output).toMatch(/\+ egressCheck +: \{/);
    expect(preview.output).not.toMatch(/\+-|replace/);
    const up = await cli.must("up", "--yes", "--skip-preview");
    expect(up.output).not.toMatch(/egress check failed|saw the proxy's requests come from/);
    expect(proxyOutputs()).toMatchObject({ egressAddress: OUTGOING, domainName: NAME, state: "running" });
    const refresh = await cli.must("refresh", "--yes", "--skip-preview");
    expect(refresh.output).not.toMatch(/egress check failed|saw the proxy's requests come from/);
    expect(proxyOutputs()).toMatchObject({ egressAddress: OUTGOING });
  });

  it("pulumi destroy leaves no domain, no per-VM volume and no NVRAM file", async () => {
    expect(allDomains(host)).toContain(NAME);
    // UEFI (the default firmware): libvirt made an NVRAM file for it.
    expect(nvramFiles(host, NAME)).toEqual([`${NAME}_VARS.fd`]);
    await cli.must("destroy", "--yes", "--skip-preview");
    expect(ws.proxies()).toEqual([]);
    expect(allDomains(host)).not.toContain(NAME);
    await refreshPoolByHand(host);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${NAME}-`))).toEqual([]);
    expect(poolFilesOf(host, NAME)).toEqual([]);
    expect(nvramFiles(host, NAME)).toEqual([]);
  });
});
