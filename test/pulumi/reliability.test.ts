/**
 * Connection cuts under the real Pulumi CLI: the stack's host URI points at
 * the wire relay this test process hosts, so the provider subprocess that
 * `pulumi up` starts talks to libvirtd through it. For sampled procedures of
 * create (first occurrence, cut after libvirtd ran it, reconnection refused),
 * `pulumi up` fails or succeeds, the rerun converges to the proxy in the
 * state and exactly one domain; then `pulumi destroy` is cut at sampled
 * delete procedures, rerun, and nothing is left.
 *
 * Sampled, not every procedure: each case is two or three CLI runs (15-30 s
 * each on this machine) and the file must stay within about 4 minutes; the
 * full per-call tables live in the libvirtd project
 * (test/libvirtd/reliability/cut-points.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeResults } from "../libvirtd/reliability/support";
import { testHost } from "../support/test-host";
import { WireRelay } from "../support/wire-relay";
import {
  domainsOfStack,
  E2E_ROOT,
  poolVolumes,
  type RunResult,
  relayHostsConfig,
  removeByHand,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  Workspace,
} from "./harness";

const host = testHost();
const relay = new WireRelay({ target: host.socketPath, dir: E2E_ROOT });
const workspaces: Workspace[] = [];

/**
 * The sample: calls after which a cut leaves half-made state (a volume, a
 * defined domain not started, a destroyed domain still defined, a domain gone
 * with its volumes left). Upload cuts have a suite of their own (upload-cuts).
 */
const CREATE_SAMPLE = ["storage_vol_create_xml", "domain_define_xml", "domain_create"];
const DELETE_SAMPLE = ["domain_destroy", "storage_vol_delete"];

const up = (ws: Workspace) => ws.runAsync(["up", "--yes", "--skip-preview"]);
const destroy = (ws: Workspace) => ws.runAsync(["destroy", "--yes", "--skip-preview"]);

let seq = 0;
function stack(): { ws: Workspace; name: string } {
  seq += 1;
  const name = `kvmpt-rel-${process.pid}-${seq}-p`;
  const ws = new Workspace("reliability", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
  workspaces.push(ws);
  ws.setConfig({
    "kvm:hosts": relayHostsConfig(host, relay.socketPath),
    "kvm:images": { tiny: { url: TEST_IMAGE, firmware: "bios" } },
    // A short delete deadline: a destroy cut with reconnection refused retries until it, then fails.
    "pair:proxies": {
      p1: {
        host: "local",
        image: "tiny",
        name,
        ...TEST_PROXY_ARGS,
        timeouts: { create: "3m", delete: "20s" },
      },
    },
  });
  return { ws, name };
}

/** Cut both sockets after libvirtd ran the first `proc` call; no reconnection afterwards. */
function cutFirst(proc: string): void {
  relay.reset();
  relay.refuseAfterCut = true;
  let fired = false;
  relay.onCall = (c) => {
    if (fired || c.name !== proc) return undefined;
    fired = true;
    return { kind: "cut", mode: "after" };
  };
}

function perVm(name: string): string[] {
  return poolVolumes(host).filter((v) => v.startsWith(`${name}-`));
}

const shape = (r: RunResult) => ({
  result: r.code === 0 ? "ok" : "failed",
  ...(r.code === 0 ? {} : { message: lastError(r.output) }),
});

/** The provider's errors from the engine's diagnostics (the stack's "update failed" dropped), for the table. */
function lastError(output: string): string {
  const diagnostics = output.split("Diagnostics:")[1] ?? output;
  const lines = diagnostics
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^(error:|\* )/.test(l) && !/^error: (update failed|\d+ errors occurred:)$/.test(l));
  return lines.join(" / ").slice(0, 400);
}

interface Row {
  command: "up" | "destroy";
  call: string;
  first: { result: string; message?: string };
  rerun: { result: string; message?: string };
  domainsAfterRerun?: number;
  leaked?: number;
}
const rows: Row[] = [];

beforeAll(() => relay.start());
afterAll(async () => {
  writeResults("pulumi-cuts", rows);
  relay.reset();
  for (const ws of workspaces) {
    await destroy(ws);
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
  await relay.stop();
});

describe("pulumi up cut at a call of create, rerun", () => {
  for (const call of CREATE_SAMPLE) {
    it(`${call}: the rerun converges to one domain and destroy leaves nothing`, async () => {
      const { ws, name } = stack();
      cutFirst(call);
      const first = await up(ws);
      expect(relay.cuts).toBe(1);
      if (first.code !== 0) expect(first.output).toMatch(/transient|connection|EPIPE|ECONNRESET|closed/i);

      relay.reset();
      const rerun = await up(ws);
      expect(rerun.code, rerun.output).toBe(0);
      expect(ws.proxies()).toHaveLength(1);
      expect(domainsOfStack(host, ws.stack)).toEqual([name]);

      const gone = await destroy(ws);
      expect(gone.code, gone.output).toBe(0);
      const leaked = domainsOfStack(host, ws.stack).length + perVm(name).length;
      rows.push({
        command: "up",
        call,
        first: shape(first),
        rerun: shape(rerun),
        domainsAfterRerun: 1,
        leaked,
      });
      expect(leaked).toBe(0);
    });
  }
});

describe("pulumi destroy cut at a call of delete, rerun", () => {
  for (const call of DELETE_SAMPLE) {
    it(`${call}: the rerun destroys everything`, async () => {
      const { ws, name } = stack();
      relay.reset();
      const made = await up(ws);
      expect(made.code, made.output).toBe(0);

      cutFirst(call);
      const first = await destroy(ws);
      expect(relay.cuts).toBe(1);
      expect(first.code).not.toBe(0);

      relay.reset();
      const rerun = await destroy(ws);
      expect(rerun.code, rerun.output).toBe(0);
      expect(ws.proxies()).toHaveLength(0);
      const leaked = domainsOfStack(host, ws.stack).length + perVm(name).length;
      rows.push({ command: "destroy", call, first: shape(first), rerun: shape(rerun), leaked });
      expect(leaked).toBe(0);
    });
  }
});
