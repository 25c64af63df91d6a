/**
 * Nothing hangs a `pulumi up`. The stack reaches libvirtd
 * through the wire relay this process hosts; from the first start of the VM
 * onwards the relay holds every call and never answers, as a wedged daemon
 * would. With the host's `callTimeout` at 2 s, the run must end on its own
 * with a timeout error naming the call it waited for; what it may have made
 * must be recorded in the state (the rollback cannot reach the daemon
 * either); and once the daemon answers again, `pulumi destroy` removes it.
 * A second case holds only the image upload: the resource's `timeouts.create`
 * (5 s), not the host's callTimeout (60 s), must end that create, and the
 * rollback must leave nothing.
 * The VM that never gets an IP is the `pulumi` project's create-deadline
 * test; the upload and RPC deadlines are pinned in the unit tests.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { partialMarkerVolumeName } from "../../provider/kvm/domain/names";
import { testHost } from "../support/test-host";
import { WireRelay } from "../support/wire-relay";
import {
  allDomains,
  cacheVolumeOf,
  domainsOfStack,
  E2E_ROOT,
  failureText,
  poolVolumes,
  relayHostsConfig,
  removeByHand,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  virshQuiet,
  Workspace,
} from "./harness";

const host = testHost();
// A folder of its own: other files host relays too.
const relay = new WireRelay({ target: host.socketPath });
let ws: Workspace | undefined;
let held: Workspace | undefined;
/** An image file of this test's own, so its cache volume (and any partial marker) is ours alone. */
let heldImage: string | undefined;

beforeAll(() => relay.start());
afterAll(async () => {
  relay.reset();
  for (const w of [ws, held]) {
    if (w === undefined) continue;
    await w.runAsync(["destroy", "--yes", "--skip-preview"]);
    for (const d of domainsOfStack(host, w.stack)) removeByHand(host, d);
    w.cleanup();
  }
  if (heldImage !== undefined) {
    const volume = cacheVolumeOf(heldImage);
    virshQuiet(host, "vol-delete", "--pool", host.poolName, volume);
    virshQuiet(host, "vol-delete", "--pool", host.poolName, partialMarkerVolumeName(volume));
    rmSync(heldImage, { force: true });
  }
  await relay.stop();
});

describe("a daemon that stops answering", () => {
  it("ends the up with a timeout naming the call, records the VM, and destroy removes it once the daemon answers", async () => {
    const name = `kvmpt-wedged-${process.pid}`;
    ws = new Workspace("deadlines", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
    ws.setConfig({
      "kvm:hosts": relayHostsConfig(host, relay.socketPath, { callTimeout: "2s" }),
      "kvm:images": { tiny: { url: TEST_IMAGE, firmware: "bios" } },
      "pair:proxies": {
        p: {
          host: "local",
          image: "tiny",
          name,
          ...TEST_PROXY_ARGS,
          timeouts: { create: "2m", delete: "30s" },
        },
      },
    });
    let wedged = false;
    relay.onCall = (c) => {
      if (c.name === "domain_create") wedged = true;
      return wedged ? { kind: "stall", ms: 3_600_000 } : undefined;
    };

    const up = await ws.runAsync(["up", "--yes", "--skip-preview"]);
    expect(wedged).toBe(true);
    expect(up.code).not.toBe(0);
    // Each failure names the call it waited for (the create retries past its
    // first timeout, on virDomainCreate, and gives up on a later call).
    expect(up.output).toMatch(
      new RegExp(
        `create of kvm://local/${name} failed: timed out after 2 s \\(the host's callTimeout\\) waiting for reply to vir[A-Za-z]+`,
      ),
    );
    // The rollback could not reach the daemon either: the VM is recorded, not forgotten.
    expect(up.output).toMatch(
      /deleting it again failed too: timed out after 2 s \(the host's callTimeout\) waiting for reply to vir[A-Za-z]+; the VM is recorded in the state/,
    );
    expect(allDomains(host)).toContain(name);
    expect(ws.proxies().map((p) => p.id)).toEqual([`kvm://local/${name}`]);

    relay.reset();
    const destroy = await ws.runAsync(["destroy", "--yes", "--skip-preview"]);
    expect(destroy.code, failureText(destroy)).toBe(0);
    expect(allDomains(host)).not.toContain(name);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${name}-`))).toEqual([]);
    expect(ws.proxies()).toEqual([]);
  });

  it("ends a create held in its image upload at timeouts.create, well before callTimeout, and rolls it back", async () => {
    const name = `kvmpt-slow-image-${process.pid}`;
    const dir = path.join(E2E_ROOT, "images");
    mkdirSync(dir, { recursive: true });
    heldImage = path.join(dir, `held-${process.pid}.qcow2`);
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", heldImage, "64M"]);
    held = new Workspace("held-upload", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
    held.setConfig({
      "kvm:hosts": relayHostsConfig(host, relay.socketPath, { callTimeout: "60s" }),
      "kvm:images": { own: { url: heldImage, firmware: "bios" } },
      "pair:proxies": {
        p: {
          host: "local",
          image: "own",
          name,
          ...TEST_PROXY_ARGS,
          timeouts: { create: "5s", delete: "30s" },
        },
      },
    });
    let uploads = 0;
    relay.onCall = (c) => {
      if (c.name !== "storage_vol_upload") return undefined;
      uploads += 1;
      return { kind: "stall", ms: 3_600_000 };
    };

    const up = await held.runAsync(["up", "--yes", "--skip-preview"]);
    relay.reset();
    expect(uploads).toBe(1);
    expect(up.code).not.toBe(0);
    expect(up.output).toMatch(
      new RegExp(
        `create of kvm://local/${name} failed and was rolled back .*timed out after 5 s \\(timeouts.create\\) waiting for the create of kvm://local/${name} to finish`,
      ),
    );
    expect(up.output).not.toMatch(/waiting for reply to virStorageVolUpload/);
    expect(allDomains(host)).not.toContain(name);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${name}-`))).toEqual([]);
    expect(held.proxies()).toEqual([]);
  });
});
