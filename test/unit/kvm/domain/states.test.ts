import { describe, expect, it } from "vitest";
import {
  firstRoutableIpv4,
  isRoutableIpv4,
  mapDomainState,
  ShutoffReason,
} from "../../../../provider/kvm/domain/states";
import { DomainState } from "../../../../provider/libvirt/constants";
import type { DomainInterface } from "../../../../provider/libvirt/types";

describe("mapDomainState", () => {
  const IP = "192.168.213.20";
  it.each([
    ["no domain", undefined, undefined, "absent"],
    ["running, no IP yet", { state: DomainState.RUNNING, reason: 1 }, undefined, "provisioning"],
    ["running with an IP", { state: DomainState.RUNNING, reason: 1 }, IP, "running"],
    ["blocked (running, idle vCPU) with an IP", { state: DomainState.BLOCKED, reason: 0 }, IP, "running"],
    ["nostate while starting", { state: DomainState.NOSTATE, reason: 0 }, undefined, "provisioning"],
    [
      "shut off by the user",
      { state: DomainState.SHUTOFF, reason: ShutoffReason.SHUTDOWN },
      undefined,
      "stopped",
    ],
    ["destroyed", { state: DomainState.SHUTOFF, reason: ShutoffReason.DESTROYED }, undefined, "stopped"],
    ["never started", { state: DomainState.SHUTOFF, reason: ShutoffReason.UNKNOWN }, undefined, "stopped"],
    [
      "shut off after QEMU crashed",
      { state: DomainState.SHUTOFF, reason: ShutoffReason.CRASHED },
      undefined,
      "failed",
    ],
    [
      "shut off after a failed start",
      { state: DomainState.SHUTOFF, reason: ShutoffReason.FAILED },
      undefined,
      "failed",
    ],
    ["crashed", { state: DomainState.CRASHED, reason: 1 }, undefined, "failed"],
    ["crashed, stale IP", { state: DomainState.CRASHED, reason: 1 }, IP, "failed"],
    ["paused", { state: DomainState.PAUSED, reason: 1 }, undefined, "stopped"],
    ["shutting down", { state: DomainState.SHUTDOWN, reason: 1 }, IP, "stopped"],
    ["suspended to RAM", { state: DomainState.PMSUSPENDED, reason: 0 }, undefined, "stopped"],
    ["a state newer than this table", { state: 99, reason: 0 }, undefined, "failed"],
  ])("%s → %s", (_what, libvirt, ip, expected) => {
    expect(mapDomainState(libvirt, ip)).toBe(expected);
  });
});

describe("isRoutableIpv4", () => {
  it.each([
    ["192.168.213.20", true],
    ["10.0.0.1", true],
    ["172.17.0.1", true],
    ["127.0.0.1", false],
    ["127.1.2.3", false],
    ["169.254.1.1", false],
    ["0.0.0.0", false],
    ["224.0.0.1", false],
    ["255.255.255.255", false],
    ["256.1.1.1", false],
    ["fe80::1", false],
    ["not an address", false],
  ])("%s → %s", (addr, ok) => {
    expect(isRoutableIpv4(addr)).toBe(ok);
  });
});

describe("firstRoutableIpv4", () => {
  const ifaces: DomainInterface[] = [
    { name: "lo", hwaddr: "00:00:00:00:00:00", addrs: [{ type: 0, addr: "127.0.0.1", prefix: 8 }] },
    {
      name: "docker0",
      hwaddr: "02:42:00:00:00:01",
      addrs: [{ type: 0, addr: "172.17.0.1", prefix: 16 }],
    },
    {
      name: "enp1s0",
      hwaddr: "52:54:00:aa:bb:cc",
      addrs: [
        { type: 1, addr: "fe80::5054:ff:feaa:bbcc", prefix: 64 },
        { type: 0, addr: "169.254.3.4", prefix: 16 },
        { type: 0, addr: "192.168.213.20", prefix: 24 },
      ],
    },
  ];

  it("prefers the interface with the domain's MAC, skipping loopback, link-local and IPv6", () => {
    expect(firstRoutableIpv4(ifaces, "52:54:00:aa:bb:cc")).toBe("192.168.213.20");
  });

  it("takes the first routable address of any interface without a MAC to match", () => {
    expect(firstRoutableIpv4(ifaces)).toBe("172.17.0.1");
  });

  it("is undefined when nothing routable is reported", () => {
    expect(firstRoutableIpv4([ifaces[0] as DomainInterface])).toBeUndefined();
    expect(firstRoutableIpv4([])).toBeUndefined();
  });
});
