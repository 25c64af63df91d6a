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
 * - the examples every resource's description carries (what a registry page
 *   and each SDK's doc comments show), taken out of the served schema: the
 *   TypeScript one compiles against npm's tarball, the Python one runs
 *   under the SDK's mocks in a venv with the wheel (every resource and
 *   argument constructed as the SDK takes them), the Go one builds in the
 *   program's module, and the YAML one names the schema's types and
 *   properties and previews through the plugin.
 * Programs that run through the plugin: plugin.test.ts (Node.js) and
 * plugin-languages.test.ts (YAML, Python, Go).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { packageVersion, servedSchema } from "../../provider/plugin/served-schema";
import { exampleFileStem, examplesOf } from "../../tools/schema/examples";
import { lockedVersions, npmInstallOffline } from "../support/npm-offline";
import { repoRoot } from "../support/test-host";
import { failureText, runTool, Workspace } from "./harness";
import { GO_SDK_MODULE, goProgramModule, venvWith } from "./plugin-workspace";

const SDK = path.join(repoRoot, "sdk");
const TSC = path.join(repoRoot, "node_modules/typescript/bin/tsc");
const version = packageVersion();

const run = runTool;
/** Outside the repository: nothing resolves through its node_modules. */
let dir: string;
/** What `scripts/sdk pack` made. */
let packed: { npm: string; wheel: string; sdist: string };

/** The parts of the served schema the examples' tests read. */
interface SchemaObject {
  properties?: Record<string, SchemaProperty>;
  required?: string[];
}
type SchemaProperty = {
  $ref?: string;
  type?: string;
  items?: SchemaProperty;
  additionalProperties?: SchemaProperty;
  oneOf?: SchemaProperty[];
};
interface Served {
  resources: Record<
    string,
    SchemaObject & {
      description: string;
      inputProperties: Record<string, SchemaProperty>;
      requiredInputs?: string[];
    }
  >;
  types: Record<string, SchemaObject>;
}
/** The schema the plugin serves: its descriptions are what a registry page and the SDKs' doc comments show. */
const served = JSON.parse(servedSchema()) as Served;

/** Each resource's `lang` example, as its description in the served schema holds it: [token, code]. */
function schemaExamples(lang: string): [string, string][] {
  return Object.entries(served.resources).map(([token, r]) => {
    const found = examplesOf(r.description).filter((e) => e.lang === lang);
    if (found.length !== 1) throw new Error(`${token}'s description holds ${found.length} ${lang} examples`);
    return [token, (found[0] as { code: string }).code];
  });
}

/** `kvmproxy:index:KvmProxy` -> `kvm-proxy`. */
const stemOf = (token: string) => exampleFileStem(token.replace(/^.*:/, ""));

/**
 * What in a Pulumi YAML program disagrees with the served schema: a resource
 * type it lacks, an input it does not name (at any depth, through object
 * types, arrays, maps and a `oneOf`'s object alternative), a required input
 * left out, an output exported that the resource does not have.
 */
function yamlProblems(program: {
  resources?: Record<string, { type: string; properties?: Record<string, unknown> }>;
  outputs?: Record<string, unknown>;
}): string[] {
  const problems: string[] = [];
  const isInterpolation = (v: unknown) => typeof v === "string" && /^\$\{[^}]+\}$/.test(v);
  const checkObject = (
    value: Record<string, unknown>,
    properties: Record<string, SchemaProperty>,
    required: readonly string[],
    at: string,
  ) => {
    for (const name of required) if (!(name in value)) problems.push(`${at}: ${name} is required`);
    for (const [name, v] of Object.entries(value)) {
      const spec = properties[name];
      if (spec === undefined) problems.push(`${at}: no input ${name}`);
      else checkValue(v, spec, `${at}.${name}`);
    }
  };
  const objectType = (spec: SchemaProperty) =>
    spec.$ref === undefined ? undefined : served.types[spec.$ref.replace(/^#\/types\//, "")];
  const checkValue = (value: unknown, spec: SchemaProperty, at: string): void => {
    if (isInterpolation(value) || value === null) return;
    if (spec.oneOf !== undefined) {
      const objects = spec.oneOf.filter((alt) => alt.$ref !== undefined);
      if (typeof value === "object" && !Array.isArray(value) && objects.length > 0) {
        const fits = objects.find((alt) =>
          Object.keys(value).every((k) => k in (objectType(alt)?.properties ?? {})),
        );
        checkValue(value, fits ?? (objects[0] as SchemaProperty), at);
      }
      return;
    }
    const type = objectType(spec);
    if (spec.$ref !== undefined) {
      if (type === undefined) problems.push(`${at}: the schema has no type ${spec.$ref}`);
      else if (typeof value !== "object" || Array.isArray(value)) problems.push(`${at}: not an object`);
      else checkObject(value as Record<string, unknown>, type.properties ?? {}, type.required ?? [], at);
    } else if (spec.type === "array" && spec.items !== undefined) {
      if (!Array.isArray(value)) problems.push(`${at}: not a list`);
      else for (const [i, v] of value.entries()) checkValue(v, spec.items, `${at}[${i}]`);
    } else if (spec.type === "object" && spec.additionalProperties !== undefined) {
      for (const [k, v] of Object.entries(value as Record<string, unknown>))
        checkValue(v, spec.additionalProperties, `${at}.${k}`);
    }
  };
  const resources = program.resources ?? {};
  for (const [name, r] of Object.entries(resources)) {
    const resource = served.resources[r.type];
    if (resource === undefined) problems.push(`${name}: the schema has no resource ${r.type}`);
    else checkObject(r.properties ?? {}, resource.inputProperties, resource.requiredInputs ?? [], name);
  }
  for (const [key, v] of Object.entries(program.outputs ?? {})) {
    for (const m of String(v).matchAll(/\$\{(\w+)\.(\w+)\}/g)) {
      const type = resources[m[1] as string]?.type;
      const outputs = type === undefined ? undefined : served.resources[type]?.properties;
      if (outputs === undefined || !((m[2] as string) in outputs))
        problems.push(`outputs.${key}: ${m[1]} has no output ${m[2]}`);
    }
  }
  return problems;
}

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
    writeFileSync(path.join(program, "package.json"), JSON.stringify({ name: "edge", private: true }));
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
    // @pulumi/pulumi at the repository's version: its lock names every package the npm cache holds.
    npmInstallOffline(program, { "@kvmproxy/sdk": packed.npm, ...lockedVersions("@pulumi/pulumi") });
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

  it.each(schemaExamples("typescript"))("compiles the TypeScript example of %s's description", (_, code) => {
    writeFileSync(path.join(program, "index.ts"), code);
    const r = tsc();
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  });
});

describe("the Python SDK, a wheel and an sdist", () => {
  it.each([
    ["wheel", () => packed.wheel],
    ["sdist", () => packed.sdist],
  ])(
    "the %s pip-installs into a fresh virtual environment, offline, with the package's version and the resource's arguments as Python names them",
    (kind, file) => {
      const python = venvWith(path.join(dir, `venv-${kind}`), file());
      const py = run(
        python,
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

/**
 * Runs a Pulumi Python program under the SDK's mocks, the secret config
 * keys it names set: every resource and argument it declares is
 * constructed as the SDK takes them (a keyword the SDK lacks raises),
 * nothing is deployed.
 */
const PYTHON_MOCKS_RUNNER = `import runpy
import sys

import pulumi


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return [f"{args.name}-id", args.inputs]

    def call(self, args):
        return {}


program, *secrets = sys.argv[1:]
pulumi.runtime.set_mocks(Mocks(), project="example", stack="test", preview=False)
pulumi.runtime.set_all_config(
    {f"example:{k}": "an-example-secret-0123456789" for k in secrets}, [f"example:{k}" for k in secrets]
)
runpy.run_path(program, run_name="__main__")
print("ran")
`;

describe("the Python examples of the descriptions, in a venv with the wheel", () => {
  let python: string;

  beforeAll(() => {
    python = venvWith(path.join(dir, "venv-examples"), packed.wheel);
    writeFileSync(path.join(dir, "run_example.py"), PYTHON_MOCKS_RUNNER);
  }, 300_000);

  it.each(schemaExamples("python"))(
    "the example of %s's description runs under the SDK's mocks: it compiles, imports the SDK and declares its resources as the SDK takes them",
    (token, code) => {
      const file = path.join(dir, `${stemOf(token).replace(/-/g, "_")}.py`);
      writeFileSync(file, code);
      const secrets = [...code.matchAll(/require_secret\("(\w+)"\)/g)].map((m) => m[1] as string);
      const r = run(python, [path.join(dir, "run_example.py"), file, ...secrets], dir);
      expect(r.out).toBe("ran\n");
      expect(r.code).toBe(0);
    },
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
    for (const [name, text] of Object.entries(goProgramModule()))
      writeFileSync(path.join(program, name), text);
  });

  function main(body: string) {
    writeFileSync(
      path.join(program, "main.go"),
      `package main

import (
	"${GO_SDK_MODULE}/kvmproxy"
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

  it.each(schemaExamples("go"))(
    "builds the Go example of %s's description",
    (_, code) => {
      writeFileSync(path.join(program, "main.go"), code);
      const r = build();
      expect(r.out).toBe("");
      expect(r.code).toBe(0);
    },
    600_000,
  );
});

describe("the YAML examples of the descriptions", () => {
  /** The hosts and images the examples name, as libvirt sockets and files that do not exist: a preview reaches neither. */
  const NO_HOST = { uri: "unix:///nonexistent/kvmp-sdk-examples/libvirt-sock", domainType: "qemu" };
  const PLUGIN = { providers: [{ name: "kvmproxy", path: path.join(repoRoot, "bin") }] };
  const CONFIG = {
    "kvmproxy:hosts": { lab: NO_HOST, "hv-1": NO_HOST, "hv-2": NO_HOST },
    "kvmproxy:images": { "debian-12": { url: "/nonexistent/kvmp-sdk-examples/debian-12.qcow2" } },
  };

  it.each(schemaExamples("yaml"))(
    "the example of %s's description names the schema's resource types, their inputs (nested ones too) and outputs, and gives the required inputs",
    (_, code) => {
      expect(yamlProblems(YAML.parse(code))).toEqual([]);
    },
  );

  it.each(schemaExamples("yaml"))(
    "the example of %s's description previews through the plugin, its resources to create, reaching no libvirt host",
    (token, code) => {
      const program = YAML.parse(code) as {
        config: Record<string, unknown>;
        resources: Record<string, { type: string; properties: { size?: number } }>;
      };
      // Outside the repository, the plugin named by its path (bin/) as plugin-workspace.ts names it.
      const ws = new Workspace(`example-${stemOf(token)}`, { name: "kvmpt-example" }, dir);
      writeFileSync(
        path.join(ws.dir, "Pulumi.yaml"),
        YAML.stringify({ name: "kvmpt-example", runtime: "yaml", ...program, plugins: PLUGIN }),
      );
      ws.setConfig(CONFIG);
      for (const key of Object.keys(program.config)) ws.setSecret(key, "an-example-secret-0123456789");
      const r = ws.run("preview");
      expect(r.code, failureText(r)).toBe(0);
      for (const [name, { type, properties }] of Object.entries(program.resources)) {
        expect(r.stdout).toMatch(new RegExp(`\\+\\s+${type}\\s+${name}\\s+create`));
        // A fleet's members too: the plugin constructs the fleet at preview.
        for (let i = 0; i < (properties.size ?? 0); i++)
          expect(r.stdout).toMatch(new RegExp(`\\+\\s+kvmproxy:index:KvmProxy\\s+${name}-${i}\\s+create`));
      }
    },
  );
});
