/**
 * The layout docs/contributing/architecture.md describes, held against the code: which
 * files are pure, which layer may import which (and none skips one), that no
 * modules import each other in a circle, that the KVM core's pure modules
 * live in folders named by concept, where retry lives, and the size of
 * modules. Reads the sources as text (imports and calls), nothing runs.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
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

// The schema's example programs are programs a user writes against the SDKs,
// not modules of the package (tsconfig.json leaves them out of the build).
const schemaExamples = path.join(providerDir, "schema/examples");

const sources = filesUnder(providerDir)
  .filter((file) => !file.startsWith(`${schemaExamples}/`))
  .map((file) => ({
    file: path.relative(root, file),
    text: readFileSync(file, "utf8"),
  }));

interface Import {
  /** As written. */
  from: string;
  /** A repo path (`provider/kvm/proxy/access.ts`) for a relative import, the package's name otherwise. */
  target: string;
  typeOnly: boolean;
}

/** The imports of a module: `import ... from "x"`, `export ... from "x"` and `import "x"`, resolved, and whether type-only. */
function importsOf(file: string, text: string): Import[] {
  const out: Import[] = [];
  const re = /^(?:(import|export)(\s+type)?\s[^;]*?\sfrom\s+|import\s+)"([^"]+)";/gms;
  for (const m of text.matchAll(re)) {
    const from = m[3] as string;
    let target = from;
    if (from.startsWith(".")) {
      const base = path.join(path.dirname(file), from);
      target =
        [`${base}.ts`, path.join(base, "index.ts")].find((p) => existsSync(path.join(root, p))) ?? base;
    }
    out.push({ from, target, typeOnly: m[2] !== undefined });
  }
  return out;
}

const graph = new Map(sources.map((s) => [s.file, importsOf(s.file, s.text)]));
const edges = (file: string) => graph.get(file) ?? [];

const under = (folder: string) => sources.filter((s) => s.file.startsWith(`${folder}/`));

/** The KVM core's pure modules: everything in provider/kvm but its host I/O. */
const PURE = under("provider/kvm").filter((s) => !s.file.startsWith("provider/kvm/host/"));

/** What a pure module may import besides other pure modules of the core. */
const PURE_ALLOWED = [
  /^provider\/errors\.ts$/,
  /^provider\/libvirt\/(constants|error-codes)\.ts$/, // numbers only
  /^provider\/transport\/defaults\.ts$/, // constants only
  /^provider\/transport\/host-port\.ts$/, // how a host is written before a port, text only
  /^provider\/transport\/(private-key|known-hosts)\.ts$/, // key text and known_hosts lines, node:crypto only
  /^provider\/transport\/openssh-config\.ts$/, // what OpenSSH reads in its config and command line, text only
  /^node:(crypto|zlib|url)$/,
  /^fast-xml-parser$/,
  /^yaml$/,
];

/** The shared helpers the core keeps beside its concept folders. */
const KVM_TOP_LEVEL = ["duration.ts", "fields.ts", "progress.ts", "validation.ts", "vendor-shell.ts"];
/** File names that repeat across provider/ where the folder tells them apart at a glance. */
const SHARED_NAMES = ["errors.ts", "index.ts", "types.ts"];

/** The size past which a module is an outlier to look at (see the test). */
const OUTLIER_LINES = 700;

/** The folders of provider/kvm that import each other: folder → the other folders its modules import. */
function kvmFolderGraph(): Map<string, Set<string>> {
  const folderOf = (file: string) => path.dirname(file);
  const folders = new Map<string, Set<string>>();
  for (const s of under("provider/kvm")) {
    const from = folderOf(s.file);
    if (from === "provider/kvm") continue;
    const to = folders.get(from) ?? new Set<string>();
    for (const { target } of edges(s.file)) {
      const folder = folderOf(target);
      if (folder !== from && folder.startsWith("provider/kvm/")) to.add(folder);
    }
    folders.set(from, to);
  }
  return folders;
}

/** Strongly connected groups of more than one node (Tarjan), each sorted: the circles of a graph. */
function circlesOf(nodes: Iterable<string>, next: (v: string) => Iterable<string>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  let n = 0;
  const visit = (v: string): void => {
    index.set(v, n);
    low.set(v, n);
    n++;
    stack.push(v);
    on.add(v);
    for (const w of next(v)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        on.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) out.push(group.sort());
    }
  };
  for (const v of nodes) if (!index.has(v)) visit(v);
  return out;
}

/** The circles of imports between modules. */
function circles(): string[][] {
  return circlesOf(
    sources.map((s) => s.file),
    (v) => edges(v).flatMap(({ target }) => (graph.has(target) ? [target] : [])),
  );
}

describe("architecture", () => {
  it("finds the modules it checks", () => {
    expect(PURE.length).toBeGreaterThan(25);
    expect(under("provider/kvm/host").length).toBeGreaterThan(5);
    expect(under("provider/resource").length).toBeGreaterThan(5);
    expect(
      edges("provider/resource/provider.ts").some((i) => i.target === "provider/kvm/host/operations.ts"),
    ).toBe(true);
  });

  it.each(PURE.map((s) => [s.file] as const))(
    "%s is pure: no I/O, no host operation, no libvirt client or transport",
    (file) => {
      const bad = edges(file).filter(
        (i) =>
          !(i.typeOnly && i.target === "provider/libvirt/types.ts") &&
          !(i.target.startsWith("provider/kvm/") && !i.target.startsWith("provider/kvm/host/")) &&
          !PURE_ALLOWED.some((r) => r.test(i.target)),
      );
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it("keeps the core's pure modules in folders named by concept: guest, proxy, tls, domain, network, config, placement", () => {
    const top = PURE.filter((s) => path.dirname(s.file) === "provider/kvm").map((s) => path.basename(s.file));
    expect(top.sort()).toEqual(KVM_TOP_LEVEL);
    const folders = new Set(PURE.map((s) => path.dirname(s.file)).filter((d) => d !== "provider/kvm"));
    expect([...folders].sort()).toEqual(
      ["config", "domain", "guest", "network", "placement", "proxy", "tls"].map((f) => `provider/kvm/${f}`),
    );
  });

  it("uses no file name twice in provider/ but those the folder tells apart (errors, index, types)", () => {
    const byName = new Map<string, string[]>();
    for (const s of sources)
      byName.set(path.basename(s.file), [...(byName.get(path.basename(s.file)) ?? []), s.file]);
    const twice = [...byName].filter(([name, files]) => files.length > 1 && !SHARED_NAMES.includes(name));
    expect(twice).toEqual([]);
  });

  it("has no modules that import each other in a circle", () => {
    expect(circles()).toEqual([]);
  });

  it("has no folders of the KVM core that import each other, directly or through a third", () => {
    const folders = kvmFolderGraph();
    expect(folders.get("provider/kvm/host")?.size).toBeGreaterThan(3);
    expect(circlesOf(folders.keys(), (v) => folders.get(v) ?? [])).toEqual([]);
  });

  it("mirrors the KVM core's folders in its unit tests: each test sits in the folder of what it tests", () => {
    const testRoot = path.join(root, "test/unit/kvm");
    const tests = (dir: string): string[] =>
      readdirSync(dir).flatMap((name) => {
        const p = path.join(dir, name);
        return statSync(p).isDirectory() ? tests(p) : p.endsWith(".test.ts") ? [p] : [];
      });
    const misplaced = tests(testRoot).filter((file) => {
      const folder = path.relative(testRoot, path.dirname(file));
      const source = path.join(providerDir, "kvm", folder);
      return (
        !existsSync(source) ||
        !readFileSync(file, "utf8").includes(`provider/kvm/${folder ? `${folder}/` : ""}`)
      );
    });
    expect(misplaced.map((f) => path.relative(root, f))).toEqual([]);
  });

  it.each(under("provider/resource").map((s) => [s.file] as const))(
    "%s uses the KVM core's operations and types, never a libvirt procedure, constant, host helper or transport",
    (file) => {
      const bad = edges(file).filter(
        (i) =>
          (i.target.startsWith("provider/libvirt/") && !i.typeOnly) ||
          i.target.startsWith("provider/transport/") ||
          (i.target.startsWith("provider/kvm/host/") &&
            !/^provider\/kvm\/host\/(operations|provision|hosts|image-cache|image-bake)\.ts$/.test(i.target)),
      );
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it.each(under("provider/program").map((s) => [s.file] as const))(
    "%s, run in the user's program, touches no host: the KVM core's pure rules only",
    (file) => {
      const bad = edges(file).filter((i) => /^provider\/(kvm\/host|libvirt|transport)\//.test(i.target));
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it.each(under("provider/probes").map((s) => [s.file] as const))(
    "%s, a probe of a running proxy, touches no host: the KVM core's pure rules only",
    (file) => {
      const bad = edges(file).filter((i) => /^provider\/(kvm\/host|libvirt|transport)\//.test(i.target));
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it("puts each doc comment above what it documents: none sits directly on another (the upper one would document nothing)", () => {
    const stacked = sources.flatMap((s) =>
      // A doc comment followed, past blank space only, by another (the file's header aside).
      [...s.text.matchAll(/\/\*\*(?:(?!\*\/)[\s\S])*\*\/(?=\s*\/\*\*)/g)]
        .filter((m) => m.index !== 0)
        .map((m) => `${s.file}:${s.text.slice(0, m.index).split("\n").length}`),
    );
    expect(stacked).toEqual([]);
  });

  it("names in its comments only modules that exist (a module's name, or its path from any folder)", () => {
    const modules = ["provider", "test", "bench", "tools", "examples"]
      .filter((d) => existsSync(path.join(root, d)))
      .flatMap((d) => filesUnder(path.join(root, d)).map((f) => path.relative(root, f)));
    const names = new Set(modules.map((f) => path.basename(f)));
    const missing = sources.flatMap((s) =>
      [...s.text.matchAll(/(?<![\w./-])((?:[\w-]+\/)*[\w-]+\.ts)\b/g)]
        .map((m) => m[1] as string)
        .filter(
          (n) => !names.has(path.basename(n)) || (n.includes("/") && !modules.some((f) => f.endsWith(n))),
        )
        .map((n) => `${s.file}: ${n}`),
    );
    expect(missing).toEqual([]);
  });

  it("opens network sockets only in the transport, the probes and the image download", () => {
    const sockets = sources
      .filter((s) =>
        /(from|require\()\s*"(node:)?(net|tls|http|https|http2|dgram|undici|ssh2)"|(?<![.\w])fetch\(/.test(
          s.text,
        ),
      )
      .map((s) => s.file)
      .filter((f) => !f.startsWith("provider/transport/") && !f.startsWith("provider/probes/"));
    expect(sockets).toEqual(["provider/kvm/host/download.ts"]);
  });

  it.each(under("provider/plugin").map((s) => [s.file] as const))(
    "%s, the plugin's front door, reaches the KVM core only through the resource layer",
    (file) => {
      const bad = edges(file).filter((i) => /^provider\/(kvm|libvirt|transport)\//.test(i.target));
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it.each([...under("provider/status"), ...under("provider/retire")].map((s) => [s.file] as const))(
    "%s, a fleet command, reaches hosts only through the runtime's read and operations: no host code of its own",
    (file) => {
      const bad = edges(file).filter(
        (i) => !i.typeOnly && /^provider\/(kvm\/host|libvirt|transport)\//.test(i.target),
      );
      expect(bad.map((i) => i.from)).toEqual([]);
    },
  );

  it("the resource layer calls no operation that takes a hint from another read (readStatus, waitForIpFrom: the core's own)", () => {
    const bad = under("provider/resource").filter((s) => /\.(readStatus|waitForIpFrom)\(/.test(s.text));
    expect(bad.map((s) => s.file)).toEqual([]);
  });

  const LAYERS: [string, RegExp][] = [
    ["provider/transport", /^provider\/(libvirt|kvm|probes|resource|program|gc|status|retire|cli|plugin)\//],
    ["provider/libvirt", /^provider\/(kvm|probes|resource|program|gc|status|retire|cli|plugin)\//],
    ["provider/kvm", /^provider\/(probes|resource|program|gc|status|retire|cli|plugin)\//],
    // Probes ask a running proxy over the network; they know the core's grammar, not the resource's inputs.
    ["provider/probes", /^provider\/(resource|program|schema|gc|status|retire|cli|plugin)\//],
    // The resource layer writes its properties' types in the schema's words (a leaf with no imports).
    [
      "provider/resource",
      /^provider\/(program|gc|status|retire|cli|plugin)\/|^provider\/schema\/(?!type-spec\.ts$)/,
    ],
    // What runs in the user's program stands on the lifecycle's types and rules, never on a front door.
    ["provider/program", /^provider\/(gc|status|retire|cli|plugin)\//],
    ["provider/schema", /^provider\/(gc|status|retire|cli|plugin)\//],
  ];
  it.each(LAYERS)("nothing in %s imports a layer above it", (folder, above) => {
    const bad = under(folder).flatMap((s) =>
      edges(s.file)
        .filter((i) => above.test(i.target))
        .map((i) => `${s.file} -> ${i.from}`),
    );
    expect(bad).toEqual([]);
  });

  it("the schema's type vocabulary, which the resource layer reads, is a leaf: it imports nothing", () => {
    expect(edges("provider/schema/type-spec.ts")).toEqual([]);
  });

  it("the package schema is pure: it reads the resource's argument and output types and its property registry, nothing else", () => {
    const files = under("provider/schema").map((s) => s.file);
    expect(files.length).toBeGreaterThan(2);
    const bad = files.flatMap((f) =>
      edges(f)
        .filter(
          (i) =>
            !/^provider\/schema\//.test(i.target) &&
            !/^provider\/resource\/(args|outputs|kvm-proxy-properties)\.ts$/.test(i.target) &&
            i.target !== "provider/program/proxy-fleet.ts",
        )
        .map((i) => `${f} -> ${i.from}`),
    );
    expect(bad).toEqual([]);
  });

  it("retries in one place: the operations' wrapper (plus the pool's busy-lock wait)", () => {
    const callers = sources.filter((s) => /\bwithRetry\(/.test(s.text)).map((s) => s.file);
    expect(callers.sort()).toEqual(["provider/kvm/host/operations.ts", "provider/kvm/host/volumes.ts"]);
    const volumes = sources.find((s) => s.file === "provider/kvm/host/volumes.ts")?.text ?? "";
    // The one use below the operations waits out a busy pool only, never other failures.
    expect(volumes).toMatch(/withRetry\([^;]*retryIf: isBusy/s);
  });

  it("sets timers only through provider/timers.ts, whose one rule bounds every delay (Node fires one past 2^31-1 ms at once)", () => {
    // A bare call (not a declaration with typed parameters, not a method of an injected clock or a socket).
    const bare =
      /(?<![.\w])(setTimeout|setInterval|setImmediate)\((?!\w+:)|AbortSignal\.timeout\(|node:timers/;
    const setters = sources.filter((s) => bare.test(s.text)).map((s) => s.file);
    expect(setters).toEqual(["provider/timers.ts"]);
  });

  // A smell detector, not a rule to split by: past this size a module here has so far always held
  // two concepts (docs/contributing/decisions.md, "Module size: outliers, not a cap").
  it.each(sources.map((s) => [s.file, s.text.split("\n").length] as const))(
    "%s is no outlier (at most 700 lines)",
    (_file, lines) => {
      expect(lines).toBeLessThanOrEqual(OUTLIER_LINES);
    },
  );
});
