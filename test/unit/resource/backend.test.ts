/**
 * The Pulumi backend a program's stacks live in, told as the CLI tells it:
 * the environment, then the project file, then the login (files of a
 * temporary PULUMI_HOME and project folder).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { backendIdentity, backendUrl } from "../../../provider/resource/backend";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A project folder (with a subfolder for the program) and a PULUMI_HOME holding a login to `current`. */
function setup(options: { projectBackend?: string; current?: string }) {
  const root = mkdtempSync(path.join(os.tmpdir(), "kvmp-backend-"));
  dirs.push(root);
  const project = path.join(root, "project");
  const program = path.join(project, "src");
  const home = path.join(root, "home");
  mkdirSync(program, { recursive: true });
  mkdirSync(home);
  writeFileSync(
    path.join(project, "Pulumi.yaml"),
    `name: p\nruntime: nodejs\n${options.projectBackend !== undefined ? `backend:\n  url: ${options.projectBackend}\n` : ""}`,
  );
  if (options.current !== undefined) {
    writeFileSync(
      path.join(home, "credentials.json"),
      JSON.stringify({ current: options.current, accounts: {} }),
    );
  }
  return { program, home };
}

describe("the Pulumi backend", () => {
  it.each([
    [
      "PULUMI_BACKEND_URL first",
      { projectBackend: "s3://b", current: "https://api.pulumi.com" },
      "file:///env",
      "file:///env",
    ],
    [
      "then the project's backend.url (from a folder below it)",
      { projectBackend: "s3://b", current: "https://api.pulumi.com" },
      undefined,
      "s3://b",
    ],
    ["then the login", { current: "https://api.pulumi.com" }, undefined, "https://api.pulumi.com"],
    ["none to tell", {}, undefined, undefined],
  ] as const)("is %s", (_what, files, envUrl, expected) => {
    const { program, home } = setup(files);
    const env = { PULUMI_HOME: home, ...(envUrl !== undefined ? { PULUMI_BACKEND_URL: envUrl } : {}) };
    expect(backendUrl(env, program)).toBe(expected);
  });

  it("is identified by a short hash: the same for one URL (a trailing slash aside), different for another, no path in it", () => {
    const { program, home } = setup({});
    const id = (url: string) => backendIdentity({ PULUMI_HOME: home, PULUMI_BACKEND_URL: url }, program);
    expect(id("file:///srv/state")).toMatch(/^[0-9a-f]{16}$/);
    expect(id("file:///srv/state/")).toBe(id("file:///srv/state"));
    expect(id("file:///srv/other")).not.toBe(id("file:///srv/state"));
    expect(backendIdentity({ PULUMI_HOME: home }, program)).toBeUndefined();
  });
});
