/**
 * The SDKs kept in sdk/ (scripts/sdk): what pkg/v3's generators make of the
 * schema the plugin serves, installed the way each language installs a
 * package, offline, into programs outside the repository:
 * - sdk/ is what a regeneration writes (a schema changed without
 *   `scripts/sdk gen` fails here);
 * - Node.js: npm's tarball installs with npm, and a TypeScript program
 *   compiles against its types (one with a wrong type does not);
 * - Python: the wheel and the sdist (`python -m build`) pip-install into
 *   fresh virtual environments, with the version of the package;
 * - Go: a program's module requires the SDK's module by its path (a replace
 *   to sdk/go stands for the published tag) and builds; one with a wrong
 *   type does not.
 * Programs that run through the plugin: plugin.test.ts (Node.js) and
 * plugin-languages.test.ts (YAML, Python, Go).
 */
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageVersion } from "../../provider/plugin/served-schema";
import { repoRoot } from "../support/test-host";
import { runTool } from "./harness";

const SDK = path.join(repoRoot, "sdk");
const GO_MODULE = "github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go";
const WHEELS = path.join(repoRoot, ".tools/pulumi/wheels");
const TSC = path.join(repoRoot, "node_modules/typescript/bin/tsc");
const version = packageVersion();

const run = runTool;
/** Outside the repository: nothing resolves through its node_modules. */
let dir: string;
/** What `scripts/sdk pack` made. */
let packed: { npm: string; wheel: string; sdist: string };

/** Every file under `root`, relative, sorted. */
function filesUnder(root: string, rel = ""): string[] {
  return readdirSync(path.join(root, rel), { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? filesUnder(root, path.join(rel, e.name)) : [path.join(rel, e.name)]))
    .sort();
}

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "kvmpt-sdk-"));
  const r = run(path.join(repoRoot, "scripts/sdk"), ["pack", path.join(dir, "dist")], repoRoot);
  expect(r.code, r.out).toBe(0);
  packed = {
    npm: path.join(dir, "dist", `kvmproxy-sdk-${version}.tgz`),
    wheel: path.join(dir, "dist", `pulumi_kvmproxy-${version}-py3-none-any.whl`),
    sdist: path.join(dir, "dist", `pulumi_kvmproxy-${version}.tar.gz`),
  };
  expect(r.out.trim().split("\n")).toEqual([packed.npm, packed.wheel, packed.sdist]);
}, 300_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("sdk/", () => {
  it("is what the generators make of the schema the plugin serves: no file added, missing or changed", () => {
    const fresh = path.join(dir, "fresh");
    const r = run(path.join(repoRoot, "scripts/sdk"), ["gen", fresh], repoRoot);
    expect(r.code, r.out).toBe(0);
    // Written by hand, not generated.
    const handWritten = new Set(["README.md", "go/go.mod", "go/go.sum"]);
    const kept = filesUnder(SDK).filter((f) => !handWritten.has(f));
    expect(kept).toEqual(filesUnder(fresh));
    const changed = kept.filter(
      (f) => readFileSync(path.join(SDK, f), "utf8") !== readFileSync(path.join(fresh, f), "utf8"),
    );
    expect(changed, "run scripts/sdk gen").toEqual([]);
    expect(kept).toContain("python/pulumi_kvmproxy/kvm_proxy.py");
  });
});

describe("the Node.js SDK, npm's tarball", () => {
  let program: string;
  const tsc = () => run(process.execPath, [TSC, "-p", "tsconfig.json"], program);

  beforeAll(() => {
    program = path.join(dir, "node-program");
    mkdirSync(program);
    // @pulumi/pulumi at the repository's version: its lock names every package the npm cache holds.
    const pulumi = (
      JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")) as {
        devDependencies: Record<string, string>;
      }
    ).devDependencies["@pulumi/pulumi"];
    writeFileSync(
      path.join(program, "package.json"),
      JSON.stringify({
        name: "edge",
        private: true,
        dependencies: { "@kvmproxy/sdk": `file:${packed.npm}`, "@pulumi/pulumi": pulumi },
      }),
    );
    copyFileSync(path.join(repoRoot, "package-lock.json"), path.join(program, "package-lock.json"));
    writeFileSync(
      path.join(program, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: "commonjs",
          target: "ES2022",
          noEmit: true,
          skipLibCheck: true,
        },
        files: ["index.ts"],
      }),
    );
  });

  it("installs with npm, offline, and loads with the package's version", () => {
    const npm = run(
      "npm",
      ["install", "--offline", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"],
      program,
    );
    expect(npm.code, npm.out).toBe(0);
    const node = run(
      process.execPath,
      [
        "-e",
        'const k = require("@kvmproxy/sdk"); console.log(typeof k.KvmProxy, typeof k.ProxyFleet, require("@kvmproxy/sdk/package.json").version)',
      ],
      program,
    );
    expect(node.out).toBe(`function function ${version}\n`);
  });

  it("types a program declaring a proxy with auth, a host in full and its outputs", () => {
    writeFileSync(
      path.join(program, "index.ts"),
      `import * as kvmproxy from "@kvmproxy/sdk";
const p = new kvmproxy.KvmProxy("edge", {
  host: { key: "hv-1", uri: "ssh://root@hv-1", knownHosts: "hv-1 ssh-ed25519 AAAA" },
  image: "debian-12",
  memoryMiB: 768,
  proxy: { auth: { username: "crawler", password: "a-long-secret-1" }, allowedClients: ["198.51.100.0/24"] },
  healthCheck: false,
});
export const url: kvmproxy.KvmProxy["proxyUrl"] = p.proxyUrl;
`,
    );
    const r = tsc();
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  });

  it("refuses a program giving memoryMiB as text", () => {
    writeFileSync(
      path.join(program, "index.ts"),
      `import * as kvmproxy from "@kvmproxy/sdk";\nnew kvmproxy.KvmProxy("edge", { host: "hv-1", image: "i", memoryMiB: "768" });\n`,
    );
    const r = tsc();
    expect(r.out).toMatch(
      /index\.ts\(\d+,\d+\): error TS2322: Type 'string' is not assignable to type 'Input<number/,
    );
    expect(r.code).not.toBe(0);
  });
});

describe("the Python SDK, a wheel and an sdist", () => {
  it.each([
    ["wheel", () => packed.wheel],
    ["sdist", () => packed.sdist],
  ])(
    "the %s pip-installs into a fresh virtual environment, offline, with the package's version and the resource's arguments as Python names them",
    (kind, file) => {
      const venv = path.join(dir, `venv-${kind}`);
      const made = run("python3", ["-m", "venv", venv], dir);
      expect(made.code, made.out).toBe(0);
      const pip = run(
        path.join(venv, "bin/pip"),
        ["install", "--quiet", "--disable-pip-version-check", "--no-index", "--find-links", WHEELS, file()],
        dir,
      );
      expect(pip.code, pip.out).toBe(0);
      const py = run(
        path.join(venv, "bin/python"),
        [
          "-c",
          `import importlib.metadata as m, inspect, pulumi_kvmproxy as k
print(m.version("pulumi_kvmproxy"), k.KvmProxy.__name__, k.ProxyFleet.__name__)
print(inspect.signature(k.KvmProxyArgs.__init__).parameters["host"].annotation)`,
        ],
        dir,
      );
      expect(py.code, py.out).toBe(0);
      const [first, second] = py.out.split("\n");
      expect(first).toBe(`${version} KvmProxy ProxyFleet`);
      // Input[...] evaluated: the union of str and the two typed forms, each possibly an Output.
      expect(second).toMatch(
        /^typing\.Union\[str, ForwardRef\('HostInputArgs'\), ForwardRef\('HostPoolArgs'\),/,
      );
    },
    300_000,
  );
});

describe("the Go SDK, a module a program requires by its path", () => {
  let program: string;
  /** Builds the program offline, with the flags of the CLI's build, whose compiled packages the build cache holds. */
  const build = () =>
    run("go", ["build", "-trimpath", "./..."], program, {
      ...process.env,
      GOFLAGS: "-mod=mod",
      GOPROXY: "off",
      CGO_ENABLED: "0",
    });

  beforeAll(() => {
    program = path.join(dir, "go-program");
    mkdirSync(program);
    const goLine = /^go .*$/m.exec(readFileSync(path.join(SDK, "go/go.mod"), "utf8"))?.[0];
    writeFileSync(
      path.join(program, "go.mod"),
      `module example.com/edge\n\n${goLine}\n\nrequire ${GO_MODULE} v${version}\n\nreplace ${GO_MODULE} => ${path.join(SDK, "go")}\n`,
    );
    copyFileSync(path.join(SDK, "go/go.sum"), path.join(program, "go.sum"));
  });

  function main(body: string) {
    writeFileSync(
      path.join(program, "main.go"),
      `package main

import (
	"${GO_MODULE}/kvmproxy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
${body}
	})
}
`,
    );
  }

  it("builds a program declaring a proxy", () => {
    main(`		p, err := kvmproxy.NewKvmProxy(ctx, "edge", &kvmproxy.KvmProxyArgs{
			Host:      pulumi.String("hv-1"),
			Image:     pulumi.String("debian-12"),
			MemoryMiB: pulumi.Int(768),
			Proxy: &kvmproxy.ProxyArgs{
				Auth: &kvmproxy.ProxyAuthArgs{Username: pulumi.String("crawler"), Password: pulumi.String("a-long-secret-1")},
			},
		})
		if err != nil {
			return err
		}
		ctx.Export("url", p.ProxyUrl)
		return nil`);
    const r = build();
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  }, 600_000);

  it("refuses a program giving MemoryMiB as text", () => {
    main(`		_, err := kvmproxy.NewKvmProxy(ctx, "edge", &kvmproxy.KvmProxyArgs{Host: pulumi.String("hv-1"), Image: pulumi.String("i"), MemoryMiB: pulumi.String("768")})
		return err`);
    const r = build();
    expect(r.out).toMatch(/cannot use pulumi\.String\("768"\)/);
    expect(r.code).not.toBe(0);
  }, 600_000);
});
