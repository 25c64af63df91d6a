/**
 * The user's path: the package packed as `npm pack` makes it, installed from
 * the tarball into new Pulumi projects OUTSIDE the repository (their own
 * package.json, `@pulumi/pulumi` and the TypeScript tools at the versions
 * the repository's lock pins, installed with npm offline from the cache the
 * repository's `npm ci` fills: no registry, no link into the repo), then
 * `pulumi up`, `preview`, `refresh` and `destroy` against the test host, as
 * JavaScript and as TypeScript (type-checked by the Pulumi runtime against
 * the installed types), and an upgrade to a tarball of a higher version that
 * previews no change.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lockedVersions, NO_REGISTRY_ENV, npmInstallOffline } from "../support/npm-offline";
import { pack } from "../support/pack";
import { repoRoot, type TestHost, testHost } from "../support/test-host";
import {
  cacheVolumeOf,
  domainsOfStack,
  hostsConfig,
  proxyDiagnostics,
  pulumiEnv,
  removeByHand,
  TEST_IMAGE,
  TEST_PROXY_ARGS,
  virshQuiet,
  Workspace,
} from "./harness";

/** The SDK of a user's project, at the repository's version. */
const PULUMI_SDK = lockedVersions("@pulumi/pulumi");
/**
 * A TypeScript project's tools, at the repository's versions. No ts-node: the
 * Pulumi runtime runs the program through the ts-node it vendors, which
 * type-checks with the project's typescript.
 */
const TS_TOOLS = lockedVersions("typescript", "@types/node");

let host: TestHost;
let outside: string;
const workspaces: Workspace[] = [];
/** Per-project image copies, whose cache volumes go at the end. */
const images: string[] = [];
const tarballs: Record<"current" | "next", string> = { current: "", next: "" };
let version = "";

/** A new Pulumi project outside the repo with the package installed from `tarball`. */
function userProject(language: "js" | "ts"): Workspace {
  const program: Record<string, string> =
    language === "js"
      ? {
          "index.js": `const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");
const config = new pulumi.Config();
const proxy = new KvmProxy("edge", { host: "local", image: "tiny", ...config.requireObject("proxy") });
exports.id = proxy.id;
exports.state = proxy.state;
`,
          "package.json": JSON.stringify({ name: "user-js", private: true, main: "index.js" }),
        }
      : {
          "index.ts": `import * as pulumi from "@pulumi/pulumi";
import { KvmProxy, type KvmProxyArgs } from "pulumi-kvm-proxy";
const config = new pulumi.Config();
const args: KvmProxyArgs = { host: "local", image: "tiny", ...config.requireObject<Partial<KvmProxyArgs>>("proxy") };
const proxy: KvmProxy = new KvmProxy("edge", args);
export const id: pulumi.Output<string> = proxy.id;
export const state: pulumi.Output<string> = proxy.state;
`,
          "package.json": JSON.stringify({ name: "user-ts", private: true, main: "index.ts" }),
          "tsconfig.json": JSON.stringify({
            compilerOptions: { strict: true, target: "ES2020", module: "commonjs", moduleResolution: "node" },
            files: ["index.ts"],
          }),
        };
  const ws = new Workspace(
    `user-${language}`,
    { name: `kvmpt-user-${language}`, typescript: language === "ts", files: program },
    outside,
  );
  workspaces.push(ws);
  npmInstallOffline(ws.dir, {
    "pulumi-kvm-proxy": tarballs.current,
    ...PULUMI_SDK,
    ...(language === "ts" ? TS_TOOLS : {}),
  });
  // An image of this project's own (a copy under another path is another cache entry): its upload shows.
  const image = path.join(ws.dir, "tiny.qcow2");
  cpSync(TEST_IMAGE, image);
  images.push(image);
  ws.setConfig({
    ...hostsConfig(host, ["local"]),
    "kvm:images": { tiny: { url: image, firmware: "bios" } },
    [`kvmpt-user-${language}:proxy`]: TEST_PROXY_ARGS,
  });
  return ws;
}

beforeAll(() => {
  host = testHost();
  // Outside the repository: nothing resolves through its node_modules.
  outside = mkdtempSync(path.join(os.tmpdir(), "kvmp-user-"));
  const pkg = JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")) as { version: string };
  version = pkg.version;
  const [major, minor, patch] = version.split(/[.-]/).map(Number) as [number, number, number];
  tarballs.current = pack(path.join(outside, "pack-current"));
  tarballs.next = pack(path.join(outside, "pack-next"), `${major}.${minor}.${patch + 1}`);
}, 600_000);

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
  for (const image of images) {
    virshQuiet(host, "vol-delete", "--pool", host.poolName, cacheVolumeOf(image));
  }
  rmSync(outside, { recursive: true, force: true });
});

describe("the package as npm pack makes it", () => {
  it("holds the compiled code, its types and source maps, the plugin and its schema, the user docs and the license, and nothing else", () => {
    const listing = execFileSync("tar", ["-tzf", tarballs.current], { encoding: "utf8" }).split("\n");
    const files = listing.filter((f) => f !== "").map((f) => f.replace(/^package\//, ""));
    for (const f of [
      "dist/provider/index.js",
      "dist/provider/index.d.ts",
      "dist/provider/index.js.map",
      "dist/provider/resource/provider.js",
      "dist/provider/cli/main.js",
      "bin/pulumi-resource-kvmproxy",
      "provider/schema/schema.json",
      "README.md",
      "CHANGELOG.md",
      "LICENSE",
      "package.json",
      "docs/getting-started.md",
      "docs/troubleshooting.md",
      "docs/reference/kvm-proxy.md",
    ]) {
      expect(files, f).toContain(f);
    }
    const strays = files.filter(
      (f) =>
        !/^dist\/provider\/.*\.(js|d\.ts|js\.map)$/.test(f) &&
        !/^docs\/((README|getting-started|troubleshooting)\.md|(guides|reference)\/[a-z-]+\.md)$/.test(f) &&
        ![
          "README.md",
          "CHANGELOG.md",
          "LICENSE",
          "package.json",
          "bin/pulumi-resource-kvmproxy",
          "provider/schema/schema.json",
        ].includes(f),
    );
    expect(strays).toEqual([]);
    expect(files.filter((f) => /^(test|bench|scripts|tools|docs\/contributing)\//.test(f))).toEqual([]);
    // The README's links into the docs resolve in the installed package too.
    const readme = execFileSync("tar", ["-xzOf", tarballs.current, "package/README.md"], {
      encoding: "utf8",
    });
    const linked = [...readme.matchAll(/\]\((docs\/[^)#\s]+)/g)].map((m) => m[1] as string);
    expect(linked.length).toBeGreaterThan(0);
    for (const target of new Set(linked)) expect(files, `README links ${target}`).toContain(target);
    const pkg = JSON.parse(
      execFileSync("tar", ["-xzOf", tarballs.current, "package/package.json"], { encoding: "utf8" }),
    ) as Record<string, unknown>;
    expect(pkg.private).toBeUndefined();
    expect(pkg.peerDependencies).toEqual({ "@pulumi/pulumi": expect.stringMatching(/^\^3\./) });
    expect(Object.keys(pkg.dependencies as object)).not.toContain("@pulumi/pulumi");
  });
});

describe("a user's project outside the repository", () => {
  it.each(["js", "ts"] as const)(
    "as %s: installs from the tarball, then up, preview (no changes), refresh and destroy work; the gc command runs from the package",
    (language) => {
      const ws = userProject(language);
      // One copy of the SDK: the package brings none of its own.
      expect(() =>
        readFileSync(
          path.join(ws.dir, "node_modules/pulumi-kvm-proxy/node_modules/@pulumi/pulumi/package.json"),
        ),
      ).toThrow();
      ws.extraEnv = { PULUMI_DEBUG_COMMANDS: "true" };
      const events = path.join(ws.dir, "up-events.jsonl");
      ws.mustRun("up", "--yes", "--skip-preview", "--event-log", events);
      const id = ws.outputs().id as string;
      // The provider's progress reached the engine as status lines of the proxy, the image upload among them.
      const statuses = proxyDiagnostics(events).filter((d) => d.ephemeral);
      expect(statuses.length).toBeGreaterThan(0);
      for (const d of statuses) expect(d.urn).toMatch(/::edge$/);
      const messages = statuses.map((d) => d.message);
      expect(messages).toContain("checking the image cache");
      expect(messages).toContainEqual(expect.stringMatching(/^uploading the image: \d+ of \d+ MiB/));
      expect(messages).toContain("starting the domain");
      expect(id).toMatch(/^kvm:\/\/local\/edge-[0-9a-f]{8}$/);
      expect(domainsOfStack(host, ws.stack)).toEqual([id.slice("kvm://local/".length)]);
      const preview = ws.mustRun("preview", "--diff", "--expect-no-changes");
      expect(preview.output).not.toMatch(/~ update|\+- replace|\+ create/);
      ws.mustRun("refresh", "--yes", "--skip-preview");
      const gc = spawnSync(
        "npx",
        ["--no-install", "pulumi-kvm-proxy", "gc", "--stack", ws.stack, "--json", "--min-age", "0s"],
        {
          cwd: ws.dir,
          env: { ...pulumiEnv(), ...NO_REGISTRY_ENV, PULUMI_BACKEND_URL: `file://${ws.backend}` },
          encoding: "utf8",
          timeout: 300_000,
        },
      );
      expect(gc.status, gc.stderr).toBe(0);
      const judged = (JSON.parse(gc.stdout) as { domains: { domain: string; verdict: string }[] }).domains;
      expect(judged.find((d) => d.domain === id.slice("kvm://local/".length))?.verdict).toBe("held");
      ws.destroy();
      expect(domainsOfStack(host, ws.stack)).toEqual([]);
    },
  );

  it("upgraded to a tarball of a higher version, previews no change for existing proxies, then up and destroy work", () => {
    const ws = userProject("js");
    ws.up();
    const before = ws.proxies()[0];
    npmInstallOffline(ws.dir, { "pulumi-kvm-proxy": tarballs.next });
    const installed = JSON.parse(
      readFileSync(path.join(ws.dir, "node_modules/pulumi-kvm-proxy/package.json"), "utf8"),
    ) as { version: string };
    expect(installed.version).not.toBe(version);
    const preview = ws.mustRun("preview", "--diff", "--expect-no-changes");
    expect(preview.output).not.toMatch(/~ update|\+- replace|\+ create|- delete/);
    ws.up();
    const after = ws.proxies()[0];
    expect(after?.id).toBe(before?.id);
    expect(after?.outputs?.uuid).toBe(before?.outputs?.uuid);
    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});
