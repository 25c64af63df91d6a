/**
 * Hostile and wrong inputs through the real Pulumi CLI:
 * every row of test/support/bad-inputs.ts is rejected by `pulumi preview`
 * with a message naming the property, and nothing reaches libvirt. The rows
 * the unit test of `check` also runs are packed into as few previews as
 * possible: one proxy reports all of its failures at once, but the engine
 * stops at the first proxy that fails, so each preview carries one proxy whose
 * rows touch different properties, or different keys of one object property,
 * packed only where check itself still names every row's failure. The
 * previews share one stack.
 *
 * Two wrong inputs only the first step of `up` can see are here too: an image
 * that is not the format its config declares, and two proxies with the same
 * fixed name on one host.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseImage } from "../../provider/kvm/config/image";
import { parseMetadata } from "../../provider/kvm/domain/metadata";
import { cachedImageVolumeName } from "../../provider/kvm/domain/names";
import { Failures } from "../../provider/kvm/validation";
import { hashedProxyBlock } from "../../provider/program/proxy-auth";
import { checkInputs } from "../../provider/resource/check";
import { readStackConfig } from "../../provider/resource/stack-config";
import { BAD, BAD_INPUT_CONFIG, GOOD_INPUTS, KEY_MARKER, UNIT_ONLY } from "../support/bad-inputs";
import { type TestHost, testHost } from "../support/test-host";
import {
  allDomains,
  domainsOfStack,
  E2E_ROOT,
  hostsConfig,
  metadataOf,
  perVmVolumesOf,
  poolVolumes,
  removeByHand,
  TEST_PROXY_ARGS,
  vmVolumeNames,
  Workspace,
} from "./harness";

let host: TestHost;
const workspaces: Workspace[] = [];

beforeAll(() => {
  host = testHost();
});

afterAll(() => {
  for (const ws of workspaces) {
    ws.cleanup();
    for (const d of domainsOfStack(host, ws.stack)) removeByHand(host, d);
  }
});

function pair(tag: string): Workspace {
  const ws = new Workspace(tag, { name: "kvmpt-hostile", main: "test/pulumi/programs/pair" });
  workspaces.push(ws);
  return ws;
}

type Row = (typeof BAD)[number];

// Properties check validates together: one's failure can hide the other's,
// so rows touching either never share a preview.
const COUPLED: Record<string, string> = {
  installGuestAgent: "vendorData",
  waitForIp: "healthCheck",
  bridge: "network",
  proxyPort: "proxy",
  userDataBase64: "userData",
  vendorDataBase64: "vendorData",
};

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Whether `row` may join `group`: every top-level property it changes is
 * untouched by the group (a coupled one counts as its partner), or both
 * change it as objects with no key in common (their keys are merged).
 */
function fits(group: Row[], row: Row): boolean {
  return Object.entries(row[1]).every(([k, v]) =>
    group.every(([, other]) =>
      Object.entries(other).every(([ok, ov]) => {
        if ((COUPLED[ok] ?? ok) !== (COUPLED[k] ?? k)) return true;
        return (
          ok === k && isPlainObject(v) && isPlainObject(ov) && Object.keys(v).every((sub) => !(sub in ov))
        );
      }),
    ),
  );
}

/** The stack config the previews run with, as check reads it. */
const CHECK_CONFIG = readStackConfig((k) => BAD_INPUT_CONFIG[k]);

/** What check says of `group`'s merged inputs, as the KvmProxy class sends them (the password hashed in the program). */
function checkOf(group: Row[]): { property: string; reason: string }[] {
  const args = mergedArgs(group);
  if (args.proxy !== undefined) args.proxy = hashedProxyBlock(args.proxy, "urn:packing");
  return checkInputs({}, args, { config: CHECK_CONFIG, randomBytes: (n) => new Uint8Array(n) }).failures;
}

/** The rows of `group` that check, given the group's merged inputs, does not name (property and reason). */
function missedByCheck(group: Row[], failures = checkOf(group)): Row[] {
  return group.filter(
    ([, , property, reason]) => !failures.some((f) => f.property === property && reason.test(f.reason)),
  );
}

/** Check's failures of `group` as text, and of its rows one at a time; a group that packs cleanly has the same. */
function failuresTogetherAndAlone(
  group: Row[],
  failures = checkOf(group),
): { together: string[]; alone: string[] } {
  const text = (fs: { property: string; reason: string }[]) => fs.map((f) => `${f.property}: ${f.reason}`);
  return {
    together: [...new Set(text(failures))].sort(),
    alone: [...new Set(group.flatMap((row) => text(checkOf([row]))))].sort(),
  };
}

/** Whether check says of `group` together exactly what it says of its rows alone, every row's failure among it. */
function packsCleanly(group: Row[]): boolean {
  const failures = checkOf(group);
  const { together, alone } = failuresTogetherAndAlone(group, failures);
  return (
    missedByCheck(group, failures).length === 0 &&
    together.length === alone.length &&
    together.every((f, i) => f === alone[i])
  );
}

/**
 * Packs rows into as few groups as it can: a row joins the first group it
 * {@link fits} in that still {@link packsCleanly} with it.
 */
function pack(rows: Row[]): Row[][] {
  const groups: Row[][] = [];
  for (const row of rows) {
    const g = groups.find((x) => fits(x, row) && packsCleanly([...x, row]));
    if (g === undefined) groups.push([row]);
    else g.push(row);
  }
  return groups;
}

/**
 * A good proxy's inputs with every row of `group` merged over them (an
 * undefined value removes the input; two rows' objects for one property are
 * merged key by key).
 */
function mergedArgs(group: Row[]): Record<string, unknown> {
  const args: Record<string, unknown> = { ...GOOD_INPUTS };
  for (const [, change] of group)
    for (const [k, v] of Object.entries(change)) {
      const had = args[k];
      args[k] = isPlainObject(had) && isPlainObject(v) ? { ...had, ...v } : v;
    }
  for (const k of Object.keys(args)) if (args[k] === undefined) delete args[k];
  return args;
}

/** The "has a problem: ..." texts the engine printed for `property` of `resource` (one per failure at it). */
function problems(output: string, resource: string, property: string): string[] {
  const marker = `resource '${resource}': property ${property} value {`;
  const found: string[] = [];
  for (let at = output.indexOf(marker); at >= 0; at = output.indexOf(marker, at + marker.length)) {
    const rest = output.slice(at + marker.length);
    const end = rest.search(/\n {4}error: |\n\n/);
    const text = end < 0 ? rest : rest.slice(0, end);
    const p = text.indexOf("} has a problem: ");
    if (p >= 0) found.push(text.slice(p + "} has a problem: ".length));
  }
  return found;
}

describe("bad inputs through pulumi preview", () => {
  const rows = BAD.filter(([what]) => !UNIT_ONLY.has(what));
  const groups = pack(rows);

  it("the previews cover the unit test's table: each row but the unit-only ones in exactly one, far fewer previews than rows", () => {
    const names = BAD.map(([what]) => what);
    expect(new Set(names).size).toBe(names.length);
    expect([...UNIT_ONLY].filter((what) => !names.includes(what))).toEqual([]);
    const previewed = groups.flat().map(([what]) => what);
    expect(previewed.sort()).toEqual(names.filter((what) => !UNIT_ONLY.has(what)).sort());
    expect(previewed.length).toBeGreaterThanOrEqual(30);
    expect(groups.length).toBeLessThan(previewed.length / 3);
  });

  it("packing hides no failure and adds none: check says of each preview's merged inputs what it says of its rows one at a time, naming every row", () => {
    expect(
      groups.flatMap((group) => missedByCheck(group).map(([what, , property]) => `${what} (${property})`)),
    ).toEqual([]);
    for (const group of groups) {
      const { together, alone } = failuresTogetherAndAlone(group);
      expect(together, group.map(([what]) => what).join(", ")).toEqual(alone);
    }
  });

  // One stack for every preview (each sets the stack's one proxy): a preview writes no checkpoint, and the one
  // failing up, which records the stack and its default provider, comes last.
  let shared: Workspace | undefined;
  it.each(groups.map((g, i) => [i, g] as const))(
    "preview %i rejects each of its rows naming the property, and nothing is created",
    (i, group) => {
      shared ??= pair("hostile");
      const ws = shared;
      const resource = `g${i}`;
      const args = mergedArgs(group);
      ws.setConfig({ ...BAD_INPUT_CONFIG, "pair:proxies": { [resource]: args } });
      const r = ws.run("preview");
      expect(r.code).not.toBe(0);
      const missed = group
        .filter(
          ([, , property, reason]) => !problems(r.output, resource, property).some((t) => reason.test(t)),
        )
        .map(([what, , property]) => `${what} (${property})`);
      expect(missed, r.output.slice(-3000)).toEqual([]);
      // A secret input's value never appears beside its failure, nor key material in any shape.
      expect(r.output).not.toContain(KEY_MARKER);
      for (const [, change, property] of group) {
        if (!property.endsWith("(secret)")) continue;
        for (const v of Object.values(change))
          if (typeof v === "string") expect(r.output).not.toContain(v.trim());
      }
      // Preview stops before any create, and so does up (run once: it is the same check).
      if (i === groups.length - 1) {
        const up = ws.run("up", "--yes", "--skip-preview");
        expect(up.code).not.toBe(0);
      }
      expect(ws.proxies()).toEqual([]);
      expect(domainsOfStack(host, ws.stack)).toEqual([]);
    },
  );
});

describe("wrong inputs only the first step can see", () => {
  it("an image that is not the format it declares fails the create naming the image, and leaves nothing behind", () => {
    const ws = pair("wrongformat");
    const dir = path.join(E2E_ROOT, "images");
    mkdirSync(dir, { recursive: true });
    const raw = path.join(dir, `not-qcow2-${process.pid}.img`);
    writeFileSync(raw, Buffer.alloc(1024 * 1024, 0x5a));
    const name = `kvmpt-wrongfmt-${process.pid}`;
    const volumesBefore = poolVolumes(host);
    ws.setConfig({
      ...hostsConfig(host),
      "kvm:images": { liar: { url: raw, format: "qcow2", firmware: "bios" } },
      "pair:proxies": { liar: { host: "local", image: "liar", ...TEST_PROXY_ARGS, name } },
    });
    const up = ws.run("up", "--yes", "--skip-preview");
    expect(up.code).not.toBe(0);
    expect(up.output).toMatch(
      new RegExp(`${raw.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}.*qcow2|qcow2.*${path.basename(raw)}`),
    );
    expect(allDomains(host)).not.toContain(name);
    // No per-VM volume, no cached image and no marker for this image (other
    // tests may add volumes of their own meanwhile).
    const image = parseImage(undefined, { url: raw, format: "qcow2" }, new Failures());
    if (image === undefined) throw new Error("the test image config does not parse");
    const cached = cachedImageVolumeName(image);
    const mine = (v: string) => v.includes(name) || v === cached || v === `${cached}.partial`;
    expect(volumesBefore.filter(mine)).toEqual([]);
    expect(poolVolumes(host).filter(mine)).toEqual([]);
    expect(ws.proxies()).toEqual([]);
    execFileSync("rm", ["-f", raw]);
  });

  it("two proxies with the same fixed name on one host, created at once: one is created, the other is refused and does not touch it", () => {
    const ws = pair("dupname");
    const name = `kvmpt-dup-${process.pid}`;
    ws.setConfig({
      ...hostsConfig(host),
      "pair:proxies": {
        first: { host: "local", image: "tiny", ...TEST_PROXY_ARGS, name },
        second: { host: "local", image: "tiny", ...TEST_PROXY_ARGS, name },
      },
    });
    // Pulumi's default parallelism starts both creates together; the provider runs creates of one name in turn.
    const up = ws.run("up", "--yes", "--skip-preview");
    expect(up.code).not.toBe(0);
    expect(up.output).toMatch(
      new RegExp(`domain ${name} already exists on host local and belongs to urn:pulumi:`),
    );
    // Exactly one VM, owned by the proxy the state holds, with its disks; the refused one rolled nothing back.
    expect(allDomains(host).filter((d) => d === name)).toEqual([name]);
    expect(perVmVolumesOf(poolVolumes(host), name)).toEqual(vmVolumeNames(host, name).sort());
    const held = ws.proxies();
    expect(held).toHaveLength(1);
    expect(held[0]?.id).toBe(`kvm://local/${name}`);
    expect(parseMetadata(metadataOf(host, name) ?? "")?.owner.urn).toBe(held[0]?.urn);
    ws.destroy();
    expect(allDomains(host)).not.toContain(name);
  });
});
