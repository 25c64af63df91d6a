/**
 * The layout docs/architecture.md describes, held against the code: which
 * files are pure, which layer may import which, where retry lives, and the
 * size of modules. Reads the sources as text (imports and calls), nothing runs.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(__dirname, "../..");
const providerDir = path.join(root, "provider");

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : p.endsWith(".ts") ? [p] : [];
  });
}

const sources = filesUnder(providerDir).map((file) => ({
  file: path.relative(root, file),
  text: readFileSync(file, "utf8"),
}));

interface Import {
  from: string;
  typeOnly: boolean;
}

/** The imports of a module: `import ... from "x"` and `export ... from "x"`, and whether type-only. */
function importsOf(text: string): Import[] {
  const out: Import[] = [];
  const re = /^(import|export)(\s+type)?\s[^;]*?\sfrom\s+"([^"]+)";/gms;
  for (const m of text.matchAll(re)) out.push({ from: m[3] as string, typeOnly: m[2] !== undefined });
  return out;
}

/** Files directly in a folder (not in its subfolders). */
function filesIn(folder: string): typeof sources {
  return sources.filter((s) => path.dirname(s.file) === folder);
}

const PURE_ALLOWED = [
  /^\.\/[a-z0-9-]+$/, // another pure module of provider/kvm/
  /^\.\.\/errors$/,
  /^\.\.\/libvirt\/(constants|error-codes)$/, // numbers only
  /^\.\.\/transport\/defaults$/, // constants only
  /^\.\.\/transport\/private-key$/, // key text, node:crypto only
  /^node:(crypto|zlib|url)$/,
  /^fast-xml-parser$/,
];

/** The size past which a module is an outlier to look at (see the test). */
const OUTLIER_LINES = 700;

describe("architecture", () => {
  it("finds the modules it checks", () => {
    expect(filesIn("provider/kvm").length).toBeGreaterThan(10);
    expect(filesIn("provider/kvm/host").length).toBeGreaterThan(5);
    expect(filesIn("provider/resource").length).toBeGreaterThan(5);
  });

  it.each(filesIn("provider/kvm").map((s) => [s.file, s.text] as const))(
    "%s is pure: no I/O, no host operation, no libvirt client or transport",
    (_file, text) => {
      const bad = importsOf(text).filter(
        (i) =>
          !(i.typeOnly && i.from.startsWith("../libvirt/types")) && !PURE_ALLOWED.some((r) => r.test(i.from)),
      );
      expect(bad).toEqual([]);
    },
  );

  it.each(filesIn("provider/resource").map((s) => [s.file, s.text] as const))(
    "%s uses the KVM core's operations and types, never a libvirt procedure, constant or host helper",
    (_file, text) => {
      const bad = importsOf(text).filter(
        (i) =>
          (i.from.includes("/libvirt/") && !i.typeOnly) ||
          (i.from.includes("/kvm/host/") &&
            !/\/kvm\/host\/(operations|provision|hosts|image-cache)$/.test(i.from)),
      );
      expect(bad).toEqual([]);
    },
  );

  it("the resource layer calls no operation that takes a hint from another read (readStatus, waitForIpFrom: the core's own)", () => {
    const bad = filesIn("provider/resource").filter((s) => /\.(readStatus|waitForIpFrom)\(/.test(s.text));
    expect(bad.map((s) => s.file)).toEqual([]);
  });

  const LAYERS: [string, RegExp][] = [
    ["provider/transport", /\/(libvirt|kvm|resource|gc|cli)\//],
    ["provider/libvirt", /\/(kvm|resource|gc|cli)\//],
    ["provider/kvm", /\/(resource|gc|cli)\//],
    ["provider/resource", /\/(gc|cli)\//],
  ];
  it.each(LAYERS)("nothing in %s imports a layer above it", (folder, above) => {
    const bad = sources
      .filter((s) => s.file.startsWith(`${folder}/`))
      .flatMap((s) => importsOf(s.text).map((i) => `${s.file} -> ${i.from}`))
      .filter((edge) => above.test(`${edge.split(" -> ")[1]}/`));
    expect(bad).toEqual([]);
  });

  it("retries in one place: the operations' wrapper (plus the pool's busy-lock wait)", () => {
    const callers = sources.filter((s) => /\bwithRetry\(/.test(s.text)).map((s) => s.file);
    expect(callers.sort()).toEqual(["provider/kvm/host/operations.ts", "provider/kvm/host/volumes.ts"]);
    const volumes = sources.find((s) => s.file === "provider/kvm/host/volumes.ts")?.text ?? "";
    // The one use below the operations waits out a busy pool only, never other failures.
    expect(volumes).toMatch(/withRetry\([^;]*retryIf: isBusy/s);
  });

  // A smell detector, not a rule to split by: past this size a module here has so far always held
  // two concepts (docs/decisions.md, "Module size: outliers, not a cap").
  it.each(sources.map((s) => [s.file, s.text.split("\n").length] as const))(
    "%s is no outlier (at most 700 lines)",
    (_file, lines) => {
      expect(lines).toBeLessThanOrEqual(OUTLIER_LINES);
    },
  );
});
