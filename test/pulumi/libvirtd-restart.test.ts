/**
 * libvirtd restarted in the middle of a six-proxy `pulumi up`: the provider's
 * connection drops with calls in flight and the daemon is gone for a few
 * seconds. The run must complete or fail with a transient error, the rerun
 * must converge (six domains, no extra volumes), and destroy must leave
 * nothing.
 *
 * It runs on a private test host of its own (scripts/test-host with another
 * state folder, hence its own namespace, veth and addresses): restarting the
 * shared host's libvirtd would break every other suite running at the same time.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeResults } from "../libvirtd/reliability/support";
import { repoRoot, type TestHost } from "../support/test-host";
import {
  domainsOfStack,
  poolVolumes,
  removeByHand,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  virsh,
  vmVolumeNames,
  Workspace,
} from "./harness";

/** The private host: its own state folder, from which its namespace, veth and link-local /30 follow. */
const PRIVATE_ENV = {
  KVMP_TEST_HOST_DIR: path.join(repoRoot, ".state/test-host-restart"),
};

function testHostScript(...args: string[]): void {
  execFileSync(path.join(repoRoot, "scripts/test-host"), args, {
    env: { ...process.env, ...PRIVATE_ENV },
    stdio: ["ignore", "ignore", "inherit"],
    timeout: 300_000,
  });
}

let host: TestHost;
let ws: Workspace | undefined;
// Six proxies created one at a time: once the first is defined, five creates still need the daemon.
const PROXIES = 6;
const prefix = `kvmpt-rst-${process.pid}-`;
const names = Array.from({ length: PROXIES }, (_, i) => `${prefix}${i + 1}`);

const ours = (which = "--all"): string[] =>
  virsh(host, "list", which, "--name")
    .split("\n")
    .map((s) => s.trim())
    .filter((n) => n.startsWith(prefix));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(() => {
  testHostScript("start");
  host = JSON.parse(readFileSync(path.join(PRIVATE_ENV.KVMP_TEST_HOST_DIR, "host.json"), "utf8")) as TestHost;
});

afterAll(async () => {
  try {
    if (ws !== undefined) await ws.runAsync(["destroy", "--yes", "--skip-preview"]);
    for (const n of names) removeByHand(host, n);
  } finally {
    testHostScript("stop");
  }
});

describe("libvirtd restarted during a six-proxy pulumi up", () => {
  it("completes or fails transiently; the rerun converges; destroy leaves nothing", async () => {
    const w = new Workspace("libvirtd-restart", { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
    ws = w;
    w.setConfig({
      "kvm:hosts": {
        local: {
          uri: `unix://${host.socketPath}`,
          domainType: "qemu",
          pool: host.poolName,
          network: host.network,
          capacity: { concurrentCreates: 1 },
        },
      },
      "kvm:images": { tiny: { url: TEST_IMAGE, firmware: "bios" } },
      "pair:proxies": Object.fromEntries(
        names.map((name, i) => [`p${i + 1}`, { host: "local", image: "tiny", name, ...TEST_PROXY_ARGS }]),
      ),
    });
    const rows: { step: string; outcome: string }[] = [];

    // The provider's libvirt calls, to see it reconnect (one virConnectOpen per connection).
    const trace = path.join(w.dir, "trace.log");
    const running = w.runAsync(["up", "--yes", "--skip-preview"], { KVMP_TRACE_FILE: trace });
    let finished = false;
    void running.then(() => {
      finished = true;
    });
    // Restart once the first domain is defined: the creates are then between define and start.
    while (!finished && ours().length === 0) await sleep(20);
    expect(finished).toBe(false);
    const definedAtRestart = ours().length;
    const runningAtRestart = ours("--state-running").length;
    testHostScript("restart-libvirtd");
    rows.push({
      step: "libvirtd restarted",
      outcome: `when ${definedAtRestart} of ${PROXIES} domains were defined and ${runningAtRestart} running`,
    });

    const first = await running;
    const opens = readFileSync(trace, "utf8")
      .split("\n")
      .filter((l) => l.includes("rpc=virConnectOpen")).length;
    // The provider's connection dropped with the daemon and was opened again.
    expect(opens).toBeGreaterThanOrEqual(2);
    rows.push({ step: "provider connections opened during the first run", outcome: String(opens) });
    rows.push({
      step: "first `pulumi up`",
      outcome: first.code === 0 ? "completed" : `failed: ${lastError(first.output)}`,
    });
    if (first.code !== 0) {
      // Only a transient failure is acceptable: the daemon went away and came back.
      expect(first.output).toMatch(/connection to libvirtd|cannot connect to libvirtd|transient|timed out/i);
    }

    const rerun = await w.runAsync(["up", "--yes", "--skip-preview"]);
    expect(rerun.code, rerun.output).toBe(0);
    expect(domainsOfStack(host, w.stack)).toEqual([...names].sort());
    const vols = poolVolumes(host);
    const perVm = vols.filter((v) => v.startsWith(prefix)).sort();
    expect(perVm).toEqual(names.flatMap((n) => vmVolumeNames(host, n)).sort());
    const markers = vols.filter((v) => v.endsWith(".partial"));
    expect(markers).toEqual([]);
    rows.push({
      step: "rerun `pulumi up`",
      outcome: `completed: ${domainsOfStack(host, w.stack).length} domains, ${perVm.length} per-VM volumes, ${markers.length} partial markers`,
    });

    const gone = await w.runAsync(["destroy", "--yes", "--skip-preview"]);
    expect(gone.code, gone.output).toBe(0);
    const left = ours().length + poolVolumes(host).filter((v) => v.startsWith(prefix)).length;
    rows.push({ step: "`pulumi destroy`", outcome: `completed: ${left} objects left` });
    writeResults("libvirtd-restart", rows);
    expect(left).toBe(0);
  });
});

function lastError(output: string): string {
  const lines = output.split("\n").filter((l) => /error:/.test(l));
  return (lines.at(-1) ?? "").trim().slice(0, 300);
}
