import { describe, expect, it } from "vitest";
import { isTransient, ProviderError } from "../../../provider/errors";
import { Failures, ValidationError } from "../../../provider/kvm/validation";

describe("ValidationError", () => {
  it("is a permanent ProviderError carrying every failure", () => {
    const err = new ValidationError([
      { property: "memoryMiB", reason: "too small" },
      { property: "hosts.edge.uri", reason: "is required" },
    ]);
    expect(err).toBeInstanceOf(ProviderError);
    expect(isTransient(err)).toBe(false);
    expect(err.name).toBe("ValidationError");
    expect(err.failures).toHaveLength(2);
    expect(err.message).toBe("invalid input: memoryMiB: too small; hosts.edge.uri: is required");
  });
});

describe("Failures", () => {
  it("prefixes property paths", () => {
    const f = new Failures();
    f.at("hosts").at("edge").fail("uri", "bad");
    f.fail("memoryMiB", "small");
    f.at("images.debian").fail(undefined, "must be an object");
    expect(f.list).toEqual([
      { property: "hosts.edge.uri", reason: "bad" },
      { property: "memoryMiB", reason: "small" },
      { property: "images.debian", reason: "must be an object" },
    ]);
  });

  it("throws only when something failed", () => {
    const f = new Failures();
    expect(() => f.throwIfAny()).not.toThrow();
    f.fail("x", "y");
    expect(() => f.throwIfAny("invalid spec")).toThrow("invalid spec: x: y");
  });
});
