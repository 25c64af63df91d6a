/**
 * Nothing hangs a `pulumi up` (issue 7, item 8). The stack reaches libvirtd
 * through the wire relay this process hosts; from the first start of the VM
 * onwards the relay holds every call and never answers, as a wedged daemon
 * would. With the host's `callTimeout` at 2 s, the run must end on its own
 * with a timeout error naming the call it waited for; what it may have made
 * must be recorded in the state (the rollback cannot reach the daemon
 * either); and once the daemon answers again, `pulumi destroy` removes it.
 * The VM that never gets an IP is the `pulumi` project's create-deadline
 * test; the upload and RPC deadlines are pinned in the unit tests.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { testHost } from "../support/test-host";
import { WireRelay } from "../support/wire-relay";
import {
  allDomains,
  domainsOfStack,
  poolVolumes,
  removeByHand,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  Workspace,
} from "./harness";

const host = testHost();
// A folder of its own: other files host relays too.
const relay = new WireRelay({ target: host.socketPath });
let ws: Workspace | undefined;

beforeAll(() => relay.start());
afterAll(async () => {
  relay.reset();
  if (ws !== undefined) {
    await ws.runAsync(["destroy", "--yes", "--skip-preview"]);
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
  await relay.stop();
});

describe("a daemon that stops answering", () => {
  it("ends the up with a timeout naming the call, records the VM, and destroy removes it once the daemon answers", async () => {
    const name = `kvmpt-wedged-${process.pid}`;
    ws = new Workspace("deadlines", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
    ws.setConfig({
      "kvm:hosts": {
        local: {
          uri: `unix://${relay.socketPath}`,
          domainType: "qemu",
          pool: host.poolName,
          network: host.network,
          callTimeout: "2s",
        },
      },
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
        `create of kvm://local/${name} failed: timed out after 2000 ms waiting for reply to vir[A-Za-z]+`,
      ),
    );
    // The rollback could not reach the daemon either: the VM is recorded, not forgotten.
    expect(up.output).toMatch(
      /deleting it again failed too: timed out after 2000 ms waiting for reply to vir[A-Za-z]+; the VM is recorded in the state/,
    );
    expect(allDomains(host)).toContain(name);
    expect(ws.proxies().map((p) => p.id)).toEqual([`kvm://local/${name}`]);

    relay.reset();
    const destroy = await ws.runAsync(["destroy", "--yes", "--skip-preview"]);
    expect(destroy.code, destroy.output.slice(-3000)).toBe(0);
    expect(allDomains(host)).not.toContain(name);
    expect(poolVolumes(host).filter((v) => v.startsWith(`${name}-`))).toEqual([]);
    expect(ws.proxies()).toEqual([]);
  });
});
