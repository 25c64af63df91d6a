/**
 * What one proxy costs in the state: `__provider` stays under 4 KiB and is
 * the same text whatever the stack configures, and nothing of the other
 * hosts or images reaches a proxy's state. Two stacks, one proxy each: one
 * configures one host and one image, the other three hosts and four images.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestHost, testHost } from "../support/test-host";
import {
  cacheVolumeOf,
  domainsOfStack,
  E2E_ROOT,
  hostsConfig,
  removeByHand,
  type StateResource,
  TEST_PROXY_ARGS,
  virshQuiet,
  Workspace,
} from "./harness";

let host: TestHost;
const workspaces: Workspace[] = [];
const images: string[] = [];

/** Image files of equal path length, so the two proxies' states differ only where the config does. */
function image(tag: string): string {
  const dir = path.join(E2E_ROOT, "images");
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `size-${tag}-${process.pid}.qcow2`);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", file, "64M"]);
  images.push(file);
  return file;
}

function stack(tag: string, config: Record<string, unknown>): StateResource {
  const ws = new Workspace(tag, { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
  workspaces.push(ws);
  ws.setConfig({
    ...config,
    "pair:proxies": { "size-1": { host: "local", image: "used", ...TEST_PROXY_ARGS } },
  });
  ws.up();
  const proxies = ws.proxies();
  expect(proxies).toHaveLength(1);
  return proxies[0] as StateResource;
}

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
  for (const f of images) {
    virshQuiet(host, "vol-delete", "--pool", host.poolName, cacheVolumeOf(f));
    rmSync(f, { force: true });
  }
});

describe("state size", () => {
  it("does not grow with the hosts and images the stack configures", () => {
    const used = image("a");
    const one = stack("size1", {
      ...hostsConfig(host, ["local"]),
      "kvm:images": { used: { url: used, firmware: "bios" } },
    });
    const others = ["b", "c", "d"].map(image);
    const many = stack("size3", {
      ...(() => {
        const c = hostsConfig(host, ["local", "remote"]);
        const hosts = c["kvm:hosts"] as Record<string, Record<string, unknown>>;
        // A third key for the same daemon: configured, never used.
        hosts.spare = { ...hosts.local };
        return c;
      })(),
      "kvm:images": {
        used: { url: used, firmware: "bios" },
        ...Object.fromEntries(others.map((url, i) => [`other${i}`, { url, firmware: "bios" }])),
      },
    });

    const provider = (r: StateResource) => r.outputs?.__provider as string;
    expect(Buffer.byteLength(provider(one))).toBeLessThan(4096);
    expect(provider(many)).toBe(provider(one));

    const text = JSON.stringify(many);
    for (const word of ["remote", "spare", host.address, ...others]) expect(text).not.toContain(word);
    expect(Object.keys(many.inputs ?? {}).sort()).toEqual(Object.keys(one.inputs ?? {}).sort());
    expect(Object.keys(many.outputs ?? {}).sort()).toEqual(Object.keys(one.outputs ?? {}).sort());
    // Same keys, values of the same shape: only names and random parts differ in length.
    const bytes = (r: StateResource) => Buffer.byteLength(JSON.stringify(r));
    expect(Math.abs(bytes(many) - bytes(one))).toBeLessThanOrEqual(16);
  });
});
