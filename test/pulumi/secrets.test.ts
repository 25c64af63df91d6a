/**
 * No secret in any log line or in the state: a full
 * lifecycle (up, preview, refresh, destroy) over SSH with a passphrase-
 * protected key, logged by our trace at its most verbose (KVMP_LOG=2) and by
 * the Pulumi engine and its plugins (--logflow). Every byte of output and
 * every file of the state backend is scanned for the private key, its
 * passphrase, user-data and vendor-data markers (from secret config and
 * from plain strings in the program) and a proxy password.
 *
 * The proxy password is held to more: it never leaves the
 * program (the KvmProxy class hashes it there and builds
 * proxyUrlWithCredentials itself), so no form of it (as given, URL-encoded,
 * in a Basic token) is in any line with --debug at -v=9 when the program
 * made it (pulumi.secret of what it read), with characters URLs reserve. One
 * kept in stack config is handed by the engine itself, with the whole stack
 * config, to the dynamic provider's Configure, and printed in those dumps
 * at -v=9; in no other line.
 *
 * The boundary is the engine's own property logging: from -v=7 the Pulumi
 * engine prints every property value it plans with or sends to a provider
 * ("Planner decided to create ... (inputs=...)" at 7, "Marshaling property
 * for RPC" at 9), secrets included, and its redaction filter misses them
 * (it filters only string-typed log arguments, and knows only config
 * secrets). No provider can prevent that. So: at -v=6 nothing may leak at
 * all; at -v=10 a leak may only sit in those engine lines.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authorize, keygen, scratchDir } from "../libvirtd/transport/helpers";
import { staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import {
  domainsOfStack,
  ENGINE_PROPERTY_DUMP,
  failureText,
  hostsConfig,
  pulumiEnv,
  removeByHand,
  TEST_PROXY_ARGS,
  virsh,
  vmVolumeNames,
  Workspace,
} from "./harness";

/** The most verbose engine level that prints no property values. */
const SAFE_LEVEL = 6;
const PASSPHRASE = "kvmp-passphrase-Zq81-never-logged";
const SECRET_USER_DATA_MARKER = "kvmp-secret-userdata-Hx42";
const PLAIN_USER_DATA_MARKER = "kvmp-plain-userdata-Kc77";
const VENDOR_DATA_MARKER = "kvmp-vendordata-Wp19";
const PROXY_PASSWORD = "kvmp-proxy-password-Tr56";
/** The engine's dumps of the stack config it hands the dynamic (default) provider, at -v=7 and -v=9. */
const ENGINE_CONFIG_DUMP =
  /"msg":"(Marshaling property for RPC\[Provider\[0x[0-9a-f]+\]\.(CheckConfig|DiffConfig|Configure)\(|Planner decided [^"]*pulumi:providers:pulumi-nodejs::default)/;
/** Passwords with characters URLs reserve: one from secret config, one the program makes (pulumi.secret). */
const CONFIG_PASSWORD = "kvmp-cfg@pw#%/:Qx81";
const PROGRAM_PASSWORD = "kvmp-prog@pw#%/:Lm42";

let host: TestHost;
const workspaces: Workspace[] = [];
let dir: string;
let unauthorize: () => void = () => {};
let keyText: string;

beforeAll(() => {
  host = testHost();
  dir = scratchDir(host, "secrets");
  const keyFile = path.join(dir, "id_ed25519");
  keygen(keyFile, "ed25519", PASSPHRASE);
  keyText = readFileSync(keyFile, "utf8");
  unauthorize = authorize(host, readFileSync(`${keyFile}.pub`, "utf8"));
});

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
  unauthorize();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs the CLI at its most verbose, our trace included, and returns everything it printed. */
function verbose(w: Workspace, level: number | "debug", ...args: string[]): { code: number; output: string } {
  const r = spawnSync(
    "pulumi",
    [
      ...args,
      "--stack",
      w.stack,
      "--non-interactive",
      "--color",
      "never",
      ...(level === "debug" ? ["--debug", "-v=9"] : [`-v=${level}`]),
      "--logtostderr",
      "--logflow",
    ],
    {
      cwd: w.dir,
      env: {
        ...pulumiEnv(),
        PULUMI_BACKEND_URL: `file://${w.backend}`,
        KVMP_LOG: "2",
        // Plain strings in the program (not secrets, not stack config).
        KVMPT_PLAIN_USER_DATA: `#cloud-config\nchpasswd:\n  list: |\n    root:${PLAIN_USER_DATA_MARKER}\n`,
        KVMPT_PLAIN_VENDOR_DATA: `#cloud-config\nbootcmd:\n  - echo ${VENDOR_DATA_MARKER}\n`,
        KVMPT_PROGRAM_PASSWORD: PROGRAM_PASSWORD,
      },
      encoding: "utf8",
      timeout: 600_000,
      maxBuffer: 512 * 1024 * 1024,
    },
  );
  if (r.error) throw r.error;
  return { code: r.status ?? -1, output: `${r.stdout}\n${r.stderr}` };
}

/** Every file the file:// backend wrote (checkpoints, history, backups), concatenated. */
function backendText(w: Workspace): string {
  const parts: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = path.join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else parts.push(readFileSync(p, "utf8"));
    }
  };
  walk(w.backend);
  return parts.join("\n");
}

/** The secrets a leak would show: each base64 line of the key, the passphrase, the markers. */
function secrets(): string[] {
  const keyLines = keyText
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("-----"));
  return [
    ...keyLines,
    PASSPHRASE,
    SECRET_USER_DATA_MARKER,
    PLAIN_USER_DATA_MARKER,
    VENDOR_DATA_MARKER,
    PROXY_PASSWORD,
  ];
}

function leaked(text: string): string[] {
  return secrets().filter((s) => text.includes(s));
}

/** A stack with two proxies over SSH: user-data from secret config, and plain strings from the program. */
function secretsWorkspace(tag: string): Workspace {
  const w = new Workspace(tag, { name: "kvmpt-secrets", main: "test/pulumi/programs/pair" });
  workspaces.push(w);
  w.setConfig({
    ...hostsConfig(host, ["remote"]),
    "pair:proxies": {
      fromsecret: {
        host: "remote",
        image: "tiny",
        ...TEST_PROXY_ARGS,
        userDataFromSecret: true,
        proxy: { auth: { username: "crawler" } },
        proxyPasswordFromSecret: true,
      },
      plain: {
        host: "remote",
        image: "tiny",
        ...TEST_PROXY_ARGS,
        userDataFromEnv: "KVMPT_PLAIN_USER_DATA",
        vendorDataFromEnv: "KVMPT_PLAIN_VENDOR_DATA",
      },
    },
  });
  w.setSecret("kvm:sshPrivateKey", keyText);
  const pass = w.runWithInput(
    PASSPHRASE,
    "config",
    "set",
    "--secret",
    "--path",
    "kvm:hosts.remote.passphrase",
  );
  expect(pass.code).toBe(0);
  w.setSecret("pair:userData", `#cloud-config\npassword: ${SECRET_USER_DATA_MARKER}\n`);
  w.setSecret("pair:proxyPassword", PROXY_PASSWORD);
  return w;
}

function mustSucceed(r: { code: number; output: string }): string {
  expect(r.code, failureText(r)).toBe(0);
  return r.output;
}

describe("secrets in logs and state", () => {
  it(`at -v=${SAFE_LEVEL} with KVMP_LOG=2, no private key, passphrase, user-data or vendor-data appears in any log line or in the state`, () => {
    const ws = secretsWorkspace("secrets");
    const logs: string[] = [];
    const up = mustSucceed(verbose(ws, SAFE_LEVEL, "up", "--yes", "--skip-preview"));
    logs.push(up);

    // The capture really is a verbose one, and the secrets really were used:
    // our trace reached the output, the engine's debug lines too, and both
    // user-data texts sit in the guests' seeds (read back from the pool).
    expect(up).toMatch(/rpc=virDomainDefineXML host=remote/);
    expect(up).toMatch(/"msg":"Registering resource: t=pulumi-nodejs:dynamic:KvmProxy/);
    const names = Object.values(ws.outputs().names as Record<string, string>);
    expect(names).toHaveLength(2);
    const seeds = names.map((n) =>
      readFileSync(
        virsh(host, "vol-path", "--pool", host.poolName, vmVolumeNames(host, n)[1] as string).trim(),
      ).toString("latin1"),
    );
    expect(seeds.some((s) => s.includes(SECRET_USER_DATA_MARKER))).toBe(true);
    expect(seeds.some((s) => s.includes(PLAIN_USER_DATA_MARKER))).toBe(true);
    // The proxy's password reached its seed only as squid's salted hash (SHA-512-crypt).
    expect(seeds.some((s) => /crawler:\$6\$rounds=5000\$[./0-9A-Za-z]{16}\$[./0-9A-Za-z]{86}/.test(s))).toBe(
      true,
    );
    expect(seeds.some((s) => s.includes(PROXY_PASSWORD))).toBe(false);
    const afterUp = backendText(ws);
    expect(afterUp).toContain("kvmpt-secrets");

    logs.push(mustSucceed(verbose(ws, SAFE_LEVEL, "preview", "--expect-no-changes")));
    logs.push(mustSucceed(verbose(ws, SAFE_LEVEL, "refresh", "--yes", "--skip-preview")));
    logs.push(mustSucceed(verbose(ws, SAFE_LEVEL, "destroy", "--yes", "--skip-preview")));
    expect(domainsOfStack(host, ws.stack)).toEqual([]);

    const all = logs.join("\n");
    expect(all.length).toBeGreaterThan(100_000);
    expect(leaked(all)).toEqual([]);
    expect(leaked(afterUp)).toEqual([]);
    expect(leaked(backendText(ws))).toEqual([]);
  });

  it("at -v=10, secrets appear only in the engine's own property dumps, never in a line of ours or of the SDK", () => {
    const ws = secretsWorkspace("secrets10");
    const logs = [
      mustSucceed(verbose(ws, 10, "up", "--yes", "--skip-preview")),
      mustSucceed(verbose(ws, 10, "destroy", "--yes", "--skip-preview")),
    ].join("\n");
    expect(logs).toMatch(/rpc=virDomainDefineXML host=remote/);
    const lines = logs.split("\n");
    const leaking = lines.filter((l) => leaked(l).length > 0);
    // The boundary is real: the engine does print them at this level.
    expect(leaking.length).toBeGreaterThan(0);
    expect(leaking.filter((l) => !ENGINE_PROPERTY_DUMP.test(l)).map((l) => l.slice(0, 300))).toEqual([]);
    expect(leaked(backendText(ws))).toEqual([]);
  });

  it("with --debug and at -v=9, no form of a proxy password is in any line or in the state, from config or from the program", () => {
    const ws = new Workspace("secretspw", { name: "kvmpt-secrets", main: "test/pulumi/programs/pair" });
    workspaces.push(ws);
    const credentialsFile = path.join(ws.dir, "crawler-proxies.json");
    const bridge = staticBridgeOf(host);
    // A static address gives each proxy its proxyUrl without a guest booting.
    const onBridge = (n: number) => ({
      nics: [{ bridge: bridge.name, addresses: [`192.0.2.${200 + n}/24`] }],
    });
    ws.setConfig({
      ...hostsConfig(host, ["remote"]),
      "pair:exportUrlsWithCredentials": false,
      "pair:credentialsFile": credentialsFile,
      "pair:proxies": {
        fromconfig: {
          host: "remote",
          image: "tiny",
          ...TEST_PROXY_ARGS,
          ...onBridge(1),
          proxy: { auth: { username: "crawler" } },
          proxyPasswordFromSecret: true,
        },
        fromprogram: {
          host: "remote",
          image: "tiny",
          ...TEST_PROXY_ARGS,
          ...onBridge(2),
          proxy: { auth: { username: "crawler" } },
          proxyPasswordFromEnv: "KVMPT_PROGRAM_PASSWORD",
        },
      },
    });
    ws.setSecret("kvm:sshPrivateKey", keyText);
    expect(
      ws.runWithInput(PASSPHRASE, "config", "set", "--secret", "--path", "kvm:hosts.remote.passphrase").code,
    ).toBe(0);
    ws.setSecret("pair:proxyPassword", CONFIG_PASSWORD);
    const logs = [
      mustSucceed(verbose(ws, "debug", "up", "--yes", "--skip-preview")),
      mustSucceed(verbose(ws, "debug", "preview", "--expect-no-changes")),
      mustSucceed(verbose(ws, "debug", "refresh", "--yes", "--skip-preview")),
    ];
    // The program did get its URLs with the credentials (it wrote them for its crawlers).
    expect(JSON.parse(readFileSync(credentialsFile, "utf8"))).toEqual({
      fromconfig: `http://crawler:${encodeURIComponent(CONFIG_PASSWORD)}@192.0.2.201:3128`,
      fromprogram: `http://crawler:${encodeURIComponent(PROGRAM_PASSWORD)}@192.0.2.202:3128`,
    });
    logs.push(mustSucceed(verbose(ws, "debug", "destroy", "--yes", "--skip-preview")));
    const all = logs.join("\n");
    // The capture is a debug one at -v=9: the SDK's debug lines and the engine's property dumps are in it.
    expect(all).toMatch(/RegisterResource RPC finished/);
    expect(all).toMatch(/Marshaling property for RPC/);
    const formsOf = (p: string) => [
      p,
      encodeURIComponent(p),
      Buffer.from(`crawler:${p}`).toString("base64"),
      JSON.stringify(p).slice(1, -1),
    ];
    const lines = all.split("\n");
    const carrying = (p: string) => lines.filter((l) => formsOf(p).some((f) => l.includes(f)));
    // The program's own secret: in no line at all, and not in the state.
    expect(carrying(PROGRAM_PASSWORD).map((l) => l.slice(0, 400))).toEqual([]);
    // A stack config secret: the engine hands the dynamic provider the whole stack config and
    // dumps it at -v=9 (Configure, CheckConfig, DiffConfig of the default provider); it is in
    // no other line: none of ours, none of the SDK's, no dump of a proxy's properties.
    const configLines = carrying(CONFIG_PASSWORD);
    expect(configLines.length).toBeGreaterThan(0);
    expect(configLines.filter((l) => !ENGINE_CONFIG_DUMP.test(l)).map((l) => l.slice(0, 400))).toEqual([]);
    for (const p of [CONFIG_PASSWORD, PROGRAM_PASSWORD]) {
      expect(formsOf(p).filter((f) => backendText(ws).includes(f))).toEqual([]);
    }
  });
});
