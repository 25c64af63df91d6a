/**
 * Property values as the engine sends them to a provider plugin that
 * accepts secrets (plain JavaScript, from `google.protobuf.Struct`), and
 * back. Pure.
 *
 * - A secret is `{[SECRET_SIG]: SECRET_VALUE, value}`, at any depth;
 *   `reveal` takes every wrapper off and says which top-level keys held one,
 *   so what was secret going in is secret coming out.
 * - An unknown (preview) is the string UNKNOWN, as in the dynamic provider.
 * - A resource's URN names its stack, project, type and name
 *   (`urn:pulumi:<stack>::<project>::<parent types$>type::<name>`).
 */

import { isPlain as isObject } from "../program/proxy-auth";
import { UNKNOWN } from "../resource/args";

/** The key and value that mark an object as a secret wrapper (Pulumi's resource/sig). */
export const SECRET_SIG = "4dabf18193072939515e22adb298388d";
export const SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270";

export type Props = Record<string, unknown>;

/** True when `v` is a secret wrapper. */
export function isSecret(v: unknown): v is { value: unknown } {
  return isObject(v) && v[SECRET_SIG] === SECRET_VALUE;
}

/** `v` wrapped as a secret (once: a secret stays one wrapper deep). */
export function secret(v: unknown): unknown {
  return isSecret(v) ? v : { [SECRET_SIG]: SECRET_VALUE, value: v };
}

/** `v` without any secret wrapper, at any depth, and whether it held one. */
export function revealValue(v: unknown): { value: unknown; secret: boolean } {
  if (isSecret(v)) return { value: revealValue(v.value).value, secret: true };
  if (Array.isArray(v)) {
    const items = v.map(revealValue);
    return { value: items.map((i) => i.value), secret: items.some((i) => i.secret) };
  }
  if (isObject(v)) {
    let any = false;
    const out: Props = {};
    for (const [k, x] of Object.entries(v)) {
      const r = revealValue(x);
      out[k] = r.value;
      any ||= r.secret;
    }
    return { value: out, secret: any };
  }
  return { value: v, secret: false };
}

/** `props` without secret wrappers, and the top-level keys whose value held one. */
export function reveal(props: Props | undefined): { props: Props; secretKeys: Set<string> } {
  const out: Props = {};
  const secretKeys = new Set<string>();
  for (const [k, v] of Object.entries(props ?? {})) {
    const r = revealValue(v);
    out[k] = r.value;
    if (r.secret) secretKeys.add(k);
  }
  return { props: out, secretKeys };
}

/** `props` with the values of `keys` (those present and not unknown) wrapped as secrets. */
export function conceal(props: Props, keys: Iterable<string>): Props {
  const out: Props = { ...props };
  for (const k of keys) {
    const v = out[k];
    if (v !== undefined && v !== null && v !== UNKNOWN) out[k] = secret(v);
  }
  return out;
}

/** What a URN names; undefined when it is not a Pulumi URN. */
export interface UrnParts {
  stack: string;
  project: string;
  /** The resource's own type token (the last of `parent$child`). */
  type: string;
  name: string;
}

export function parseUrn(urn: string): UrnParts | undefined {
  const m = /^urn:pulumi:([^:]+)::([^:]+)::(.+?)::(.+)$/s.exec(urn);
  if (m === null) return undefined;
  const types = (m[3] as string).split("$");
  return {
    stack: m[1] as string,
    project: m[2] as string,
    type: types[types.length - 1] as string,
    name: m[4] as string,
  };
}

/** The owner record check keeps (`{project, stack, urn, resource}`), from the resource's URN. */
export function ownerOfUrn(urn: string): Props | undefined {
  const p = parseUrn(urn);
  return p === undefined ? undefined : { project: p.project, stack: p.stack, urn, resource: p.name };
}
