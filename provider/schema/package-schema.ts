/**
 * The Pulumi package schema of `kvmproxy` (the shapes a provider plugin
 * serves, SDKs are generated from and the reference pages' tables show),
 * built from the property tables of ./properties.ts. Pure: the descriptions
 * come in as a lookup, which tools/schema/tsdoc.ts fills from the TSDoc of
 * the interfaces the tables are tied to (provider/resource/args.ts), so a
 * tooltip, the schema and docs/reference/ say the same words.
 *
 * The subset of the schema format used here follows pkg/codegen/schema's
 * PackageSpec (pulumi.json, the metaschema), which the pulumi test group
 * binds the result with (tools/pulumi/cmd/kvmproxy-schema).
 */

import type { ObjectTable, Prop, TypeSpec } from "./type-spec";

/** What the TSDoc of the sources says of an interface or one of its properties. */
export interface SourceDoc {
  description?: string;
  /** The property is declared optional (`?`). */
  optional?: boolean;
}

/** Reads the TSDoc of `iface` (its property `prop` when given); undefined when the source has no such thing. */
export type DocLookup = (iface: string, prop?: string) => SourceDoc | undefined;

/** A property as the schema holds it. */
export type PropertySpec = TypeSpec & {
  description: string;
  secret?: true;
  default?: string | number | boolean;
  replaceOnChanges?: true;
};

export interface ObjectTypeSpec {
  type: "object";
  description: string;
  properties: Record<string, PropertySpec>;
  required?: string[];
}

export interface ResourceSpec extends ObjectTypeSpec {
  inputProperties: Record<string, PropertySpec>;
  requiredInputs?: string[];
  isComponent?: true;
}

export interface PackageSpec {
  name: string;
  displayName: string;
  description: string;
  keywords: string[];
  homepage?: string;
  license: string;
  repository?: string;
  publisher: string;
  version?: string;
  meta: { moduleFormat: string };
  config: { variables: Record<string, PropertySpec> };
  provider: { description: string; inputProperties: Record<string, PropertySpec> };
  types: Record<string, ObjectTypeSpec>;
  resources: Record<string, ResourceSpec>;
  language: Record<string, Record<string, unknown>>;
}

/** A failure to describe: the table entry and what the sources lack. */
export class SchemaSourceError extends Error {}

/** A table's properties as the schema holds them, in the table's order; the descriptions from `source` (then `fallbacks`). */
export function schemaProperties(
  table: Readonly<Record<string, Prop>>,
  docs: DocLookup,
  source: string,
  options: { fallbacks?: string[]; replaceOnChanges?: readonly string[] } = {},
): { properties: Record<string, PropertySpec>; required: string[] } {
  const properties: Record<string, PropertySpec> = {};
  const required: string[] = [];
  for (const [name, prop] of Object.entries(table)) {
    const found = [source, ...(options.fallbacks ?? [])]
      .map((iface) => docs(iface, name))
      .find((d) => d !== undefined);
    const description = prop.description ?? found?.description;
    if (description === undefined || description.trim() === "")
      throw new SchemaSourceError(
        `${source}.${name} has no description: write its TSDoc in the interface${options.fallbacks?.length ? ` (or in ${options.fallbacks.join(", ")})` : ""}`,
      );
    properties[name] = {
      ...prop.type,
      description,
      ...(prop.secret ? { secret: true as const } : {}),
      ...(prop.default !== undefined ? { default: prop.default } : {}),
      ...(options.replaceOnChanges?.includes(name) ? { replaceOnChanges: true as const } : {}),
    };
    if (found !== undefined && found.optional === false) required.push(name);
  }
  return { properties, required };
}

/** An object type of the schema from its table. */
export function objectType(table: ObjectTable, docs: DocLookup): ObjectTypeSpec {
  const description = table.description ?? docs(table.source)?.description;
  if (description === undefined)
    throw new SchemaSourceError(`interface ${table.source} has no description: write its TSDoc`);
  const { properties, required } = schemaProperties(table.properties, docs, table.source);
  return { type: "object", description, properties, ...(required.length > 0 ? { required } : {}) };
}
