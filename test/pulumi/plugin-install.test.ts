/**
 * The provider plugin as a user of any Pulumi language installs it: the
 * archive scripts/plugin-archive makes, installed with `pulumi plugin
 * install resource kvmproxy <version> --file <archive>` into a PULUMI_HOME
 * of this file's own (no other plugin counts), then found by its name alone:
 * a Pulumi YAML program whose Pulumi.yaml has no `plugins:` section previews
 * a KvmProxy to create, and `pulumi package get-schema kvmproxy` returns the
 * schema the installed plugin serves. The CLI runs with a PATH that holds
 * no `pulumi-resource-kvmproxy`: the engine prefers one on the PATH to an
 * installed plugin.
 *
 * No libvirt host is reached: a preview of a create calls the plugin's
 * CheckConfig, Configure and Check, and none of them connects (a host's
 * connection opens at its first operation). The stack's host is a socket
 * that does not exist, so a plugin that connected would fail the preview.
 *
 * `pulumi package gen-sdk kvmproxy --language python` cannot write an SDK
 * with this toolset: the CLI loads the schema as get-schema does, then asks
 * the Python language host to generate the SDK (GeneratePackage), and the
 * host here is this project's minimal one (tools/pulumi, built by
 * scripts/pulumi-cli: the official hosts are not served by the Go module
 * proxy), which implements running a program only. The test asserts that
 * answer, and writes the Python SDK from the schema get-schema returned with
 * the toolset's kvmproxy-schema: the same pkg/v3 generator the official
 * host calls. The package commands run with PULUMI_DISABLE_REGISTRY_RESOLVE:
 * an installed plugin resolves before the Pulumi Registry is asked, and
 * this keeps the registry out of the test whatever the CLI version does.
 *
 * The archive is built by the script itself (tsc and an offline npm install
 * from the npm cache, about half a minute).
 */
import { spawn, spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { packageVersion } from "../../provider/plugin/served-schema";
import { repoRoot } from "../support/test-host";
import { failureText, runTool, TEST_PROXY_ARGS, Workspace } from "./harness";
import { KVM_PROXY_TYPE, PLUGIN_EXECUTABLE, pluginArchive, pluginFreeEnv } from "./plugin-workspace";

/** Outside the repository: the installed plugin resolves nothing through the checkout's node_modules. */
const ROOT = mkdtempSync(path.join(os.tmpdir(), "kvmpt-plugin-install-"));
const CLI_BIN = path.join(repoRoot, ".tools/pulumi/bin");
const PULUMI = path.join(CLI_BIN, "pulumi");
const PLUGIN = PLUGIN_EXECUTABLE;
const VERSION = packageVersion();
/** A libvirt socket that does not exist: the plugin must not need its host to preview a create. */
const NO_HOST = {
  "kvmproxy:hosts": {
    local: {
      uri: "unix:///nonexistent/kvmp-plugin-install/libvirt-sock",
      domainType: "qemu",
      pool: "default",
      network: "default",
    },
  },
  "kvmproxy:images": { tiny: { url: "/nonexistent/kvmp-plugin-install/empty.qcow2", firmware: "bios" } },
};

let archive: string;

/** The CLI (`args`, not interactive, no colours) in `cwd`: its exit code, stdout, and stdout with stderr. */
function cli(args: string[], cwd: string, env: NodeJS.ProcessEnv) {
  const r = spawnSync(PULUMI, [...args, "--non-interactive", "--color", "never"], {
    cwd,
    env,
    encoding: "utf8",
    timeout: 600_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.error !== undefined) throw r.error;
  return { code: r.status, stdout: r.stdout, output: `${r.stdout}\n${r.stderr}` };
}

/** An empty folder under ROOT. */
function freshDir(name: string): string {
  const dir = path.join(ROOT, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

beforeAll(() => {
  freshDir(".");
  archive = pluginArchive(path.join(ROOT, "dist"));
});

afterAll(() => {
  rmSync(ROOT, { recursive: true, force: true });
});

describe("the plugin archive scripts/plugin-archive makes", () => {
  it("is named pulumi-resource-kvmproxy-v<version>-<os>-<arch>.tar.gz and holds at its root an executable pulumi-resource-kvmproxy, the compiled provider, the schema, package.json and the dependencies with @pulumi/pulumi (no PulumiPlugin.yaml)", () => {
    expect(path.dirname(archive)).toBe(path.join(ROOT, "dist"));
    expect(path.basename(archive)).toMatch(
      new RegExp(
        `^pulumi-resource-kvmproxy-v${VERSION.replace(/\./g, "\\.")}-(linux|darwin)-(amd64|arm64)\\.tar\\.gz$`,
      ),
    );
    expect(statSync(archive).isFile()).toBe(true);
    const listing = spawnSync("tar", ["-tzf", archive], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
    expect(listing.status, listing.stderr).toBe(0);
    const entries = new Set(listing.stdout.split("\n").map((l) => l.replace(/\/$/, "")));
    const launcher = runTool("tar", ["-tvzf", archive, PLUGIN], ROOT);
    expect(launcher.out).toMatch(/^-rwx/);
    for (const file of [
      "package.json",
      "provider/schema/schema.json",
      "dist/provider/plugin/plugin-main.js",
      "dist/provider/plugin/server.js",
      "node_modules/@pulumi/pulumi/package.json",
      "node_modules/ssh2/package.json",
    ]) {
      expect(entries.has(file), file).toBe(true);
    }
    expect(entries.has("PulumiPlugin.yaml")).toBe(false);
  });
});

describe("`pulumi plugin install resource kvmproxy <version> --file <archive>`", () => {
  let home: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(() => {
    home = freshDir("home");
    env = pluginFreeEnv(home);
    const r = cli(["plugin", "install", "resource", "kvmproxy", VERSION, "--file", archive], ROOT, env);
    expect(r.code, failureText(r)).toBe(0);
  });

  it("installs the plugin into PULUMI_HOME, where `pulumi plugin ls` lists it as the resource plugin kvmproxy at the package's version", () => {
    const r = cli(["plugin", "ls", "--output", "json"], ROOT, env);
    expect(r.code, failureText(r)).toBe(0);
    const plugins = JSON.parse(r.stdout) as { name: string; kind: string; version: string }[];
    expect(plugins.map(({ name, kind, version }) => ({ name, kind, version }))).toEqual([
      { name: "kvmproxy", kind: "resource", version: VERSION },
    ]);
    const launcher = path.join(home, "plugins", `resource-kvmproxy-v${VERSION}`, PLUGIN);
    expect(statSync(launcher).mode & 0o111).not.toBe(0);
  });

  it("starts the installed launcher from a symlink in another folder: it finds its code beside its real path and serves, printing its port", async () => {
    const link = path.join(freshDir("link"), PLUGIN);
    symlinkSync(path.join(home, "plugins", `resource-kvmproxy-v${VERSION}`, PLUGIN), link);
    const child = spawn(link, [], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    try {
      const firstLine = await new Promise<string>((resolve, reject) => {
        let out = "";
        let err = "";
        child.stdout.on("data", (b: Buffer) => {
          out += b.toString();
          if (out.includes("\n")) resolve(out.split("\n")[0] as string);
        });
        child.stderr.on("data", (b: Buffer) => {
          err += b.toString();
        });
        child.on("error", reject);
        child.on("exit", (code) => reject(new Error(`the launcher exited ${code}: ${err}`)));
      });
      expect(firstLine).toMatch(/^\d+$/);
    } finally {
      child.kill();
    }
  });

  it("lets a Pulumi YAML program with no `plugins:` section preview a KvmProxy to create, reaching no libvirt host; without the install the same program finds no plugin", () => {
    const ws = new Workspace("install-yaml", { name: "kvmpt-install" }, ROOT);
    const project = {
      name: "kvmpt-install",
      runtime: "yaml",
      resources: {
        proxy: { type: KVM_PROXY_TYPE, properties: { host: "local", image: "tiny", ...TEST_PROXY_ARGS } },
      },
    };
    writeFileSync(path.join(ws.dir, "Pulumi.yaml"), YAML.stringify(project));
    expect(YAML.parse(readFileSync(path.join(ws.dir, "Pulumi.yaml"), "utf8"))).not.toHaveProperty("plugins");
    ws.setConfig(NO_HOST);

    ws.extraEnv = env;
    const r = ws.run("preview");
    expect(r.code, failureText(r)).toBe(0);
    expect(r.stdout).toMatch(/\+\s+kvmproxy:index:KvmProxy\s+proxy\s+create/);
    expect(r.stdout).toMatch(/\+ 2 to create/);
    expect(r.output).not.toContain("from $PATH");

    ws.extraEnv = pluginFreeEnv(freshDir("empty-home"));
    const bare = ws.run("preview");
    expect(bare.code).not.toBe(0);
    expect(bare.output).toContain(`no resource plugin '${PLUGIN}' found`);
  });

  it("lets `pulumi package get-schema kvmproxy` return the schema the installed plugin serves", () => {
    const r = cli(["package", "get-schema", "kvmproxy"], freshDir("get-schema"), env);
    expect(r.code, failureText(r)).toBe(0);
    const schema = JSON.parse(r.stdout) as { name: string; version: string };
    expect(schema.name).toBe("kvmproxy");
    expect(schema.version).toBe(VERSION);
  });

  it("makes `pulumi package gen-sdk kvmproxy --language python` reach the Python host, which here cannot generate (GeneratePackage unimplemented); the installed plugin's schema generates the Python SDK", () => {
    const dir = freshDir("gen-sdk");
    const out = path.join(dir, "sdk");
    const gen = cli(["package", "gen-sdk", "kvmproxy", "--language", "python", "--out", out], dir, env);
    expect(gen.code).not.toBe(0);
    expect(gen.output).toContain("method GeneratePackage not implemented");

    const got = cli(["package", "get-schema", "kvmproxy"], dir, env);
    expect(got.code, failureText(got)).toBe(0);
    const schemaFile = path.join(dir, "schema.json");
    writeFileSync(schemaFile, got.stdout);
    const sdk = runTool(
      path.join(CLI_BIN, "kvmproxy-schema"),
      ["gen-sdk", "python", schemaFile, out],
      dir,
      env,
    );
    expect(sdk.out).toMatch(/^ok: python SDK/);
    for (const file of ["setup.py", "pulumi_kvmproxy/__init__.py", "pulumi_kvmproxy/kvm_proxy.py"]) {
      expect(existsSync(path.join(out, file)), file).toBe(true);
    }
  });
});
