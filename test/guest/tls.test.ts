/**
 * TLS to the proxy with a booted guest, through the real Pulumi CLI run
 * inside the test host's namespace: one proxy with auth and `proxy.tls: {}`
 * on the namespace's bridge (a static address), its certificate issued at
 * create by the CA made for it. The same guest boots with BIOS firmware from
 * a shell-script user-data, which reaches it byte for byte and runs beside
 * the provider's vendor scripts (boot.test.ts boots UEFI from a
 * cloud-config: one guest fewer than a boot of each there). Its health check (squid's own answer over
 * TLS from here, then the URL inside the guest) and its egress check pass
 * at create. From the namespace, while a capture runs on the bridge: curl
 * with `--proxy https://` and the CA output gets 407 without credentials
 * and the target's answer with them, plainly and through CONNECT; a client
 * without the CA, and a plain-HTTP request to the port, get nothing; Go's
 * net/http through the https proxy URL with credentials gets the target's
 * answer. The capture holds no Proxy-Authorization header and no form of
 * the password. The next preview shows no change (the CA is kept), and the
 * CA's key is in no output and nowhere in the state as plain text.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  cacheVolumeOfImage,
  deleteCachedImage,
  hostsConfig,
  removeByHand,
  Workspace,
} from "../pulumi/harness";
import { type StaticBridge, staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import { done, pending, waitUntil } from "../support/wait-until";
import { testImage, testImageUrlFor } from "./images";
import { NetnsCli } from "./netns-cli";
import {
  agentFor,
  CREATE_TIMEOUT,
  expectVendorScriptRan,
  GUEST_CEILING_MS,
  GUEST_STALL_MS,
  GUEST_TEST_TIMEOUT_MS,
  GuestProgress,
  nvramFiles,
  testHostLibvirt,
  waitCloudInitDone,
} from "./support";

const env = inject("guest");
const IMAGE_URL = testImageUrlFor(env, "tls");
const NAME = `kvmpt-tls-${process.pid}`;
const USER = "crawler";
/** Characters URLs encode, so that every form of it is searched for. */
const PASSWORD = "kvmpt-tls-pw:@#%/Zq81";
/** Credentials sent in plain HTTP once, to show the capture would see them. */
const CONTROL = "control:capture-sees-plain-text";
/** The proxy's address on the namespace's bridge (not .224-.254, which other files use). */
const ADDRESS = "192.0.2.13";
/** A shell-script user-data (a tab, no trailing newline), kept byte for byte; it leaves squid alone. */
const SCRIPT_USER_DATA = `#!/bin/sh
# kvmp TLS guest ${process.pid}: a shell-script user-data\t(tab)
set -e
echo user-script > /var/lib/kvmp-guest-test-script
exit 0`;

let host: TestHost;
let bridge: StaticBridge;
let ws: Workspace;
let cli: NetnsCli;
let dir: string;
let caFile: string;
let capture: ChildProcess | undefined;
let goClient: string;

/** Every form a leak of the password would take on the wire. */
const passwordForms = () => [
  PASSWORD,
  encodeURIComponent(PASSWORD),
  Buffer.from(`${USER}:${PASSWORD}`).toString("base64"),
];

const proxyUrl = () => `https://${ADDRESS}:3128`;

/** curl through the proxy from the namespace, trusting `ca` (a file) unless undefined. */
function curlThrough(
  url: string,
  o: { ca?: string; credentials?: boolean; user?: string; connect?: boolean; proxy?: string },
) {
  const args = [
    "netns",
    "exec",
    env.netns,
    "curl",
    "-s",
    "-o",
    "/dev/null",
    "--max-time",
    "20",
    "--noproxy",
    "",
  ];
  args.push("-w", o.connect ? "%{http_connect}" : "%{http_code}");
  if (o.ca !== undefined) args.push("--proxy-cacert", o.ca);
  if (o.credentials) args.push("--proxy-user", `${USER}:${PASSWORD}`);
  if (o.user !== undefined) args.push("--proxy-user", o.user);
  if (o.connect) args.push("-p");
  args.push("-x", o.proxy ?? proxyUrl(), url);
  try {
    return { status: execFileSync("ip", args, { encoding: "utf8", timeout: 40_000 }).trim(), exit: 0 };
  } catch (err) {
    const e = err as { stdout?: string; status?: number };
    return { status: (e.stdout ?? "").trim() || "000", exit: e.status ?? -1 };
  }
}

/** A Go client (net/http, the standard library only) that GETs argv[3] through the proxy argv[1], trusting the CA file argv[2]. */
const GO_CLIENT = `package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

func main() {
	proxy, err := url.Parse(os.Args[1])
	if err != nil {
		panic(err)
	}
	pem, err := os.ReadFile(os.Args[2])
	if err != nil {
		panic(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	res, err := client.Get(os.Args[3])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(res.StatusCode)
}
`;

beforeAll(async () => {
  const { sha256 } = await testImage(env);
  host = testHost();
  bridge = staticBridgeOf(host);
  removeByHand(host, NAME);
  dir = mkdtempSync(path.join(tmpdir(), "kvmpt-tls-"));
  // Built while the guest boots: the standard library only, no module download.
  writeFileSync(path.join(dir, "main.go"), GO_CLIENT);
  goClient = path.join(dir, "client");
  const building = new Promise<void>((resolve, reject) => {
    const go = spawn("go", ["build", "-o", goClient, "main.go"], {
      cwd: dir,
      env: { ...process.env, GOPROXY: "off", GO111MODULE: "off", CGO_ENABLED: "0" },
      stdio: "ignore",
    });
    go.once("error", reject);
    go.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`go build exited ${code}`))));
  });
  ws = new Workspace("guest-tls", { name: "kvmpt-guest-tls", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    "kvm:hosts": hostsConfig(host, ["local"])["kvm:hosts"],
    "kvm:images": { guest: { url: IMAGE_URL, sha256, firmware: "bios" } },
    "pair:exportUrlsWithCredentials": false,
    "pair:proxies": {
      edge: {
        host: "local",
        image: "guest",
        name: NAME,
        memoryMiB: 768,
        diskGiB: 4,
        userData: SCRIPT_USER_DATA,
        timeouts: { create: CREATE_TIMEOUT },
        nics: [
          {
            bridge: bridge.name,
            addresses: [`${ADDRESS}/${bridge.prefix4}`],
            gateway4: bridge.address4,
            primary: true,
          },
        ],
        proxy: {
          auth: { username: USER },
          allowedClients: [`${bridge.address4}/32`],
          tls: {},
        },
        proxyPasswordFromSecret: true,
        // Asked inside the guest (auth): through squid's loopback listener, which speaks no TLS.
        healthCheck: { url: env.targetUrl, expectStatus: 204 },
        egressCheck: { url: env.whoamiUrl },
      },
    },
  });
  ws.setSecret("pair:proxyPassword", PASSWORD);
  cli = new NetnsCli(env.netns, ws);
  await building;
}, 300_000);

afterAll(async () => {
  capture?.kill("SIGKILL");
  await cli?.stopAll();
  ws?.cleanup();
  if (host !== undefined) removeByHand(host, NAME);
  if (host !== undefined) deleteCachedImage(host, cacheVolumeOfImage({ url: IMAGE_URL }));
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
}, 300_000);

/** The proxy's state: its outputs. */
const outputs = () => ws.proxies().find((p) => p.outputs?.name === NAME)?.outputs ?? {};

describe("a proxy with proxy.tls on a booted guest", () => {
  it(
    "pulumi up creates it healthy: squid answered the health check over TLS, the egress check too",
    async () => {
      const libvirt = testHostLibvirt(host);
      const up = await cli
        .watched(["up", "--yes", "--skip-preview"], {
          guests: [new GuestProgress(libvirt.lv, NAME)],
          stallMs: GUEST_STALL_MS,
          ceilingMs: GUEST_CEILING_MS,
        })
        .finally(() => libvirt.close());
      expect(up.code, up.output.slice(-6000)).toBe(0);
      const o = outputs();
      expect(o.proxyUrl).toBe(proxyUrl());
      expect(o.health).toMatchObject({ ok: true });
      expect(o.egressAddress).toBe(ADDRESS);
      expect(o.proxyCaCertificate).toMatch(/^-----BEGIN CERTIFICATE-----/);
      caFile = path.join(dir, "ca.pem");
      writeFileSync(caFile, o.proxyCaCertificate as string);
    },
    GUEST_TEST_TIMEOUT_MS,
  );

  it("curl --proxy https:// with the CA: 407 without credentials, the target's answer with them, plainly and by CONNECT; a capture on the bridge holds no credentials", async () => {
    const pcap = path.join(dir, "bridge.pcap");
    const control = `Proxy-Authorization: Basic ${Buffer.from(CONTROL).toString("base64")}`;
    const captured = () => readFileSync(pcap, { flag: "a+" });
    let said = "";
    capture = spawn(
      "ip",
      [
        "netns",
        "exec",
        env.netns,
        "tcpdump",
        "-i",
        bridge.name,
        "-U",
        "-w",
        pcap,
        "-s",
        "0",
        "host",
        ADDRESS,
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    capture.stderr?.on("data", (b: Buffer) => {
      said += b.toString();
    });
    // Until tcpdump says it listens: a request sent before would pass unseen.
    await waitUntil({
      what: "tcpdump to listen on the bridge",
      check: () => (said.includes("listening on") ? done(true) : pending(said.trim() || undefined)),
      progress: () => said,
      stallMs: 60_000,
      ceilingMs: 120_000,
      pollMs: 100,
    });
    try {
      expect(curlThrough(env.targetUrl, { ca: caFile })).toMatchObject({ status: "407" });
      expect(curlThrough(env.targetUrl, { ca: caFile, credentials: true })).toMatchObject({ status: "204" });
      // A tunnel to port 443 of the target (squid opens CONNECT to 443 only; the server there speaks HTTP).
      const tunnel = env.targetUrl.replace(/:(\d+)\/$/, ":443/");
      expect(curlThrough(tunnel, { ca: caFile, credentials: true, connect: true })).toMatchObject({
        status: "200",
      });
      // Positive control: credentials sent in plain HTTP to the same port are in the capture. It is the
      // last request: once the capture holds it, it holds every packet before it.
      curlThrough(env.targetUrl, { proxy: `http://${ADDRESS}:3128`, user: CONTROL });
      await waitUntil({
        what: "the capture to hold the control's plain-text request",
        check: () => (captured().includes(Buffer.from(control)) ? done(true) : pending()),
        progress: () => captured().length,
        stallMs: 30_000,
        ceilingMs: 120_000,
        pollMs: 200,
      });
    } finally {
      capture.kill("SIGINT");
      await new Promise((r) => capture?.once("close", r));
      capture = undefined;
    }
    const wire = readFileSync(pcap);
    // The capture saw the exchanges (the proxy's TLS records), and nothing readable of the credentials.
    expect(wire.length).toBeGreaterThan(4_000);
    // Only the control's request, in plain HTTP, shows a Proxy-Authorization; no form of the password shows.
    expect(wire.includes(Buffer.from(control))).toBe(true);
    expect(wire.toString("latin1").split("Proxy-Authorization").length - 1).toBe(1);
    for (const form of passwordForms()) expect(wire.includes(Buffer.from(form)), form).toBe(false);
  });

  it("a client that does not trust the CA, and a plain-HTTP request to the TLS port, get nothing", () => {
    // curl: 60, the peer's certificate cannot be verified.
    expect(curlThrough(env.targetUrl, { credentials: true })).toMatchObject({ status: "000", exit: 60 });
    // squid's TLS port reads the request as a broken handshake and closes the connection: no HTTP answer.
    expect(curlThrough(env.targetUrl, { credentials: true, proxy: `http://${ADDRESS}:3128` }).status).toBe(
      "000",
    );
  });

  it("Go's net/http through the https proxy URL with credentials gets the target's answer", () => {
    const withCredentials = `https://${USER}:${encodeURIComponent(PASSWORD)}@${ADDRESS}:3128`;
    const out = execFileSync(
      "ip",
      ["netns", "exec", env.netns, goClient, withCredentials, caFile, env.targetUrl],
      {
        encoding: "utf8",
        timeout: 60_000,
      },
    );
    expect(out.trim()).toBe("204");
  });

  it("booted under BIOS from a shell-script user-data: it reached the guest byte for byte and ran, and so did the provider's vendor scripts; no EFI in the guest, no NVRAM file on the host", async () => {
    const libvirt = testHostLibvirt(host);
    try {
      const agent = await agentFor(libvirt.lv, NAME);
      // The create waited for cloud-init already: this wait is a formality, failing on a stall of the guest.
      const progress = new GuestProgress(libvirt.lv, NAME, { agent: true });
      const cloudInit = await waitCloudInitDone(
        agent,
        progress.bounds({ stallMs: GUEST_STALL_MS, ceilingMs: 10 * 60_000 }),
      );
      const userData = await agent.readFile("/var/lib/cloud/instance/user-data.txt");
      expect(userData.equals(Buffer.from(SCRIPT_USER_DATA, "utf8"))).toBe(true);
      expect((await agent.readFile("/var/lib/kvmp-guest-test-script")).toString()).toBe("user-script\n");
      await expectVendorScriptRan(
        agent,
        cloudInit,
        /^#!\/bin\/sh\n# pulumi-kvm-proxy: squid as the VM's forward proxy/,
      );
      expect(await agent.exists("/sys/firmware/efi")).toBe(false);
      expect(nvramFiles(host, NAME)).toEqual([]);
    } finally {
      await libvirt.close();
    }
  });

  it("the CA's key is in no output and in the state only encrypted; the next preview shows no change", async () => {
    const state = ws.stateText();
    const ca = outputs().proxyCaCertificate as string;
    expect(state).toContain(ca.split("\n")[1]);
    expect(JSON.stringify(outputs())).not.toMatch(/PRIVATE KEY/);
    expect(state).not.toMatch(/BEGIN PRIVATE KEY|BEGIN EC PRIVATE KEY/);
    await cli.must("preview", "--expect-no-changes");
  });

  it("pulumi destroy removes it", async () => {
    await cli.must("destroy", "--yes", "--skip-preview");
    expect(ws.proxies()).toEqual([]);
  });
});
