/**
 * `proxy.tls` through the real CLI, without a guest booting
 * (TEST_PROXY_ARGS; a static address on the test bridge gives the proxy its
 * URL): the CA made for the proxy at check is kept in the state with its
 * key only encrypted (the class marks the proxy block secret; the engine
 * keeps what check returns as secret as the input it came from), published
 * as `proxyCaCertificate` and the same at the next preview, which shows no
 * change; the certificate create issued sits in the VM's seed for the
 * static address; a CA given by the program replaces the proxy.
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeCa } from "../../provider/kvm/tls/certificate";
import { staticBridgeOf, type TestHost, testHost } from "../support/test-host";
import {
  cleanUpWorkspaces,
  domainsOfStack,
  hostsConfig,
  TEST_PROXY_ARGS,
  virsh,
  vmVolumeNames,
  Workspace,
} from "./harness";

let host: TestHost;
const workspaces: Workspace[] = [];

beforeAll(() => {
  host = testHost();
});

afterAll(() => cleanUpWorkspaces(host, workspaces));

/** The base64 body lines of a PEM text: what a leak of it would show. */
const bodyLines = (pem: string) =>
  pem
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("-----"));

describe("a proxy with proxy.tls", () => {
  it("keeps the CA made for it (its key encrypted, its certificate an output), previews no change, and a CA of the program's replaces it", () => {
    const bridge = staticBridgeOf(host);
    const ws = new Workspace("tls", { name: "kvmpt-tls", main: "test/pulumi/programs/pair" });
    workspaces.push(ws);
    const edge = (tls: unknown) => ({
      host: "local",
      image: "tiny",
      ...TEST_PROXY_ARGS,
      nics: [{ bridge: bridge.name, addresses: ["192.0.2.209/24"] }],
      proxy: { tls },
    });
    ws.setConfig({ ...hostsConfig(host, ["local"]), "pair:proxies": { edge: edge({}) } });
    ws.up();

    const [proxy] = ws.proxies();
    const outputs = proxy?.outputs ?? {};
    expect(outputs.proxyUrl).toBe("https://192.0.2.209:3128");
    const ca = new X509Certificate(outputs.proxyCaCertificate as string);
    expect(ca.ca).toBe(true);
    // The CA's key: in the state only as a secret (its text nowhere), in no output.
    const exported = JSON.parse(ws.mustRun("stack", "export", "--show-secrets").stdout) as {
      deployment: { resources: { type: string; inputs?: Record<string, unknown> }[] };
    };
    const shown = exported.deployment.resources.find((r) => r.type === "pulumi-nodejs:dynamic:KvmProxy");
    // A secret input is exported as {<sig>, plaintext: <its JSON>}: the proxy block is one.
    const secretProxy = shown?.inputs?.proxy as { plaintext?: string } | undefined;
    expect(typeof secretProxy?.plaintext).toBe("string");
    const block = JSON.parse(secretProxy?.plaintext as string) as { tls: { ca: { privateKey: string } } };
    // The key's own part (its private scalar; the rest of the PEM repeats the public key the certificate has).
    const d = createPrivateKey(block.tls.ca.privateKey).export({ format: "jwk" }).d as string;
    const forms = [
      d,
      Buffer.from(d, "base64url").toString("base64"),
      Buffer.from(d, "base64url").toString("hex"),
    ];
    const firstLine = bodyLines(block.tls.ca.privateKey)[0] as string;
    const state = ws.stateText();
    for (const f of [...forms, firstLine]) expect(state).not.toContain(f);
    expect(JSON.stringify(outputs)).not.toMatch(/PRIVATE KEY/);

    // The certificate create issued, in the seed, names the static address and is the CA's.
    const [domain] = domainsOfStack(host, ws.stack);
    const seed = vmVolumeNames(host, domain as string).find((v) => v.endsWith("-seed.iso")) as string;
    const iso = readFileSync(virsh(host, "vol-path", "--pool", host.poolName, seed).trim()).toString(
      "latin1",
    );
    const leafPem =
      /cat >\/etc\/squid\/kvm-proxy-tls\/cert\.pem <<'KVMP_EOF'\n(-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----)/.exec(
        iso,
      )?.[1];
    expect(leafPem).toBeDefined();
    const leaf = new X509Certificate(leafPem as string);
    expect(leaf.checkIssued(ca) && leaf.verify(ca.publicKey)).toBe(true);
    expect(leaf.checkIP("192.0.2.209")).toBe("192.0.2.209");

    // The next check keeps the CA: no change, the same certificate published.
    ws.mustRun("preview", "--expect-no-changes");
    ws.up();
    expect(ws.proxies()[0]?.outputs?.proxyCaCertificate).toBe(outputs.proxyCaCertificate);

    // A CA the program gives instead replaces the proxy (its certificate changes).
    const own = makeCa({ commonName: "fleet CA", now: new Date() });
    ws.setConfig({
      "pair:proxies": {
        edge: edge({ ca: { certificate: own.certificatePem, privateKey: own.privateKeyPem } }),
      },
    });
    const steps = ws.previewSteps().filter((s) => s.urn.endsWith("::edge"));
    expect(steps.map((s) => s.op)).toContain("replace");
    ws.destroy();
    expect(domainsOfStack(host, ws.stack)).toEqual([]);
  });
});
