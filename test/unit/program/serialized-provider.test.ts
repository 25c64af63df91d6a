import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import * as pulumi from "@pulumi/pulumi";
import { afterAll, describe, expect, it } from "vitest";
import { PROVIDER_MODULE, serializedProvider } from "../../../provider/program/kvm-proxy";
import * as implementation from "../../../provider/resource/provider";

// The same serialization Pulumi applies to a dynamic resource's provider (dynamic/index.ts).
async function serialize(): Promise<{ text: string; containsSecrets: boolean }> {
  const sf = await pulumi.runtime.serializeFunction(() => serializedProvider, { allowSecrets: true });
  return { text: sf.text, containsSecrets: sf.containsSecrets };
}

const REPO = path.resolve(__dirname, "../../..");
const machines: string[] = [];

afterAll(() => {
  for (const m of machines) rmSync(m, { recursive: true, force: true });
});

/**
 * Run by `node -e` in a fresh process: loads the package's TypeScript sources
 * (compiled on require with the repo's tsconfig options, as tsc builds dist/)
 * from argv[1], and prints the text Pulumi stores as `__provider`.
 */
const SERIALIZE_IN_CHILD = `
const fs = require("node:fs");
const path = require("node:path");
const [pkg, repo] = process.argv.slice(1);
const ts = require(path.join(repo, "node_modules/typescript"));
const { options } = ts.convertCompilerOptionsFromJson(
  ts.readConfigFile(path.join(repo, "tsconfig.json"), ts.sys.readFile).config.compilerOptions,
  repo,
);
require.extensions[".ts"] = (module, file) => {
  const out = ts.transpileModule(fs.readFileSync(file, "utf8"), { compilerOptions: options, fileName: file });
  module._compile(out.outputText, file);
};
const { serializedProvider } = require(path.join(pkg, "provider/program/kvm-proxy.ts"));
const pulumi = require(require.resolve("@pulumi/pulumi", { paths: [pkg] }));
pulumi.runtime
  .serializeFunction(() => serializedProvider, { allowSecrets: true })
  .then((sf) => process.stdout.write(sf.text));
`;

/**
 * The serialized provider as another machine would make it: a new node
 * process, the package installed in a folder of its own, and a working folder
 * and HOME of its own. Only node_modules is shared (linked), as one lockfile gives.
 */
async function serializeOnAnotherMachine(tag: string): Promise<string> {
  const machine = mkdtempSync(path.join(tmpdir(), `kvmp-machine-${tag}-`));
  machines.push(machine);
  const pkg = path.join(machine, "install", "pulumi-kvm-proxy");
  const home = path.join(machine, "home", tag);
  const work = path.join(machine, "projects", `stack-${tag}`);
  for (const dir of [pkg, home, work]) mkdirSync(dir, { recursive: true });
  cpSync(path.join(REPO, "provider"), path.join(pkg, "provider"), { recursive: true });
  symlinkSync(path.join(REPO, "node_modules"), path.join(pkg, "node_modules"));
  const { stdout } = await promisify(execFile)(process.execPath, ["-e", SERIALIZE_IN_CHILD, pkg, REPO], {
    cwd: work,
    env: { PATH: process.env.PATH ?? "", HOME: home, USER: `user-${tag}` },
    encoding: "utf8",
  });
  return stdout;
}

describe("the serialized provider (__provider)", () => {
  it("is under 4 KiB, holds no absolute path and no secret, and only requires the implementation", async () => {
    const { text, containsSecrets } = await serialize();
    expect(Buffer.byteLength(text)).toBeLessThan(4096);
    expect(containsSecrets).toBe(false);
    expect(text).not.toMatch(/\/work\/|\/home\/|\/root\/|\/tmp\/|[A-Z]:\\\\/);
    expect(text).not.toContain("__awaiter");
    expect(text).not.toContain("KvmOperations");
    const requires = [...text.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]);
    expect(new Set(requires)).toEqual(new Set([PROVIDER_MODULE]));
  });

  it("is the same text every time in one process", async () => {
    expect((await serialize()).text).toBe((await serialize()).text);
  });

  it("is the same text on two machines: separate processes, package folders, working folders and HOMEs", async () => {
    const [a, b] = await Promise.all([serializeOnAnotherMachine("a"), serializeOnAnotherMachine("b")]);
    for (const text of [a, b]) {
      expect(text).toContain(`require("${PROVIDER_MODULE}")`);
      for (const m of ["configure", "check", "diff", "create", "read", "update", "delete"])
        expect(text).toContain(`${m}: __f`);
    }
    expect(a).toBe(b);
  }, 60_000);

  it("has every method, each delegating to an export of the implementation module", async () => {
    const { text } = await serialize();
    for (const m of ["configure", "check", "diff", "create", "read", "update", "delete"]) {
      expect(text).toContain(`${m}: __f`);
      expect(text).toContain(`.${m}(`);
      expect(typeof (implementation as Record<string, unknown>)[m]).toBe("function");
    }
  });
});
