/**
 * keepOnFailure: the input (check, diff), the error and record of a create
 * whose VM it kept (KvmProxyRuntime.create over a provision that fails
 * after the VM ran), the diff that replaces that record, and the commands
 * the error tells the operator (kvm/host/inspect.ts).
 */
import { describe, expect, it } from "vitest";
import { ProviderError } from "../../../provider/errors";
import type { HostEndpoint } from "../../../provider/kvm/config/host-config";
import { inspectCommands, virshUri } from "../../../provider/kvm/host/inspect";
import type { KvmOperations } from "../../../provider/kvm/host/operations";
import { ProvisionError, type ProvisionOptions } from "../../../provider/kvm/host/provision";
import type { VmStatus } from "../../../provider/kvm/host/vm";
import { checkInputs } from "../../../provider/resource/check";
import { diffProxy, KEPT_MARK } from "../../../provider/resource/diff";
import { KvmProxyRuntime, PartialCreateError } from "../../../provider/resource/provider";
import { decodeState } from "../../../provider/resource/recorded-state";
import { readStackConfig } from "../../../provider/resource/stack-config";

const HOSTS = {
  lab: { uri: "unix:///run/kvmp-test/libvirt-sock" },
};
const STACK = {
  "kvm:hosts": HOSTS,
  "kvm:images": { debian: { url: "https://example.com/debian.qcow2" } },
};
const config = readStackConfig((k) => (STACK as Record<string, unknown>)[k]);
const OWNER = { project: "p", stack: "s", urn: "urn:pulumi:s::p::KvmProxy::edge", resource: "edge" };
const BASE = { host: "lab", image: "debian", owner: OWNER };

function check(news: Record<string, unknown>, olds: Record<string, unknown> = {}) {
  return checkInputs(olds, news, { config, randomBytes: (n) => new Uint8Array(n).fill(7) });
}

function checked(news: Record<string, unknown>, olds: Record<string, unknown> = {}) {
  const r = check(news, olds);
  expect(r.failures).toEqual([]);
  return r.inputs;
}

describe("check of keepOnFailure", () => {
  it.each<[string, unknown, unknown]>([
    ["true is kept", true, true],
    ["false is left out: the same inputs as without it", false, undefined],
    ["absent is left out", undefined, undefined],
  ])("%s", (_what, given, want) => {
    expect(checked({ ...BASE, keepOnFailure: given }).keepOnFailure).toBe(want);
  });

  it.each([["yes"], [1], [{}], [["true"]]])("refuses %j, naming the field", (given) => {
    expect(check({ ...BASE, keepOnFailure: given }).failures).toEqual([
      { property: "keepOnFailure", reason: "must be true or false" },
    ]);
  });
});

/** A VM that ran, then failed its first boot. */
function ranStatus(name: string): VmStatus {
  return {
    host: "lab",
    name,
    state: "running",
    uuid: "0b9c2d3e-1111-4222-8333-444455556666",
    mac: "52:54:00:12:34:56",
    ipv4: "192.168.122.50",
  };
}

const FIRST_BOOT_FAILED = [
  "cloud-init finished the guest's first boot with errors in scripts_user:",
  "last lines of /var/log/cloud-init-output.log in the guest:",
  "  | kvmp-runcmd-about-to-fail",
].join("\n");

/** A runtime whose provision fails as `fail` says, recording the options it got. */
async function runtimeFailing(fail: (name: string) => unknown): Promise<{
  runtime: KvmProxyRuntime;
  seen: ProvisionOptions[];
  info: string[];
}> {
  const runtime = new KvmProxyRuntime();
  const info: string[] = [];
  runtime.log = {
    status() {},
    info(_urn: string | undefined, text: string) {
      info.push(text);
    },
    warn() {},
    flush: async () => {},
  } as unknown as KvmProxyRuntime["log"];
  await runtime.configure({ config: { get: (k) => (STACK as Record<string, unknown>)[k] } });
  const real = runtime.ops();
  const seen: ProvisionOptions[] = [];
  // The real operations but for provision, which fails without touching a host.
  const fake = Object.assign(Object.create(real) as KvmOperations, {
    provision: async (spec: { name: string }, options: ProvisionOptions) => {
      seen.push(options);
      throw fail(spec.name);
    },
  });
  runtime.ops = () => fake;
  return { runtime, seen, info };
}

const keptBy = (name: string) =>
  new ProvisionError(
    `kvm://lab/${name}`,
    new ProviderError("permanent", FIRST_BOOT_FAILED),
    { kept: true },
    ranStatus(name),
  );

describe("a create whose VM keepOnFailure kept", () => {
  it("asks provision to keep the VM only when the input is set", async () => {
    const { runtime, seen } = await runtimeFailing(() => new Error("no host today"));
    for (const keep of [true, false]) {
      await runtime.create(checked({ ...BASE, name: "edge-1", keepOnFailure: keep })).catch(() => undefined);
    }
    expect(seen.map((o) => o.keepOnFailure)).toEqual([true, undefined]);
  });

  it("fails as a partial create: the engine records the VM, marked, with what it ran as", async () => {
    const { runtime } = await runtimeFailing(keptBy);
    const err = await runtime
      .create(checked({ ...BASE, name: "edge-1", keepOnFailure: true }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PartialCreateError);
    const e = err as PartialCreateError;
    expect(e.id).toBe("kvm://lab/edge-1");
    expect(e.properties).toMatchObject({
      host: "lab",
      domainName: "edge-1",
      uuid: "0b9c2d3e-1111-4222-8333-444455556666",
      keepOnFailure: true,
      // Running, its proxy never ready: degraded, with why.
      state: "degraded",
      health: {
        ok: false,
        reason: "cloud-init finished the guest's first boot with errors in scripts_user:",
      },
      [KEPT_MARK]: {
        failedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
        reason: "cloud-init finished the guest's first boot with errors in scripts_user:",
      },
    });
  });

  it("says it was kept, how to look at it (host and domain filled in) and what removes it, in its message and its reasons", async () => {
    const { runtime } = await runtimeFailing(keptBy);
    const e = (await runtime
      .create(checked({ ...BASE, name: "edge-1", keepOnFailure: true }))
      .catch((x: unknown) => x)) as PartialCreateError;
    for (const text of [e.message, e.reasons.join("\n")]) {
      expect(text).toContain("kvmp-runcmd-about-to-fail");
      expect(text).toContain("the VM edge-1 on host lab was kept for inspection (keepOnFailure)");
      expect(text).toContain("`pulumi-kvm-proxy console lab edge-1`");
      expect(text).toContain(
        "`virsh -c qemu+unix:///system?socket=/run/kvmp-test/libvirt-sock console edge-1`",
      );
      expect(text).toContain(
        "the next `pulumi up` replaces it (deleting it first), `pulumi destroy` deletes it",
      );
    }
    expect(e.reasons[0]).toMatch(/^create of kvm:\/\/lab\/edge-1 failed: cloud-init finished/);
  });

  it("is replaced at the next up, deleted first, and preview says why", async () => {
    const { runtime, info } = await runtimeFailing(keptBy);
    const inputs = checked({ ...BASE, keepOnFailure: true });
    const e = (await runtime.create(inputs).catch((x: unknown) => x)) as PartialCreateError;
    const d = await runtime.diff(e.id, e.properties, checked({ ...BASE, keepOnFailure: true }, inputs));
    expect(d).toEqual({ changes: true, replaces: [KEPT_MARK], deleteBeforeReplace: true });
    expect(info).toEqual([
      expect.stringMatching(
        /^replace \(delete first\): the VM was kept for inspection after its create failed at \S+ \(keepOnFailure\)$/,
      ),
    ]);
  });
});

describe("diff of a record", () => {
  const created = (news: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
    const c = checked(news);
    return { ...c, ...ranStatusOutputs(c.name as string), ...extra };
  };
  const ranStatusOutputs = (name: string) => ({ host: "lab", domainName: name, uuid: "u", state: "running" });
  const mark = { [KEPT_MARK]: { failedAt: "2026-01-01T00:00:00.000Z", reason: "health check timed out" } };

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ["marked, the same inputs", { keepOnFailure: true }, { keepOnFailure: true }],
    ["marked, the flag cleared since", { keepOnFailure: true }, {}],
    ["marked, a fixed name", { name: "edge-fixed", keepOnFailure: true }, { name: "edge-fixed" }],
    ["marked, memory changed too", { keepOnFailure: true }, { keepOnFailure: true, memoryMiB: 1024 }],
  ])("%s → replaced, deleted first", (_what, before, after) => {
    const olds = created({ ...BASE, ...before }, mark);
    const d = diffProxy(decodeState(olds), checked({ ...BASE, ...after }, olds));
    expect(d).toMatchObject({ changes: true, replaces: [KEPT_MARK], deleteBeforeReplace: true });
  });

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ["the flag set", {}, { keepOnFailure: true }],
    ["the flag cleared", { keepOnFailure: true }, { keepOnFailure: false }],
  ])("unmarked, %s → an update in place that rebuilds nothing", (_what, before, after) => {
    const olds = created({ ...BASE, ...before });
    const d = diffProxy(decodeState(olds), checked({ ...BASE, ...after }, olds));
    expect(d).toEqual({
      changes: true,
      replaces: [],
      updates: ["keepOnFailure"],
      deleteBeforeReplace: false,
    });
  });

  it("unmarked, false given where it was absent → no change", () => {
    const olds = created(BASE);
    expect(diffProxy(decodeState(olds), checked({ ...BASE, keepOnFailure: false }, olds)).changes).toBe(
      false,
    );
  });
});

describe("the commands a kept VM is looked at with", () => {
  const ssh = (user: string, host: string, port: number, socketPath = "/var/run/libvirt/libvirt-sock") =>
    ({ kind: "ssh", user, host, port, socketPath }) as HostEndpoint;
  it.each<[string, HostEndpoint, string, string]>([
    [
      "ssh, the defaults",
      ssh("root", "kvm1.example", 22),
      "qemu:///system",
      "qemu+ssh://root@kvm1.example/system",
    ],
    [
      "ssh, a port and a socket of its own",
      ssh("ops", "kvm1.example", 2222, "/run/user/1000/libvirt/libvirt-sock"),
      "qemu:///session",
      "qemu+ssh://ops@kvm1.example:2222/session?socket=/run/user/1000/libvirt/libvirt-sock",
    ],
    [
      "ssh to an IPv6 address",
      ssh("root", "2001:db8::7", 22),
      "qemu:///system",
      "qemu+ssh://root@[2001:db8::7]/system",
    ],
    [
      "a unix socket",
      { kind: "unix", socketPath: "/run/libvirt/libvirt-sock" },
      "qemu:///system",
      "qemu+unix:///system?socket=/run/libvirt/libvirt-sock",
    ],
  ])("virsh's URI: %s", (_what, endpoint, driverUri, want) => {
    expect(virshUri({ endpoint, driverUri })).toBe(want);
  });

  it("name the host key and the domain", () => {
    expect(
      inspectCommands("lab", "edge-1", { endpoint: ssh("root", "kvm1", 22), driverUri: "qemu:///system" }),
    ).toEqual({
      log: "pulumi-kvm-proxy console lab edge-1",
      console: "virsh -c qemu+ssh://root@kvm1/system console edge-1",
    });
  });
});
