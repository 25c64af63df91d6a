import { describe, expect, it } from "vitest";
import { CliOutputError } from "../../../provider/gc/pulumi-json";
import { SECRET_SIG } from "../../../provider/plugin/property-values";
import { nameOfUrn } from "../../../provider/resource/retirement";
import { revealed, stackProxies } from "../../../provider/status/stack-proxies";
import { parseStatusArgs } from "../../../provider/status/status-command-line";

const STACK = "urn:pulumi:prod::crawl::";
const FLEET_URN = `${STACK}kvmproxy:index:ProxyFleet::edge`;

function exported(resources: unknown[]): string {
  return JSON.stringify({ version: 3, deployment: { manifest: {}, resources } });
}

describe("the stack's proxies, from `pulumi stack export`", () => {
  it("takes KvmProxy resources of both doors, names a fleet member's fleet, skips what is marked for deletion", () => {
    const text = exported([
      { urn: `${STACK}pulumi:pulumi:Stack::crawl-prod`, type: "pulumi:pulumi:Stack" },
      { urn: FLEET_URN, type: "kvmproxy:index:ProxyFleet" },
      {
        urn: `${STACK}kvmproxy:index:ProxyFleet$pulumi-nodejs:dynamic:KvmProxy::edge-0`,
        type: "pulumi-nodejs:dynamic:KvmProxy",
        id: "kvm://hv1/edge-0-1a2b3c4d",
        parent: FLEET_URN,
        outputs: { state: "running" },
      },
      {
        urn: `${STACK}kvmproxy:index:KvmProxy::solo`,
        type: "kvmproxy:index:KvmProxy",
        id: "kvm://hv2/solo-9f8e7d6c",
        parent: `${STACK}pulumi:pulumi:Stack::crawl-prod`,
      },
      {
        urn: `${STACK}pulumi-nodejs:dynamic:KvmProxy::old`,
        type: "pulumi-nodejs:dynamic:KvmProxy",
        id: "kvm://hv1/old-00000000",
        delete: true,
      },
      // Not created yet (a failed first create records no ID).
      { urn: `${STACK}pulumi-nodejs:dynamic:KvmProxy::pending`, type: "pulumi-nodejs:dynamic:KvmProxy" },
    ]);
    expect(stackProxies(text)).toEqual([
      {
        urn: `${STACK}kvmproxy:index:ProxyFleet$pulumi-nodejs:dynamic:KvmProxy::edge-0`,
        id: "kvm://hv1/edge-0-1a2b3c4d",
        name: "edge-0",
        door: "dynamic",
        fleet: "edge",
        outputs: { state: "running" },
        inputs: {},
      },
      {
        urn: `${STACK}kvmproxy:index:KvmProxy::solo`,
        id: "kvm://hv2/solo-9f8e7d6c",
        name: "solo",
        door: "plugin",
        outputs: {},
        inputs: {},
      },
    ]);
  });

  it("names the explicit provider a plugin proxy was made with (it reads no stack config)", () => {
    const provider = (name: string) => `${STACK}pulumi:providers:kvmproxy::${name}::5f1c2e3a-0d4b`;
    const text = exported(
      [provider("default_0_9_0"), provider("eu-hosts"), provider("default-eu"), provider("default")].map(
        (p, i) => ({
          urn: `${STACK}kvmproxy:index:KvmProxy::p${i}`,
          type: "kvmproxy:index:KvmProxy",
          id: `kvm://hv1/p${i}-00000000`,
          provider: p,
        }),
      ),
    );
    expect(stackProxies(text).map((p) => [p.name, p.explicitProvider])).toEqual([
      ["p0", undefined],
      ["p1", "eu-hosts"],
      ["p2", "default-eu"],
      ["p3", undefined],
    ]);
  });

  it("a stack never updated holds none", () => {
    expect(stackProxies(JSON.stringify({ version: 3, deployment: { manifest: {} } }))).toEqual([]);
  });

  it.each([
    ["not JSON, quoting none of it (it holds secrets)", '{"secret":"hunter2-password"', "not JSON"],
    ["no deployment", "{}", "no deployment object"],
    ["resources not a list", JSON.stringify({ deployment: { resources: {} } }), "resources is not an array"],
    ["a resource without a URN", exported([{ type: "x" }]), "resource 0 has no urn"],
  ])("refuses an export that is %s", (_what, text, reason) => {
    expect(() => stackProxies(text)).toThrow(CliOutputError);
    expect(() => stackProxies(text)).toThrow(`unexpected output of pulumi stack export: ${reason}`);
    try {
      stackProxies(text);
    } catch (err) {
      expect(String(err)).not.toContain("hunter2");
    }
  });

  it("a URN's name is its last part", () => {
    expect(nameOfUrn(`${STACK}a$b::name::with::colons`)).toBe("colons");
    expect(nameOfUrn("plain")).toBe("plain");
  });
});

describe("status's command line", () => {
  it.each<[string[], object]>([
    [[], { cwd: "/p", format: "table", help: false }],
    [["--json", "--stack", "prod"], { cwd: "/p", stack: "prod", format: "json", help: false }],
    [["--prometheus", "-C", "/q"], { cwd: "/q", format: "prometheus", help: false }],
    [["-h"], { cwd: "/p", format: "table", help: true }],
  ])("%j", (argv, want) => {
    expect(parseStatusArgs(argv, "/p")).toEqual(want);
  });

  it.each([
    [["--json", "--prometheus"], "--json and --prometheus are two forms of one output: give one"],
    [["--stack", ""], "--stack must not be empty"],
    [["--delete"], "Unknown option '--delete'"],
    [["extra"], "Unexpected argument 'extra'"],
  ])("refuses %j", (argv, message) => {
    expect(() => parseStatusArgs(argv, "/p")).toThrow(message);
  });
});

describe("secrets of `stack export --show-secrets`", () => {
  it("are given back as the values the provider received, however deep", () => {
    const wrapped = (v: unknown) => ({
      [SECRET_SIG]: "1b47061264138c4ac30d75fd1eb44270",
      plaintext: JSON.stringify(v),
    });
    expect(
      revealed({
        host: "hv1",
        hostConnection: wrapped({ key: "hv1", uri: "ssh://root@hv1", privateKey: "KEY" }),
        nics: [{ addresses: ["192.0.2.61/24"], secretish: wrapped("x") }],
      }),
    ).toEqual({
      host: "hv1",
      hostConnection: { key: "hv1", uri: "ssh://root@hv1", privateKey: "KEY" },
      nics: [{ addresses: ["192.0.2.61/24"], secretish: "x" }],
    });
  });

  it("a proxy's outputs come out revealed", () => {
    const text = JSON.stringify({
      deployment: {
        resources: [
          {
            urn: `${STACK}pulumi-nodejs:dynamic:KvmProxy::solo`,
            type: "pulumi-nodejs:dynamic:KvmProxy",
            id: "kvm://hv1/solo-00000000",
            outputs: {
              proxyPasswordHash: { [SECRET_SIG]: "1b47061264138c4ac30d75fd1eb44270", plaintext: '"$6$x"' },
            },
          },
        ],
      },
    });
    expect(stackProxies(text)[0]?.outputs).toEqual({ proxyPasswordHash: "$6$x" });
  });
});
