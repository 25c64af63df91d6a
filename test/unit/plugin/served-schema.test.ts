import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { servedSchemaSpec } from "../../../provider/plugin/served-schema";

const ROOT = path.resolve(__dirname, "../../..");
const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8"));

describe("the schema the plugin serves", () => {
  const served = servedSchemaSpec() as unknown as Record<string, unknown>;

  it("carries package.json's version, homepage and repository (a URL a browser opens), what a registry page shows", () => {
    expect(served.version).toBe(pkg.version);
    expect(served.homepage).toBe(pkg.homepage);
    expect(served.repository).toMatch(/^https:\/\/\S+[^/]$/);
    expect(served.repository).not.toMatch(/^git\+|\.git$/);
    expect(String(pkg.repository.url)).toContain(String(served.repository));
  });

  it("is schema.json otherwise", () => {
    const file = JSON.parse(readFileSync(path.join(ROOT, "provider/schema/schema.json"), "utf8"));
    const { version: _v, homepage: _h, repository: _r, ...rest } = served;
    expect(rest).toEqual(file);
  });
});
