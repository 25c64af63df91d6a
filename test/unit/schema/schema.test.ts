/**
 * The package schema (provider/schema): the checked-in schema.json and the
 * reference pages' tables (docs/reference/*.md, between their
 * `schema-reference` markers) are what the tables and the sources' TSDoc make
 * now (regenerate both with `KVMP_UPDATE_REFERENCE=1 npx vitest run
 * --project unit test/unit/schema/schema.test.ts -u`), and the schema says
 * what the resource does: the inputs that replace, the secrets, the defaults,
 * and shows it: every resource's description carries an example program per
 * language (provider/schema/examples/; test/pulumi/sdk.test.ts compiles them
 * against the SDKs).
 */
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { PROXY_FLEET_TYPE } from "../../../provider/program/proxy-fleet";
import { DEFAULTS } from "../../../provider/resource/args";
import {
  REPLACE_PROPERTIES,
  SECRET_OUTPUTS,
  UPDATE_PROPERTIES,
} from "../../../provider/resource/kvm-proxy-properties";
import {
  buildPackageSchema,
  dynamicOnlyOutputs,
  EXAMPLE_LANGUAGES,
  type ExampleLookup,
  type ReferencePage,
  referencePages,
} from "../../../provider/schema/kvmproxy-schema";
import { type DocLookup, SchemaSourceError } from "../../../provider/schema/package-schema";
import { KVM_PROXY_TOKEN, PROXY_FLEET_TOKEN } from "../../../provider/schema/properties";
import { exampleFile, exampleLookup, examplesOf } from "../../../tools/schema/examples";
import { docLookup } from "../../../tools/schema/tsdoc";

const ROOT = path.resolve(__dirname, "../../..");
const SOURCES = [
  "provider/resource/args.ts",
  "provider/resource/outputs.ts",
  "provider/program/proxy-fleet.ts",
  "provider/program/kvm-proxy.ts",
].map((f) => path.join(ROOT, f));
const docs = docLookup(SOURCES);
const examples = exampleLookup();
const schema = buildPackageSchema(docs, examples);
const kvmProxy = schema.resources[KVM_PROXY_TOKEN];
if (kvmProxy === undefined) throw new Error("no KvmProxy in the schema");

const MARK_START = "<!-- schema-reference: generated from provider/schema/schema.json; edit the TSDoc -->";
const MARK_END = "<!-- schema-reference end -->";
const pages = referencePages(schema, dynamicOnlyOutputs(docs));

describe("the checked-in files are what the sources make", () => {
  it("provider/schema/schema.json", async () => {
    await expect(`${JSON.stringify(schema, null, 2)}\n`).toMatchFileSnapshot(
      path.join(ROOT, "provider/schema/schema.json"),
    );
  });

  it.each(Object.keys(pages) as ReferencePage[])("the reference tables of docs/reference/%s.md", (page) => {
    const file = path.join(ROOT, "docs/reference", `${page}.md`);
    const text = readFileSync(file, "utf8");
    const start = text.indexOf(MARK_START);
    const end = text.indexOf(MARK_END);
    expect(start, `${file} lacks the schema-reference markers`).toBeGreaterThan(0);
    expect(end, `${file} lacks the schema-reference end marker`).toBeGreaterThan(start);
    if (process.env.KVMP_UPDATE_REFERENCE === "1") {
      writeFileSync(file, `${text.slice(0, start)}${MARK_START}\n\n${pages[page]}\n${text.slice(end)}`);
      return;
    }
    expect(text.slice(start + MARK_START.length, end).trim()).toBe(pages[page].trim());
  });

  it("the README holds no reference tables", () => {
    expect(readFileSync(path.join(ROOT, "README.md"), "utf8")).not.toContain(MARK_START);
  });
});

describe("the schema says what the resource does", () => {
  it("marks exactly the inputs that replace the VM", () => {
    const replacing = Object.entries(kvmProxy.inputProperties)
      .filter(([, p]) => p.replaceOnChanges)
      .map(([n]) => n);
    expect(replacing.sort()).toEqual([...REPLACE_PROPERTIES].sort());
    // Every input either replaces or updates in place.
    expect(Object.keys(kvmProxy.inputProperties).sort()).toEqual(
      [...REPLACE_PROPERTIES, ...UPDATE_PROPERTIES].sort(),
    );
  });

  it("marks the secret outputs the class marks, and the secret inputs", () => {
    for (const name of SECRET_OUTPUTS)
      if (name in kvmProxy.properties) expect(kvmProxy.properties[name]?.secret, name).toBe(true);
    for (const name of ["userData", "userDataBase64", "vendorData", "vendorDataBase64"])
      expect(kvmProxy.inputProperties[name]?.secret, name).toBe(true);
    const auth = schema.types["kvmproxy:index:ProxyAuth"];
    expect(auth?.properties.password?.secret).toBe(true);
    expect(schema.config.variables.sshPrivateKey?.secret).toBe(true);
  });

  it("gives the defaults check applies, and requires what the interfaces require", () => {
    expect(kvmProxy.inputProperties.memoryMiB?.default).toBe(DEFAULTS.memoryMiB);
    // No default for the port or its shorthand: an SDK would fill in both, which check refuses together.
    expect(kvmProxy.inputProperties.proxyPort?.default).toBeUndefined();
    expect(schema.types["kvmproxy:index:Proxy"]?.properties?.port?.default).toBeUndefined();
    expect(kvmProxy.requiredInputs).toEqual(["host", "image"]);
    expect(schema.types["kvmproxy:index:HostInput"]?.required).toEqual(["key", "uri"]);
  });

  it("names the fleet as the component already does", () => {
    expect(PROXY_FLEET_TOKEN).toBe(PROXY_FLEET_TYPE);
    expect(schema.resources[PROXY_FLEET_TOKEN]?.isComponent).toBe(true);
  });

  it("describes every property from the TSDoc, links written as code", () => {
    expect(kvmProxy.inputProperties.host?.description).toContain("`HostInput`");
    expect(kvmProxy.inputProperties.userData?.description).not.toMatch(/installing squid/);
  });

  it("describes an inherited property from the interface it extends (an image of the config, an inline image's)", () => {
    expect(schema.types["kvmproxy:index:ImageConfig"]?.properties.url?.description).toBe(
      schema.types["kvmproxy:index:InlineImage"]?.properties.url?.description,
    );
  });

  it("names the configuration keys as the plugin's users set them: kvmproxy:images, never the dynamic class's kvm:images", () => {
    const text = JSON.stringify(schema);
    expect(text.match(/\bkvm:(hosts|images|sshPrivateKey|stateKey)\b/g) ?? []).toEqual([]);
    expect(schema.resources[KVM_PROXY_TOKEN]?.inputProperties.image?.description).toMatch(
      /`kvmproxy:images`/,
    );
    // Provider IDs keep their scheme.
    expect(text).toContain("kvm://");
  });

  it("types every property a program writes or reads: no Any anywhere", () => {
    const anyAt: string[] = [];
    const walk = (v: unknown, at: string): void => {
      if (Array.isArray(v)) {
        for (const [i, x] of v.entries()) walk(x, `${at}[${i}]`);
      } else if (typeof v === "object" && v !== null) {
        if ((v as { $ref?: unknown }).$ref === "pulumi.json#/Any") anyAt.push(at);
        for (const [k, x] of Object.entries(v)) if (k !== "description") walk(x, `${at}/${k}`);
      }
    };
    walk(schema, "");
    expect(anyAt).toEqual([]);
  });

  it("marks the secrets of an object type wherever they sit: a jump host's key and passphrase, a bake's user-data", () => {
    const secret = (type: string, prop: string) =>
      schema.types[`kvmproxy:index:${type}`]?.properties[prop]?.secret;
    expect([
      secret("JumpHop", "privateKey"),
      secret("JumpHop", "passphrase"),
      secret("Bake", "userData"),
    ]).toEqual([true, true, true]);
  });
});

describe("every resource's description shows it in an example per language", () => {
  const resources = Object.entries(schema.resources).map(([token, r]) => ({
    token,
    name: token.replace(/^.*:/, ""),
    description: r.description,
  }));

  it.each(resources)(
    "$token: one example, in TypeScript, Python, Go and YAML, each its file's text",
    ({ name, description }) => {
      // Pulumi's convention, which the SDKs' generators filter per language.
      expect(description).toMatch(
        /\n\{\{% examples %\}\}\n## Example Usage\n\{\{% example %\}\}\n### \S[^\n]*\n\n```typescript\n[\s\S]*\n```\n\{\{% \/example %\}\}\n\{\{% \/examples %\}\}$/,
      );
      const found = examplesOf(description);
      expect(found.map((e) => e.lang)).toEqual(["typescript", "python", "go", "yaml"]);
      for (const { lang, code } of found)
        expect(code, lang).toBe(
          readFileSync(exampleFile(name, lang as keyof typeof EXAMPLE_LANGUAGES), "utf8"),
        );
    },
  );

  it.each(resources)(
    "$token: no code block outside the examples (the TSDoc's is the dynamic class's)",
    ({ description }) => {
      const prose = description.slice(0, description.indexOf("{{% examples %}}"));
      expect(prose).not.toContain("```");
      expect(prose.trim()).not.toBe("");
    },
  );

  it.each(resources)(
    "$token: every example gives the proxy a password from a secret of the stack's config",
    ({ description }) => {
      const secretConfig: Record<string, RegExp> = {
        typescript: /config\.requireSecret\("\w+"\)/,
        python: /config\.require_secret\("\w+"\)/,
        go: /cfg\.RequireSecret\("\w+"\)/,
        yaml: /^config:\n {2}\w+:\n {4}type: string\n {4}secret: true$/m,
      };
      for (const { lang, code } of examplesOf(description))
        expect(code, lang).toMatch(secretConfig[lang] as RegExp);
    },
  );

  it.each(Object.keys(EXAMPLE_LANGUAGES))("an example missing in %s fails the build naming it", (lang) => {
    const without: ExampleLookup = (resource) => {
      const found = { ...examples(resource) };
      if (resource === "ProxyFleet") delete found[lang as keyof typeof EXAMPLE_LANGUAGES];
      return found;
    };
    expect(() => buildPackageSchema(docs, without)).toThrow(SchemaSourceError);
    expect(() => buildPackageSchema(docs, without)).toThrow(`ProxyFleet has no ${lang} example`);
  });
});

describe("a property the sources do not describe", () => {
  it.each([
    ["a property of KvmProxyArgs", "KvmProxyArgs", "memoryMiB", /KvmProxyArgs\.memoryMiB has no description/],
    ["an object type", "Timeouts", undefined, /interface Timeouts has no description/],
    ["a property of an object type", "NicDirectInput", "dev", /NicDirectInput\.dev has no description/],
  ])("fails the build naming it: %s", (_, iface, prop, message) => {
    const without: DocLookup = (i, p) => (i === iface && p === prop ? undefined : docs(i, p));
    expect(() => buildPackageSchema(without, examples)).toThrow(SchemaSourceError);
    expect(() => buildPackageSchema(without, examples)).toThrow(message);
  });
});
