import { type ChildProcess, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { startServer, stopServer } from "../support/netns-http";
import { preparePulumi } from "../support/prepare-pulumi";
import { sha256File } from "../support/sha256-file";
import { repoRoot, targetsOf, testHost } from "../support/test-host";
import { prebuildStock } from "./stock-images";
import type { GuestEnv } from "./support";

/**
 * What the `guest` project needs beyond the test host (started first by
 * test/support/global-setup.ts):
 *
 * - the guest image (`scripts/guest-image build`: a no-op when the recipe's
 *   image exists, a build otherwise; a failed build fails the run loudly);
 * - dist/ and the package link for the repo's Pulumi programs, and the Pulumi
 *   CLI (as the `pulumi` project's setup does);
 * - tiny HTTP servers, all INSIDE the test host's network namespace: the
 *   proxy targets on the namespace's outward target address (203.0.113.80,
 *   which the proxies treat as the internet: a 204, a whoami, and a 204 on
 *   443 for CONNECT), a 204 on its inward (private) address, on a port of
 *   its own and on 443, which the proxies must refuse, and the image served to the provider over HTTP
 *   on the namespace's veth address (reached from the root namespace, where
 *   the vitest workers run) and on the namespace's loopback (for the Pulumi
 *   CLI, which runs inside the namespace).
 *
 * - the stock images and their mirrors (test/guest/stock-images.ts), built in
 *   the background from here on, for first-boot.test.ts.
 *
 * The servers are stopped by PID in teardown, and a stock build still
 * running is ended. What they learn (ports, URLs, the image's SHA-256)
 * reaches the tests through `inject("guest")`.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const host = testHost();
  const imagePath = buildImage();
  const imageSha256 = await sha256File(imagePath);
  const stopPrebuild = prebuildStock();

  preparePulumi();

  // The NAT network's gateway: the bridge's address, inside the namespace.
  const gateway = host.networkAddress;
  const servers: ChildProcess[] = [];
  const stop = async () => {
    stopPrebuild();
    await Promise.all(servers.map((s) => stopServer(s)));
  };
  try {
    const dir = path.dirname(imagePath);
    const file = path.basename(imagePath);
    const targets = targetsOf(host);
    const target = await startServer(servers, host.netns, ["204", targets.outward4]);
    const whoami = await startServer(servers, host.netns, ["whoami", targets.outward4]);
    const inward = await startServer(servers, host.netns, ["204", targets.inward4]);
    await startServer(servers, host.netns, ["204", targets.inward4, "443"]);
    await startServer(servers, host.netns, ["204", targets.outward4, "443"]);
    const viaVeth = await startServer(servers, host.netns, ["files", host.address, dir]);
    const viaLoopback = await startServer(servers, host.netns, ["files", "127.0.0.1", dir]);
    const env: GuestEnv = {
      netns: host.netns,
      imagePath,
      imageSha256,
      imageUrlFromRoot: `http://${host.address}:${viaVeth}/${file}`,
      imageUrlInNetns: `http://127.0.0.1:${viaLoopback}/${file}`,
      gateway,
      subnetPrefix: gateway.replace(/\.\d+$/, "."),
      targetUrl: `http://${targets.outward4}:${target}/`,
      whoamiUrl: `http://${targets.outward4}:${whoami}/`,
      inwardUrl: `http://${targets.inward4}:${inward}/`,
      inwardTlsAddress: `${targets.inward4}:443`,
      targets,
    };
    // Loud failures now rather than a mysterious boot later: the image must
    // be downloadable from the root namespace, and the target must answer
    // 204 inside the namespace.
    await expectImageServed(env.imageUrlFromRoot);
    for (const url of [env.targetUrl, env.inwardUrl]) {
      const code = execFileSync(
        "ip",
        ["netns", "exec", host.netns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
        { encoding: "utf8", timeout: 30_000 },
      );
      if (code !== "204") throw new Error(`the 204 server at ${url} answered ${code}`);
    }
    project.provide("guest", env);
  } catch (err) {
    await stop();
    throw err;
  }
  return stop;
}

/** `scripts/guest-image build`: the image's path (building it when the recipe's image is missing). */
function buildImage(): string {
  const script = path.join(repoRoot, "scripts/guest-image");
  let out: string;
  try {
    out = execFileSync(script, ["build"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      timeout: 30 * 60_000,
    });
  } catch (err) {
    throw new Error(
      `scripts/guest-image build failed, so no guest can boot (see .state/images/*.log): ${
        err instanceof Error ? err.message : String(err)
      }`,
    );
  }
  const image = out.trim().split("\n").pop() ?? "";
  if (!image.endsWith(".qcow2") || !existsSync(image)) {
    throw new Error(`scripts/guest-image build printed ${JSON.stringify(out)}, not an image path`);
  }
  return image;
}

function expectImageServed(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "HEAD", timeout: 30_000 }, (res) => {
      res.resume();
      if (res.statusCode === 200) resolve();
      else reject(new Error(`${url} answered ${res.statusCode}`));
    });
    req.once("timeout", () => req.destroy(new Error(`${url}: no answer`)));
    req.once("error", reject);
    req.end();
  });
}
