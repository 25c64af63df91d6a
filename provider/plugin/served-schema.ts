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

/** The package's version (package.json), which the plugin reports and the schema carries. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(path.join(PACKAGE_ROOT, "package.json"), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

/** The served schema's parts the plugin reads itself. */
export interface ServedSchemaSpec {
  version: string;
  resources: Record<string, { properties: Record<string, { secret?: boolean }> }>;
  types: Record<string, { properties: Record<string, unknown> }>;
}

let spec: ServedSchemaSpec | undefined;

/** The package schema as the plugin serves it: schema.json with the package's version (read once). */
export function servedSchemaSpec(): ServedSchemaSpec {
  spec ??= {
    ...(JSON.parse(readFileSync(path.join(PACKAGE_ROOT, "provider/schema/schema.json"), "utf8")) as Props),
    version: packageVersion(),
  } as unknown as ServedSchemaSpec;
  return spec;
}

/** The served schema as its JSON text. */
export function servedSchema(): string {
  return JSON.stringify(servedSchemaSpec());
}
