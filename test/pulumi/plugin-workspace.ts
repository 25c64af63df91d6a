/**
 * What the provider plugin's CLI tests share (plugin.test.ts,
 * plugin-languages.test.ts): a project that finds the plugin in bin/ by
 * `plugins.providers[].path` (no PATH, no plugin install), the test host's
 * configuration under the plugin's namespace, the arguments of a proxy
 * that boots no guest, the SDKs generated from the schema the plugin
 * serves, and a secret as `stack export --show-secrets` shows it.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import YAML from "yaml";
import { servedSchema } from "../../provider/plugin/server";
import { repoRoot, type TestHost } from "../support/test-host";
import { hostsConfig, runTool, TEST_PROXY_ARGS, Workspace } from "./harness";

export const KVM_PROXY_TYPE = "kvmproxy:index:KvmProxy";

/** A proxy on the test host that boots no guest (TEST_PROXY_ARGS), from the tiny test image. */
export const PLUGIN_PROXY_ARGS = { host: "local", image: "tiny", ...TEST_PROXY_ARGS };

/** The virtual environment of the Python SDK the CLI's Python host runs programs with (scripts/pulumi-cli). */
export const PYTHON_VENV = path.join(repoRoot, ".tools/pulumi/python");

/** `kvm:hosts`/`kvm:images` of the test host under the plugin's namespace. */
export function pluginConfig(host: TestHost): Record<string, unknown> {
  const c = hostsConfig(host, ["local"]);
  return { "kvmproxy:hosts": c["kvm:hosts"], "kvmproxy:images": c["kvm:images"] };
}

/**
 * A project whose Pulumi.yaml is `project` (name, runtime, and for YAML its
 * resources; `main` may be absolute) plus the plugin's path, with `files`
 * beside it and one stack.
 */
export function pluginWorkspace(
  tag: string,
  project: Record<string, unknown> & { name: string },
  files: Record<string, string> = {},
): Workspace {
  const ws = new Workspace(tag, { name: project.name, files });
  const main = project.main;
  const doc = {
    ...project,
    ...(typeof main === "string" && path.isAbsolute(main) ? { main: path.relative(ws.dir, main) } : {}),
    plugins: { providers: [{ name: "kvmproxy", path: path.join(repoRoot, "bin") }] },
  };
  writeFileSync(path.join(ws.dir, "Pulumi.yaml"), YAML.stringify(doc));
  return ws;
}

/** The `lang` SDK of the schema the plugin serves, generated into `dir` (emptied first). */
export function generateSdk(lang: "nodejs" | "python" | "go", dir: string): string {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const schemaFile = path.join(dir, "schema.json");
  writeFileSync(schemaFile, servedSchema());
  const out = path.join(dir, lang);
  const gen = runTool("kvmproxy-schema", ["gen-sdk", lang, schemaFile, out], repoRoot);
  expect(gen.out).toMatch(new RegExp(`^ok: ${lang} SDK`));
  return out;
}

/** A secret as `stack export --show-secrets` shows it (`{<sig>, plaintext: <JSON>}`), decoded; anything else as it is. */
export function shownSecret(v: unknown): unknown {
  const plaintext = (v as { plaintext?: unknown } | undefined)?.plaintext;
  return typeof plaintext === "string" ? JSON.parse(plaintext) : v;
}
