/**
 * `pulumi-kvm-proxy gc` against the real Pulumi CLI and the real test host:
 * two stacks of one project (three proxies), one VM orphaned by `pulumi
 * state delete`, one by `pulumi stack rm --force`, and a foreign domain
 * without our metadata. Nothing boots (empty image, no IP, no health check).
 * Other helpers share the host, so every count is of this file's own domains
 * (names starting with PREFIX).
 */
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  hostsConfig,
  packageCli,
  perVmVolumesOf,
  poolVolumes,
  pulumiEnv,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  virshQuiet,
  vmVolumeNames,
  Workspace,
} from "./harness";

const PREFIX = `gc${process.pid}`;
const PROJECT = `kvmpt-gc-${process.pid}`;
const FOREIGN = `${PREFIX}-foreign`;
const S2 = `${PREFIX}s2`;
const S4 = `${PREFIX}s4`;
const CFG = `${PREFIX}cfg`;

let host: TestHost;
let ws: Workspace;
/** Domain names by resource name: a and b in the workspace's stack, c in stack S2. */
const names: Record<string, string> = {};

interface GcDomain {
  host: string;
  domain: string;
  stack: string;
  urn: string;
  verdict: string;
  reason: string;
  deleted?: boolean;
  volumesRemoved?: string[];
}

interface GcRun {
  code: number;
  stdout: string;
  stderr: string;
  /** Parsed stdout when --json was given. */
  json?: { domains: GcDomain[]; problems: { scope: string; subject: string; message: string }[] };
}

/** Runs the built command from the repo root on the workspace folder (--cwd); hosts from the workspace's stack unless --stack is given. */
function gc(...args: string[]): GcRun {
  const stack = args.includes("--stack") ? [] : ["--stack", ws.stack];
  return gcWith([...stack, ...args]);
}

function gcWith(args: string[]): GcRun {
  const run: GcRun = packageCli(ws, ["gc", "--cwd", ws.dir, ...args]);
  if (args.includes("--json")) run.json = JSON.parse(run.stdout) as GcRun["json"];
  return run;
}

/** `pulumi` in the workspace folder on another stack than the workspace's own. */
function pulumiOn(stack: string, ...args: string[]): string {
  const r = spawnSync("pulumi", [...args, "--stack", stack, "--non-interactive", "--color", "never"], {
    cwd: ws.dir,
    env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` },
    encoding: "utf8",
    timeout: 600_000,
  });
  if (r.error) throw r.error;
  if (r.status !== 0)
    throw new Error(`pulumi ${args.join(" ")} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** This file's domains on the host (the foreign one included). */
function ours(): string[] {
  return allDomains(host)
    .filter((d) => d.startsWith(PREFIX))
    .sort();
}

function volumesOf(name: string): string[] {
  return perVmVolumesOf(poolVolumes(host), name);
}

/** gc's view of this project's domains: name → verdict. */
function verdicts(run: GcRun): Record<string, string> {
  return Object.fromEntries(
    (run.json?.domains ?? []).filter((d) => d.domain.startsWith(PREFIX)).map((d) => [d.domain, d.verdict]),
  );
}

function urnOf(resource: string): string {
  const p = ws.proxies().find((r) => r.urn.endsWith(`::${resource}`));
  if (p === undefined) throw new Error(`no ${resource} in the state`);
  return p.urn;
}

const proxy = { host: "local", image: "tiny", ...TEST_PROXY_ARGS };

beforeAll(() => {
  host = testHost();
  ws = new Workspace("gc", { name: PROJECT, main: "test/pulumi/programs/pair" });
  ws.setConfig({ ...hostsConfig(host), "pair:proxies": { [`${PREFIX}a`]: proxy, [`${PREFIX}b`]: proxy } });
  ws.up();
  const out = ws.outputs().names as Record<string, string>;
  names.a = out[`${PREFIX}a`] as string;
  names.b = out[`${PREFIX}b`] as string;

  // A second stack of the same project, holding c.
  pulumiOn(S2, "stack", "init");
  writeFileSync(
    path.join(ws.dir, `Pulumi.${S2}.yaml`),
    JSON.stringify({ config: { ...hostsConfig(host), "pair:proxies": { [`${PREFIX}c`]: proxy } } }),
  );
  pulumiOn(S2, "up", "--yes", "--skip-preview");
  names.c = (JSON.parse(pulumiOn(S2, "stack", "output", "names", "--json")) as Record<string, string>)[
    `${PREFIX}c`
  ] as string;
  pulumiOn(ws.stack, "stack", "select");

  // A domain of someone else: no metadata of ours (another tool's instead).
  const xml = path.join(ws.dir, "foreign.xml");
  writeFileSync(
    xml,
    `<domain type='qemu'><name>${FOREIGN}</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>` +
      `<metadata><other:thing xmlns:other="https://example.com/other/v1" owner="someone"/></metadata>` +
      `<os><type arch='x86_64'>hvm</type></os></domain>`,
  );
  virsh(host, "define", xml);
});

afterAll(() => {
  ws?.cleanup();
  try {
    pulumiOn(S2, "stack", "rm", "--force", "--yes");
  } catch {
    // already removed by the test
  }
  virshQuiet(host, "undefine", FOREIGN);
  for (const d of ours()) removeByHand(host, d);
});

describe("pulumi-kvm-proxy gc", () => {
  it("answers --help through npx after a build", () => {
    const r = spawnSync("npx", ["--no-install", "pulumi-kvm-proxy", "gc", "--help"], {
      cwd: repoRoot,
      encoding: "utf8",
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("Usage: pulumi-kvm-proxy gc [options]");
    expect(r.stdout).toContain("--min-age");
  });

  it("finds nothing to sweep while every VM is held (hosts from the current stack)", () => {
    const r = gcWith(["--json", "--min-age", "0"]);
    expect(r.code).toBe(0);
    expect(verdicts(r)).toEqual({
      [names.a as string]: "held",
      [names.b as string]: "held",
      [names.c as string]: "held",
    });
  });

  it("lists exactly the orphan after `pulumi state delete`, deletes nothing, never lists the foreign domain", () => {
    ws.mustRun("state", "delete", urnOf(`${PREFIX}a`), "--yes");
    const before = ours();
    expect(before).toEqual([names.a, names.b, names.c, FOREIGN].sort());

    const r = gc("--json", "--min-age", "0");
    expect(r.code).toBe(0);
    expect(verdicts(r)).toEqual({
      [names.a as string]: "orphan",
      [names.b as string]: "held",
      [names.c as string]: "held",
    });
    const orphan = r.json?.domains.find((d) => d.domain === names.a);
    expect(orphan).toMatchObject({ host: "local", stack: ws.stack, reason: `URN not in stack ${ws.stack}` });
    expect(orphan?.urn).toMatch(new RegExp(`::${PREFIX}a$`));
    expect(r.json?.domains.some((d) => d.domain === FOREIGN)).toBe(false);

    // The table: one row, the orphan; a summary that says nothing was deleted.
    const t = gc("--min-age", "0");
    expect(t.code).toBe(0);
    const rows = t.stdout.split("\n").filter((l) => l.includes(PREFIX));
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatch(
      new RegExp(
        `^local\\s+${names.a}\\s+${ws.stack}\\s+urn:pulumi:\\S+\\s+\\S+\\s+orphan\\s+URN not in stack`,
      ),
    );
    expect(t.stdout).toContain("Dry run: nothing deleted.");
    expect(ours()).toEqual(before);
    expect(volumesOf(names.a as string)).toHaveLength(2);
  });

  it("skips an orphan younger than --min-age (the default 15m included), even with --delete", () => {
    for (const args of [["--min-age", "1h"], [], ["--min-age", "1h", "--delete"]]) {
      const r = gc("--json", ...args);
      expect(r.code).toBe(0);
      expect(verdicts(r)[names.a as string]).toBe("too-young");
      expect(r.json?.domains.some((d) => d.deleted === true)).toBe(false);
    }
    expect(ours()).toContain(names.a);
  });

  it("deletes nothing when the stacks cannot be read, and exits 1", () => {
    const file = path.join(ws.backend, ".pulumi/stacks", PROJECT, `${S2}.json`);
    copyFileSync(file, `${file}.gc-test`);
    try {
      writeFileSync(file, "{ not a checkpoint");
      const r = gc("--json", "--min-age", "0", "--delete");
      expect(r.code).toBe(1);
      expect(r.json?.problems.map((p) => p.scope)).toContain("stacks");
      expect(verdicts(r)[names.a as string]).toBe("unknown");
      expect(r.stderr).toMatch(/^error: stacks /m);
      expect(ours()).toContain(names.a);
    } finally {
      copyFileSync(`${file}.gc-test`, file);
      rmSync(`${file}.gc-test`);
    }
  });

  it("--delete removes the orphan and its volumes and leaves everything else", () => {
    const aVolumes = vmVolumeNames(host, names.a as string);
    const r = gc("--min-age", "0", "--delete");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`deleted local/${names.a} and volumes ${aVolumes.join(", ")}`);
    expect(r.stdout).toContain("Deleted 1 of 1 orphan.");
    expect(ours()).toEqual([names.b, names.c, FOREIGN].sort());
    expect(volumesOf(names.a as string)).toEqual([]);
    expect(volumesOf(names.b as string)).toHaveLength(2);

    const again = gc("--json", "--min-age", "0");
    expect(again.code).toBe(0);
    expect(verdicts(again)).toEqual({ [names.b as string]: "held", [names.c as string]: "held" });
  });

  it("reports an unreachable host and exits 1, judges the rest, and never prints the secret key", () => {
    // Hosts from a third stack: the test host over SSH (the key a secret) and a dead socket.
    pulumiOn(CFG, "stack", "init");
    const config = hostsConfig(host, ["remote"]) as { "kvm:hosts": Record<string, unknown> };
    config["kvm:hosts"].dead = { uri: `unix://${ws.dir}/no-such-libvirt-sock` };
    writeFileSync(path.join(ws.dir, `Pulumi.${CFG}.yaml`), JSON.stringify({ config }));
    const key = readFileSync(host.sshKeyPath, "utf8");
    const set = spawnSync(
      "pulumi",
      ["config", "set", "--secret", "--raw", "kvm:sshPrivateKey", "--stack", CFG],
      {
        cwd: ws.dir,
        input: key,
        env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` },
      },
    );
    expect(set.status).toBe(0);
    try {
      const r = gc("--json", "--min-age", "0", "--stack", CFG);
      expect(r.code).toBe(1);
      expect(r.json?.problems.filter((p) => p.scope === "host").map((p) => p.subject)).toEqual(["dead"]);
      // The stacks hold kvm://local/...: seen through another host key, never an orphan.
      const remote = (r.json?.domains ?? []).filter((d) => d.domain.startsWith(PREFIX));
      expect(remote.map((d) => [d.host, d.domain, d.verdict]).sort()).toEqual(
        [
          ["remote", names.b, "unknown"],
          ["remote", names.c, "unknown"],
        ].sort(),
      );
      expect(remote[0]?.reason).toMatch(/another host key/);
      const body = key.split("\n")[1] ?? "";
      expect(body.length).toBeGreaterThan(20);
      expect(r.stdout + r.stderr).not.toContain(body);
    } finally {
      pulumiOn(CFG, "stack", "rm", "--yes");
    }
  });

  it("after `pulumi stack rm --force`, its VM is an orphan: stack no longer exists", () => {
    pulumiOn(S2, "stack", "rm", "--force", "--yes");
    const r = gc("--json", "--min-age", "0");
    expect(r.code).toBe(0);
    expect(verdicts(r)).toEqual({ [names.b as string]: "held", [names.c as string]: "orphan" });
    expect(r.json?.domains.find((d) => d.domain === names.c)?.reason).toBe("stack no longer exists");

    const cVolumes = vmVolumeNames(host, names.c as string);
    const d = gc("--json", "--min-age", "0", "--delete");
    expect(d.code).toBe(0);
    expect(d.json?.domains.find((x) => x.domain === names.c)).toMatchObject({
      deleted: true,
      volumesRemoved: cVolumes,
    });
    expect(ours()).toEqual([names.b, FOREIGN].sort());
  });

  it("an `up` still creating its VM holds it, even with --min-age 0", async () => {
    // The create waits for an IP the empty image never gets, then rolls back.
    const S3 = `${PREFIX}s3`;
    pulumiOn(S3, "stack", "init");
    pulumiOn(ws.stack, "stack", "select");
    const slow = { ...proxy, waitForIp: true, timeouts: { create: "60s" } };
    writeFileSync(
      path.join(ws.dir, `Pulumi.${S3}.yaml`),
      JSON.stringify({ config: { ...hostsConfig(host), "pair:proxies": { [`${PREFIX}w`]: slow } } }),
    );
    const up = spawn("pulumi", ["up", "--yes", "--skip-preview", "--stack", S3, "--non-interactive"], {
      cwd: ws.dir,
      env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` },
      stdio: "ignore",
    });
    let ended = false;
    const exited = new Promise<number | null>((resolve) =>
      up.on("exit", (code) => {
        ended = true;
        resolve(code);
      }),
    );
    try {
      let creating: string | undefined;
      while (creating === undefined) {
        if (ended) throw new Error("pulumi up ended before its VM appeared");
        await new Promise((r) => setTimeout(r, 500));
        creating = ours().find((d) => d.startsWith(`${PREFIX}w-`));
      }
      const r = gc("--json", "--min-age", "0", "--delete");
      expect(r.code).toBe(0);
      expect(verdicts(r)[creating]).toBe("held");
      expect(r.json?.domains.find((d) => d.domain === creating)?.reason).toBe(
        `pending creating operation in stack ${S3}`,
      );
      expect(ours()).toContain(creating);
      expect(await exited).not.toBe(0);
      expect(ours()).not.toContain(creating);
    } finally {
      up.kill();
      await exited;
      pulumiOn(S3, "stack", "rm", "--force", "--yes");
    }
  });

  it("judges no VM whose stack lives in another backend: reported as unknown-backend, never deleted", () => {
    // The same project, a stack in a second file backend: gc reads the first, where that stack looks gone.
    const other = path.join(ws.dir, ".backend-2");
    mkdirSync(other, { recursive: true });
    const inOther = (...args: string[]): string => {
      const r = spawnSync("pulumi", [...args, "--stack", S4, "--non-interactive", "--color", "never"], {
        cwd: ws.dir,
        env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${other}` },
        encoding: "utf8",
        timeout: 600_000,
      });
      if (r.status !== 0)
        throw new Error(`pulumi ${args.join(" ")} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
      return r.stdout;
    };
    inOther("stack", "init");
    try {
      writeFileSync(
        path.join(ws.dir, `Pulumi.${S4}.yaml`),
        JSON.stringify({ config: { ...hostsConfig(host), "pair:proxies": { [`${PREFIX}z`]: proxy } } }),
      );
      inOther("up", "--yes", "--skip-preview");
      const z = (JSON.parse(inOther("stack", "output", "names", "--json")) as Record<string, string>)[
        `${PREFIX}z`
      ] as string;
      const r = gc("--json", "--min-age", "0", "--delete");
      expect(r.code).toBe(0);
      expect(verdicts(r)[z]).toBe("unknown-backend");
      expect(r.json?.domains.find((d) => d.domain === z)?.reason).toMatch(/another Pulumi backend/);
      expect(ours()).toContain(z);
      expect(volumesOf(z)).toHaveLength(2);
      // Its own backend's sweep holds it.
      inOther("destroy", "--yes", "--skip-preview");
      expect(ours()).not.toContain(z);
    } finally {
      inOther("stack", "rm", "--force", "--yes");
    }
  });
});
