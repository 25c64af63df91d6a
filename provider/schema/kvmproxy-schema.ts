/**
 * The `kvmproxy` package schema from the property tables (./properties.ts)
 * and the sources' TSDoc, and the README's reference tables from the
 * schema. Pure: `docs` reads the TSDoc (tools/schema/tsdoc.ts does, from the
 * source files); provider/schema/schema.json is this function's output,
 * checked in and compared by test/unit/schema/schema.test.ts.
 */
import { REPLACE_PROPERTIES, SECRET_DERIVED_OUTPUTS, SECRET_OUTPUTS } from "../resource/args";
import {
  type DocLookup,
  objectType,
  type PackageSpec,
  type PropertySpec,
  type ResourceSpec,
  SchemaSourceError,
  schemaProperties,
  type TypeSpec,
} from "./package-schema";
import {
  CONFIG,
  FLEET_TYPES,
  KVM_PROXY_INPUTS,
  KVM_PROXY_OUTPUTS,
  KVM_PROXY_TOKEN,
  PACKAGE,
  PROXY_FLEET_INPUTS,
  PROXY_FLEET_OUTPUTS,
  PROXY_FLEET_TOKEN,
  TYPES,
} from "./properties";

/** Builds the package schema; throws SchemaSourceError naming a property the sources do not describe. */
export function buildPackageSchema(docs: DocLookup): PackageSpec {
  const types: PackageSpec["types"] = {};
  for (const [name, table] of Object.entries({ ...TYPES, ...FLEET_TYPES })) {
    const spec = objectType(table, docs);
    types[`${PACKAGE}:index:${name}`] = spec;
  }

  const inputs = schemaProperties(KVM_PROXY_INPUTS, docs, "KvmProxyArgs", {
    replaceOnChanges: REPLACE_PROPERTIES,
  });
  const outputs = schemaProperties(KVM_PROXY_OUTPUTS, docs, "KvmProxyOutputs", {
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
    description: describe(docs, "KvmProxy"),
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
    description: describe(docs, "ProxyFleet"),
    isComponent: true,
    properties: fleetOutputs.properties,
    required: Object.keys(fleetOutputs.properties),
    inputProperties: fleetInputs.properties,
    requiredInputs: fleetInputs.required,
  };

  const config = schemaProperties(CONFIG, docs, "StackConfig").properties;
  return {
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
        importBasePath: "github.com/pulumi-kvm-proxy/sdk/go/kvmproxy",
        generateResourceContainerTypes: true,
        respectSchemaVersion: true,
      },
    },
  };
}

function describe(docs: DocLookup, name: string): string {
  const d = docs(name)?.description;
  if (d === undefined) throw new SchemaSourceError(`${name} has no description: write its TSDoc`);
  return d;
}

/** A type as the README's tables write it. */
function typeText(t: TypeSpec): string {
  if ("$ref" in t) return t.$ref.replace(/^.*[:/]/, "");
  if ("oneOf" in t) return t.oneOf.map(typeText).join(" \\| ");
  if (t.type === "array") return `${typeText(t.items)}[]`;
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
  const outputs = schemaProperties(KVM_PROXY_OUTPUTS, docs, "KvmProxyOutputs", {
    fallbacks: ["KvmProxyCredentialUrls", "KvmProxyArgs", "CheckedInputs"],
  }).properties;
  const out: Record<string, PropertySpec> = {};
  for (const name of SECRET_DERIVED_OUTPUTS) {
    const spec = outputs[name];
    if (spec !== undefined) out[name] = { ...spec, secret: true };
  }
  return out;
}

/** The README's reference tables (between its `schema-reference` markers), from the schema. */
export function referenceMarkdown(
  schema: PackageSpec,
  dynamicOnly: Record<string, PropertySpec> = {},
): string {
  const parts: string[] = [];
  for (const [token, res] of Object.entries(schema.resources)) {
    const name = token.replace(/^.*:/, "");
    parts.push(`#### \`${name}\` inputs\n\n${table(res.inputProperties, res.requiredInputs)}`);
    parts.push(`#### \`${name}\` outputs\n\n${table(res.properties)}`);
    if (token === KVM_PROXY_TOKEN && Object.keys(dynamicOnly).length > 0) {
      parts.push(
        `#### The dynamic \`KvmProxy\` class's own outputs\n\nComputed from a secret; the provider plugin keeps them in the state's inputs and returns none of them to a program.\n\n${table(dynamicOnly)}`,
      );
    }
  }
  for (const [token, type] of Object.entries(schema.types)) {
    parts.push(
      `#### \`${token.replace(/^.*:/, "")}\`\n\n${cell(type.description)}\n\n${table(type.properties, type.required)}`,
    );
  }
  return `${parts.join("\n\n")}\n`;
}
