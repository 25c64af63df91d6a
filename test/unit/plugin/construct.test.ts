/**
 * How construct.ts turns a ConstructRequest's deserialized inputs into the
 * fleet's arguments: nested secrets become secret Outputs, a block given as
 * one Output is read field by field, and a count that is not a plain value
 * is refused by name. (The whole Construct runs through the CLI in
 * test/pulumi/plugin-languages.test.ts.)
 */
import * as pulumi from "@pulumi/pulumi";
import { describe, expect, it } from "vitest";
import { fieldsOf, fleetArgs, withSecretOutputs } from "../../../provider/plugin/construct";

/** The engine's secret wrapper as the SDK's rpc module deserializes it. */
const SECRET = Symbol("secret");
const wrapped = (value: unknown) => ({ [SECRET]: true, value });
const isSecret = (x: unknown) => typeof x === "object" && x !== null && SECRET in x;
const unwrap = (x: unknown) => (x as { value: unknown }).value;

/** An Output's value and whether it is secret (test-side read of a resolved Output). */
async function read(o: unknown): Promise<{ value: unknown; secret: boolean }> {
  const out = o as pulumi.Output<unknown> & { promise(): Promise<unknown>; isSecret: Promise<boolean> };
  return { value: await out.promise(), secret: await out.isSecret };
}

describe("withSecretOutputs", () => {
  it("makes a secret nested in a block a secret Output, and leaves the rest as it is", async () => {
    const v = withSecretOutputs(
      { proxy: { auth: { username: "crawler", password: wrapped("pw-1234567890") } }, size: 2 },
      isSecret,
      unwrap,
    ) as { proxy: { auth: { username: string; password: unknown } }; size: number };
    expect(v.size).toBe(2);
    expect(v.proxy.auth.username).toBe("crawler");
    expect(pulumi.Output.isInstance(v.proxy.auth.password)).toBe(true);
    expect(await read(v.proxy.auth.password)).toEqual({ value: "pw-1234567890", secret: true });
  });
});

describe("fieldsOf", () => {
  it("reads a block given as one Output field by field", async () => {
    const block = pulumi.output({ image: "tiny", memoryMiB: 128 });
    const v = fieldsOf(block, ["image", "memoryMiB", "tags"]) as Record<string, unknown>;
    expect(Object.keys(v)).toEqual(["image", "memoryMiB", "tags"]);
    expect((await read(v.image)).value).toBe("tiny");
    expect((await read(v.memoryMiB)).value).toBe(128);
    expect((await read(v.tags)).value).toBeUndefined();
  });

  it("leaves a plain block as it is", () => {
    const block = { image: "tiny" };
    expect(fieldsOf(block, ["image"])).toBe(block);
  });
});

describe("fleetArgs", () => {
  it.each(["size", "rotation"])("refuses %s given as an Output, naming it", (name) => {
    const inputs: Record<string, unknown> = {
      size: 2,
      hosts: ["local"],
      proxy: {},
      [name]: pulumi.output(3),
    };
    expect(() => fleetArgs(inputs, [])).toThrow(new RegExp(`^ProxyFleet: ${name} must be a plain value`));
  });

  it("takes plain counts and a plain rotation as they are", () => {
    const args = fleetArgs(
      { size: 2, hosts: ["local"], proxy: { image: "tiny" }, rotation: { maxAge: "7d" } },
      [],
    );
    expect(args.size).toBe(2);
    expect(args.rotation).toEqual({ maxAge: "7d" });
    expect(args.proxy).toEqual({ image: "tiny" });
    expect(args.memberPasswords).toBeUndefined();
  });
});
