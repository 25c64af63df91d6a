/**
 * The provider plugin from programs in other languages than Node.js, each
 * through the real CLI and its language host (scripts/pulumi-cli builds
 * them: pulumi-yaml's, and this project's minimal Python and Go hosts):
 * Pulumi YAML (an explicit provider whose hosts come from the program),
 * Python and Go (the default provider configured by the stack). Each is a
 * user's project in an empty folder outside the repository, set up as the
 * docs say (docs/guides/languages.md): the plugin installed from its archive
 * (`pulumi plugin install --file`, a PULUMI_HOME of this file's own) and
 * found by name, no `plugins:` in Pulumi.yaml; Python's SDK pip-installed
 * from its wheel into the project's own virtual environment, offline (the
 * toolchain's wheels stand for PyPI); Go's required by its module path (a
 * replace to sdk/go stands for the published tag). Each creates two proxies, one
 * with auth whose URL with credentials is a secret output, previews and
 * refreshes with no change, and destroys them. No guest boots
 * (TEST_PROXY_ARGS); a static address on the test bridge gives the proxy
 * with auth its URL.
 *
 * What each language's SDK prints with `--debug`, measured with a password
 * that has characters URLs encode (the engine masks only a config secret's
 * raw form, not the URL-encoded one inside `proxyUrlWithCredentials`):
 * Pulumi YAML and Go print no form of it, exported or not; Python prints
 * the stack outputs a program exports (its own debug lines), so the URL
 * with credentials when, and only when, the program exports it. (Node.js:
 * plugin.test.ts.)
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  cleanUpWorkspaces,
  domainsOfStack,
  failureText,
  hostsConfig,
  runTool,
  type StateResource,
  type Workspace,
} from "./harness";
import {
  GO_SDK_MODULE,
  goProgramModule,
  type InstalledPlugin,
  installPlugin,
  KVM_PROXY_TYPE,
  PLUGIN_PROXY_ARGS,
  pluginConfig,
  pluginWorkspace,
  venvWith,
} from "./plugin-workspace";

/** Characters URLs encode: its URL-encoded form is no config secret the engine masks. */
const PASSWORD = `languages-${process.pid}-S3c@r#t%pw`;

let host: TestHost;
const workspaces: Workspace[] = [];
/** Where the users' projects are: outside the repository. */
let outside: string;
/** The plugin installed from its archive, the projects' folder beside it. */
let plugin: InstalledPlugin & { root: string };
/** The Python SDK's wheel, as scripts/sdk pack makes it. */
let wheel: string;

beforeAll(() => {
  host = testHost();
  outside = mkdtempSync(path.join(os.tmpdir(), "kvmpt-languages-"));
  plugin = { ...installPlugin(path.join(outside, "plugin")), root: outside };
  const packed = runTool(path.join(repoRoot, "scripts/sdk"), ["pack", path.join(outside, "sdk")], repoRoot);
  expect(packed.code, packed.out).toBe(0);
  wheel = packed.out.split("\n").find((l) => l.endsWith(".whl")) as string;
}, 600_000);

afterAll(() => {
  cleanUpWorkspaces(host, workspaces);
  rmSync(outside, { recursive: true, force: true });
});

function track(ws: Workspace): Workspace {
  workspaces.push(ws);
  return ws;
}

/** A Pulumi YAML interpolation: `${expr}`. */
const yamlRef = (expr: string) => `\${${expr}}`;

/** The URL with credentials of the proxy with auth at `ip`. */
const credentialUrl = (ip: string) => `http://crawler:${encodeURIComponent(PASSWORD)}@${ip}:3128`;

/** The lines of `output` that carry the password in any form (as given, URL-encoded, in a Basic token). */
function carryingPassword(output: string): string[] {
  const forms = [
    PASSWORD,
    encodeURIComponent(PASSWORD),
    Buffer.from(`crawler:${PASSWORD}`).toString("base64"),
  ];
  return output.split("\n").filter((l) => forms.some((f) => l.includes(f)));
}

/** What the Go program logs at debug level: only a --debug run shows it. */
const GO_DEBUG_MARKER = "kvmpt-go-debug-line";

/**
 * The lines of a `preview --debug` that carry the password: what the
 * language's SDK printed. `shown` is a debug line the run must hold (the
 * capture is a debug one).
 */
function printedWithDebug(ws: Workspace, shown: RegExp | string = /debug: /): string[] {
  const r = ws.run("preview", "--expect-no-changes", "--debug");
  expect(r.code, failureText(r)).toBe(0);
  expect(r.output).toMatch(shown);
  return carryingPassword(r.output);
}

/**
 * up, then what every language's program must show: two proxies of the
 * plugin's type on the host, the secret output masked (and itself with
 * --show-secrets), preview and refresh with no change, destroy leaving
 * nothing. `between` runs before the destroy.
 */
function upToDestroy(ws: Workspace, ip: string, between: () => void = () => {}): void {
  const up = ws.run("up", "--yes", "--skip-preview");
  expect(up.code, failureText(up)).toBe(0);
  const proxies = ws.state().resources.filter((r) => r.type === KVM_PROXY_TYPE);
  expect(proxies).toHaveLength(2);
  const names = proxies.map((p) => (p.id as string).replace(/^kvm:\/\/local\//, "")).sort();
  expect(domainsOfStack(host, ws.stack)).toEqual(names);

  const shown = JSON.parse(ws.mustRun("stack", "output", "--json").stdout) as Record<string, unknown>;
  expect(shown.url).toBe(`http://${ip}:3128`);
  expect(shown.urlWithCredentials).toBe("[secret]");
  expect(ws.outputs().urlWithCredentials).toBe(credentialUrl(ip));
  expect(ws.stateText()).not.toContain(PASSWORD);

  ws.mustRun("preview", "--expect-no-changes");
  ws.mustRun("refresh", "--yes", "--skip-preview", "--expect-no-changes");
  ws.mustRun("preview", "--expect-no-changes");
  between();

  ws.destroy();
  expect(domainsOfStack(host, ws.stack)).toEqual([]);
  for (const n of names) expect(allDomains(host)).not.toContain(n);
}

describe("a Pulumi YAML program", () => {
  it("creates two proxies through an explicit provider (one with auth), previews and refreshes with no change, and destroys them; the secret URL is masked", () => {
    const bridge = staticBridgeOf(host);
    const c = hostsConfig(host, ["local"]);
    const ip = "192.0.2.233";
    const common = { ...PLUGIN_PROXY_ARGS };
    const ws = track(
      pluginWorkspace(
        "yaml",
        {
          name: "kvmpt-yaml",
          runtime: "yaml",
          config: { password: { type: "string", secret: true } },
          resources: {
            lab: {
              type: "pulumi:providers:kvmproxy",
              properties: { hosts: c["kvm:hosts"], images: c["kvm:images"] },
            },
            plain: {
              type: KVM_PROXY_TYPE,
              properties: common,
              options: { provider: yamlRef("lab") },
            },
            authed: {
              type: KVM_PROXY_TYPE,
              properties: {
                ...common,
                nics: [{ bridge: bridge.name, addresses: [`${ip}/24`] }],
                proxy: { auth: { username: "crawler", password: yamlRef("password") } },
              },
              options: { provider: yamlRef("lab") },
            },
          },
          outputs: {
            url: yamlRef("authed.proxyUrl"),
            urlWithCredentials: yamlRef("authed.proxyUrlWithCredentials"),
          },
        },
        {},
        plugin,
      ),
    );
    ws.setSecret("kvmpt-yaml:password", PASSWORD);
    // Pulumi YAML prints no output with --debug, exported or not.
    upToDestroy(ws, ip, () => expect(printedWithDebug(ws)).toEqual([]));
  });
});

describe("an explicit provider given key material and a bake's user-data as plain text", () => {
  it("keeps its hosts and images secret in the state: neither text is in the checkpoint", () => {
    const key = `-----BEGIN OPENSSH PRIVATE KEY-----\nkvmpt-not-a-key-${process.pid}\n-----END OPENSSH PRIVATE KEY-----\n`;
    const userData = `#cloud-config\n# kvmpt-bake-user-data-${process.pid}\n`;
    const ws = track(
      pluginWorkspace(
        "yamlkeys",
        {
          name: "kvmpt-yamlkeys",
          runtime: "yaml",
          resources: {
            lab: {
              type: "pulumi:providers:kvmproxy",
              properties: {
                hosts: {
                  far: {
                    uri: "ssh://root@192.0.2.250:22",
                    knownHosts: "192.0.2.250 ssh-ed25519 AAAA",
                    privateKey: key,
                  },
                },
                images: { baked: { url: "https://images.invalid/debian.qcow2", bake: { userData } } },
              },
            },
          },
        },
        {},
        plugin,
      ),
    );
    ws.up();
    const text = ws.stateText();
    expect(text).not.toContain(`kvmpt-not-a-key-${process.pid}`);
    expect(text).not.toContain(`kvmpt-bake-user-data-${process.pid}`);
    const provider = ws.state().resources.find((r) => r.type === "pulumi:providers:kvmproxy");
    expect(Object.keys((provider?.inputs?.hosts ?? {}) as object)).toContain("ciphertext");
    expect(Object.keys((provider?.inputs?.images ?? {}) as object)).toContain("ciphertext");
    ws.destroy();
  });
});

describe("a ProxyFleet from a Pulumi YAML program (a component the plugin constructs)", () => {
  it("makes its members of the plugin's KvmProxy type under it, each with a password of its own, previews with no change and destroys them", () => {
    const bridge = staticBridgeOf(host);
    const { host: _host, image: _image, ...sized } = PLUGIN_PROXY_ARGS;
    const ws = track(
      pluginWorkspace(
        "yamlfleet",
        {
          name: "kvmpt-yamlfleet",
          runtime: "yaml",
          config: { password: { type: "string", secret: true } },
          resources: {
            fleet: {
              type: "kvmproxy:index:ProxyFleet",
              properties: {
                size: 2,
                hosts: ["local"],
                proxy: {
                  ...sized,
                  image: "tiny",
                  nics: [{ bridge: bridge.name, addressPool: { ranges: ["192.0.2.240-192.0.2.242/24"] } }],
                  proxy: { auth: { username: "crawler" } },
                },
                memberPasswords: { secret: yamlRef("password") },
              },
            },
          },
          outputs: { urls: yamlRef("fleet.urls"), urlsWithCredentials: yamlRef("fleet.urlsWithCredentials") },
        },
        {},
        plugin,
      ),
    );
    ws.setConfig(pluginConfig(host));
    ws.setSecret("kvmpt-yamlfleet:password", PASSWORD);
    const up = ws.run("up", "--yes", "--skip-preview");
    expect(up.code, failureText(up)).toBe(0);
    const resources = ws.state().resources as (StateResource & { parent?: string })[];
    const fleet = resources.find((r) => r.type === "kvmproxy:index:ProxyFleet");
    const members = resources.filter((r) => r.type === KVM_PROXY_TYPE);
    expect(members.map((m) => m.urn.replace(/^.*::/, "")).sort()).toEqual(["fleet-0", "fleet-1"]);
    for (const m of members) expect(m.parent).toBe(fleet?.urn);
    expect(domainsOfStack(host, ws.stack)).toHaveLength(2);

    const urls = ws.outputs().urls as string[];
    expect(urls.sort()).toEqual(["http://192.0.2.240:3128", "http://192.0.2.241:3128"].sort());
    expect(
      (JSON.parse(ws.mustRun("stack", "output", "--json").stdout) as Record<string, unknown>)
        .urlsWithCredentials,
    ).toBe("[secret]");
    const withCredentials = ws.outputs().urlsWithCredentials as string[];
    const passwords = withCredentials.map((u) => decodeURIComponent(new URL(u).password));
    expect(withCredentials.map((u) => new URL(u).username)).toEqual(["crawler", "crawler"]);
    expect(new Set(passwords).size).toBe(2);
    expect(passwords).not.toContain(PASSWORD);

    // Nothing of the secret, nor of the passwords made from it, in a --debug run or the plaintext state.
    const debug = ws.run("preview", "--expect-no-changes", "--debug");
    expect(debug.code, failureText(debug)).toBe(0);
    for (const secret of [PASSWORD, ...passwords]) {
      expect(debug.output).not.toContain(secret);
      expect(ws.stateText()).not.toContain(secret);
    }

    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
    expect((ws.state().resources ?? []).filter((r) => r.type === KVM_PROXY_TYPE)).toEqual([]);
  });
});

describe("a Python program", () => {
  it("creates two proxies through the Python SDK (one with auth), previews and refreshes with no change, and destroys them; the secret URL is masked", () => {
    const bridge = staticBridgeOf(host);
    const ip = "192.0.2.234";
    const ws = track(
      pluginWorkspace(
        "python",
        { name: "kvmpt-python", runtime: { name: "python", options: { virtualenv: "venv" } } },
        {
          "__main__.py": `import pulumi
import pulumi_kvmproxy as kvmproxy

cfg = pulumi.Config()
common = dict(host="local", image="tiny", health_check=False, wait_for_ip=False, memory_mi_b=128, disk_gi_b=1)
plain = kvmproxy.KvmProxy("plain", **common)
authed = kvmproxy.KvmProxy(
    "authed",
    nics=[kvmproxy.NicArgs(bridge=${JSON.stringify(bridge.name)}, addresses=["${ip}/24"])],
    proxy=kvmproxy.ProxyArgs(
        auth=kvmproxy.ProxyAuthArgs(username="crawler", password=cfg.require_secret("password")),
    ),
    **common,
)
pulumi.export("ids", [plain.id, authed.id])
pulumi.export("url", authed.proxy_url)
if cfg.get_bool("exportCredentials") is not False:
    pulumi.export("urlWithCredentials", authed.proxy_url_with_credentials)
`,
        },
        plugin,
      ),
    );
    // The project's own virtual environment, the SDK's wheel pip-installed into it as the docs say.
    venvWith(path.join(ws.dir, "venv"), wheel);
    ws.setConfig(pluginConfig(host));
    ws.setSecret("kvmpt-python:password", PASSWORD);
    upToDestroy(ws, ip, () => {
      // The Python SDK prints the stack outputs a program exports with --debug, secrets in the
      // clear: the URL with credentials, URL-encoded, in its lines for the stack's outputs...
      const exported = printedWithDebug(ws);
      expect(exported.length).toBeGreaterThan(0);
      expect(exported.every((l) => l.includes(encodeURIComponent(PASSWORD)))).toBe(true);
      // ...and nothing of it when the program does not export it.
      ws.setConfig({ "kvmpt-python:exportCredentials": false });
      const r = ws.run("preview", "--debug");
      expect(r.code, failureText(r)).toBe(0);
      expect(carryingPassword(r.output)).toEqual([]);
      ws.setConfig({ "kvmpt-python:exportCredentials": true });
    });
  });
});

describe("a Go program", () => {
  it("built by the Go host against the Go SDK's module, creates two proxies (one with auth), previews and refreshes with no change, and destroys them; the secret URL is masked", () => {
    const bridge = staticBridgeOf(host);
    const ip = "192.0.2.235";
    const main = `package main

import (
	"${GO_SDK_MODULE}/kvmproxy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		cfg := config.New(ctx, "")
		_ = ctx.Log.Debug("${GO_DEBUG_MARKER}", nil)
		common := func(args *kvmproxy.KvmProxyArgs) *kvmproxy.KvmProxyArgs {
			args.Host = pulumi.String("local")
			args.Image = pulumi.String("tiny")
			args.HealthCheck = pulumi.Bool(false)
			args.WaitForIp = pulumi.Bool(false)
			args.MemoryMiB = pulumi.Int(128)
			args.DiskGiB = pulumi.Int(1)
			return args
		}
		plain, err := kvmproxy.NewKvmProxy(ctx, "plain", common(&kvmproxy.KvmProxyArgs{}))
		if err != nil {
			return err
		}
		authed, err := kvmproxy.NewKvmProxy(ctx, "authed", common(&kvmproxy.KvmProxyArgs{
			Nics: kvmproxy.NicArray{kvmproxy.NicArgs{
				Bridge:    pulumi.String(${JSON.stringify(bridge.name)}),
				Addresses: pulumi.StringArray{pulumi.String("${ip}/24")},
			}},
			Proxy: &kvmproxy.ProxyArgs{
				Auth: &kvmproxy.ProxyAuthArgs{Username: pulumi.String("crawler"), Password: cfg.RequireSecret("password")},
			},
		}))
		if err != nil {
			return err
		}
		ctx.Export("ids", pulumi.StringArray{plain.ID().ToStringOutput(), authed.ID().ToStringOutput()})
		ctx.Export("url", authed.ProxyUrl)
		ctx.Export("urlWithCredentials", authed.ProxyUrlWithCredentials)
		return nil
	})
}
`;
    // A module of its own requiring the SDK's module by its path, offline.
    const ws = track(
      pluginWorkspace(
        "go",
        { name: "kvmpt-go", runtime: "go" },
        {
          "main.go": main,
          ...goProgramModule(),
        },
        plugin,
      ),
    );
    // The flags of the CLI's build (scripts/pulumi-cli), whose compiled packages the build cache holds.
    ws.extraEnv = { ...ws.extraEnv, GOFLAGS: "-mod=mod -trimpath", GOPROXY: "off", CGO_ENABLED: "0" };
    ws.setConfig(pluginConfig(host));
    ws.setSecret("kvmpt-go:password", PASSWORD);
    // The Go SDK prints no output with --debug, exported or not.
    upToDestroy(ws, ip, () => expect(printedWithDebug(ws, GO_DEBUG_MARKER)).toEqual([]));
  }, 900_000);
});
