import { describe, expect, it } from "vitest";
import { isTransient } from "../../../../provider/errors";
import {
  formatProviderId,
  InvalidProviderIdError,
  parseProviderId,
} from "../../../../provider/kvm/domain/provider-id";

describe("provider IDs", () => {
  it("formats kvm://<host>/<domain-name>", () => {
    expect(formatProviderId("edge", "web-1")).toBe("kvm://edge/web-1");
  });

  it.each([
    ["edge", "web-1"],
    ["lab_2", "Proxy.A_b-9"],
    ["0", "x"],
    ["h", "a".repeat(63)],
  ])("round-trips host %s and name %s", (host, name) => {
    expect(parseProviderId(formatProviderId(host, name))).toEqual({ host, name });
  });

  it.each([
    ["empty", "", "empty"],
    ["wrong scheme", "libvirt://edge/web-1", "wrong scheme"],
    ["upper-case scheme", "KVM://edge/web-1", "wrong scheme"],
    ["no scheme", "edge/web-1", "wrong scheme"],
    ["missing host", "kvm:///web-1", "missing host"],
    ["missing name", "kvm://edge/", "missing domain name"],
    ["missing slash and name", "kvm://edge", "missing domain name"],
    ["extra path segments", "kvm://edge/web-1/x", "extra path segments"],
    ["trailing slash", "kvm://edge/web-1/", "extra path segments"],
    ["upper-case host", "kvm://Edge/web-1", "host"],
    ["a port", "kvm://edge:22/web-1", "host"],
    ["user info", "kvm://root@edge/web-1", "host"],
    ["a query", "kvm://edge/web-1?x=1", "domain name"],
    ["a fragment", "kvm://edge/web-1#x", "domain name"],
    ["percent-encoding", "kvm://edge/web%2D1", "domain name"],
    ["a space", "kvm://edge/web 1", "domain name"],
    ["a leading dot", "kvm://edge/.web", "domain name"],
    ["a leading dash", "kvm://edge/-web", "domain name"],
    ["a name too long", `kvm://edge/${"a".repeat(64)}`, "domain name"],
    ["a quote", "kvm://edge/web'1", "domain name"],
  ])("rejects an ID with %s", (_, id, reason) => {
    expect(() => parseProviderId(id)).toThrow(InvalidProviderIdError);
    expect(() => parseProviderId(id)).toThrow(reason);
  });

  it.each([undefined, null, 42, {}])("rejects the non-string %j", (id) => {
    expect(() => parseProviderId(id)).toThrow(InvalidProviderIdError);
  });

  // History: a providerID the provider cannot resolve must fail permanently
  // (never retried as if the VM might appear), and must not read as not-found.
  it("fails permanently, naming the ID and the expected form", () => {
    try {
      parseProviderId("kvm://edge");
      expect.unreachable();
    } catch (err) {
      expect(isTransient(err)).toBe(false);
      expect((err as InvalidProviderIdError).id).toBe("kvm://edge");
      expect((err as Error).message).toBe(
        'invalid provider ID "kvm://edge": missing domain name; expected kvm://<host>/<domain-name>',
      );
    }
  });

  it.each([
    ["Edge", "web"],
    ["edge", "web/1"],
    ["edge", ""],
    ["", "web"],
  ])("refuses to format host %j and name %j", (host, name) => {
    expect(() => formatProviderId(host, name)).toThrow(InvalidProviderIdError);
  });
});
