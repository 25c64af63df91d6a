import { type ChildProcess, execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { startServer, stopServer } from "../support/netns-http";
import { preparePulumi } from "../support/prepare-pulumi";
import { targetsOf, testHost } from "../support/test-host";
import { prebuildImages, testImagePath } from "./images";
import type { GuestEnv } from "./support";

/**
 * What the `guest` project needs beyond the test host (started first by
 * test/support/global-setup.ts):
 *
 * - the guest images (test/guest/images.ts): the test image, then the stock
 *   images and their mirrors for first-boot.test.ts, built in the background
 *   from here on (a no-op when the recipe's image exists); each guest file
 *   waits for the image it boots, and a failed build fails it loudly;
 * - dist/ and the package link for the repo's Pulumi programs, and the Pulumi
 *   CLI (as the `pulumi` project's setup does);
 * - tiny HTTP servers, all INSIDE the test host's network namespace: the
 *   proxy targets on the namespace's outward target address (203.0.113.80,
 *   which the proxies treat as the internet: a 204, a whoami, and a 204 on
 *   443 for CONNECT), a 204 on its inward (private) address, on a port of
 *   its own and on 443, which the proxies must refuse, and the images' folder
 *   served to the provider over HTTP on the namespace's veth address (reached
 *   from the root namespace, where the vitest workers run) and on the
 *   namespace's loopback (for the Pulumi CLI, which runs inside the namespace).
 *
 * The servers are stopped by PID in teardown, and a build still running is
 * ended. What they learn (ports, URLs, where the test image will be) reaches
 * the tests through `inject("guest")`.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const host = testHost();
  const imagePath = testImagePath();
  mkdirSync(path.dirname(imagePath), { recursive: true });
  const stopPrebuild = prebuildImages();

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
    // Loud failures now rather than a mysterious boot later: the targets must
    // answer 204 inside the namespace.
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
