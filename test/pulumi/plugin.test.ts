/**
 * The provider plugin (`pulumi-resource-kvmproxy`, bin/) through the real
 * CLI, found by `plugins.providers[].path` in Pulumi.yaml, driven by a
 * Node.js program that uses the TypeScript SDK generated from the schema
 * the plugin serves (compiled here with tsc): up, preview with no change,
 * refresh, destroy; the password a secret end to end; `pulumi import` of a
 * proxy another stack made; `customTimeouts` honoured; a stack of dynamic
 * KvmProxy resources moved to the plugin's type by aliases (no replace,
 * and the orphan sweep still sees its VMs held); `retire` writing the
 * plugin's namespace and preview naming it. No guest boots
 * (TEST_PROXY_ARGS); a static address on the test bridge gives a proxy
 * its URL.
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageVersion } from "../../provider/plugin/served-schema";
import { SECRET_DERIVED_OUTPUTS } from "../../provider/resource/kvm-proxy-properties";
import { repoRoot, staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  cleanUpWorkspaces,
  domainsOfStack,
  ENGINE_PROPERTY_DUMP,
  failureText,
  hostsConfig,
  metadataOf,
  packageCli,
  pulumiEnv,
  runTool,
  type Workspace,
} from "./harness";
import {
  copiedSdk,
  KVM_PROXY_TYPE,
  PLUGIN_PROXY_ARGS,
  pluginConfig,
  pluginWorkspace,
  shownSecret,
} from "./plugin-workspace";

const TYPE = KVM_PROXY_TYPE;
const SDK_DIR = path.join(repoRoot, ".state/plugin-sdk", String(process.pid));
/** Characters URLs encode: the URL-encoded form in proxyUrlWithCredentials is no config secret the engine masks. */
const PASSWORD = `plugin-${process.pid}-S3c@r#t%pw`;
/** The Node.js SDK's line for the reply of the RegisterResource of `authed` (it prints every output). */
const SDK_REPLY_OF_AUTHED = /RegisterResource RPC finished: resource:authed\[/;

let host: TestHost;
let sdk: string;
const workspaces: Workspace[] = [];

const run = runTool;

/** The repository's TypeScript SDK (sdk/nodejs), compiled to a package folder. */
function buildSdk(): string {
  const src = copiedSdk("nodejs", SDK_DIR);
  const tsc = run(
    process.execPath,
    [path.join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"],
    src,
  );
  expect(tsc.out).toBe("");
  const out = path.join(src, "bin");
  const pkg = JSON.parse(readFileSync(path.join(src, "package.json"), "utf8")) as Record<string, unknown>;
  writeFileSync(
    path.join(out, "package.json"),
    JSON.stringify({ ...pkg, version: packageVersion(), main: "index.js" }),
  );
  return out;
}

/** A Node.js project using the SDK (node_modules/@kvmproxy/sdk). */
function nodeWorkspace(tag: string, program: string): Workspace {
  const ws = pluginWorkspace(
    tag,
    { name: "kvmpt-plugin", runtime: { name: "nodejs", options: { typescript: false } } },
    {
      "index.js": program,
      "package.json": JSON.stringify({ name: "kvmpt-plugin", main: "index.js" }),
    },
  );
  workspaces.push(ws);
  mkdirSync(path.join(ws.dir, "node_modules/@kvmproxy"), { recursive: true });
  symlinkSync(sdk, path.join(ws.dir, "node_modules/@kvmproxy/sdk"));
  return ws;
}

/** `pulumi <args> --debug` (at `level`, logs to stderr); throws unless it succeeds; all it printed. */
function debugRun(ws: Workspace, level: string | undefined, ...args: string[]): string {
  const logs = level === undefined ? [] : [level, "--logtostderr", "--logflow"];
  const r = ws.run(...args, "--debug", ...logs);
  if (r.code !== 0) throw new Error(`pulumi ${args.join(" ")} exited ${r.code}:\n${failureText(r)}`);
  return r.output;
}

const ARGS = JSON.stringify(PLUGIN_PROXY_ARGS);

beforeAll(() => {
  host = testHost();
  sdk = buildSdk();
});

afterAll(() => {
  cleanUpWorkspaces(host, workspaces);
  rmSync(SDK_DIR, { recursive: true, force: true });
});

describe("a Node.js program through the generated SDK and the plugin", () => {
  it("creates two proxies (one with auth), previews and refreshes with no change, keeps the password secret, and destroys everything", () => {
    const bridge = staticBridgeOf(host);
    const ws = nodeWorkspace(
      "plugin",
      `const pulumi = require("@pulumi/pulumi");
const kvmproxy = require("@kvmproxy/sdk");
const cfg = new pulumi.Config();
const plain = new kvmproxy.KvmProxy("plain", ${ARGS});
const authed = new kvmproxy.KvmProxy("authed", {
  ...${ARGS},
  nics: [{ bridge: ${JSON.stringify(bridge.name)}, addresses: ["192.0.2.231/24"] }],
  proxy: { auth: { username: "crawler", password: cfg.requireSecret("password") } },
});
exports.ids = [plain.id, authed.id];
exports.url = authed.proxyUrl;
exports.urlWithCredentials = authed.proxyUrlWithCredentials;
`,
    );
    ws.setConfig(pluginConfig(host));
    ws.setSecret("kvmpt-plugin:password", PASSWORD);

    // --debug -v=9: our lines, the SDK's debug lines and the engine's property dumps.
    const verbose = debugRun(ws, "-v=9", "up", "--yes", "--skip-preview");
    const state = ws.state().resources;
    const proxies = state.filter((r) => r.type === TYPE);
    expect(proxies).toHaveLength(2);
    expect(state.some((r) => r.type === "pulumi:providers:kvmproxy")).toBe(true);
    const ids = proxies.map((p) => p.id as string);
    const names = ids.map((id) => id.replace(/^kvm:\/\/local\//, "")).sort();
    expect(domainsOfStack(host, ws.stack)).toEqual(names);
    for (const n of names) {
      expect(metadataOf(host, n)).toContain(`urn="urn:pulumi:${ws.stack}::kvmpt-plugin::${TYPE}::`);
    }

    // Shown masked; the real value only with --show-secrets; never in plaintext state.
    const shown = ws.mustRun("stack", "output", "--json").stdout;
    expect(JSON.parse(shown).urlWithCredentials).toBe("[secret]");
    const outputs = ws.outputs();
    expect(outputs.url).toBe("http://192.0.2.231:3128");
    expect(outputs.urlWithCredentials).toBe(
      `http://crawler:${encodeURIComponent(PASSWORD)}@192.0.2.231:3128`,
    );
    const text = ws.stateText();
    expect(text).not.toContain(PASSWORD);
    expect(text).not.toContain(encodeURIComponent(PASSWORD));

    // --debug alone, as a user shares a failing run: every diagnostic, nothing of the engine's dumps.
    const debug = [
      debugRun(ws, undefined, "preview", "--expect-no-changes"),
      debugRun(ws, undefined, "refresh", "--yes", "--skip-preview", "--expect-no-changes"),
    ].join("\n");
    ws.mustRun("preview", "--expect-no-changes");

    // What is computed from the password or the user-data (the hash squid checks, the seed's digest)
    // lives in the state's inputs, encrypted; no output holds it, so no program receives it.
    const authed = (
      JSON.parse(ws.mustRun("stack", "export", "--show-secrets").stdout) as {
        deployment: {
          resources: { urn: string; inputs?: Record<string, unknown>; outputs?: Record<string, unknown> }[];
        };
      }
    ).deployment.resources.find((r) => r.urn.endsWith("::authed"));
    const kept = shownSecret(authed?.inputs?.proxy) as { auth: { passwordHash: string } };
    const userData = shownSecret(authed?.inputs?.userData) as string;
    const derived = [kept.auth.passwordHash, createHash("sha256").update(userData, "utf8").digest("hex")];
    expect(derived[0]).toMatch(/^\$6\$/);
    for (const k of SECRET_DERIVED_OUTPUTS) expect(authed?.outputs).not.toHaveProperty(k);

    // Nothing computed from the password in a line of a --debug run, nor in the plaintext state.
    // The password itself: the Node.js SDK prints each RegisterResource reply with --debug, secret
    // outputs in the clear, so proxyUrlWithCredentials (URL-encoded: no config secret the engine
    // masks) is in the SDK's line for `authed`, whether or not the program exports it, and in no
    // other line. That is why Node.js programs use the dynamic KvmProxy class (docs/guides/languages.md).
    const forms = [PASSWORD, encodeURIComponent(PASSWORD)];
    const carrying = (text: string, of: unknown[]) =>
      text.split("\n").filter((l) => of.some((f) => l.includes(f as string)));
    expect(debug).toMatch(/RegisterResource RPC finished/);
    expect(carrying(debug, derived)).toEqual([]);
    expect(carrying(debug, forms).length).toBeGreaterThan(0);
    expect(carrying(debug, forms).filter((l) => !SDK_REPLY_OF_AUTHED.test(l))).toEqual([]);
    expect(carrying(ws.stateText(), [...forms, ...derived])).toEqual([]);
    // At -v=9 the engine dumps every property of every RPC, secrets too (the password is the
    // program's input): those dumps and the SDK's replies are the only lines that carry them.
    expect(verbose).toMatch(ENGINE_PROPERTY_DUMP);
    expect(
      carrying(verbose, [...forms, ...derived])
        .filter((l) => !ENGINE_PROPERTY_DUMP.test(l) && !SDK_REPLY_OF_AUTHED.test(l))
        .map((l) => l.slice(0, 300)),
    ).toEqual([]);

    // Retired through the plugin's namespace: the command writes kvmproxy:retire, the default provider
    // reads the changed config, and preview names the key as set.
    const retired = packageCli(ws, [
      "retire",
      "plain",
      "--reason",
      "blocked by example.com",
      "--cwd",
      ws.dir,
      "--stack",
      ws.stack,
    ]);
    expect(retired.code, retired.stderr).toBe(0);
    expect(retired.stdout).toContain('kvmproxy:retire["plain"] set');
    const steps = (
      JSON.parse(ws.mustRun("preview", "--json").stdout) as { steps: { op: string; urn: string }[] }
    ).steps;
    const opsOf = (name: RegExp) =>
      steps.filter((s) => name.test(s.urn.replace(/.*::/, ""))).map((s) => s.op);
    // The default provider takes the changed config (the engine shows no step of it): only the retired
    // proxy is replaced.
    expect(opsOf(/^plain$/)).toContain("replace");
    expect(steps.filter((s) => s.op !== "same" && !s.urn.endsWith("::plain"))).toEqual([]);
    expect(ws.mustRun("preview", "--diff").output).toContain(
      "replacing: retired (kvmproxy:retire.plain): blocked by example.com",
    );
    ws.mustRun("config", "rm", "kvmproxy:retire");

    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
    for (const n of names) expect(allDomains(host)).not.toContain(n);
  });

  it("fails a create that passes its customTimeouts and leaves nothing", () => {
    const ws = nodeWorkspace(
      "plugintimeout",
      `const kvmproxy = require("@kvmproxy/sdk");
new kvmproxy.KvmProxy(
  "slow",
  { ...${ARGS}, waitForIp: true, timeouts: { create: 90 } },
  { customTimeouts: { create: "1s" } },
);
`,
    );
    ws.setConfig(pluginConfig(host));
    const r = ws.run("up", "--yes", "--skip-preview");
    expect(r.code).not.toBe(0);
    // The engine's 1 s, not the 90 s of the inputs (the guest never gets an address here).
    // Where the deadline lands decides what the message waited for; either way it names the engine's deadline.
    expect(r.output).toMatch(/\(customTimeouts\.create\) waiting for (the create of|an IPv4)/);
    expect(ws.state().resources.filter((x) => x.type === TYPE)).toEqual([]);
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});

describe("the engine's Cancel", () => {
  it("ends a create waiting for its guest's address when `pulumi up` is interrupted, and rolls it back", async () => {
    const ws = nodeWorkspace(
      "plugincancel",
      `const kvmproxy = require("@kvmproxy/sdk");
new kvmproxy.KvmProxy("waiting", { ...${ARGS}, waitForIp: true, timeouts: { create: 400 } });
`,
    );
    ws.setConfig(pluginConfig(host));
    let cli: ChildProcess | undefined;
    const up = ws.runAsync(["up", "--yes", "--skip-preview"], {}, (c) => {
      cli = c;
    });
    // Defined and started: the create now waits for an address the guest never gets (no guest boots here).
    const since = Date.now();
    while (domainsOfStack(host, ws.stack).length === 0 && Date.now() - since < 300_000) {
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(domainsOfStack(host, ws.stack)).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 2_000));
    cli?.kill("SIGINT");
    const r = await up;
    expect(r.code).not.toBe(0);
    expect(r.output).toContain("cancelled: the Pulumi engine asked the provider to stop");
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
    expect(ws.state().resources.filter((x) => x.type === TYPE)).toEqual([]);
  });
});

describe("pulumi import", () => {
  it("adopts a proxy another stack made, and the next preview shows no change", () => {
    const maker = nodeWorkspace(
      "pluginmaker",
      `const kvmproxy = require("@kvmproxy/sdk");
const p = new kvmproxy.KvmProxy("made", { ...${ARGS}, tags: { team: "crawl" } });
exports.id = p.id;
exports.name = p.domainName;
`,
    );
    maker.setConfig(pluginConfig(host));
    maker.up();
    const { id, name } = maker.outputs() as { id: string; name: string };

    const program = `const kvmproxy = require("@kvmproxy/sdk");
new kvmproxy.KvmProxy("adopted", { ...${ARGS}, name: ${JSON.stringify(name)}, tags: { team: "crawl" } });
`;
    const adopter = nodeWorkspace("pluginadopter", program);
    adopter.setConfig(pluginConfig(host));
    adopter.mustRun("import", TYPE, "adopted", id, "--yes", "--protect=false", "--generate-code=false");
    const adopted = adopter.state().resources.filter((r) => r.type === TYPE);
    expect(adopted.map((r) => r.id)).toEqual([id]);
    // The spec hash it was read with digests the user-data and the password hash: a secret of its
    // inputs, no output.
    const shown = JSON.parse(adopter.mustRun("stack", "export", "--show-secrets").stdout) as {
      deployment: {
        resources: { type: string; inputs?: Record<string, unknown>; outputs?: Record<string, unknown> }[];
      };
    };
    const state = shown.deployment.resources.find((r) => r.type === TYPE);
    const specHash = shownSecret(state?.inputs?.adoptedSpecHash);
    expect(specHash).toMatch(/^[0-9a-f]{64}$/);
    expect(state?.outputs).not.toHaveProperty("adoptedSpecHash");
    expect(adopter.stateText()).not.toContain(specHash as string);
    adopter.mustRun("preview", "--expect-no-changes");
    adopter.up();
    expect(allDomains(host)).toContain(name);

    // The adopter lets it go; the maker deletes it.
    adopter.mustRun("state", "delete", adopted[0]?.urn as string, "--yes");
    maker.destroy();
    expect(allDomains(host)).not.toContain(name);
  });
});

describe("moving a stack from the dynamic provider to the plugin", () => {
  it("by an alias of the type: preview shows no create, delete or replace, and gc judges no moved VM an orphan", () => {
    const bridge = staticBridgeOf(host);
    const args = `{
  ...${ARGS},
  nics: [{ bridge: ${JSON.stringify(bridge.name)}, addresses: ["192.0.2.232/24"] }],
  proxy: { auth: { username: "crawler", password: cfg.requireSecret("password") } },
}`;
    const ws = nodeWorkspace(
      "pluginmove",
      `const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");
const cfg = new pulumi.Config();
exports.id = new KvmProxy("moved", ${args}).id;
new KvmProxy("plain", ${ARGS});
`,
    );
    const c = hostsConfig(host, ["local"]);
    ws.setConfig({ ...c, ...pluginConfig(host) });
    ws.setSecret("kvmpt-plugin:password", PASSWORD);
    ws.up();
    const before = ws.proxies().map((p) => p.id as string);
    expect(before).toHaveLength(2);

    writeFileSync(
      path.join(ws.dir, "index.js"),
      `const pulumi = require("@pulumi/pulumi");
const kvmproxy = require("@kvmproxy/sdk");
const cfg = new pulumi.Config();
const moved = { aliases: [{ type: "pulumi-nodejs:dynamic:KvmProxy" }] };
const p = new kvmproxy.KvmProxy("moved", ${args}, moved);
exports.id = p.id;
exports.urlWithCredentials = p.proxyUrlWithCredentials;
new kvmproxy.KvmProxy("plain", ${ARGS}, moved);
`,
    );
    // Both proxies are the same resources under their new type: nothing to create, delete or replace.
    const preview = ws.mustRun("preview", "--expect-no-changes").stdout;
    expect(preview).toMatch(/^\s*3 unchanged$/m);
    expect(preview).not.toMatch(/to create|to delete|to replace/);
    ws.up();
    const after = ws.state().resources.filter((r) => r.type === TYPE);
    expect(after.map((r) => r.id as string).sort()).toEqual([...before].sort());
    expect(ws.proxies()).toEqual([]);
    // The outputs are the dynamic provider's until a read (its class made the URL with credentials in the program).
    ws.mustRun("refresh", "--yes", "--skip-preview");
    ws.up();
    expect(ws.outputs().urlWithCredentials).toBe(
      `http://crawler:${encodeURIComponent(PASSWORD)}@192.0.2.232:3128`,
    );
    ws.mustRun("preview", "--expect-no-changes");

    const gc = spawnSync(
      process.execPath,
      [
        path.join(repoRoot, "dist/provider/cli/main.js"),
        "gc",
        "--cwd",
        ws.dir,
        "--stack",
        ws.stack,
        "--json",
        "--min-age",
        "0",
      ],
      {
        cwd: repoRoot,
        env: { ...pulumiEnv(), PULUMI_BACKEND_URL: `file://${ws.backend}` },
        encoding: "utf8",
        timeout: 300_000,
      },
    );
    expect(gc.stderr).toBe("");
    const verdicts = (
      JSON.parse(gc.stdout) as { domains: { domain: string; verdict: string; stack: string }[] }
    ).domains
      .filter((d) => d.stack === ws.stack)
      .map((d) => [d.domain, d.verdict]);
    expect(verdicts.sort()).toEqual(before.map((id) => [id.replace(/^kvm:\/\/local\//, ""), "held"]).sort());

    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});
