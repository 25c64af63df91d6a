/**
 * KvmProxy through the real Pulumi CLI (scripts/pulumi-cli) against the real
 * test host: up, preview, replace, refresh, adopt, destroy, and the examples.
 * Nothing here boots a guest OS (TCG domains on an empty image), so every
 * proxy uses waitForIp: false and healthCheck: false, except the test of the
 * create deadline, which relies on the IP never coming.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  domainsOfStack,
  type EngineStep,
  engineSteps,
  hostsConfig,
  metadataOf,
  perVmVolumesOf,
  poolVolumes,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  vmVolumeNames,
  Workspace,
} from "./harness";

/** How the state marks a secret value (Pulumi's signature key and its value for secrets). */
const SECRET_SIG = "4dabf18193072939515e22adb298388d";
const SECRET_SIG_VALUE = "1b47061264138c4ac30d75fd1eb44270";

let host: TestHost;
const workspaces: Workspace[] = [];

function workspace(...args: ConstructorParameters<typeof Workspace>): Workspace {
  const ws = new Workspace(...args);
  workspaces.push(ws);
  return ws;
}

function pair(tag: string): Workspace {
  return workspace(tag, { name: "kvmpt-pair", main: "test/pulumi/programs/pair" });
}

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
});

function perVmVolumes(names: string[]): string[] {
  const vols = poolVolumes(host);
  return names.flatMap((n) => perVmVolumesOf(vols, n)).sort();
}

describe("the quickstart over SSH", () => {
  it("creates two proxies, holds no plaintext key, previews no change, and destroys everything", () => {
    const ws = workspace("quickstart", { name: "kvmpt-quickstart", main: "examples/quickstart" });
    ws.setConfig({
      ...hostsConfig(host, ["remote"]),
      "quickstart:host": "remote",
      "quickstart:image": "tiny",
      "quickstart:proxy": TEST_PROXY_ARGS,
    });
    const key = readFileSync(host.sshKeyPath, "utf8");
    ws.setSecret("kvm:sshPrivateKey", key);
    const password = `quickstart-${process.pid}-P4ssw0rd`;
    ws.setSecret("quickstart:password", password);

    ws.up();
    const ids = ws.outputs().ids as string[];
    expect(ids).toHaveLength(2);
    const names = ids.map((id) => {
      expect(id).toMatch(/^kvm:\/\/remote\/edge-[12]-[0-9a-f]{8}$/);
      return id.slice("kvm://remote/".length);
    });
    // libvirt holds exactly those domains for this stack, each with our metadata.
    expect(domainsOfStack(host, ws.stack)).toEqual([...names].sort());
    for (const n of names) {
      const meta = metadataOf(host, n) ?? "";
      expect(meta).toContain('managedBy="pulumi-kvm-proxy"');
      expect(meta).toContain(
        `urn="urn:pulumi:${ws.stack}::kvmpt-quickstart::pulumi-nodejs:dynamic:KvmProxy::`,
      );
      expect(meta).toContain('ref="tiny"');
    }
    expect(perVmVolumes(names)).toEqual(names.flatMap((n) => vmVolumeNames(host, n)).sort());

    // The state: no plaintext key anywhere, a small serialized provider without paths.
    const text = ws.stateText();
    const keyBody = key.split("\n")[1] ?? "";
    expect(keyBody.length).toBeGreaterThan(20);
    expect(text).not.toContain(keyBody);
    expect(text).not.toContain(password);
    const proxies = ws.proxies();
    expect(proxies).toHaveLength(2);
    for (const p of proxies) {
      const provider = p.outputs?.__provider as string;
      expect(Buffer.byteLength(provider)).toBeLessThan(4096);
      expect(provider).not.toContain(`${path.sep}work`);
      expect(provider).not.toMatch(/"\/[a-z]/);
      expect(provider).toContain('require("pulumi-kvm-proxy/dist/provider/resource/provider")');
      // The outputs keep only the user-data's digest (here the default
      // cloud-config; a user's own is a secret input: test/pulumi/secrets.test.ts),
      // and keep it as a secret: a guess at the text is checked against it.
      expect(p.outputs?.userData).toBeUndefined();
      expect(p.outputs?.userDataSha256).toMatchObject({ [SECRET_SIG]: SECRET_SIG_VALUE });
    }
    const shown = JSON.parse(ws.mustRun("stack", "export", "--show-secrets").stdout) as {
      deployment: { resources?: { type: string; outputs?: Record<string, unknown> }[] };
    };
    const shownProxies = (shown.deployment.resources ?? []).filter(
      (r) => r.type === "pulumi-nodejs:dynamic:KvmProxy",
    );
    expect(shownProxies).toHaveLength(2);
    for (const p of shownProxies) {
      expect(p.outputs?.userDataSha256).toMatchObject({
        [SECRET_SIG]: SECRET_SIG_VALUE,
        plaintext: expect.stringMatching(/^"[0-9a-f]{64}"$/),
      });
    }

    const preview = ws.mustRun("preview", "--expect-no-changes", "--diff");
    expect(preview.output).toMatch(/3 unchanged/);

    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
    expect(allDomains(host).filter((d) => names.includes(d))).toEqual([]);
    expect(perVmVolumes(names)).toEqual([]);
    // The cached image stays for the next VM.
    expect(poolVolumes(host).some((v) => v.startsWith("kvmp-image-"))).toBe(true);
  });
});

describe("changes", () => {
  it("a changed userData previews a replace of that proxy only, and up applies it", () => {
    const ws = pair("replace");
    const proxies = {
      "rep-a": { host: "local", image: "tiny", ...TEST_PROXY_ARGS, userData: "#cloud-config\n" },
      "rep-b": { host: "local", image: "tiny", ...TEST_PROXY_ARGS, userData: "#cloud-config\n" },
    };
    ws.setConfig({ ...hostsConfig(host), "pair:proxies": proxies });
    ws.up();
    const before = ws.outputs().names as Record<string, string>;

    ws.setConfig({
      "pair:proxies": {
        ...proxies,
        "rep-a": { ...proxies["rep-a"], userData: "#cloud-config\nhostname: x\n" },
      },
    });
    const steps = ws.previewSteps();
    const changed = steps.filter((st) => st.op !== "same" && st.urn.includes("KvmProxy"));
    expect(changed.length).toBeGreaterThan(0);
    for (const st of changed) expect(st.urn).toMatch(/::rep-a$/);
    expect(changed.map((st) => st.op)).toContain("replace");

    ws.up();
    const after = ws.outputs().names as Record<string, string>;
    expect(after["rep-b"]).toBe(before["rep-b"]);
    expect(after["rep-a"]).not.toBe(before["rep-a"]);
    // Autonamed: created before the old one was deleted; the old one is gone.
    expect(domainsOfStack(host, ws.stack)).toEqual([after["rep-a"], after["rep-b"]].sort());
    ws.mustRun("preview", "--expect-no-changes");
  });

  it("tags update in place, in the VM's metadata too", () => {
    const ws = pair("tags");
    const p = {
      host: "local",
      image: "tiny",
      ...TEST_PROXY_ARGS,
      name: `kvmpt-tags-${process.pid}`,
      tags: { team: "a" },
    };
    ws.setConfig({ ...hostsConfig(host), "pair:proxies": { tagged: p } });
    ws.up();
    const uuid = virshUuid(p.name);
    ws.setConfig({ "pair:proxies": { tagged: { ...p, tags: { team: "b", tier: "edge" } } } });
    const preview = ws.mustRun("preview");
    expect(preview.output).toMatch(/1 to update/);
    expect(preview.output).not.toMatch(/to replace/);
    ws.up();
    expect(virshUuid(p.name)).toBe(uuid);
    const meta = metadataOf(host, p.name) ?? "";
    expect(meta).toContain('<tag key="team" value="b"/>');
    expect(meta).toContain('<tag key="tier" value="edge"/>');
  });

  it("a fixed name is replaced delete-before-create: only that proxy, for the property that changed", () => {
    const ws = pair("dbr");
    const p = { host: "local", image: "tiny", ...TEST_PROXY_ARGS, name: `kvmpt-dbr-${process.pid}` };
    const other = {
      host: "local",
      image: "tiny",
      ...TEST_PROXY_ARGS,
      name: `kvmpt-dbr-other-${process.pid}`,
    };
    ws.setConfig({ ...hostsConfig(host), "pair:proxies": { fixed: p, other } });
    ws.up();
    const uuid = virshUuid(p.name);
    const otherUuid = virshUuid(other.name);
    ws.setConfig({ "pair:proxies": { fixed: { ...p, vcpus: 2 }, other } });
    const steps = upSteps(ws);
    const of = (resource: string) =>
      steps.filter((st) => st.urn.endsWith(`KvmProxy::${resource}`)).map(({ op, keys }) => ({ op, keys }));
    // In the engine's order: the old VM goes first, the replacement names vcpus as its only reason.
    expect(of("fixed")).toEqual([
      { op: "delete-replaced", keys: [] },
      { op: "replace", keys: ["vcpus"] },
      { op: "create-replacement", keys: ["vcpus"] },
    ]);
    expect(of("other")).toEqual([{ op: "same", keys: [] }]);
    expect(virshUuid(p.name)).not.toBe(uuid);
    expect(virshUuid(other.name)).toBe(otherUuid);
    expect(domainsOfStack(host, ws.stack)).toEqual([p.name, other.name].sort());
  });
});

/**
 * The steps `pulumi up --json` took, in the order the engine began them: op,
 * URN, and the keys the provider named as forcing a replace.
 */
function upSteps(ws: Workspace): EngineStep[] {
  return engineSteps(ws.mustRun("up", "--yes", "--skip-preview", "--json").stdout);
}

function virshUuid(name: string): string {
  return virsh(host, "domuuid", name).trim();
}

describe("validation", () => {
  it("bad inputs fail at preview naming each field, and nothing is created", () => {
    const ws = pair("bad");
    const name = `bad-${process.pid}`;
    ws.setConfig({
      ...hostsConfig(host),
      "pair:proxies": {
        bad: {
          host: "local",
          image: "no-such-image",
          ...TEST_PROXY_ARGS,
          name,
          memoryMiB: -5,
          macAddress: "01:00:5e:00:00:01",
          tags: { "<x>": "y" },
        },
      },
    });
    const r = ws.run("preview");
    expect(r.code).not.toBe(0);
    expect(r.output).toMatch(/property memoryMiB value .* has a problem: must be an integer from 128/);
    expect(r.output).toMatch(/property image value .* has a problem: unknown image key "no-such-image"/);
    expect(r.output).toMatch(/property macAddress value .* has a problem: must be a unicast address/);
    expect(r.output).toMatch(/tags.<x>.* has a problem: key must be/);
    const up = ws.run("up", "--yes", "--skip-preview");
    expect(up.code).not.toBe(0);
    expect(allDomains(host)).not.toContain(name);
    expect(ws.proxies()).toEqual([]);
  });

  it("an unknown host key fails at preview", () => {
    const ws = pair("badhost");
    ws.setConfig({
      ...hostsConfig(host),
      "pair:proxies": { x: { host: "nowhere", image: "tiny", ...TEST_PROXY_ARGS } },
    });
    const r = ws.run("preview");
    expect(r.code).not.toBe(0);
    expect(r.output).toMatch(
      /property host value .* has a problem: unknown host "nowhere": not a key of the stack config kvm:hosts \(configured: local\)/,
    );
    expect(ws.proxies()).toEqual([]);
  });
});

describe("refresh and adoption", () => {
  it("a VM deleted by hand disappears from the state at refresh", () => {
    const ws = pair("refresh");
    ws.setConfig({
      ...hostsConfig(host),
      "pair:proxies": {
        keep: { host: "local", image: "tiny", ...TEST_PROXY_ARGS },
        gone: { host: "local", image: "tiny", ...TEST_PROXY_ARGS },
      },
    });
    ws.up();
    const names = ws.outputs().names as Record<string, string>;
    removeByHand(host, names.gone as string);
    ws.mustRun("refresh", "--yes");
    const left = ws.proxies().map((p) => p.id);
    expect(left).toEqual([`kvm://local/${names.keep}`]);
    // The program still declares it: the next up recreates it.
    const preview = ws.mustRun("preview");
    expect(preview.output).toMatch(/1 to create/);
  });

  it("KvmProxy.get adopts an existing VM by ID, rebuilding its inputs from the metadata", () => {
    const owner = pair("owner");
    const name = `kvmpt-adopt-${process.pid}`;
    owner.setConfig({
      ...hostsConfig(host),
      "pair:proxies": {
        orig: { host: "local", image: "tiny", ...TEST_PROXY_ARGS, name, tags: { team: "x" } },
      },
    });
    owner.up();
    const reader = pair("reader");
    reader.setConfig({ ...hostsConfig(host), "pair:adopt": { seen: `kvm://local/${name}` } });
    reader.up();
    const adopted = (reader.outputs().adopted as Record<string, Record<string, unknown>>).seen;
    expect(adopted).toMatchObject({
      id: `kvm://local/${name}`,
      domainName: name,
      image: "tiny",
      memoryMiB: 128,
      tags: { team: "x" },
    });
    // Read-only: destroying the reader leaves the VM alone.
    reader.destroy();
    expect(allDomains(host)).toContain(name);
  });
});

describe("the create deadline", () => {
  it("a VM that gets no IP in time is rolled back: up fails, nothing is left", () => {
    const ws = pair("deadline");
    const name = `kvmpt-noip-${process.pid}`;
    ws.setConfig({
      ...hostsConfig(host),
      "pair:proxies": {
        noip: {
          host: "local",
          image: "tiny",
          ...TEST_PROXY_ARGS,
          name,
          waitForIp: true,
          healthCheck: false,
          timeouts: { create: "3s" },
        },
      },
    });
    const r = ws.run("up", "--yes", "--skip-preview");
    expect(r.code).not.toBe(0);
    expect(r.output).toMatch(/rolled back/);
    expect(r.output).toMatch(/an IPv4 address of domain/);
    expect(allDomains(host)).not.toContain(name);
    expect(perVmVolumes([name])).toEqual([]);
    expect(ws.proxies()).toEqual([]);
  });
});

describe("examples", () => {
  it("compose (proxies feeding a crawler config file) runs up and destroy", () => {
    const ws = workspace("compose", { name: "kvmpt-compose", main: "examples/compose" });
    const file = path.join(ws.dir, "crawler.json");
    ws.setConfig({
      ...hostsConfig(host),
      "compose:host": "local",
      "compose:image": "tiny",
      "compose:proxy": TEST_PROXY_ARGS,
      "compose:crawlerConfig": file,
    });
    ws.up();
    const ids = ws.outputs().proxyIds as string[];
    const written = JSON.parse(readFileSync(file, "utf8")) as { proxies: { id: string }[] };
    expect(written.proxies.map((p) => p.id)).toEqual(ids);
    ws.destroy();
    expect(() => readFileSync(file)).toThrow();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });

  it("the root Pulumi.yaml runs the quickstart", () => {
    const yaml = readFileSync(path.join(__dirname, "../../Pulumi.yaml"), "utf8");
    expect(yaml).toMatch(/^main: examples\/quickstart$/m);
  });
});
