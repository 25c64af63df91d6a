/**
 * The orphan sweep's I/O: reads the project and the stack config through the
 * Pulumi CLI, lists managed domains on every configured host, reads the
 * owning stacks' checkpoints, classifies (classify.ts) and, only when asked,
 * deletes the orphans. Every failure becomes a problem in the report, so
 * one unreachable host or unreadable stack never hides the rest.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { messageOf } from "../errors";
import { HostPool } from "../kvm/host/hosts";
import { KvmOperations } from "../kvm/host/operations";
import { backendIdentity } from "../resource/backend";
import { readStackConfig } from "../resource/stack-config";
import {
  type Classified,
  classify,
  type ManagedDomain,
  type StackRef,
  type StackState,
  stackKey,
  stacksToRead,
} from "./classify";
import type { GcOptions } from "./command-line";
import { type PulumiRunner, pulumiRunner } from "./pulumi-cli";
import { configReader, currentStack, parseStackExport, parseStackList } from "./pulumi-json";

/** Something gc could not read or do. Any problem makes the exit code 1. */
export interface Problem {
  scope: "project" | "config" | "host" | "stacks" | "stack" | "domain" | "delete";
  /** The host key, stack, or `host/domain` concerned. */
  subject: string;
  message: string;
}

/** A classified domain, plus what deleting it did (with --delete). */
export interface Row extends Classified {
  deleted?: { volumesRemoved: string[] };
}

/** A bake builder a cut-short bake left (shut off, its bake over), and whether --delete removed it. */
export interface LeftoverBuilder {
  host: string;
  name: string;
  /** What --delete removed (the builder and its seed); absent without --delete. */
  removed?: string[];
}

/** Everything one run found and did. */
export interface GcReport {
  project: string;
  /** The stack whose config named the hosts. */
  stack: string;
  hosts: string[];
  minAgeMs: number;
  deleteRequested: boolean;
  rows: Row[];
  /** Bake builders nothing will finish (kvm/host/operations.ts `leftoverBuilders`). */
  builders: LeftoverBuilder[];
  problems: Problem[];
}

/** Injectable edges (tests drive the real ones; `now` and the runner are here for the CLI's own use). */
export interface GcDeps {
  pulumi?: PulumiRunner;
  now?: () => Date;
}

/** The project name from Pulumi.yaml (or Pulumi.yml) in `cwd`. */
export function readProjectName(cwd: string): string {
  for (const file of ["Pulumi.yaml", "Pulumi.yml"]) {
    const p = path.join(cwd, file);
    if (!existsSync(p)) continue;
    const doc = YAML.parse(readFileSync(p, "utf8")) as { name?: unknown } | null;
    if (typeof doc?.name !== "string" || doc.name === "") throw new Error(`${p} has no project name`);
    return doc.name;
  }
  throw new Error(`no Pulumi.yaml in ${cwd}: run gc in the Pulumi project folder or pass --cwd`);
}

/** Runs the sweep. Throws only when nothing can be judged at all (no project, no stack, no config). */
export async function runGc(options: GcOptions, deps: GcDeps = {}): Promise<GcReport> {
  const pulumi = deps.pulumi ?? pulumiRunner(options.cwd);
  const project = readProjectName(options.cwd);
  const stack = options.stack ?? currentStack(await pulumi(["stack", "ls", "--json"]));
  if (stack === undefined) throw new Error("no current stack: select one or pass --stack");

  const config = readStackConfig(
    configReader(await pulumi(["config", "--json", "--show-secrets", "--stack", stack])),
  );
  const problems: Problem[] = [];
  for (const f of config.general)
    problems.push({ scope: "config", subject: stack, message: `${f.property}: ${f.reason}` });
  for (const [key, failures] of Object.entries(config.hostFailures)) {
    problems.push({
      scope: "config",
      subject: key,
      message: failures.map((f) => `${f.property}: ${f.reason}`).join("; "),
    });
  }
  const hostKeys = Object.keys(config.hosts);
  if (hostKeys.length === 0 && problems.length === 0) {
    problems.push({ scope: "config", subject: stack, message: "kvm:hosts names no host" });
  }

  const pool = new HostPool(config.hosts);
  const ops = new KvmOperations(pool);
  try {
    const domains: ManagedDomain[] = [];
    const listed = await Promise.allSettled(hostKeys.map((key) => ops.listHost(key)));
    listed.forEach((r, i) => {
      const key = hostKeys[i] as string;
      if (r.status === "rejected") {
        problems.push({ scope: "host", subject: key, message: messageOf(r.reason) });
        return;
      }
      domains.push(...r.value.vms);
      for (const s of r.value.skipped) {
        problems.push({
          scope: "domain",
          subject: `${s.host}/${s.name}`,
          message: `metadata unreadable: ${s.reason}`,
        });
      }
    });

    let stacks: StackRef[] | { error: string };
    try {
      const args = ["stack", "ls", "--json", ...(options.allProjects ? ["--all"] : [])];
      stacks = parseStackList(await pulumi(args), project);
    } catch (err) {
      stacks = { error: messageOf(err) };
      problems.push({ scope: "stacks", subject: project, message: messageOf(err) });
    }

    const scope = { domains, project, allProjects: options.allProjects, stacks };
    const states = new Map<string, StackState>();
    for (const s of stacksToRead(scope)) {
      try {
        states.set(
          stackKey(s.project, s.stack),
          parseStackExport(await pulumi(["stack", "export", "--stack", s.ref])),
        );
      } catch (err) {
        states.set(stackKey(s.project, s.stack), { kind: "unreadable", error: messageOf(err) });
        problems.push({ scope: "stack", subject: s.ref, message: messageOf(err) });
      }
    }

    const now = (deps.now ?? (() => new Date()))();
    const backend = backendIdentity(process.env, options.cwd);
    const rows: Row[] = classify({
      ...scope,
      minAgeMs: options.minAgeMs,
      now,
      states,
      ...(backend !== undefined ? { backend } : {}),
    });
    if (options.delete) {
      for (const row of rows) {
        if (row.verdict === "orphan") await deleteOrphan(ops, row, problems);
      }
    }
    const builders: LeftoverBuilder[] = [];
    for (const host of hostKeys.filter((_, i) => listed[i]?.status === "fulfilled")) {
      try {
        for (const left of await ops.leftoverBuilders(host, { remove: options.delete }))
          builders.push({ host, name: left.name, ...(options.delete ? { removed: left.removed } : {}) });
      } catch (err) {
        problems.push({ scope: "host", subject: host, message: `bake builders: ${messageOf(err)}` });
      }
    }
    return {
      project,
      stack,
      hosts: hostKeys,
      minAgeMs: options.minAgeMs,
      deleteRequested: options.delete,
      rows,
      builders,
      problems,
    };
  } finally {
    await pool.closeAll();
  }
}

/**
 * Deletes one orphan, after checking that the domain of that name is still
 * the one judged (same UUID): a name freed and reused since the listing
 * belongs to someone else.
 */
async function deleteOrphan(ops: KvmOperations, row: Row, problems: Problem[]): Promise<void> {
  const { host, name, uuid } = row.domain;
  const subject = `${host}/${name}`;
  try {
    const now = await ops.get(host, name);
    if (now.state === "absent") {
      row.deleted = { volumesRemoved: [] };
      row.reason = `${row.reason}; already gone`;
      return;
    }
    if (now.uuid !== uuid) {
      problems.push({
        scope: "delete",
        subject,
        message: `not deleted: the domain was replaced since listing (UUID ${now.uuid})`,
      });
      return;
    }
    // Its disks are found from the domain; the owner's tag finds them even if the domain goes first.
    const result = await ops.delete(host, name, { volumeOwner: row.domain.metadata.owner.urn });
    row.deleted = { volumesRemoved: result.volumesRemoved };
  } catch (err) {
    problems.push({ scope: "delete", subject, message: messageOf(err) });
  }
}

/** 0 when everything was read (and deleted, if asked) and nothing is unknown; 1 otherwise. */
export function exitCodeOf(report: GcReport): number {
  return report.problems.length > 0 || report.rows.some((r) => r.verdict === "unknown") ? 1 : 0;
}
