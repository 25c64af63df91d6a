/**
 * The package schema as Pulumi's own code reads it: pkg/v3's binder
 * (codegen/schema.BindSpec, the metaschema and then every reference and
 * type; the reader the engine and the SDK generators use), built with the
 * CLI (tools/pulumi/cmd/kvmproxy-schema). Our own generator and test
 * (test/unit/schema) say the file is what the sources make; this says the
 * file is a schema Pulumi accepts.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repoRoot } from "../support/test-host";
import { pulumiEnv } from "./harness";

const SCHEMA = path.join(repoRoot, "provider/schema/schema.json");

function bind(file: string): { code: number | null; out: string } {
  const r = spawnSync("kvmproxy-schema", ["bind", file], { env: pulumiEnv(), encoding: "utf8" });
  if (r.error !== undefined) throw r.error;
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("pkg/v3's binder", () => {
  it("binds provider/schema/schema.json without a diagnostic", () => {
    const r = bind(SCHEMA);
    expect(r.out).toMatch(/^ok: kvmproxy: 2 resources, \d+ types\n$/);
    expect(r.code).toBe(0);
  });

  it.each([
    [
      "a reference to a type the schema lacks",
      (s: string) => s.replace('"#/types/kvmproxy:index:Timeouts"', '"#/types/kvmproxy:index:Missing"'),
      /type kvmproxy:index:Missing not found/,
    ],
    [
      "a type the metaschema does not know",
      (s: string) => s.replace('"type": "integer"', '"type": "int"'),
      /unknown type kind int/,
    ],
  ])("refuses the schema with %s, naming it", (_, breakIt, message) => {
    const dir = mkdtempSync(path.join(tmpdir(), "kvmp-schema-"));
    try {
      const broken = breakIt(readFileSync(SCHEMA, "utf8"));
      const file = path.join(dir, "schema.json");
      writeFileSync(file, broken);
      const r = bind(file);
      expect(r.out).toMatch(message);
      expect(r.code).toBe(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
