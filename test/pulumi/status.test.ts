/**
 * `pulumi-kvm-proxy status` against the real Pulumi CLI and the test host:
 * a ProxyFleet of three with rotation and auth, read as a table, as JSON and
 * as Prometheus text (which promtool, Prometheus' own checker, accepts).
 * Nothing boots (an empty image: no address, no agent, no health check), so
 * the counters here are the host's NIC counters of running domains and the
 * requests cannot be counted; the booted guest's bytes and requests are
 * test/guest/egress-fleet.test.ts's. A member stopped and one undefined
 * from libvirt's side are reported as such, and status writes nothing.
 */
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProxyStatus } from "../../provider/status/status-report";
import { type TestHost, testHost } from "../support/test-host";
import {
  hostsConfig,
  packageCli,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  virshQuiet,
  Workspace,
} from "./harness";

const FLEET = `st${process.pid}`;
const PASSWORD = `status-${process.pid}-password`;
const MAX_AGE_S = 30 * 86_400;

let host: TestHost;
let ws: Workspace;

/** A row of `status --json`: the report's own type. */
type Row = ProxyStatus;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function status(...args: string[]): Run {
  return packageCli(ws, ["status", "--cwd", ws.dir, "--stack", ws.stack, ...args]);
}

function rows(run: Run): Row[] {
  return (JSON.parse(run.stdout) as { proxies: Row[] }).proxies;
}

/** The members' domains, by member name, as the state records them. */
function domains(): Record<string, string> {
  return Object.fromEntries(
    ws.proxies().map((p) => [p.urn.replace(/.*::/, ""), String(p.outputs?.domainName)]),
  );
}

beforeAll(() => {
  host = testHost();
  ws = new Workspace("status", { name: "kvmpt-status", main: "test/pulumi/programs/fleet" });
  ws.setConfig({
    ...hostsConfig(host),
    "fleet:fleets": {
      [FLEET]: {
        size: 3,
        hosts: ["local"],
        rotation: { maxAge: "30d" },
        proxy: {
          image: "tiny",
          ...TEST_PROXY_ARGS,
          proxy: { auth: { username: "crawler", password: PASSWORD } },
        },
      },
    },
  });
  ws.up();
}, 600_000);

afterAll(() => {
  const left = ws === undefined ? [] : Object.values(domains());
  ws?.cleanup();
  for (const d of left) removeByHand(host, d);
});

describe("pulumi-kvm-proxy status", () => {
  it("answers --help, and refuses two output forms at once (exit 2)", () => {
    const help = status("--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: pulumi-kvm-proxy status [options]");
    const both = status("--json", "--prometheus");
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--json and --prometheus are two forms of one output: give one");
  });

  it("--json: one row per member, with its fleet, host, domain, state, age, rotation due and the NICs' counters", () => {
    const before = Date.now();
    const r = status("--json");
    const got = rows(r);
    expect(got.map((p) => p.name).sort()).toEqual([0, 1, 2].map((i) => `${FLEET}-${i}`));
    const byName = domains();
    for (const p of got) {
      expect(p).toMatchObject({ fleet: FLEET, host: "local", domain: byName[p.name], state: "provisioning" });
      // No address without an agent or a lease; no health check asked for.
      expect(p.addresses).toEqual([]);
      expect(p.health).toBeUndefined();
      const created = Date.parse(p.createdAt as string);
      expect(created).toBeLessThanOrEqual(before);
      expect(p.ageSeconds).toBeGreaterThanOrEqual(0);
      expect(Date.parse(p.rotationDue as string)).toBe(created + MAX_AGE_S * 1000);
      expect(p.traffic?.receivedBytes).toBeGreaterThanOrEqual(0);
      expect(p.traffic?.sentBytes).toBeGreaterThanOrEqual(0);
      // The empty image has no agent: the requests are not counted, and it says so.
      expect(p.requests).toBeUndefined();
      expect(p.problems).toEqual(["requests: the guest agent does not answer"]);
    }
    // What could not be read makes the exit code 1, and is named on stderr too.
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error: ${FLEET}-0: requests: the guest agent does not answer`);
  });

  it("the table: a row per member named fleet/member, its state and what could not be read beneath", () => {
    const r = status();
    const lines = r.stdout.split("\n");
    expect(lines[0]).toMatch(new RegExp(`^kvmpt-status/${ws.stack} at \\d{4}-`));
    expect(lines[1]).toMatch(
      /^NAME\s+HOST\s+STATE\s+ADDRESSES\s+EGRESS\s+HEALTH\s+AGE\s+ROTATES IN\s+IN\s+OUT\s+1XX/,
    );
    for (const i of [0, 1, 2]) {
      expect(r.stdout).toMatch(
        new RegExp(
          `^${FLEET}/${FLEET}-${i}\\s+local\\s+provisioning\\s+-\\s+-\\s+-\\s+\\S+( \\S+)*\\s+(29|30) d`,
          "m",
        ),
      );
      expect(r.stdout).toContain(`${FLEET}-${i}: requests: the guest agent does not answer`);
    }
  });

  it("--prometheus: text promtool accepts, a sample per member, labels naming it", () => {
    const r = status("--prometheus");
    const check = spawnSync("promtool", ["check", "metrics"], { input: r.stdout, encoding: "utf8" });
    expect(check.error).toBeUndefined();
    expect(`${check.stdout}${check.stderr}`.trim()).toBe("");
    expect(check.status).toBe(0);
    const byName = domains();
    for (const i of [0, 1, 2]) {
      const name = `${FLEET}-${i}`;
      const id = `proxy="${name}",fleet="${FLEET}",host="local",domain="${byName[name]}"`;
      expect(r.stdout).toContain(`kvmproxy_info{${id},state="provisioning",address="",egress_address=""} 1`);
      expect(r.stdout).toMatch(
        new RegExp(
          `^kvmproxy_network_receive_bytes_total\\{${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\} \\d+$`,
          "m",
        ),
      );
      expect(r.stdout).toContain(`kvmproxy_age_seconds{${id}} `);
    }
    // No health check, no requests counted: those families are left out rather than made up.
    expect(r.stdout).not.toContain("kvmproxy_up");
    expect(r.stdout).not.toContain("kvmproxy_http_requests_total");
  });

  it("no secret in any form: not the password, not its hash, not the state's secrets", () => {
    const exported = ws.mustRun("stack", "export", "--show-secrets").stdout;
    const hash = /"proxyPasswordHash":\s*\{[^}]*"plaintext":\s*"\\"([^"\\]+)/.exec(exported)?.[1];
    expect(hash, "the state records a password hash").toBeDefined();
    for (const form of [[], ["--json"], ["--prometheus"]]) {
      const r = status(...form);
      for (const secret of [PASSWORD, hash as string]) {
        expect(r.stdout).not.toContain(secret);
        expect(r.stderr).not.toContain(secret);
      }
    }
  });

  it("a member stopped from libvirt's side is `stopped`, one undefined is `missing`; the state is left as it was", () => {
    const byName = domains();
    const stopped = byName[`${FLEET}-1`] as string;
    const gone = byName[`${FLEET}-2`] as string;
    virsh(host, "destroy", stopped);
    removeByHand(host, gone);
    const before = ws.mustRun("stack", "export").stdout;
    const r = status("--json");
    const got = Object.fromEntries(rows(r).map((p) => [p.name, p]));
    expect(got[`${FLEET}-0`]?.state).toBe("provisioning");
    expect(got[`${FLEET}-1`]).toMatchObject({ state: "stopped", problems: [] });
    expect(got[`${FLEET}-1`]?.traffic).toBeUndefined();
    expect(got[`${FLEET}-2`]?.state).toBe("missing");
    expect(got[`${FLEET}-2`]?.problems[0]).toContain(`no VM ${gone} on host local`);
    expect(ws.mustRun("stack", "export").stdout).toBe(before);
    virshQuiet(host, "start", stopped);
  });
});
