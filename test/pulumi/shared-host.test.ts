/**
 * A host shared by stacks that know nothing of each other:
 * two `pulumi up` processes at the same instant, coordinated only through
 * what the host holds.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ImageCache } from "../../provider/kvm/host/image-cache";
import { makeQcow2 } from "../libvirtd/kvm/ops-helpers";
import { type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  E2E_ROOT,
  hostsConfig,
  metadataOf,
  perVmVolumesOf,
  poolVolumes,
  removeByHand,
  TEST_PROXY_ARGS,
  virshQuiet,
  vmVolumeNames,
  Workspace,
} from "./harness";

let host: TestHost;
const workspaces: Workspace[] = [];
const NAME = `kvmpt-twin-${process.pid}`;

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) ws.cleanup();
  removeByHand(host, NAME);
});

/** A stack of its own (its own backend) with one proxy of the fixed name, its user-data marked with `marker`. */
function stack(tag: string, marker: string): Workspace {
  const ws = new Workspace(tag, { name: "kvmpt-shared", main: "test/pulumi/programs/pair" });
  workspaces.push(ws);
  ws.setConfig({
    ...hostsConfig(host),
    "pair:proxies": {
      twin: {
        host: "local",
        image: "tiny",
        name: NAME,
        ...TEST_PROXY_ARGS,
        userData: `#cloud-config\n# ${marker}\n`,
      },
    },
  });
  return ws;
}

function sha256(file: string): string {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

describe("two stacks on one host", () => {
  it("creating one fixed name at the same instant: one wins, the other fails naming the domain, and the winner's disks are untouched", async () => {
    const a = stack("twin-a", `stack-a-${process.pid}`);
    const b = stack("twin-b", `stack-b-${process.pid}`);
    const [ra, rb] = await Promise.all([
      a.runAsync(["up", "--yes", "--skip-preview"]),
      b.runAsync(["up", "--yes", "--skip-preview"]),
    ]);
    const codes = [ra.code, rb.code];
    expect(
      codes.filter((c) => c === 0),
      `${ra.output}\n${rb.output}`,
    ).toHaveLength(1);
    const [winner, loser, lost] = ra.code === 0 ? [a, b, rb] : [b, a, ra];
    expect(lost.output).toContain(`domain ${NAME}`);
    expect(lost.output).toMatch(/already exists|was left alone/);

    // One domain, the winner's, on the winner's own volumes; the loser left none of its own.
    expect(allDomains(host).filter((d) => d === NAME)).toEqual([NAME]);
    expect(metadataOf(host, NAME)).toContain(`stack="${winner.stack}"`);
    const mine = vmVolumeNames(host, NAME);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([...mine].sort());
    const [root, seed] = mine.map((v) => path.join(host.poolPath, v)) as [string, string];
    const winnerMarker = winner === a ? `stack-a-${process.pid}` : `stack-b-${process.pid}`;
    const loserMarker = winner === a ? `stack-b-${process.pid}` : `stack-a-${process.pid}`;
    expect(readFileSync(seed).includes(winnerMarker)).toBe(true);
    expect(readFileSync(seed).includes(loserMarker)).toBe(false);

    // The loser tries again: refused again, and the winner's disks are the same bytes before and after.
    const before = { root: sha256(root), seed: sha256(seed) };
    const again = await loser.runAsync(["up", "--yes", "--skip-preview"]);
    expect(again.code).not.toBe(0);
    expect(again.output).toContain(`domain ${NAME}`);
    expect({ root: sha256(root), seed: sha256(seed) }).toEqual(before);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([...mine].sort());
    winner.destroy();
    expect(allDomains(host)).not.toContain(NAME);
    expect(perVmVolumesOf(poolVolumes(host), NAME)).toEqual([]);
  });

  it("needing one new image at the same instant: exactly one uploads it, the other waits for it, both succeed", async () => {
    // An image no VM has used, served slowly (2 MiB over about 4 s): the two uploads would overlap.
    const dir = mkdtempSync(path.join(E2E_ROOT, "shared-image-"));
    const img = makeQcow2(dir, `shared-${process.pid}`, 2);
    const server = http.createServer((_req, res) => {
      const body = readFileSync(img.path);
      res.writeHead(200, { "content-length": body.length });
      let at = 0;
      const tick = setInterval(() => {
        res.write(body.subarray(at, at + 64 * 1024));
        at += 64 * 1024;
        if (at >= body.length) {
          clearInterval(tick);
          res.end();
        }
      }, 100);
      res.on("close", () => clearInterval(tick));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/shared.qcow2`;
    const volume = ImageCache.volumeName({ url, format: "qcow2", sha256: img.sha256 });
    const run = (tag: string) => {
      const ws = new Workspace(tag, { name: "kvmpt-shared", main: "test/pulumi/programs/pair" });
      workspaces.push(ws);
      ws.setConfig({
        ...hostsConfig(host),
        "kvm:images": { fresh: { url, sha256: img.sha256, firmware: "bios" } },
        "pair:proxies": { p: { host: "local", image: "fresh", ...TEST_PROXY_ARGS } },
      });
      const trace = path.join(ws.dir, "trace.log");
      return { ws, trace, done: ws.runAsync(["up", "--yes", "--skip-preview"], { KVMP_TRACE_FILE: trace }) };
    };
    try {
      const one = run("img-a");
      const two = run("img-b");
      const [ra, rb] = await Promise.all([one.done, two.done]);
      expect(ra.code, ra.output).toBe(0);
      expect(rb.code, rb.output).toBe(0);
      const uploads = [one.trace, two.trace]
        .map((t) => readFileSync(t, "utf8"))
        .join("\n")
        .split("\n")
        .filter((l) => l.includes("rpc=virStorageVolUpload") && l.includes(`/${volume}`));
      expect(uploads).toHaveLength(1);
      for (const { ws } of [one, two]) ws.destroy();
    } finally {
      virshQuiet(host, "vol-delete", "--pool", host.poolName, volume);
      virshQuiet(host, "vol-delete", "--pool", host.poolName, `${volume}.partial`);
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
