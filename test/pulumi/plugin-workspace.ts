/**
 * What the provider plugin's CLI tests share (plugin.test.ts,
 * plugin-languages.test.ts): a project that finds the plugin in bin/ by
 * `plugins.providers[].path` (no PATH, no plugin install), the test host's
 * configuration under the plugin's namespace, the arguments of a proxy
 * that boots no guest, the SDKs kept in sdk/ (what the generators make of
 * the schema the plugin serves: sdk.test.ts), and a secret as `stack export
 * --show-secrets` shows it.
 */
import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { repoRoot, type TestHost } from "../support/test-host";
import { hostsConfig, TEST_PROXY_ARGS, Workspace } from "./harness";

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

/** The Go SDK's module path (sdk/go/go.mod): a program requires it, replaced by the folder. */
export const GO_SDK_MODULE = "github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go";

/** A copy of the repository's `lang` SDK (sdk/<lang>) in `dir` (emptied first): building it writes beside its files. */
export function copiedSdk(lang: "nodejs" | "python", dir: string): string {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const out = path.join(dir, lang);
  cpSync(path.join(repoRoot, "sdk", lang), out, { recursive: true });
  return out;
}

/** A secret as `stack export --show-secrets` shows it (`{<sig>, plaintext: <JSON>}`), decoded; anything else as it is. */
export function shownSecret(v: unknown): unknown {
  const plaintext = (v as { plaintext?: unknown } | undefined)?.plaintext;
  return typeof plaintext === "string" ? JSON.parse(plaintext) : v;
}
