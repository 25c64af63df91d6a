/**
 * The words a property's type is written in: the Pulumi package schema's
 * types (pkg/codegen/schema's TypeSpec, the subset used here), and a
 * property's entry of a table (its type, secret, default), and the
 * package's name and configuration keys. A leaf with no
 * imports: the property registries of the resources (provider/resource/)
 * declare their types in it, and the schema builder (./package-schema.ts)
 * reads them.
 */

/** The package's name: type tokens are `kvmproxy:index:<Name>`. */
export const PACKAGE = "kvmproxy";

/** The configuration's keys, the same in the dynamic class's namespace and the plugin's (config-namespace.ts). */
export const CONFIG_KEY_NAMES = [
  "hosts",
  "images",
  "sshPrivateKey",
  "stateKey",
  "retire",
  "blockedAddresses",
] as const;
export type ConfigKeyName = (typeof CONFIG_KEY_NAMES)[number];

/** A type as the schema writes it: a primitive, an array, a map, a reference or a union. */
export type TypeSpec =
  | { type: "string" | "integer" | "number" | "boolean" }
  | { type: "array"; items: TypeSpec }
  | { type: "object"; additionalProperties: TypeSpec }
  | { $ref: string }
  | { oneOf: TypeSpec[] };

/** One property of a table: its type and what the TSDoc cannot say. */
export interface Prop {
  type: TypeSpec;
  /** The value is kept secret in the state and masked in displays. */
  secret?: true;
  /** The default check applies (a primitive). */
  default?: string | number | boolean;
  /** Only where no TSDoc can carry it (stack config keys); otherwise the TSDoc is the one text. */
  description?: string;
}

/**
 * Every property of `T`, each with its {@link Prop} (or a richer row): an
 * input added to an interface without its entry fails the type check.
 */
export type Table<T, Row extends Prop = Prop> = { readonly [K in keyof T]-?: Row };

/** An object type of the schema and the interface whose TSDoc describes it. */
export interface ObjectTable {
  /** The interface in the source files the descriptions are read from. */
  source: string;
  /** Only where the interface's own TSDoc describes something else (a type made from another's properties). */
  description?: string;
  properties: Readonly<Record<string, Prop>>;
}

/** A reference to a type of package `pkg`. */
export function ref(pkg: string, name: string): { $ref: string } {
  return { $ref: `#/types/${pkg}:index:${name}` };
}

/** A reference to a type of this package. */
export const typeRef = (name: string): { $ref: string } => ref(PACKAGE, name);

/** The schema's builtin "any value" type. */
export const ANY: TypeSpec = { $ref: "pulumi.json#/Any" };

export const STRING: TypeSpec = { type: "string" };
export const INTEGER: TypeSpec = { type: "integer" };
export const NUMBER: TypeSpec = { type: "number" };
export const BOOLEAN: TypeSpec = { type: "boolean" };
export const STRINGS: TypeSpec = { type: "array", items: STRING };
export const STRING_MAP: TypeSpec = { type: "object", additionalProperties: STRING };
/** Seconds, or a duration such as "90s". */
export const DURATION: TypeSpec = { oneOf: [STRING, NUMBER] };
