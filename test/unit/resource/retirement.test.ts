import { describe, expect, it } from "vitest";
import { decodeState } from "../../../provider/resource/recorded-state";
import {
  addressesHeld,
  blockedNow,
  holdsAgainWhenReplaced,
  parseBlockedAddresses,
  parseRetirements,
  retiredNow,
} from "../../../provider/resource/retirement";
import { readStackConfig } from "../../../provider/resource/stack-config";

const NOW = Date.parse("2026-12-07T12:00:00Z");

describe("kvm:retire", () => {
  it("keeps each entry by resource name, its time as epoch ms", () => {
    expect(
      parseRetirements(
        { "edge-2": { reason: "blocked by example.com", before: "2026-12-07T11:00:00Z" } },
        "kvm:retire",
        NOW,
      ),
    ).toEqual({
      values: { "edge-2": { reason: "blocked by example.com", before: Date.parse("2026-12-07T11:00:00Z") } },
      failures: [],
    });
  });

  it.each([
    ["2026-12-07 10:30:00 +0000 UTC", "2026-12-07T10:30:00Z"],
    ["2026-12-07 11:30:00.125 +0100 CET", "2026-12-07T10:30:00.125Z"],
    ["2026-12-07 00:00:00 +0000 UTC", "2026-12-07T00:00:00Z"],
  ])("reads %s, an unquoted YAML time as Go gives it, as %s", (given, iso) => {
    const r = parseRetirements({ a: { reason: "r", before: given } }, "kvm:retire", NOW);
    expect(r.failures).toEqual([]);
    expect(r.values.a?.before).toBe(Date.parse(iso));
  });

  it.each<[string, unknown, string, RegExp]>([
    ["not an object", ["edge-2"], "kvm:retire", /must be an object/],
    ["an entry not an object", { a: "now" }, "kvm:retire.a", /must be \{reason, before\}/],
    ["no reason", { a: { before: "2026-12-07T11:00:00Z" } }, "kvm:retire.a.reason", /non-empty string/],
    [
      "a blank reason",
      { a: { reason: "  ", before: "2026-12-07T11:00:00Z" } },
      "kvm:retire.a.reason",
      /non-empty/,
    ],
    [
      "a reason of two lines",
      { a: { reason: "x\ny", before: "2026-12-07T11:00:00Z" } },
      "kvm:retire.a.reason",
      /one line/,
    ],
    ...[
      ["a bidirectional override", "\u202egnp.exe"],
      ["a C1 control", "next\u0085line"],
      ["a zero-width space", "edge\u200b-2"],
      ["a line separator", "x\u2028y"],
    ].map(([what, reason]): [string, unknown, string, RegExp] => [
      `a reason with ${what}`,
      { a: { reason, before: "2026-12-07T11:00:00Z" } },
      "kvm:retire.a.reason",
      /one line without control, format or bidirectional/,
    ]),
    [
      "a reason too long",
      { a: { reason: "x".repeat(201), before: "2026-12-07T11:00:00Z" } },
      "kvm:retire.a.reason",
      /at most 200/,
    ],
    ["no before", { a: { reason: "r" } }, "kvm:retire.a.before", /must be a time/],
    [
      "a before that is no time",
      { a: { reason: "r", before: "yesterday" } },
      "kvm:retire.a.before",
      /must be a time/,
    ],
    [
      "Go's form without its offset",
      { a: { reason: "r", before: "2026-12-07 10:30:00 UTC" } },
      "kvm:retire.a.before",
      /must be a time/,
    ],
    [
      "a date without a zone",
      { a: { reason: "r", before: "2026-12-07T11:00:00" } },
      "kvm:retire.a.before",
      /must be a time/,
    ],
    [
      "a before in the future",
      { a: { reason: "r", before: "2026-12-08T12:00:00Z" } },
      "kvm:retire.a.before",
      /not be in the future/,
    ],
    [
      "a misspelt field",
      { a: { reason: "r", before: "2026-12-07T11:00:00Z", untill: "x" } },
      "kvm:retire.a.untill",
      /unknown property/,
    ],
  ])("refuses %s, naming it", (_what, raw, property, reason) => {
    const r = parseRetirements(raw, "kvm:retire", NOW);
    expect(r.failures).toHaveLength(1);
    expect(r.failures[0]?.property).toBe(property);
    expect(r.failures[0]?.reason).toMatch(reason);
  });
});

describe("kvm:blockedAddresses", () => {
  it("keeps each entry by canonical address", () => {
    expect(
      parseBlockedAddresses(
        {
          "2001:DB8:0::61": { reason: "403s", since: "2026-12-07T11:00:00Z", until: "2026-12-14T12:00:00Z" },
        },
        "kvm:blockedAddresses",
        NOW,
      ),
    ).toEqual({
      values: {
        "2001:db8::61": {
          reason: "403s",
          until: Date.parse("2026-12-14T12:00:00Z"),
          since: Date.parse("2026-12-07T11:00:00Z"),
        },
      },
      failures: [],
    });
  });

  it.each<[string, unknown, string, RegExp]>([
    [
      "a key that is no address",
      { "edge-2": { reason: "r", until: "2026-12-14T12:00:00Z" } },
      "kvm:blockedAddresses.edge-2",
      /not an IPv4 or IPv6/,
    ],
    [
      "a CIDR",
      { "192.0.2.0/24": { reason: "r", until: "2026-12-14T12:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.0/24",
      /not an IPv4/,
    ],
    [
      "no until",
      { "192.0.2.61": { reason: "r", since: "2026-12-07T11:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.61.until",
      /must be a time/,
    ],
    [
      "no reason",
      { "192.0.2.61": { since: "2026-12-07T11:00:00Z", until: "2026-12-14T12:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.61.reason",
      /non-empty/,
    ],
    [
      "a since in the future",
      { "192.0.2.61": { reason: "r", since: "2026-12-08T12:00:00Z", until: "2026-12-14T12:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.61.since",
      /not be in the future/,
    ],
    [
      "an until before its since",
      { "192.0.2.61": { reason: "r", since: "2026-12-07T11:00:00Z", until: "2026-12-07T10:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.61.until",
      /not be before since/,
    ],
    [
      "no since",
      { "192.0.2.61": { reason: "r", until: "2026-12-14T12:00:00Z" } },
      "kvm:blockedAddresses.192.0.2.61.since",
      /when it was blocked/,
    ],
  ])("refuses %s, naming it", (_what, raw, property, reason) => {
    const r = parseBlockedAddresses(raw, "kvm:blockedAddresses", NOW);
    expect(r.failures[0]?.property).toBe(property);
    expect(r.failures[0]?.reason).toMatch(reason);
  });

  it("only entries not yet over are blocked now", () => {
    expect(
      blockedNow(
        {
          "192.0.2.61": { reason: "a", until: NOW + 1, since: NOW - 1 },
          "192.0.2.62": { reason: "b", until: NOW, since: NOW - 1 },
        },
        NOW,
      ),
    ).toEqual(["192.0.2.61"]);
  });
});

describe("read with the rest of the stack config", () => {
  it("a bad entry is a general failure: every proxy's check names it, nothing is created", () => {
    const config = readStackConfig(
      (k) =>
        ({
          "kvm:retire": JSON.stringify({ a: { reason: "r", before: "soon" } }),
          "kvm:blockedAddresses": { x: {} },
        })[k],
      NOW,
    );
    expect(config.general.map((f) => f.property)).toEqual(["kvm:retire.a.before", "kvm:blockedAddresses.x"]);
  });
});

describe("replaced at this up on demand", () => {
  const state = (s: Record<string, unknown>) =>
    decodeState({
      name: "edge-2",
      createdAt: "2026-12-07T10:00:00.000Z",
      nics: [
        {
          bridge: "br0",
          addresses: ["192.0.2.61/24"],
          addressPool: { ranges: ["192.0.2.60-192.0.2.64/24"] },
        },
      ],
      ...s,
    });
  const retire = {
    "edge-2": { reason: "blocked by example.com", before: Date.parse("2026-12-07T11:00:00Z") },
  };
  const blocked = {
    "192.0.2.61": { reason: "403s", until: NOW + 3_600_000, since: Date.parse("2026-12-07T11:00:00Z") },
  };

  it.each<[string, Record<string, unknown>, string, object, object, string | undefined]>([
    ["a retirement of its name made after its VM", {}, "edge-2", retire, {}, "retire"],
    [
      "its replacement, made after the retirement",
      { createdAt: "2026-12-07T11:30:00.000Z" },
      "edge-2",
      retire,
      {},
      undefined,
    ],
    ["another proxy's retirement", {}, "edge-1", retire, {}, undefined],
    ["its NIC's address blocked", {}, "edge-2", {}, blocked, "blockedAddresses"],
    [
      "its egress address blocked",
      { nics: [], egressAddress: "192.0.2.61" },
      "edge-2",
      {},
      blocked,
      "blockedAddresses",
    ],
    [
      "its replacement, made after the block, holding the address again (a static address): not replaced again",
      { createdAt: "2026-12-07T11:30:00.000Z" },
      "edge-2",
      {},
      blocked,
      undefined,
    ],
    [
      "a block that is over",
      {},
      "edge-2",
      {},
      { "192.0.2.61": { reason: "r", until: NOW, since: Date.parse("2026-12-07T11:00:00Z") } },
      undefined,
    ],
    ["another address blocked", {}, "edge-2", {}, { "192.0.2.62": blocked["192.0.2.61"] }, undefined],
  ])("%s", (_what, s, name, r, b, key) => {
    expect(retiredNow(state(s), name, r as never, b as never, NOW)?.key).toBe(key);
  });

  it("says why, naming the config", () => {
    expect(retiredNow(state({}), "edge-2", retire, {}, NOW)?.note).toBe(
      "replacing: retired (kvm:retire.edge-2): blocked by example.com",
    );
    expect(retiredNow(state({}), "edge-2", {}, blocked, NOW)?.note).toBe(
      `replacing: its address 192.0.2.61 is blocked until ${new Date(NOW + 3_600_000).toISOString()} (kvm:blockedAddresses): 403s`,
    );
  });

  it.each<[string, Record<string, unknown>, boolean]>([
    ["a pool's address: the replacement takes another", {}, false],
    ["a static NIC address", { nics: [{ bridge: "br0", addresses: ["192.0.2.61/24"] }] }, true],
    [
      "its outgoing address",
      { proxy: { port: 3128, allowedClients: [], allowedDestinations: [], outgoingAddress: "192.0.2.61" } },
      true,
    ],
    ["an egress address on no NIC of its own (NAT)", { nics: [], egressAddress: "192.0.2.61" }, true],
    [
      "a DHCP lease of the MAC the user gave",
      {
        nics: [{ bridge: "br0", addresses: [], macAddress: "52:54:00:aa:00:01", mac: "52:54:00:aa:00:01" }],
        ipAddresses: [{ mac: "52:54:00:aa:00:01", addresses: ["192.0.2.61/24"] }],
      },
      true,
    ],
    [
      "a DHCP lease of a MAC derived from its generated name (a replacement has another)",
      {
        nics: [{ bridge: "br0", addresses: [], mac: "52:54:00:aa:00:02" }],
        ipAddresses: [{ mac: "52:54:00:aa:00:02", addresses: ["192.0.2.61/24"] }],
      },
      false,
    ],
    ["an address it does not hold", { nics: [] }, false],
  ])("a replacement holds the blocked address again when it is %s", (_what, s, again) => {
    expect(holdsAgainWhenReplaced(state(s), "192.0.2.61")).toBe(again);
  });

  it("the addresses a VM holds: its NICs', the guest's, its egress and outgoing addresses, canonical and once", () => {
    expect(
      addressesHeld(
        state({
          ipAddresses: [{ mac: "52:54:00:00:00:01", addresses: ["192.0.2.61/24", "2001:DB8::61/64"] }],
          egressAddress: "203.0.113.7",
          proxy: { port: 3128, allowedClients: [], allowedDestinations: [], outgoingAddress: "192.0.2.61" },
        }),
      ),
    ).toEqual(["192.0.2.61", "2001:db8::61", "203.0.113.7"]);
  });
});
