/**
 * What the provider plugin's CLI tests share (plugin.test.ts,
 * plugin-languages.test.ts, plugin-install.test.ts): a project that finds
 * the plugin in bin/ by `plugins.providers[].path` (no PATH, no plugin
 * install), or the plugin installed from its archive as a user installs it
 * and a project that names no path, the test host's
 * configuration under the plugin's namespace, the arguments of a proxy
 * that boots no guest, the SDKs kept in sdk/ (what the generators make of
 * the schema the plugin serves: sdk.test.ts), and a secret as `stack export
 * --show-secrets` shows it.
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import YAML from "yaml";
import { packageVersion } from "../../provider/plugin/served-schema";
import { repoRoot, type TestHost } from "../support/test-host";
import { hostsConfig, pulumiEnv, runTool, TEST_PROXY_ARGS, Workspace } from "./harness";

export const KVM_PROXY_TYPE = "kvmproxy:index:KvmProxy";

/** A proxy on the test host that boots no guest (TEST_PROXY_ARGS), from the tiny test image. */
export const PLUGIN_PROXY_ARGS = { host: "local", image: "tiny", ...TEST_PROXY_ARGS };

/** `kvm:hosts`/`kvm:images` of the test host under the plugin's namespace. */
export function pluginConfig(host: TestHost): Record<string, unknown> {
  const c = hostsConfig(host, ["local"]);
  return { "kvmproxy:hosts": c["kvm:hosts"], "kvmproxy:images": c["kvm:images"] };
}

/** The plugin's executable, in bin/ and at the root of its archive. */
export const PLUGIN_EXECUTABLE = "pulumi-resource-kvmproxy";

/** The plugin installed as a user installs it (docs/guides/languages.md). */
export interface InstalledPlugin {
  /** The archive scripts/plugin-archive made. */
  archive: string;
  /** The CLI's environment: a PULUMI_HOME of its own holding the plugin, and no plugin on the PATH. */
  env: NodeJS.ProcessEnv;
}

/**
 * The CLI's environment with `home` as PULUMI_HOME and a PATH without any
 * folder holding a pulumi-resource-kvmproxy (the engine prefers one on the
 * PATH to an installed one); the Pulumi Registry is not asked.
 */
export function pluginFreeEnv(home: string): NodeJS.ProcessEnv {
  const base = pulumiEnv();
  const dirs = (base.PATH ?? "")
    .split(path.delimiter)
    .filter((d) => d !== "" && !existsSync(path.join(d, PLUGIN_EXECUTABLE)));
  return {
    ...base,
    PATH: dirs.join(path.delimiter),
    PULUMI_HOME: home,
    PULUMI_DISABLE_REGISTRY_RESOLVE: "true",
  };
}

/** The archive scripts/plugin-archive makes, written into `dir`: its path. */
export function pluginArchive(dir: string): string {
  const made = spawnSync(path.join(repoRoot, "scripts/plugin-archive"), [dir], {
    cwd: repoRoot,
    // From the npm cache only: a test reaches no registry.
    env: { ...process.env, KVMP_OFFLINE: "1" },
    encoding: "utf8",
    timeout: 600_000,
  });
  if (made.status !== 0) throw new Error(`scripts/plugin-archive exited ${made.status}:\n${made.stderr}`);
  return made.stdout.trim();
}

/**
 * The plugin as the docs install it: its archive made into `dir`, then
 * `pulumi plugin install resource kvmproxy <version> --file <archive>` into
 * the PULUMI_HOME `dir`/home.
 */
export function installPlugin(dir: string): InstalledPlugin {
  const archive = pluginArchive(path.join(dir, "dist"));
  const env = pluginFreeEnv(path.join(dir, "home"));
  const r = spawnSync(
    "pulumi",
    ["plugin", "install", "resource", "kvmproxy", packageVersion(), "--file", archive, "--non-interactive"],
    { cwd: dir, env, encoding: "utf8", timeout: 600_000 },
  );
  if (r.status !== 0) throw new Error(`pulumi plugin install exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return { archive, env };
}

/**
 * A project whose Pulumi.yaml is `project` (name, runtime, and for YAML its
 * resources; `main` may be absolute) with `files` beside it and one stack.
 * It finds the plugin by the path of bin/, or, given `installed`, by name
 * alone from that installation, in a folder under `installed.root` (outside
 * the repository, where a user's project is).
 */
export function pluginWorkspace(
  tag: string,
  project: Record<string, unknown> & { name: string },
  files: Record<string, string> = {},
  installed?: InstalledPlugin & { root: string },
): Workspace {
  const ws = new Workspace(tag, { name: project.name, files }, installed?.root);
  const main = project.main;
  const doc = {
    ...project,
    ...(typeof main === "string" && path.isAbsolute(main) ? { main: path.relative(ws.dir, main) } : {}),
    ...(installed === undefined
      ? { plugins: { providers: [{ name: "kvmproxy", path: path.join(repoRoot, "bin") }] } }
      : {}),
  };
  writeFileSync(path.join(ws.dir, "Pulumi.yaml"), YAML.stringify(doc));
  if (installed !== undefined) ws.extraEnv = installed.env;
  return ws;
}

/** The Go SDK's module path (sdk/go/go.mod): a program requires it, replaced by the folder. */
export const GO_SDK_MODULE = "github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go";

/** A Go program's module files: `example.com/edge` requiring the SDK's module by its path, replaced by sdk/go (standing for its tag). */
export function goProgramModule(): { "go.mod": string; "go.sum": string } {
  const sdk = path.join(repoRoot, "sdk/go");
  const goLine = /^go .*$/m.exec(readFileSync(path.join(sdk, "go.mod"), "utf8"))?.[0];
  return {
    "go.mod": `module example.com/edge\n\n${goLine}\n\nrequire ${GO_SDK_MODULE} v${packageVersion()}\n\nreplace ${GO_SDK_MODULE} => ${sdk}\n`,
    "go.sum": readFileSync(path.join(sdk, "go.sum"), "utf8"),
  };
}

/** The toolchain's wheels of the Python SDK's dependencies (scripts/pulumi-cli): PyPI for the offline tests. */
const WHEELS = path.join(repoRoot, ".tools/pulumi/wheels");

/** A fresh virtual environment at `venv` with `packages` pip-installed offline, their dependencies from the toolchain's wheels: its python. */
export function venvWith(venv: string, ...packages: string[]): string {
  const made = runTool("python3", ["-m", "venv", venv], path.dirname(venv));
  expect(made.code, made.out).toBe(0);
  const pip = runTool(
    path.join(venv, "bin/pip"),
    ["install", "--quiet", "--disable-pip-version-check", "--no-index", "--find-links", WHEELS, ...packages],
    path.dirname(venv),
  );
  expect(pip.code, pip.out).toBe(0);
  return path.join(venv, "bin/python");
}

/** A copy of the repository's `lang` SDK (sdk/<lang>) in `dir` (emptied first): building it writes beside its files. */
export function copiedSdk(lang: "nodejs", dir: string): string {
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
