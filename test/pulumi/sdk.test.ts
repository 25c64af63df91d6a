/**
 * The SDKs pkg/v3's generators make from provider/schema/schema.json
 * (`kvmproxy-schema gen-sdk`, tools/pulumi/cmd/kvmproxy-schema), built the
 * way each language builds them, offline: TypeScript with tsc against the
 * @pulumi/pulumi of node_modules, Python byte-compiled, Go with the toolchain
 * against the module versions the CLI is built from. A program in each of
 * TypeScript and Go declares a proxy through its SDK and compiles; one with
 * a wrong type does not (the SDK's types are real). Programs that run
 * through the plugin: plugin.test.ts (TypeScript) and
 * plugin-languages.test.ts (YAML, Python, Go).
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../support/test-host";
import { runTool } from "./harness";

const SCHEMA = path.join(repoRoot, "provider/schema/schema.json");
// Inside the repository: the TypeScript SDK resolves @pulumi/pulumi and @types/node from its node_modules.
const DIR = path.join(repoRoot, ".state/sdk", String(process.pid));

const run = runTool;

function generate(lang: string): string {
  const out = path.join(DIR, lang);
  const r = run("kvmproxy-schema", ["gen-sdk", lang, SCHEMA, out], repoRoot);
  expect(r.out).toMatch(new RegExp(`^ok: ${lang} SDK: \\d+ files\\n$`));
  expect(r.code).toBe(0);
  return out;
}

beforeAll(() => {
  rmSync(DIR, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });
});

afterAll(() => {
  rmSync(DIR, { recursive: true, force: true });
});

describe("the TypeScript SDK", () => {
  let sdk: string;
  const tsc = (project: string) =>
    run(
      process.execPath,
      [path.join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", project, "--noEmit"],
      sdk,
    );

  /** A program beside the SDK's files, compiled with the SDK's own tsconfig. */
  function program(body: string): string {
    writeFileSync(path.join(sdk, "program.ts"), body);
    const config = JSON.parse(
      readFileSync(path.join(sdk, "tsconfig.json"), "utf8").replace(/^\s*\/\/.*$/gm, ""),
    ) as { files: string[] };
    writeFileSync(
      path.join(sdk, "tsconfig.program.json"),
      JSON.stringify({ extends: "./tsconfig.json", files: [...config.files, "program.ts"] }),
    );
    return "tsconfig.program.json";
  }

  beforeAll(() => {
    sdk = generate("nodejs");
  });

  it("compiles", () => {
    const r = tsc("tsconfig.json");
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  });

  it("types a proxy with auth, a host in full and the outputs", () => {
    const r = tsc(
      program(`import * as kvmproxy from "./index";
const p = new kvmproxy.KvmProxy("edge", {
  host: { key: "hv-1", uri: "ssh://root@hv-1", knownHosts: "hv-1 ssh-ed25519 AAAA" },
  image: "debian-12",
  memoryMiB: 768,
  proxy: { auth: { username: "crawler", password: "a-long-secret-1" }, allowedClients: ["198.51.100.0/24"] },
  healthCheck: false,
});
export const url: kvmproxy.KvmProxy["proxyUrl"] = p.proxyUrl;
`),
    );
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  });

  it("refuses a program giving memoryMiB as text", () => {
    const r = tsc(
      program(
        `import * as kvmproxy from "./index";\nnew kvmproxy.KvmProxy("edge", { host: "hv-1", image: "i", memoryMiB: "768" });\n`,
      ),
    );
    expect(r.out).toMatch(
      /program\.ts\(\d+,\d+\): error TS2322: Type 'string' is not assignable to type 'Input<number/,
    );
    expect(r.code).not.toBe(0);
  });
});

describe("the Python SDK", () => {
  it("byte-compiles, with the resource's arguments named as Python names them", () => {
    const sdk = generate("python");
    const r = run("python3", ["-m", "compileall", "-q", sdk], sdk);
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
    const kvm = readFileSync(path.join(sdk, "pulumi_kvmproxy/kvm_proxy.py"), "utf8");
    expect(kvm).toMatch(/host: pulumi\.Input\[Union\[_builtins\.str, 'HostInputArgs', 'HostPoolArgs'\]\]/);
  });
});

describe("the Go SDK", () => {
  let sdk: string;
  /** Builds the SDK's module, offline, against the versions tools/pulumi pins (its go.mod, renamed), with the flags of the CLI's build (scripts/pulumi-cli), whose compiled packages the build cache then holds. */
  const build = () =>
    run("go", ["build", "-trimpath", "./..."], sdk, {
      ...process.env,
      GOFLAGS: "-mod=mod",
      GOPROXY: "off",
      CGO_ENABLED: "0",
    });

  beforeAll(() => {
    sdk = generate("go");
    const mod = readFileSync(path.join(repoRoot, "tools/pulumi/go.mod"), "utf8").replace(
      /^module .*$/m,
      "module github.com/pulumi-kvm-proxy/sdk/go",
    );
    writeFileSync(path.join(sdk, "go.mod"), mod);
    copyFileSync(path.join(repoRoot, "tools/pulumi/go.sum"), path.join(sdk, "go.sum"));
  });

  /** A `pulumi.Run` program in the SDK's module whose function body is `body`. */
  function program(body: string) {
    mkdirSync(path.join(sdk, "program"), { recursive: true });
    writeFileSync(
      path.join(sdk, "program/main.go"),
      `package main

import (
	"github.com/pulumi-kvm-proxy/sdk/go/kvmproxy"
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

  it("compiles with a program declaring a proxy", () => {
    program(`		p, err := kvmproxy.NewKvmProxy(ctx, "edge", &kvmproxy.KvmProxyArgs{
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
    program(`		_, err := kvmproxy.NewKvmProxy(ctx, "edge", &kvmproxy.KvmProxyArgs{Host: pulumi.String("hv-1"), Image: pulumi.String("i"), MemoryMiB: pulumi.String("768")})
		return err`);
    const r = build();
    expect(r.out).toMatch(/cannot use pulumi\.String\("768"\)/);
    expect(r.code).not.toBe(0);
  }, 600_000);
});
