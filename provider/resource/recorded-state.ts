/**
 * A state's outputs as the lifecycle reads them: the engine's property bag
 * decoded once, where diff, read, update and delete take it
 * (provider.ts), into the outputs' types. Pure.
 *
 * Lenient by design: a state is what this provider wrote, possibly long ago,
 * and a refresh or a delete must never fail on it. Each recorded output is
 * held to the shape of its row's type in kvm-proxy-properties.ts (a string,
 * an integer, a list or map of them, an object); one of another shape is
 * dropped, as if it had not been recorded. The fields of an object type (a
 * NIC, the health) are taken as recorded (a rule tightened since is not
 * applied to them), and properties without a row (a state's `__provider`,
 * an older state's user-data text) are kept for what reads them.
 */
import { isObject } from "../kvm/fields";
import type { TypeSpec } from "../schema/type-spec";
import { KVM_PROXY_OUTPUT_PROPERTIES } from "./kvm-proxy-properties";
import type { KvmProxyOutputs } from "./outputs";

type Props = Record<string, unknown>;

declare const recorded: unique symbol;

/**
 * The recorded outputs, each of its row's shape when present; made only by
 * {@link decodeState}.
 */
export type RecordedState = Readonly<Partial<KvmProxyOutputs>> &
  Readonly<Props> & { readonly [recorded]: true };

const ANY_REF = "pulumi.json#/Any";

/**
 * Whether `v` has the shape of `type`: a primitive, a list or a map of such
 * shapes; a reference to an object type only an object (its fields as recorded).
 */
export function hasShape(type: TypeSpec, v: unknown): boolean {
  if ("oneOf" in type) return type.oneOf.some((t) => hasShape(t, v));
  if ("$ref" in type) return type.$ref === ANY_REF || isObject(v);
  switch (type.type) {
    case "string":
      return typeof v === "string";
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "boolean":
      return typeof v === "boolean";
    case "array":
      return Array.isArray(v) && v.every((item) => hasShape(type.items, item));
    case "object":
      return isObject(v) && Object.values(v).every((x) => hasShape(type.additionalProperties, x));
  }
}

const ROWS: Readonly<Record<string, { type: TypeSpec }>> = KVM_PROXY_OUTPUT_PROPERTIES;

/** The state's bag as {@link RecordedState}: every output of its row's shape, the rest as recorded. */
export function decodeState(props: Props): RecordedState {
  const out: Props = {};
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined) continue;
    const row = ROWS[key];
    if (row === undefined || hasShape(row.type, value)) out[key] = value;
  }
  return out as RecordedState;
}
