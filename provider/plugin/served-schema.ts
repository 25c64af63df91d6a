/**
 * The package schema as the provider plugin serves it (schema.json with the
 * package's version), and that version: read from the package's files, so
 * the plugin, its members (plugin-kvm-proxy.ts) and the tests agree.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import type { Props } from "./property-values";

/** The package root: the nearest folder above this module with a package.json (from provider/ or dist/provider/). */
const PACKAGE_ROOT = (() => {
  let dir = __dirname;
  while (!existsSync(path.join(dir, "package.json")) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
})();

/** What package.json says of the package that a registry page shows. */
interface PackageJson {
  version: string;
  homepage?: string;
  repository?: string | { url?: string };
}

function packageJson(): PackageJson {
  return JSON.parse(readFileSync(path.join(PACKAGE_ROOT, "package.json"), "utf8")) as PackageJson;
}

/** The package's version (package.json), which the plugin reports and the schema carries. */
export function packageVersion(): string {
  return packageJson().version;
}

/** The schema's version, homepage and repository (a browsable URL), from package.json. */
export function packageMetadata(): { version: string; homepage?: string; repository?: string } {
  const pkg = packageJson();
  const repo = typeof pkg.repository === "string" ? pkg.repository : pkg.repository?.url;
  const repository = repo?.replace(/^git\+/, "").replace(/\.git$/, "");
  return {
    version: pkg.version,
    ...(pkg.homepage !== undefined ? { homepage: pkg.homepage } : {}),
    ...(repository !== undefined ? { repository } : {}),
  };
}

/** The served schema's parts the plugin reads itself. */
export interface ServedSchemaSpec {
  version: string;
  resources: Record<string, { properties: Record<string, { secret?: boolean }> }>;
  types: Record<string, { properties: Record<string, unknown> }>;
}

let spec: ServedSchemaSpec | undefined;

/** The package schema as the plugin serves it: schema.json with package.json's version, homepage and repository (read once). */
export function servedSchemaSpec(): ServedSchemaSpec {
  spec ??= {
    ...(JSON.parse(readFileSync(path.join(PACKAGE_ROOT, "provider/schema/schema.json"), "utf8")) as Props),
    ...packageMetadata(),
  } as unknown as ServedSchemaSpec;
  return spec;
}

/** The served schema as its JSON text. */
export function servedSchema(): string {
  return JSON.stringify(servedSchemaSpec());
}
