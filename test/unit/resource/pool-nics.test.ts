/**
 * A pool NIC in the resource layer: the state records the address its VM
 * was made with, squid's configuration (and the name it gives squid, which
 * the health check compares) never depends on it, and a fleet whose pool
 * is too small is refused in the program at preview.
 */
import { describe, expect, it } from "vitest";
import type { NicSpec } from "../../../provider/kvm/network/nic";
import { squidName } from "../../../provider/kvm/proxy/setup";
import { poolRoomProblem } from "../../../provider/program/proxy-fleet";
import type { CheckedInputs } from "../../../provider/resource/args";
import { squidConfOf, withPoolAddresses } from "../../../provider/resource/mapping";

const POOL = { ranges: ["203.0.113.10-203.0.113.14/24"] };
const poolNic: NicSpec = {
  bridge: "br-public",
  mac: "52:54:00:00:00:01",
  addresses: [],
  addressPool: POOL,
  gateway4: "203.0.113.1",
  nameservers: [],
  primary: true,
};
const staticNic: NicSpec = {
  network: "default",
  mac: "52:54:00:00:00:02",
  addresses: ["192.168.1.5/24"],
  nameservers: [],
  primary: false,
};
const checked = { proxyPort: 3128, nics: [poolNic, staticNic] } as unknown as CheckedInputs;

describe("a pool NIC's address in the resource layer", () => {
  it("is filled in from the NICs the VM was made with (or the state's), by position; other NICs stay as checked", () => {
    const made = withPoolAddresses(checked, [
      { ...poolNic, addresses: ["203.0.113.12/24"] },
      { ...staticNic, addresses: ["10.0.0.9/8"] },
    ]);
    expect(made.nics).toEqual([{ ...poolNic, addresses: ["203.0.113.12/24"] }, staticNic]);
    expect(withPoolAddresses(checked, undefined)).toBe(checked);
  });

  it.each<[string, unknown]>([
    ["an address the pool does not hold", ["198.51.100.7/24"]],
    ["a text where the list was", "203.0.113.12/24"],
    ["an address without its prefix", ["203.0.113.12"]],
    ["a number", [7]],
  ])("is left out when the state records %s: nothing unchecked reaches the VM's NICs", (_, recorded) => {
    const made = withPoolAddresses(checked, [{ ...poolNic, addresses: recorded as string[] }]);
    expect(made.nics?.[0]).toEqual(poolNic);
  });

  it("never enters squid.conf: its name is the same before the address is taken and after", () => {
    const before = squidConfOf(checked);
    const after = squidConfOf(withPoolAddresses(checked, [{ ...poolNic, addresses: ["203.0.113.12/24"] }]));
    expect(after).toEqual(before);
    expect(squidName(after)).toBe(squidName(before));
    // The static NIC's address and subnet are in it, the pool NIC's gateway too.
    expect(before.ownAddresses).toEqual(["192.168.1.5"]);
    expect(before.onLink).toEqual(["192.168.1.0/24", "203.0.113.1"]);
  });
});

describe("a fleet's pool room, judged in the program", () => {
  const nics = [{ bridge: "br-public", addressPool: POOL }];
  it.each<[string, unknown, number, number, RegExp | undefined]>([
    ["5 addresses for 4 members and a batch of 1", nics, 4, 1, undefined],
    [
      "5 addresses for 4 members and a batch of 2",
      nics,
      4,
      2,
      /nics\[0\]\.addressPool holds 5 addresses per family; 4 members and a batch of 2 replacements need 6/,
    ],
    ["NICs not known yet (an Output)", undefined, 40, 1, undefined],
    ["a NIC without a pool", [{ network: "default" }], 40, 1, undefined],
  ])("%s", (_what, n, size, batch, problem) => {
    const r = poolRoomProblem(n, size, batch);
    if (problem === undefined) expect(r).toBeUndefined();
    else expect(r).toMatch(problem);
  });
});
