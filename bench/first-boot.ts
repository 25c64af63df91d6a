/**
 * Figure 8: what the first boot costs a user, on the same host in
 * the same run: time from create to a ready proxy (cloud-init done, then the
 * health check: the provider's own readiness) for the test image, which has
 * squid and the guest agent, and for the stock variant, whose vendor scripts
 * install both from a package mirror served inside the test host's
 * namespace, and for the stock image baked on the host (the bake
 * timed apart, then a proxy from the baked volume); and the package bytes
 * each first boot (and the bake) fetched from the mirror's log.
 *
 * The proxies are made as the provider makes them (KvmOperations.provision
 * with the resource's readiness gate: first boot through the agent, then
 * the health check), one after the other, so neither slows the other. The
 * health check reaches the guest, which is only allowed inside the
 * namespace: {@link benchFirstBoot} runs this file there.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parseConfig } from "../provider/kvm/config/host-config";
import { type ImageConfig, parseImage } from "../provider/kvm/config/image";
import { HostPool } from "../provider/kvm/host/hosts";
import { bakeNames } from "../provider/kvm/host/image-bake";
import { KvmOperations } from "../provider/kvm/host/operations";
import { squidName } from "../provider/kvm/proxy/setup";
import { Failures } from "../provider/kvm/validation";
import { waitHealthy } from "../provider/probes/health-check";
import { KvmProxyRuntime } from "../provider/resource/provider";
import { host, runInNamespace } from "./common";
import { guestProxySpec, PROXY_PORT, SETUP } from "./guest-proxy";
import { readKnobs } from "./knobs";

const config = readKnobs(process.env);
const repoRoot = config.root;
const DEADLINE_MS = 30 * 60_000;

/** One first boot. */
export interface FirstBootRun {
  image: "test" | "stock" | "baked";
  suite: string;
  /** From create's first call to the proxy ready (cloud-init done, health check passed), ms. */
  readyMs: number;
  /** Of which waiting for cloud-init to finish (after the guest's address), ms. */
  firstBootMs: number;
  /** Package bytes the guest fetched from the mirror, and how many files. */
  fetchedBytes: number;
  fetchedFiles: number;
}

export interface FirstBootResults {
  runs: FirstBootRun[];
  /** The bake of the stock image on the host, before the baked run: its time and the packages it fetched. */
  bake?: { ms: number; fetchedBytes: number; fetchedFiles: number };
}

function log(msg: string): void {
  process.stderr.write(`bench: first-boot: ${msg}\n`);
}

/** Runs the figure inside the test host's namespace and returns its results. */
export function benchFirstBoot(script = path.join(__dirname, "first-boot.js")): Promise<FirstBootResults> {
  return runInNamespace<FirstBootResults>(script, "first-boot");
}

function imageOf(file: string, bake?: { userData: string }): ImageConfig {
  const f = new Failures();
  const sha256 = execFileSync("sha256sum", [file], { encoding: "utf8" }).split(" ")[0] as string;
  const img = parseImage(bake === undefined ? undefined : "baked", { url: file, sha256, bake }, f);
  f.throwIfAny();
  return img as ImageConfig;
}

function build(script: string, args: string[], env: Record<string, string> = {}): string {
  return execFileSync(path.join(repoRoot, "scripts", script), args, {
    encoding: "utf8",
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  })
    .trim()
    .split("\n")
    .pop() as string;
}

/** A package mirror on the NAT gateway (python's http.server), logging each request to `log`. */
function serveMirror(
  dir: string,
  address: string,
  logFile: string,
): Promise<{ port: number; stop: () => void }> {
  const program = `
import http.server, sys
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=sys.argv[1], **k)
    def log_message(self, *a):
        pass
    def log_request(self, code="-", size="-"):
        with open(sys.argv[3], "a") as f:
            f.write("%s %s\\n" % (getattr(code, "value", code), self.path))
srv = http.server.ThreadingHTTPServer((sys.argv[2], 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
`;
  const child = spawn("/usr/bin/python3", ["-c", program, dir, address, logFile], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    child.stdout.once("data", (b: Buffer) =>
      resolve({ port: Number(b.toString().trim()), stop: () => child.kill() }),
    );
    child.once("exit", (c) => reject(new Error(`mirror server exited ${c}`)));
  });
}

/** The bytes and files of the mirror's log that were fetched (200s of .deb files). */
function fetched(dir: string, logFile: string): { bytes: number; files: number } {
  let bytes = 0;
  let files = 0;
  for (const line of readFileSync(logFile, "utf8").split("\n")) {
    const [code, p] = line.split(" ");
    if (code !== "200" || p === undefined || !p.endsWith(".deb")) continue;
    bytes += statSync(path.join(dir, decodeURIComponent(p))).size;
    files++;
  }
  return { bytes, files };
}

async function runOnce(
  ops: KvmOperations,
  kind: FirstBootRun["image"],
  image: ImageConfig,
  userData: string,
  mirror: { dir: string; log: string } | undefined,
  pollMs: number,
): Promise<FirstBootRun> {
  const name = `kvmpb-firstboot-${kind}-${process.pid}`;
  const spec = guestProxySpec("kvmpb-firstboot", name, image, userData);
  if (image.bakeUserData !== undefined) spec.bakeUserData = image.bakeUserData;
  if (mirror !== undefined) writeFileSync(mirror.log, "");
  const t0 = performance.now();
  let firstBootMs = 0;
  try {
    await ops.provision(spec, {
      deadlineMs: DEADLINE_MS,
      pollMs,
      ready: async (status, remainingMs, signal) => {
        const since = performance.now();
        await ops.waitFirstBoot("local", name, { signal, pollMs: Math.max(pollMs, 1000) });
        firstBootMs = performance.now() - since;
        const ip = status.ipv4 as string;
        await waitHealthy({ ip, proxyPort: PROXY_PORT, squidName: squidName(SETUP) }, remainingMs, {
          pollMs,
        });
      },
    });
    const readyMs = performance.now() - t0;
    const got = mirror === undefined ? { bytes: 0, files: 0 } : fetched(mirror.dir, mirror.log);
    log(
      `${kind}: ready in ${(readyMs / 1000).toFixed(1)} s, ${got.files} packages (${(got.bytes / 1e6).toFixed(1)} MB) fetched`,
    );
    return {
      image: kind,
      suite: "bookworm",
      readyMs,
      firstBootMs,
      fetchedBytes: got.bytes,
      fetchedFiles: got.files,
    };
  } finally {
    await ops.delete("local", name).catch((e: unknown) => log(`cleanup of ${name} failed: ${String(e)}`));
  }
}

/** Bakes `image` on the host as a create would (after removing an earlier bake of it), timed. */
async function bakeOnce(
  ops: KvmOperations,
  image: ImageConfig,
  mirror: { dir: string; log: string },
): Promise<NonNullable<FirstBootResults["bake"]>> {
  const lv = ops.hosts.libvirt("local");
  const pool = await ops.hosts.pool("local");
  if (pool === undefined || image.bake === undefined) throw new Error("no pool, or no recipe");
  const loc = { host: "local", lv, pool };
  const stock = await ops.images.ensure(loc, image);
  const names = bakeNames(stock.name, image.bake);
  for (const v of [names.volume, names.marker]) {
    await lv
      .storageVolLookupByName(pool, v)
      .then((vol) => lv.storageVolDelete(vol))
      .catch(() => undefined);
  }
  writeFileSync(mirror.log, "");
  const t0 = performance.now();
  await ops.baker.ensure(
    { ...loc, hostConfig: ops.hosts.config("local") },
    { image: { ...image, bake: image.bake }, stock, userData: image.bakeUserData as string },
  );
  const ms = performance.now() - t0;
  const got = fetched(mirror.dir, mirror.log);
  log(
    `bake: ${(ms / 1000).toFixed(1)} s, ${got.files} packages (${(got.bytes / 1e6).toFixed(1)} MB) fetched`,
  );
  return { ms, fetchedBytes: got.bytes, fetchedFiles: got.files };
}

async function child(): Promise<void> {
  const testImage = build("guest-image", ["path"]);
  const stockImage = build("guest-image", ["build"], { KVMP_GUEST_VARIANT: "stock" });
  const mirrorDir = build("guest-mirror", ["build", "bookworm", `${stockImage}.dpkg-status`]);
  const scratch = mkdtempSync(path.join(repoRoot, ".state/bench-firstboot-"));
  const mirrorLog = path.join(scratch, "mirror.log");
  const server = await serveMirror(mirrorDir, host.networkAddress, mirrorLog);
  const pool = new HostPool(
    parseConfig({
      hosts: {
        local: {
          uri: `unix://${host.socketPath}`,
          pool: host.poolName,
          network: host.network,
          domainType: "qemu",
        },
      },
    }).hosts,
  );
  const ops = new KvmOperations(pool);
  const pollMs = new KvmProxyRuntime().pollMs;
  const stockUserData = [
    "#cloud-config",
    "bootcmd:",
    "  - [rm, -f, /etc/apt/sources.list.d/debian.sources]",
    "apt:",
    "  preserve_sources_list: false",
    "  sources_list: |",
    `    deb [trusted=yes] http://${host.networkAddress}:${server.port}/ ./`,
    "",
  ].join("\n");
  const mirror = { dir: mirrorDir, log: mirrorLog };
  const baked = imageOf(stockImage, { userData: stockUserData });
  try {
    const runs = [
      await runOnce(ops, "test", imageOf(testImage), "#cloud-config\n", undefined, pollMs),
      await runOnce(ops, "stock", imageOf(stockImage), stockUserData, mirror, pollMs),
    ];
    const bake = await bakeOnce(ops, baked, mirror);
    runs.push(await runOnce(ops, "baked", baked, stockUserData, mirror, pollMs));
    process.stdout.write(`${JSON.stringify({ runs, bake } satisfies FirstBootResults)}\n`);
  } finally {
    server.stop();
    await pool.closeAll();
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (require.main === module && process.argv.includes("--child")) {
  child().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(
        `bench: first-boot failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exit(1);
    },
  );
}
