/**
 * The resources' example programs the package schema's descriptions carry
 * (provider/schema/kvmproxy-schema.ts): one file per resource and language,
 * provider/schema/examples/<resource in kebab case>.<ts|py|go|yaml>, each a
 * whole program a test compiles (test/pulumi/sdk.test.ts); and the examples
 * as a description holds them, read back. Touches files; used by the tests,
 * by nothing the package ships.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import {
  EXAMPLE_LANGUAGES,
  type ExampleLanguage,
  type ExampleLookup,
} from "../../provider/schema/kvmproxy-schema";

export const EXAMPLES_DIR = path.resolve(__dirname, "../../provider/schema/examples");

/** `KvmProxy` -> `kvm-proxy`. */
export function exampleFileStem(resource: string): string {
  return resource.replace(/(?<=[a-z0-9])([A-Z])/g, "-$1").toLowerCase();
}

/** The file of `resource`'s example in `lang`. */
export function exampleFile(resource: string, lang: ExampleLanguage, dir = EXAMPLES_DIR): string {
  return path.join(dir, `${exampleFileStem(resource)}.${EXAMPLE_LANGUAGES[lang]}`);
}

/** An ExampleLookup over the files of `dir`: the languages whose file exists. */
export function exampleLookup(dir = EXAMPLES_DIR): ExampleLookup {
  return (resource) => {
    const out: Partial<Record<ExampleLanguage, string>> = {};
    for (const lang of Object.keys(EXAMPLE_LANGUAGES) as ExampleLanguage[]) {
      const file = exampleFile(resource, lang, dir);
      if (existsSync(file)) out[lang] = readFileSync(file, "utf8");
    }
    return out;
  };
}

/**
 * The code blocks of a description's `{{% examples %}}` section, by their
 * language, in order (a language twice is kept twice); none without one.
 */
export function examplesOf(description: string): { lang: string; code: string }[] {
  const section = /^\{\{% examples %\}\}$([\s\S]*?)^\{\{% \/examples %\}\}$/m.exec(description)?.[1];
  if (section === undefined) return [];
  return [...section.matchAll(/^```(\S*)\n([\s\S]*?)\n```$/gm)].map((m) => ({
    lang: m[1] as string,
    code: `${m[2] as string}\n`,
  }));
}
