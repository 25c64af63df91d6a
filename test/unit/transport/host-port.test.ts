import { describe, expect, it } from "vitest";
import { hostPort, urlHost } from "../../../provider/transport/host-port";

describe("a host written before a port", () => {
  it.each([
    ["192.0.2.10", "192.0.2.10", "192.0.2.10:3128"],
    ["hv-1.example", "hv-1.example", "hv-1.example:3128"],
    ["2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:3128"],
    ["::1", "[::1]", "[::1]:3128"],
  ])("%s is written %s, and %s with its port", (host, url, target) => {
    expect(urlHost(host)).toBe(url);
    expect(hostPort(host, 3128)).toBe(target);
  });

  it("is read back by the WHATWG URL parser as the same host and port", () => {
    for (const host of ["192.0.2.10", "hv-1.example", "2001:db8::1"]) {
      const u = new URL(`http://${hostPort(host, 8080)}`);
      expect([u.hostname, u.port]).toEqual([urlHost(host), "8080"]);
    }
  });
});
