/**
 * A host given in full: the program makes its hypervisor's connection
 * itself (test/pulumi/programs/hosted: a dynamic resource returns the test
 * host's uri and host key; the private key is read by the program, a secret
 * the engine has no config value of, so it masks nothing), and its proxies
 * take the host from those outputs in the same `up`. Preview refuses them
 * until `kvm:stateKey` is set, then plans them with the host unknown; nothing
 * in the state, and no line of the CLI with --debug at -v=6 and our most
 * verbose trace, holds the private key (the outputs the Node.js SDK prints
 * keep the host sealed); at -v=9 only the engine's own property dumps do
 * (from -v=7 they print every value it plans with: see secrets.test.ts);
 * refresh, destroy and `status`, which run without the program, reach the
 * host through the sealed record, and destroy deletes the proxies before the hypervisor.
 * A stack moving from `host: "remote"` to the same host in full replaces
 * nothing.
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProxyStatus } from "../../provider/status/status-report";
import { type TestHost, testHost } from "../support/test-host";
import {
  domainsOfStack,
  failureText,
  hostsConfig,
  packageCli,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  Workspace,
} from "./harness";

/** A `kvm:stateKey` (host-connection.ts). */
const STATE_KEY = "kvmpt-state-key-0123456789abcdefghij";
/** The most verbose engine level that prints no property values (secrets.test.ts). */
const SAFE_LEVEL = 6;
/** Engine lines that print every property value (secrets.test.ts). */
const ENGINE_PROPERTY_DUMP =
  /"msg":"(Marshaling property for RPC|Unmarshaling property for RPC|Planner decided )/;

let host: TestHost;
let keyText: string;
const workspaces: Workspace[] = [];

beforeAll(() => {
  host = testHost();
  keyText = readFileSync(host.sshKeyPath, "utf8");
});

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
});

function hosted(tag: string): Workspace {
  const ws = new Workspace(tag, { name: "kvmpt-hosted", main: "test/pulumi/programs/hosted" });
  workspaces.push(ws);
  return ws;
}

const uri = () => `ssh://${host.sshUser}@${host.address}:${host.sshPort}`;
/** What a kvm:hosts entry of the test host says besides its uri and key (hostsConfig's). */
const common = () => ({ domainType: "qemu", pool: host.poolName, network: host.network });

/** The base64 lines of the private key: what a leak would show. */
function keyLines(): string[] {
  return keyText
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("-----"));
}

function leaks(text: string): string[] {
  return keyLines().filter((l) => text.includes(l));
}

/** The lines of `output` that hold key material, less the engine's own property dumps. */
function leakingLines(output: string): string[] {
  return output.split("\n").filter((line) => !ENGINE_PROPERTY_DUMP.test(line) && leaks(line).length > 0);
}

/** What the CLI printed with --debug at engine level `level`, our trace at its most verbose. */
function verbose(ws: Workspace, level: number, ...args: string[]) {
  ws.extraEnv = { KVMP_LOG: "2" };
  const r = ws.run(...args, "--debug", `-v=${level}`, "--logtostderr", "--logflow");
  ws.extraEnv = {};
  expect(r.code, failureText(r)).toBe(0);
  return r.output;
}

describe("a host another resource of the program makes", () => {
  it("creates two proxies and a fleet of two on it in one up, keeps its key out of logs and state, and destroys them before it", () => {
    const ws = hosted("made");
    ws.setConfig({
      "kvm:images": hostsConfig(host, [])["kvm:images"],
      "hosted:hypervisor": { uri: uri(), knownHosts: readFileSync(host.knownHostsPath, "utf8") },
      "hosted:key": "hv",
      "hosted:hostExtra": common(),
      "hosted:proxies": ["made-a", "made-b"],
      "hosted:fleetSize": 2,
      "hosted:proxyArgs": { image: "tiny", ...TEST_PROXY_ARGS },
      "hosted:privateKeyFile": host.sshKeyPath,
    });

    // A host with key material in the dynamic provider's outputs needs a key to seal it under.
    const refused = ws.run("preview");
    expect(refused.code).not.toBe(0);
    expect(refused.output).toMatch(/property kvm:stateKey value \{<nil>\} has a problem: is required/);
    expect(leaks(refused.output)).toEqual([]);
    ws.setSecret("kvm:stateKey", STATE_KEY);

    // Preview: the hypervisor and both proxies to be created, the proxies' host not known yet.
    const plan = JSON.parse(ws.mustRun("preview", "--json").stdout) as {
      steps: { op: string; urn: string; newState?: { inputs?: Record<string, unknown> } }[];
    };
    const creates = plan.steps.filter((s) => s.op === "create").map((s) => s.urn.split("::").pop());
    expect(creates).toEqual(expect.arrayContaining(["hypervisor", "made-a", "made-b", "fleet-0", "fleet-1"]));
    const proxyInputs = plan.steps.find((s) => s.urn.endsWith("::made-a"))?.newState?.inputs ?? {};
    expect(JSON.stringify(proxyInputs.host)).toMatch(
      /04da6b54-80e4-46f7-96ec-b56ff0331ba9|\[secret\]|unknown/i,
    );

    const upLog = verbose(ws, 9, "up", "--yes", "--skip-preview");
    expect(leakingLines(upLog)).toEqual([]);
    // The SDK did print the proxies' outputs, the host among them: sealed.
    expect(upLog).toMatch(
      /RegisterResource RPC finished: resource:made-a\[pulumi-nodejs:dynamic:KvmProxy\][^\n]*v1\./,
    );
    const domains = domainsOfStack(host, ws.stack);
    expect(domains).toHaveLength(4);
    const outputs = ws.outputs();
    expect(outputs.hosts).toEqual(["hv", "hv"]);
    expect(outputs.fleetHosts).toEqual(["hv", "hv"]);
    for (const id of [...(outputs.ids as string[]), ...(outputs.fleetIds as string[])])
      expect(id).toMatch(/^kvm:\/\/hv\//);
    expect(leaks(ws.stateText())).toEqual([]);

    // Refresh and preview reach the VMs through the connection the state records; below the
    // engine's property dumps, no line at all holds the key.
    expect(leakingLines(verbose(ws, 9, "refresh", "--yes", "--skip-preview"))).toEqual([]);
    const safe = verbose(ws, SAFE_LEVEL, "refresh", "--yes", "--skip-preview");
    // The capture is a verbose one: the engine's debug lines and our trace of the read are in it.
    expect(safe).toMatch(
      /"msg":"StepExecutor worker\(\d+\): applying step refresh on urn:[^"]*KvmProxy::made-a/,
    );
    expect(safe).toMatch(/rpc=virDomain\w+ host=hv/);
    expect(leaks(safe)).toEqual([]);
    expect(leaks(verbose(ws, SAFE_LEVEL, "preview", "--expect-no-changes"))).toEqual([]);

    // `status` reaches each VM through the connection the state records (a secret of the export),
    // and prints nothing of the key.
    // Nothing boots here: what it cannot read is the guests' request counts, nothing of the host.
    const status = packageCli(ws, ["status", "--json", "--cwd", ws.dir, "--stack", ws.stack]);
    expect(status.code, status.stderr).toBe(1);
    const rows = (JSON.parse(status.stdout) as { proxies: ProxyStatus[] }).proxies;
    // Each in the state the refresh just recorded (an empty image never finishes its first boot).
    const refreshed = Object.fromEntries(
      ws.proxies().map((p) => [String(p.urn).replace(/.*::/, ""), p.outputs?.state]),
    );
    expect(rows.map((r) => [r.name, r.host, r.state, r.problems]).sort()).toEqual(
      ["fleet-0", "fleet-1", "made-a", "made-b"].map((n) => [
        n,
        "hv",
        refreshed[n],
        ["requests: the guest agent does not answer"],
      ]),
    );
    expect(Object.values(refreshed)).not.toContain(undefined);
    expect(leaks(`${status.stdout}\n${status.stderr}`)).toEqual([]);

    const destroyLog = ws.destroy().output;
    const deletedAt = (name: string) => destroyLog.search(new RegExp(`${name} deleted`));
    for (const proxy of ["made-a", "made-b", "fleet-0", "fleet-1"]) {
      expect(deletedAt(proxy)).toBeGreaterThanOrEqual(0);
      expect(deletedAt(proxy)).toBeLessThan(deletedAt("hypervisor"));
    }
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});

describe("moving between the two forms", () => {
  it('from host: "remote" to the same host in full: previewed and applied as an update, the VM kept', () => {
    const ws = hosted("moved");
    ws.setConfig({
      ...hostsConfig(host, ["remote"]),
      "hosted:fromConfig": "remote",
      "hosted:proxies": ["moved-a"],
      "hosted:proxyArgs": { image: "tiny", ...TEST_PROXY_ARGS },
    });
    ws.setSecret("kvm:sshPrivateKey", keyText);
    ws.up();
    const [domain] = domainsOfStack(host, ws.stack);
    const uuid = virsh(host, "domuuid", domain as string).trim();

    ws.mustRun("config", "rm", "hosted:fromConfig");
    ws.setConfig({
      "hosted:hypervisor": { uri: uri() },
      "hosted:key": "remote",
      "hosted:hostExtra": { knownHostsPath: host.knownHostsPath, ...common() },
    });
    ws.setSecret("hosted:privateKey", keyText);
    ws.setSecret("kvm:stateKey", STATE_KEY);
    const steps = ws.previewSteps().filter((s) => s.urn.endsWith("::moved-a"));
    expect(steps.map((s) => s.op)).toEqual(["update"]);

    // The update hands the provider the key in its inputs: no line below the property dumps holds it.
    expect(leaks(verbose(ws, SAFE_LEVEL, "up", "--yes", "--skip-preview"))).toEqual([]);
    expect(domainsOfStack(host, ws.stack)).toEqual([domain]);
    expect(virsh(host, "domuuid", domain as string).trim()).toBe(uuid);
    expect(leaks(ws.stateText())).toEqual([]);
    ws.mustRun("preview", "--expect-no-changes");
    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});
