/**
 * The documentation's relative links: in README.md, CONTRIBUTING.md,
 * CHANGELOG.md and every markdown file under docs/, each relative link
 * names a file (or folder) that exists, and each `#anchor` names a heading
 * of its target as GitHub slugs it. And the README stays a front page: at
 * most 200 lines.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(__dirname, "../../..");

function markdownUnder(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) return markdownUnder(rel);
    return e.name.endsWith(".md") ? [rel] : [];
  });
}

const FILES = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", ...markdownUnder("docs").sort()];

/** The lines outside fenced code blocks. */
function prose(text: string): string[] {
  let fenced = false;
  return text.split("\n").filter((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/** A heading's anchor as GitHub makes it (github-slugger): lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors of a markdown file's headings, a repeated one suffixed -1, -2, ... as GitHub does. */
function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of prose(readFileSync(file, "utf8"))) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m === null) continue;
    const base = slug(m[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The relative link targets of a markdown file (outside code), with their line numbers. */
function relativeLinks(text: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  let fenced = false;
  text.split("\n").forEach((raw, i) => {
    if (/^\s*(```|~~~)/.test(raw)) {
      fenced = !fenced;
      return;
    }
    if (fenced) return;
    const line = raw.replace(/`[^`]*`/g, "");
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1] as string;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      out.push({ line: i + 1, target });
    }
  });
  return out;
}

/** What is wrong with the link `target` of `file`, or undefined. */
function problem(file: string, target: string): string | undefined {
  const hash = target.indexOf("#");
  const pathPart = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const dest =
    pathPart === "" ? path.join(ROOT, file) : path.resolve(path.dirname(path.join(ROOT, file)), pathPart);
  if (!existsSync(dest)) return `${path.relative(ROOT, dest)} does not exist`;
  if (anchor === undefined) return undefined;
  if (statSync(dest).isDirectory() || !dest.endsWith(".md"))
    return `#${anchor} on ${path.relative(ROOT, dest)}, which is no markdown file`;
  const anchors = anchorsOf(dest);
  return anchors.has(anchor) ? undefined : `${path.relative(ROOT, dest)} has no heading #${anchor}`;
}

describe("relative links in the documentation", () => {
  it.each(FILES)("%s: every relative link's file and #anchor exist", (file) => {
    const broken = relativeLinks(readFileSync(path.join(ROOT, file), "utf8"))
      .map(({ line, target }) => {
        const p = problem(file, target);
        return p === undefined ? undefined : `${file}:${line}: (${target}): ${p}`;
      })
      .filter((b) => b !== undefined);
    expect(broken).toEqual([]);
  });
});

describe("slug", () => {
  it.each([
    ["`pulumi refresh` and edited stack config", "pulumi-refresh-and-edited-stack-config"],
    [
      "Which way in: the dynamic class or the provider plugin",
      "which-way-in-the-dynamic-class-or-the-provider-plugin",
    ],
    ["known_hosts and keys", "known_hosts-and-keys"],
    ["Import, get, retainOnDelete", "import-get-retainondelete"],
    ["Behind a bastion (jump hosts)", "behind-a-bastion-jump-hosts"],
    ["Uploads cut at random offsets", "uploads-cut-at-random-offsets"],
  ])("%s -> %s", (heading, anchor) => {
    expect(slug(heading)).toBe(anchor);
  });
});

describe("the README is a front page", () => {
  it("has at most 200 lines", () => {
    const lines = readFileSync(path.join(ROOT, "README.md"), "utf8").split("\n");
    expect(lines.length - (lines.at(-1) === "" ? 1 : 0)).toBeLessThanOrEqual(200);
  });
});
