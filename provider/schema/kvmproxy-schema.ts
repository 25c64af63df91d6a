/**
 * The `kvmproxy` package schema from the property tables (./properties.ts),
 * the sources' TSDoc and the resources' example programs (./examples/), and
 * the reference pages' tables (docs/reference/) from the schema. Pure:
 * `docs` reads the TSDoc (tools/schema/tsdoc.ts does, from the source
 * files) and `examples` the example programs (tools/schema/examples.ts);
 * provider/schema/schema.json is this function's output, checked in and
 * compared by test/unit/schema/schema.test.ts.
 */
import {
  KVM_PROXY_INPUT_PROPERTIES,
  KVM_PROXY_OUTPUT_PROPERTIES,
  REPLACE_PROPERTIES,
  SECRET_DERIVED_OUTPUTS,
  SECRET_OUTPUTS,
} from "../resource/kvm-proxy-properties";
import { inPluginNamespace } from "./config-namespace";
import {
  type DocLookup,
  objectType,
  type PackageSpec,
  type PropertySpec,
  type ResourceSpec,
  SchemaSourceError,
  schemaProperties,
} from "./package-schema";
import {
  CONFIG,
  FLEET_TYPES,
  KVM_PROXY_TOKEN,
  PROXY_FLEET_INPUTS,
  PROXY_FLEET_OUTPUTS,
  PROXY_FLEET_TOKEN,
  TYPES,
} from "./properties";
import { PACKAGE, type TypeSpec } from "./type-spec";

/**
 * The languages of a resource's examples, as pkg/v3's SDK generators name
 * them (codegen.FilterExamples keeps, in each SDK's doc comments, the code
 * blocks of its own language), with the extension of their files.
 */
export const EXAMPLE_LANGUAGES = { typescript: "ts", python: "py", go: "go", yaml: "yaml" } as const;
export type ExampleLanguage = keyof typeof EXAMPLE_LANGUAGES;

/** A resource's example program in each language it has one in (by the resource's name: `KvmProxy`). */
export type ExampleLookup = (resource: string) => Partial<Record<ExampleLanguage, string>>;

/** What each resource's example shows: its heading in the description. */
const EXAMPLE_TITLES: Record<string, string> = {
  KvmProxy: "A proxy with Basic authentication, its password a secret of the stack's config",
  ProxyFleet: "Three proxies over two hosts, each with a password of its own derived from a secret",
};

/**
 * Builds the package schema; throws SchemaSourceError naming a property the
 * sources do not describe, or a resource lacking an example in a language.
 */
export function buildPackageSchema(docs: DocLookup, examples: ExampleLookup): PackageSpec {
  const types: PackageSpec["types"] = {};
  for (const [name, table] of Object.entries({ ...TYPES, ...FLEET_TYPES })) {
    const spec = objectType(table, docs);
    types[`${PACKAGE}:index:${name}`] = spec;
  }

  const inputs = schemaProperties(KVM_PROXY_INPUT_PROPERTIES, docs, "KvmProxyArgs", {
    replaceOnChanges: REPLACE_PROPERTIES,
  });
  const outputs = schemaProperties(KVM_PROXY_OUTPUT_PROPERTIES, docs, "KvmProxyOutputs", {
    fallbacks: ["KvmProxyCredentialUrls", "KvmProxyArgs", "CheckedInputs"],
  });
  for (const name of SECRET_OUTPUTS) {
    const out = outputs.properties[name];
    if (out !== undefined) out.secret = true;
  }
  // The plugin returns nothing computed from a secret (kvm-proxy-plugin.ts `published`).
  for (const name of SECRET_DERIVED_OUTPUTS) delete outputs.properties[name];
  const kvmProxy: ResourceSpec = {
    type: "object",
    description: describe(docs, examples, "KvmProxy"),
    properties: outputs.properties,
    required: ["host", "name", "domainName", "uuid", "state", "proxyPort"].filter(
      (n) => n in outputs.properties,
    ),
    inputProperties: inputs.properties,
    requiredInputs: inputs.required,
  };

  const fleetInputs = schemaProperties(PROXY_FLEET_INPUTS, docs, "ProxyFleetArgs");
  const fleetOutputs = schemaProperties(PROXY_FLEET_OUTPUTS, docs, "ProxyFleet");
  const proxyFleet: ResourceSpec = {
    type: "object",
    description: describe(docs, examples, "ProxyFleet"),
    isComponent: true,
    properties: fleetOutputs.properties,
    required: Object.keys(fleetOutputs.properties),
    inputProperties: fleetInputs.properties,
    requiredInputs: fleetInputs.required,
  };

  const config = schemaProperties(CONFIG, docs, "StackConfig").properties;
  return inPluginWords({
    name: PACKAGE,
    displayName: "KVM Proxy",
    description:
      "KVM virtual machines running secured HTTP (and SOCKS5) forward proxies on your own libvirt hosts, over libvirt's remote protocol.",
    keywords: ["pulumi", "kvm", "libvirt", "squid", "proxy", "category/infrastructure", "kind/native"],
    license: "Apache-2.0",
    publisher: "pulumi-kvm-proxy",
    meta: { moduleFormat: "(.*)" },
    config: { variables: config },
    provider: {
      description:
        "The kvmproxy provider: its hosts and images (the configuration keys, per provider instance).",
      inputProperties: config,
    },
    types,
    resources: {
      [KVM_PROXY_TOKEN]: kvmProxy,
      [PROXY_FLEET_TOKEN]: proxyFleet,
    },
    language: {
      nodejs: { packageName: "@kvmproxy/sdk", respectSchemaVersion: true },
      python: { packageName: "pulumi_kvmproxy", respectSchemaVersion: true },
      // Container types: ProxyFleet outputs its members as an array of KvmProxy.
      go: {
        importBasePath: "github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go/kvmproxy",
        generateResourceContainerTypes: true,
        respectSchemaVersion: true,
      },
    },
  });
}

/**
 * The schema is the plugin's: its descriptions (written once, in the TSDoc
 * both doors share) name the configuration keys as the plugin's users set
 * them, `kvmproxy:images` where the dynamic class reads `kvm:images`.
 */
function inPluginWords<T>(value: T): T {
  if (Array.isArray(value)) return value.map(inPluginWords) as T;
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      k === "description" && typeof v === "string" ? inPluginNamespace(v) : inPluginWords(v),
    ]),
  ) as T;
}

/**
 * A resource's description: its class's TSDoc, then its examples in Pulumi's
 * convention for descriptions (`{{% examples %}}` holding one `{{% example
 * %}}`, a code block per language), which each SDK's generator filters to
 * its own language and a registry page shows per language. A code block of
 * the TSDoc is left out: it shows the dynamic provider's class (imported from
 * `pulumi-kvm-proxy`), not an SDK's, and a generator keeps no block outside
 * its own language anyway.
 */
function describe(docs: DocLookup, examples: ExampleLookup, name: string): string {
  const d = docs(name)?.description;
  if (d === undefined) throw new SchemaSourceError(`${name} has no description: write its TSDoc`);
  const prose = d
    .replace(/^```[^\n]*\n[\s\S]*?^```$/gm, "")
    .replace(/\n{3,}/g, "\n\n")
    .trim();
  const found = examples(name);
  const blocks = (Object.keys(EXAMPLE_LANGUAGES) as ExampleLanguage[]).map((lang) => {
    const code = found[lang];
    if (code === undefined)
      throw new SchemaSourceError(
        `${name} has no ${lang} example: write provider/schema/examples/<resource>.${EXAMPLE_LANGUAGES[lang]}`,
      );
    return `\`\`\`${lang}\n${code.trimEnd()}\n\`\`\``;
  });
  const title = EXAMPLE_TITLES[name];
  if (title === undefined)
    throw new SchemaSourceError(`${name}'s example has no title: add it to EXAMPLE_TITLES`);
  return [
    prose,
    "",
    "{{% examples %}}",
    "## Example Usage",
    "{{% example %}}",
    `### ${title}`,
    "",
    ...blocks,
    "{{% /example %}}",
    "{{% /examples %}}",
  ].join("\n");
}

/** A type as the reference tables write it. */
function typeText(t: TypeSpec): string {
  if ("$ref" in t) return t.$ref.replace(/^.*[:/]/, "");
  if ("oneOf" in t) return t.oneOf.map(typeText).join(" \\| ");
  if (t.type === "array") return "oneOf" in t.items ? `(${typeText(t.items)})[]` : `${typeText(t.items)}[]`;
  if (t.type === "object") return `map of ${typeText(t.additionalProperties)}`;
  return t.type;
}

function cell(text: string): string {
  return text.replace(/\s*\n\s*/g, " ").replace(/\|/g, "\\|");
}

/** One markdown table: property, type, what it is (default, secret, replaces). */
function table(props: Record<string, PropertySpec>, required: readonly string[] = []): string {
  const rows = Object.entries(props).map(([name, p]) => {
    const notes = [
      required.includes(name) ? "required" : undefined,
      p.default !== undefined ? `default \`${String(p.default)}\`` : undefined,
      p.secret ? "secret" : undefined,
      p.replaceOnChanges ? "replaces" : undefined,
    ].filter((n) => n !== undefined);
    return `| \`${name}\` | ${typeText(p)} | ${notes.length > 0 ? `*${notes.join(", ")}.* ` : ""}${cell(p.description)} |`;
  });
  return ["| property | type | description |", "|---|---|---|", ...rows].join("\n");
}

/**
 * The outputs only the dynamic provider's KvmProxy has: what is computed from
 * a secret, kept as secret outputs because its diff and delete see nothing
 * else of a resource (the plugin keeps them out of its outputs).
 */
export function dynamicOnlyOutputs(docs: DocLookup): Record<string, PropertySpec> {
  const outputs = schemaProperties(KVM_PROXY_OUTPUT_PROPERTIES, docs, "KvmProxyOutputs", {
    fallbacks: ["KvmProxyCredentialUrls", "KvmProxyArgs", "CheckedInputs"],
  }).properties;
  const out: Record<string, PropertySpec> = {};
  for (const name of SECRET_DERIVED_OUTPUTS) {
    const spec = outputs[name];
    if (spec !== undefined) out[name] = { ...spec, secret: true };
  }
  return out;
}

/** The reference pages (docs/reference/<page>.md), each holding its tables between `schema-reference` markers. */
export type ReferencePage = "kvm-proxy" | "proxy-fleet" | "provider-config";

/** The type names (tokens) `props` refer to, and the types those refer to, in `schema`. */
function reachable(schema: PackageSpec, props: Record<string, PropertySpec>[]): Set<string> {
  const found = new Set<string>();
  const visit = (t: TypeSpec): void => {
    if ("$ref" in t) {
      const token = t.$ref.replace(/^#\/types\//, "");
      const type = schema.types[token];
      if (type === undefined || found.has(token)) return;
      found.add(token);
      for (const p of Object.values(type.properties)) visit(p);
    } else if ("oneOf" in t) t.oneOf.forEach(visit);
    else if (t.type === "array") visit(t.items);
    else if (t.type === "object") visit(t.additionalProperties);
  };
  for (const table of props) for (const p of Object.values(table)) visit(p);
  return found;
}

function typeSection(schema: PackageSpec, token: string): string {
  const type = schema.types[token] as PackageSpec["types"][string];
  return `### \`${token.replace(/^.*:/, "")}\`\n\n${cell(type.description)}\n\n${table(type.properties, type.required)}`;
}

function resourceSections(res: ResourceSpec): string[] {
  return [
    `## Inputs\n\n${table(res.inputProperties, res.requiredInputs)}`,
    `## Outputs\n\n${table(res.properties)}`,
  ];
}

/**
 * Each reference page's tables (what goes between its `schema-reference`
 * markers), from the schema: a resource's inputs and outputs and the types
 * only it uses; the provider's configuration and the types it uses. A type
 * both resources use is described on the KvmProxy page.
 */
export function referencePages(
  schema: PackageSpec,
  dynamicOnly: Record<string, PropertySpec> = {},
): Record<ReferencePage, string> {
  const proxy = schema.resources[KVM_PROXY_TOKEN] as ResourceSpec;
  const fleet = schema.resources[PROXY_FLEET_TOKEN] as ResourceSpec;
  const proxyTypes = reachable(schema, [proxy.inputProperties, proxy.properties]);
  const fleetTypes = reachable(schema, [fleet.inputProperties, fleet.properties]);
  const configTypes = reachable(schema, [schema.provider.inputProperties]);
  const page: Record<ReferencePage, string[]> = { "kvm-proxy": [], "proxy-fleet": [], "provider-config": [] };
  for (const token of Object.keys(schema.types)) {
    const where: ReferencePage = proxyTypes.has(token)
      ? "kvm-proxy"
      : fleetTypes.has(token)
        ? "proxy-fleet"
        : configTypes.has(token)
          ? "provider-config"
          : "kvm-proxy";
    page[where].push(typeSection(schema, token));
  }
  const own =
    Object.keys(dynamicOnly).length > 0
      ? [
          `## The dynamic \`KvmProxy\` class's own outputs\n\nComputed from a secret; the provider plugin keeps them in the state's inputs and returns none of them to a program.\n\n${table(dynamicOnly)}`,
        ]
      : [];
  const body = (sections: string[], types: string[]) =>
    `${[...sections, ...(types.length > 0 ? ["## Types", ...types] : [])].join("\n\n")}\n`;
  return {
    "kvm-proxy": body([...resourceSections(proxy), ...own], page["kvm-proxy"]),
    "proxy-fleet": body(resourceSections(fleet), page["proxy-fleet"]),
    "provider-config": body(
      [`## Provider arguments and configuration keys\n\n${table(schema.provider.inputProperties)}`],
      page["provider-config"],
    ),
  };
}
