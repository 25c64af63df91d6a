/**
 * Field readers shared by the config and input parsers: each reads one field
 * of a plain object, records a failure under the field's name and returns
 * undefined on bad input. Pure.
 */
import { type Failures, quote } from "./validation";

export type Obj = Record<string, unknown>;

export function isObject(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Whether an optional field was given: null counts as absent, as everywhere in config and inputs. */
export function given(v: unknown): boolean {
  return v !== undefined && v !== null;
}

export function rejectUnknown(obj: Obj, known: readonly string[], f: Failures): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k)) f.fail(k, `unknown property (known: ${known.join(", ")})`);
  }
}

export function optString(obj: Obj, field: string, f: Failures): string | undefined {
  const v = obj[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") {
    f.fail(field, "must be a string");
    return undefined;
  }
  if (v === "") {
    f.fail(field, "must not be empty");
    return undefined;
  }
  if (v.includes("\0")) {
    f.fail(field, "must not contain NUL characters");
    return undefined;
  }
  return v;
}

export function optEnum<T extends string>(
  obj: Obj,
  field: string,
  allowed: readonly T[],
  f: Failures,
): T | undefined {
  const v = optString(obj, field, f);
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v)) {
    f.fail(field, `must be one of ${allowed.map((a) => JSON.stringify(a)).join(", ")} (got ${quote(v)})`);
    return undefined;
  }
  return v as T;
}

// libvirt object names (pools, networks): no '/', printable, bounded.
export function libvirtName(obj: Obj, field: string, f: Failures): string | undefined {
  const v = optString(obj, field, f);
  if (v === undefined) return undefined;
  if (!/^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$/.test(v)) {
    f.fail(
      field,
      "must be 1-128 letters, digits, '.', '_', '+', ':' or '-', starting with a letter or digit",
    );
    return undefined;
  }
  return v;
}

/** `decodeURIComponent(v)`, or undefined for a malformed escape (no throw from a parser). */
export function decodeOrUndefined(v: string): string | undefined {
  try {
    return decodeURIComponent(v);
  } catch {
    return undefined;
  }
}
