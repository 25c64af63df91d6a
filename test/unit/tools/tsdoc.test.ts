import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { docLookup } from "../../../tools/schema/tsdoc";

const dir = mkdtempSync(path.join(tmpdir(), "kvmp-tsdoc-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The description the schema gets from the TSDoc of `interface X` in `source`. */
function described(source: string): string | undefined {
  const file = path.join(dir, `${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(file, source);
  return docLookup([file])("X")?.description;
}

describe("the TSDoc reader: the text a schema description and a tooltip share", () => {
  it.each([
    [
      "joins the lines of a paragraph",
      "/**\n * One line\n * and the next.\n */\ninterface X {}",
      "One line and the next.",
    ],
    [
      "keeps a blank line between paragraphs",
      "/**\n * First.\n *\n * Second.\n */\ninterface X {}",
      "First.\n\nSecond.",
    ],
    [
      "keeps a list's items on their lines",
      "/**\n * Items:\n * - a\n * - b\n */\ninterface X {}",
      "Items:\n- a\n- b",
    ],
    ["writes a link as code", "/** See {@link Y}. */\ninterface X {}", "See `Y`."],
    [
      "keeps a fenced code block as written, its lines and indentation",
      "/**\n * Use:\n *\n * ```ts\n * const a = f({\n *   b: 1,\n * });\n * ```\n *\n * Done.\n */\ninterface X {}",
      "Use:\n\n```ts\nconst a = f({\n  b: 1,\n});\n```\n\nDone.",
    ],
  ])("%s", (_, source, text) => {
    expect(described(source)).toBe(text);
  });
});
