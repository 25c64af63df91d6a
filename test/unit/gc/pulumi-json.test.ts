import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import {
  CliOutputError,
  configReader,
  currentStack,
  parseStackExport,
  parseStackList,
} from "../../../provider/gc/pulumi-json";
import { readStackConfig } from "../../../provider/resource/stack-config";

// Shapes as printed by the Pulumi CLI 3.248 (file:// backend), trimmed.
const STACK_LS_ALL = JSON.stringify([
  { name: "organization/gcscratch/s1", current: false, resourceCount: 0 },
  { name: "s9", current: true, lastUpdate: "2026-11-29T19:47:31.160Z", resourceCount: 0 },
  { name: "acme/s3", current: false },
]);

const URN = "urn:pulumi:dev::infra::pulumi-nodejs:dynamic:KvmProxy::web";

describe("parseStackList", () => {
  it("splits qualified names and gives short ones the current project", () => {
    expect(parseStackList(STACK_LS_ALL, "other")).toEqual([
      { project: "gcscratch", stack: "s1", ref: "organization/gcscratch/s1" },
      { project: "other", stack: "s9", ref: "s9" },
      { project: "other", stack: "s3", ref: "acme/s3" },
    ]);
  });

  it.each([
    ["not JSON", "error: no backend", /not JSON/],
    ["not an array", "{}", /not an array/],
    ["an entry without a name", "[{}]", /entry 0 has no name/],
    ["a name with four parts", '[{"name":"a/b/c/d"}]', /too many parts/],
  ])("rejects %s", (_what, text, reason) => {
    const err = (() => {
      try {
        parseStackList(text, "p");
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(CliOutputError);
    expect(isTransient(err)).toBe(false);
    expect((err as Error).message).toMatch(reason);
  });

  it("finds the current stack", () => {
    expect(currentStack(STACK_LS_ALL)).toBe("s9");
    expect(currentStack("[]")).toBeUndefined();
  });
});

describe("parseStackExport", () => {
  it("reads resources (ID, type, parent, provider, outputs, marked for deletion) and pending operations", () => {
    const text = JSON.stringify({
      version: 3,
      deployment: {
        manifest: { version: "v3.248.0" },
        resources: [
          {
            urn: "urn:pulumi:dev::infra::pulumi:pulumi:Stack::infra-dev",
            custom: false,
            type: "pulumi:pulumi:Stack",
          },
          {
            urn: URN,
            custom: true,
            id: "kvm://lab/web-1",
            type: "pulumi-nodejs:dynamic:KvmProxy",
            parent: "urn:pulumi:dev::infra::pulumi:pulumi:Stack::infra-dev",
            provider: "urn:pulumi:dev::infra::pulumi:providers:pulumi-nodejs::default::04da6b54",
            outputs: { state: "running" },
          },
          { urn: URN, custom: true, id: "kvm://lab/web-0", delete: true },
        ],
        pending_operations: [{ resource: { urn: `${URN}2`, custom: true }, type: "creating" }],
      },
    });
    expect(parseStackExport(text)).toEqual({
      kind: "read",
      resources: [
        { urn: "urn:pulumi:dev::infra::pulumi:pulumi:Stack::infra-dev", type: "pulumi:pulumi:Stack" },
        {
          urn: URN,
          id: "kvm://lab/web-1",
          type: "pulumi-nodejs:dynamic:KvmProxy",
          parent: "urn:pulumi:dev::infra::pulumi:pulumi:Stack::infra-dev",
          provider: "urn:pulumi:dev::infra::pulumi:providers:pulumi-nodejs::default::04da6b54",
          outputs: { state: "running" },
        },
        { urn: URN, id: "kvm://lab/web-0", delete: true },
      ],
      pending: [{ urn: `${URN}2`, type: "creating" }],
    });
  });

  it("reads the owner a resource's VM was made with when it is another URN (a move by alias)", () => {
    const moved = "urn:pulumi:dev::infra::kvmproxy:index:KvmProxy::web-1";
    const text = JSON.stringify({
      deployment: {
        resources: [
          { urn: moved, id: "kvm://lab/web-1", outputs: { owner: { urn: URN } } },
          { urn: URN, id: "kvm://lab/web-2", inputs: { owner: { urn: URN } } },
        ],
      },
    });
    expect(parseStackExport(text).resources).toEqual([
      { urn: moved, id: "kvm://lab/web-1", ownerUrn: URN, outputs: { owner: { urn: URN } } },
      { urn: URN, id: "kvm://lab/web-2", inputs: { owner: { urn: URN } } },
    ]);
  });

  it("reads a stack that was never updated as holding nothing", () => {
    const text = JSON.stringify({ version: 3, deployment: { manifest: {}, metadata: {} } });
    expect(parseStackExport(text)).toEqual({ kind: "read", resources: [], pending: [] });
  });

  it.each([
    ["no deployment", "{}", /no deployment/],
    ["resources not an array", '{"deployment":{"resources":{}}}', /resources is not an array/],
    ["a resource without urn", '{"deployment":{"resources":[{"id":"x"}]}}', /resource 0 has no urn/],
    [
      "a pending operation without urn",
      '{"deployment":{"pending_operations":[{"type":"creating"}]}}',
      /pending operation 0/,
    ],
  ])("rejects %s rather than reading it as empty", (_what, text, reason) => {
    expect(() => parseStackExport(text)).toThrow(reason);
  });
});

describe("configReader", () => {
  const text = JSON.stringify({
    "kvm:hosts": {
      value: '{"lab":{"uri":"unix:///run/libvirt-sock"}}',
      objectValue: { lab: { uri: "unix:///run/libvirt-sock" } },
      secret: false,
    },
    "kvm:sshPrivateKey": { value: "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n", secret: true },
  });

  it("gives structured values and plain values by full key, for readStackConfig", () => {
    const get = configReader(text);
    expect(get("kvm:hosts")).toEqual({ lab: { uri: "unix:///run/libvirt-sock" } });
    expect(get("kvm:sshPrivateKey")).toMatch(/^-----BEGIN/);
    expect(get("kvm:images")).toBeUndefined();
    const config = readStackConfig(get);
    expect(Object.keys(config.hosts)).toEqual(["lab"]);
    expect(config.general).toEqual([]);
  });

  it("reads a kvm: key the stack leaves out from the plugin's namespace (kvmproxy:)", () => {
    const get = configReader(
      JSON.stringify({
        "kvmproxy:hosts": { value: "{}", objectValue: { lab: { uri: "unix:///run/libvirt-sock" } } },
        "kvm:images": { value: "{}", objectValue: {} },
        "kvmproxy:images": { value: "{}", objectValue: { tiny: { url: "/x.qcow2" } } },
      }),
    );
    expect(get("kvm:hosts")).toEqual({ lab: { uri: "unix:///run/libvirt-sock" } });
    expect(get("kvm:images")).toEqual({});
  });

  it("never quotes the text (it holds secrets) when it is not JSON", () => {
    expect(() => configReader("SECRET-VALUE")).toThrow(CliOutputError);
    try {
      configReader("SECRET-VALUE");
    } catch (e) {
      expect((e as Error).message).not.toContain("SECRET");
    }
  });
});
