import { describe, expect, it } from "vitest";
import { isTransient, ProviderError, TimeoutError } from "../../provider/errors";

describe("error classes", () => {
  it.each([
    [new ProviderError("transient", "x"), true],
    [new ProviderError("permanent", "x"), false],
    [new TimeoutError("reply to virDomainCreate", 5), true],
    [new Error("plain"), false],
    ["a string", false],
  ])("isTransient(%o) is %s", (err, expected) => {
    expect(isTransient(err)).toBe(expected);
  });

  it("a timeout names what it waited for", () => {
    expect(new TimeoutError("an IP address for kvmp-a", 1500).message).toBe(
      "timed out after 1500 ms waiting for an IP address for kvmp-a",
    );
  });
});
