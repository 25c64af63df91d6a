/**
 * Property values between the engine and the plugin: secret wrappers taken
 * off and put back, unknowns left alone, the owner read from a URN.
 */
import { describe, expect, it } from "vitest";
import {
  conceal,
  isSecret,
  ownerOfUrn,
  parseUrn,
  reveal,
  SECRET_SIG,
  SECRET_VALUE,
  secret,
} from "../../../provider/plugin/property-values";
import { UNKNOWN } from "../../../provider/resource/args";

const wrapped = (value: unknown) => ({ [SECRET_SIG]: SECRET_VALUE, value });

describe("reveal", () => {
  it.each([
    ["a plain value", { a: 1 }, { a: 1 }, []],
    ["a top-level secret", { a: wrapped("s") }, { a: "s" }, ["a"]],
    ["a secret inside an object", { a: { b: wrapped("s"), c: 2 } }, { a: { b: "s", c: 2 } }, ["a"]],
    ["a secret inside an array", { a: [1, wrapped({ x: 1 })] }, { a: [1, { x: 1 }] }, ["a"]],
    ["a secret wrapping a secret", { a: wrapped(wrapped("s")) }, { a: "s" }, ["a"]],
  ])("takes off %s and names its key", (_what, given, props, keys) => {
    const r = reveal(given);
    expect(r.props).toEqual(props);
    expect([...r.secretKeys].sort()).toEqual(keys);
  });

  it("takes nothing as a secret that only looks like one", () => {
    const r = reveal({ a: { [SECRET_SIG]: "something else", value: 1 } });
    expect(r.secretKeys.size).toBe(0);
  });
});

describe("conceal", () => {
  it("wraps the keys named, once, and leaves absent and unknown values", () => {
    const out = conceal({ a: "x", b: wrapped("y"), c: UNKNOWN, e: 1 }, ["a", "b", "c", "d"]);
    expect(out).toEqual({ a: wrapped("x"), b: wrapped("y"), c: UNKNOWN, e: 1 });
    expect(isSecret(out.a)).toBe(true);
    expect(secret(out.a)).toBe(out.a);
  });
});

describe("URNs", () => {
  it.each([
    [
      "urn:pulumi:dev::proj::kvmproxy:index:KvmProxy::edge-1",
      { stack: "dev", project: "proj", type: "kvmproxy:index:KvmProxy", name: "edge-1" },
    ],
    [
      "urn:pulumi:dev::proj::kvmproxy:index:ProxyFleet$kvmproxy:index:KvmProxy::f-0",
      { stack: "dev", project: "proj", type: "kvmproxy:index:KvmProxy", name: "f-0" },
    ],
    [
      "urn:pulumi:dev::proj::a:b:C::name::with::colons",
      { stack: "dev", project: "proj", type: "a:b:C", name: "name::with::colons" },
    ],
  ])("reads %s", (urn, parts) => {
    expect(parseUrn(urn)).toEqual(parts);
  });

  it("names the owner a URN gives, and none for text that is no URN", () => {
    const urn = "urn:pulumi:dev::proj::kvmproxy:index:KvmProxy::edge-1";
    expect(ownerOfUrn(urn)).toEqual({ project: "proj", stack: "dev", urn, resource: "edge-1" });
    expect(ownerOfUrn("edge-1")).toBeUndefined();
  });
});
