/**
 * Reads the TSDoc of interfaces and classes (and of their properties) from
 * TypeScript source files, with the TypeScript compiler's own parser: the
 * descriptions of the package schema (provider/schema/kvmproxy-schema.ts)
 * are the texts users see as tooltips. Touches files; used by the schema
 * test and by nothing the package ships (TypeScript is a dev dependency).
 */
import { readFileSync } from "node:fs";
import ts from "typescript";
import type { DocLookup, SourceDoc } from "../../provider/schema/package-schema";

interface Declared {
  doc?: string;
  members: Map<string, SourceDoc>;
  /** The interfaces it extends by name (`extends InlineImage`), where an inherited property's TSDoc is. */
  bases: string[];
}

/** The TSDoc of `node`, its `{@link X}` written as `X`, lines of one paragraph joined (a fenced code block kept as written). */
function docOf(node: ts.Node): string | undefined {
  const docs = ts.getJSDocCommentsAndTags(node).filter(ts.isJSDoc);
  const last = docs[docs.length - 1];
  if (last === undefined) return undefined;
  const text = ts.getTextOfJSDocComment(last.comment)?.trim();
  if (text === undefined || text === "") return undefined;
  // Lines of a paragraph are joined; a fenced code block keeps its lines as written.
  return text
    .split(/(^```[^\n]*\n[\s\S]*?^```)/m)
    .map((part, i) =>
      i % 2 === 1
        ? part
        : part
            .replace(/\{@link\s+([^}\s]+)\s*\}/g, "`$1`")
            .replace(/(?<!\n)\n(?!\n|- |```|$)/g, " ")
            .replace(/[ \t]+/g, " "),
    )
    .join("");
}

/** Every interface and class declared at the top level of `files`, with their property docs. */
export function readDeclarations(files: readonly string[]): Map<string, Declared> {
  const out = new Map<string, Declared>();
  for (const file of files) {
    const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
    for (const st of source.statements) {
      if (!(ts.isInterfaceDeclaration(st) || ts.isClassDeclaration(st)) || st.name === undefined) continue;
      const members = new Map<string, SourceDoc>();
      for (const m of st.members) {
        if (!(ts.isPropertySignature(m) || ts.isPropertyDeclaration(m)) || !ts.isIdentifier(m.name)) continue;
        const doc = docOf(m);
        members.set(m.name.text, {
          ...(doc !== undefined ? { description: doc } : {}),
          optional: m.questionToken !== undefined,
        });
      }
      const bases = (st.heritageClauses ?? [])
        .filter((h) => h.token === ts.SyntaxKind.ExtendsKeyword)
        .flatMap((h) => h.types.map((t) => t.expression))
        .filter(ts.isIdentifier)
        .map((e) => e.text);
      const doc = docOf(st);
      out.set(st.name.text, { ...(doc !== undefined ? { doc } : {}), members, bases });
    }
  }
  return out;
}

/**
 * A DocLookup over `files`: a property without TSDoc counts as undescribed
 * (undefined description); one an interface inherits is looked up in the
 * interfaces it extends by name.
 */
export function docLookup(files: readonly string[]): DocLookup {
  const decls = readDeclarations(files);
  const member = (iface: string, prop: string): SourceDoc | undefined => {
    const d = decls.get(iface);
    if (d === undefined) return undefined;
    const m = d.members.get(prop);
    if (m !== undefined) return m.description === undefined ? undefined : m;
    for (const base of d.bases) {
      const inherited = member(base, prop);
      if (inherited !== undefined) return inherited;
    }
    return undefined;
  };
  return (iface, prop) => {
    if (prop !== undefined) return member(iface, prop);
    const doc = decls.get(iface)?.doc;
    return doc !== undefined ? { description: doc } : undefined;
  };
}
