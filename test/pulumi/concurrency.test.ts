/**
 * Twenty proxies created at once on one host from one image nobody has
 * cached yet: the image is uploaded once, every domain is
 * defined once and running, and the parallel volume builds (overlays and
 * seeds of twenty VMs in one pool) fail nothing. Counted from the provider's
 * trace file and checked with virsh. Nothing boots here (an empty image), so
 * "healthy" is the running domain; guests that boot and serve are the
 * `guest` project's.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestHost, testHost } from "../support/test-host";
import {
  cacheVolumeOf,
  domainsOfStack,
  E2E_ROOT,
  hostsConfig,
  poolVolumes,
  pulumiEnv,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  virshQuiet,
  Workspace,
} from "./harness";

const COUNT = 20;

let host: TestHost;
let ws: Workspace;
let image: string;
let cacheVolume: string;

beforeAll(() => {
  host = testHost();
  const dir = path.join(E2E_ROOT, "images");
  mkdirSync(dir, { recursive: true });
  image = path.join(dir, `conc-${process.pid}.qcow2`);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", image, "64M"]);
  cacheVolume = cacheVolumeOf(image);
  ws = new Workspace("conc", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
  ws.setConfig({
    ...hostsConfig(host),
    "kvm:images": { shared: { url: image, firmware: "bios" } },
    "pair:proxies": Object.fromEntries(
      Array.from({ length: COUNT }, (_, i) => [
        `conc-${i + 1}`,
        { host: "local", image: "shared", ...TEST_PROXY_ARGS, memoryMiB: 128 },
      ]),
    ),
  });
});

afterAll(() => {
  ws?.cleanup();
  if (ws !== undefined) for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  if (cacheVolume !== undefined) virshQuiet(host, "vol-delete", "--pool", host.poolName, cacheVolume);
  if (image !== undefined) rmSync(image, { force: true });
});

describe(`${COUNT} proxies at once on one host, one image`, () => {
  it("uploads the image once, and every proxy is defined once and running", () => {
    expect(poolVolumes(host)).not.toContain(cacheVolume);
    const trace = path.join(ws.dir, "up.trace");
    const r = spawnSync(
      "pulumi",
      [
        "up",
        "--yes",
        "--skip-preview",
        "--parallel",
        String(COUNT),
        "--stack",
        ws.stack,
        "--non-interactive",
      ],
      {
        cwd: ws.dir,
        env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}`, KVMP_TRACE_FILE: trace },
        encoding: "utf8",
        timeout: 900_000,
      },
    );
    expect(r.status, `${r.stdout}\n${r.stderr}`.slice(-4000)).toBe(0);
    expect(existsSync(trace)).toBe(true);
    const lines = readFileSync(trace, "utf8").split("\n");
    const calls = (name: string) => lines.filter((l) => l.startsWith(`rpc=${name} `));

    const names = Object.values(ws.outputs().names as Record<string, string>).sort();
    expect(names).toHaveLength(COUNT);
    // One upload of the image; one seed upload, one define and one start per proxy.
    expect(calls("virStorageVolUpload").filter((l) => l.includes(`/${cacheVolume} `))).toHaveLength(1);
    expect(calls("virStorageVolUpload").filter((l) => / vol=\S+-seed\.iso /.test(l))).toHaveLength(COUNT);
    expect(calls("virDomainDefineXML")).toHaveLength(COUNT);
    expect(calls("virDomainCreate")).toHaveLength(COUNT);
    // Running in libvirt's own words; the state says "provisioning" (running,
    // no IP yet: nothing boots from an empty image).
    expect(domainsOfStack(host, ws.stack)).toEqual(names);
    for (const n of names) expect(virsh(host, "domstate", n).trim()).toBe("running");
    expect(ws.proxies().map((p) => p.outputs?.state)).toEqual(Array(COUNT).fill("provisioning"));

    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
    const left = poolVolumes(host).filter((v) => names.some((n) => v.startsWith(`${n}-`)));
    expect(left).toEqual([]);
  });
});
