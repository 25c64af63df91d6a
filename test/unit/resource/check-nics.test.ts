import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import type { HostConfig } from "../../../provider/kvm/config/host-config";
import { seedFiles } from "../../../provider/kvm/guest/seed";
import { checkInputs } from "../../../provider/resource/check";
import { outgoingAddressProblem, unreachableAddressWarning } from "../../../provider/resource/check-nics";
import { decodeChecked } from "../../../provider/resource/checked-inputs";
import { createSpec, vmNicsOf } from "../../../provider/resource/mapping";
import { readStackConfig } from "../../../provider/resource/stack-config";
import { BAD_INPUT_CONFIG } from "../../support/bad-inputs";

const config = readStackConfig((k) => BAD_INPUT_CONFIG[k]);
const owner = (resource: string) => ({
  project: "p",
  stack: "s",
  urn: `urn:pulumi:s::p::KvmProxy::${resource}`,
  resource,
});
const STATIC = { bridge: "br0", addresses: ["203.0.113.7/24", "2001:db8::7/64"], gateway4: "203.0.113.1" };

let n = 0;
function check(news: Record<string, unknown>, olds: Record<string, unknown> = {}, extra = {}) {
  return checkInputs(
    olds,
    { host: "lab", image: "debian", owner: owner("edge"), ...news },
    { config, randomBytes: (k) => new Uint8Array(k).fill(++n), ...extra },
  );
}

describe("nics at check", () => {
  it("gives each NIC without a MAC a stable derived one, kept across previews and ups", () => {
    const first = check({ nics: [STATIC, { network: "default" }] });
    expect(first.failures).toEqual([]);
    const again = check({ nics: [STATIC, { network: "default" }] }, first.inputs);
    const macs = (r: typeof first) => (r.inputs.nics as { mac: string }[]).map((x) => x.mac);
    expect(macs(again)).toEqual(macs(first));
    expect(new Set(macs(first)).size).toBe(2);
    for (const m of macs(first)) expect(m).toMatch(/^52:54:00(:[0-9a-f]{2}){3}$/);
  });

  it("derives other MACs for a new autoname (a replacement), so old and new VM can run side by side", () => {
    const first = check({ nics: [STATIC] });
    const replacement = check({ nics: [STATIC] }); // no olds: the engine's re-check before a replace
    expect(replacement.inputs.name).not.toBe(first.inputs.name);
    expect((replacement.inputs.nics as { mac: string }[])[0]?.mac).not.toBe(
      (first.inputs.nics as { mac: string }[])[0]?.mac,
    );
  });

  it("keeps a given MAC, lower case, and records that it was given", () => {
    const r = check({ nics: [{ network: "default", macAddress: "52:54:00:AA:BB:CC" }] });
    expect(r.inputs.nics).toMatchObject([{ mac: "52:54:00:aa:bb:cc", macAddress: "52:54:00:aa:bb:cc" }]);
  });

  it("refuses a static address another proxy of the program has on the same host, naming it", () => {
    const claims = new Map<string, string>();
    const claimAddress = (host: string, address: string, who: string) => {
      const k = `${host}/${address}`;
      const first = claims.get(k);
      if (first !== undefined && first !== who) return first;
      claims.set(k, who);
      return undefined;
    };
    expect(check({ nics: [STATIC] }, {}, { claimAddress }).failures).toEqual([]);
    const other = check(
      {
        owner: owner("edge-2"),
        nics: [{ bridge: "br0", addresses: ["203.0.113.9/24", "2001:db8::7/48"] }],
      },
      {},
      { claimAddress },
    );
    expect(other.failures).toEqual([
      {
        property: "nics[0].addresses[1]",
        reason: 'IPv6 address 2001:db8::7 is also given to "edge" on host lab',
      },
    ]);
    // The same proxy checked again (preview, then up) claims its own addresses again without failing.
    expect(check({ nics: [STATIC] }, {}, { claimAddress }).failures).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, string]>([
    [
      "in nics (a fleet whose template fixes one)",
      { nics: [{ network: "default", macAddress: "52:54:00:aa:bb:cc" }] },
      "nics[0].macAddress",
    ],
    ["as the shorthand", { macAddress: "52:54:00:aa:bb:cc" }, "macAddress"],
  ])("refuses a fixed MAC another proxy of the program has, %s", (_what, news, property) => {
    const claims = new Map<string, string>();
    const claimAddress = (host: string, key: string, who: string) => {
      const first = claims.get(`${host}/${key}`);
      if (first !== undefined && first !== who) return first;
      claims.set(`${host}/${key}`, who);
      return undefined;
    };
    const pool = { host: { pool: ["lab", "remote"] } };
    expect(check({ ...news, ...pool, owner: owner("crawl-0") }, {}, { claimAddress }).failures).toEqual([]);
    expect(check({ ...news, ...pool, owner: owner("crawl-1") }, {}, { claimAddress }).failures).toEqual([
      {
        property,
        reason:
          'MAC 52:54:00:aa:bb:cc is also given to "crawl-0" on host lab: two VMs on one network cannot share it',
      },
    ]);
  });
});

/** The network-config file of the seed create builds for `inputs` (checked), as text, or undefined. */
function seedNetworkConfig(inputs: Record<string, unknown>): string | undefined {
  const file = seedFiles(createSpec(decodeChecked(inputs))).networkConfig;
  return file === undefined ? undefined : file.toString();
}

describe("the seed's network-config", () => {
  it("is built from typed static addresses and matches each NIC by its MAC", () => {
    const r = check({ nics: [STATIC, { network: "default" }] });
    const nics = r.inputs.nics as { mac: string }[];
    const doc = parse(seedNetworkConfig(r.inputs) as string);
    expect(doc.version).toBe(2);
    const ethernets = Object.values(doc.ethernets) as {
      match: { macaddress: string };
      addresses?: string[];
      dhcp4?: boolean;
    }[];
    expect(ethernets.map((e) => e.match.macaddress)).toEqual(nics.map((n) => n.mac));
    expect(ethernets[0]?.addresses).toEqual(["203.0.113.7/24", "2001:db8::7/64"]);
    expect(ethernets[1]?.dhcp4).toBe(true);
  });

  it("is the raw networkConfig byte for byte when given", () => {
    const raw = "version: 2\nethernets:\n  x: {match: {name: 'e*'}, dhcp4: true}\n";
    expect(seedNetworkConfig(check({ networkConfig: raw }).inputs)).toBe(raw);
  });

  it("is absent for one plain DHCP NIC (the image's own configuration serves it)", () => {
    expect(seedNetworkConfig(check({ nics: [{ network: "default" }] }).inputs)).toBeUndefined();
  });
});

describe("proxy.outgoingAddress against the NICs", () => {
  const V6 = { bridge: "br1", addresses: ["2001:db8:1::9/64"] };
  const POOL = { bridge: "br2", addressPool: { ranges: ["198.51.100.10-198.51.100.40/24"] } };
  const failuresOf = (news: Record<string, unknown>) =>
    check(news).failures.filter((x) => x.property === "proxy.outgoingAddress");

  it.each<[string, Record<string, unknown>]>([
    ["one of the static IPv4 addresses", { nics: [STATIC], proxy: { outgoingAddress: "203.0.113.7" } }],
    ["one of the static IPv6 addresses", { nics: [STATIC], proxy: { outgoingAddress: "2001:db8::7" } }],
    [
      "an IPv4 while another NIC gets IPv4 by DHCP",
      { nics: [STATIC, { network: "default" }], proxy: { outgoingAddress: "192.168.1.5" } },
    ],
    [
      "an IPv6 while a NIC has no static IPv6",
      { nics: [STATIC, { network: "default" }], proxy: { outgoingAddress: "2001:db8:9::1" } },
    ],
    ["any address without nics (one DHCP NIC)", { proxy: { outgoingAddress: "198.51.100.7" } }],
    ["an IPv4 a pool NIC's range holds", { nics: [POOL], proxy: { outgoingAddress: "198.51.100.40" } }],
    [
      "an IPv6 while the pool NIC has no IPv6 range (router advertisements give one)",
      { nics: [POOL], proxy: { outgoingAddress: "2001:db8:9::1" } },
    ],
  ])("accepts %s", (_what, news) => {
    expect(failuresOf(news)).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    [
      "an IPv4 no NIC has, all IPv4 static",
      { nics: [STATIC], proxy: { outgoingAddress: "203.0.113.8" } },
      /IPv4 addresses.*\(203\.0\.113\.7\)/,
    ],
    [
      "an IPv6 no NIC has, all IPv6 static",
      { nics: [STATIC, V6], proxy: { outgoingAddress: "2001:db8::8" } },
      /IPv6 addresses.*\(2001:db8::7, 2001:db8:1::9\)/,
    ],
    [
      "an IPv4 outside the pool NIC's ranges",
      { nics: [POOL], proxy: { outgoingAddress: "198.51.100.41" } },
      /IPv4 addresses.*static or from an address pool here \(198\.51\.100\.10-198\.51\.100\.40\/24\)/,
    ],
    [
      "an IPv4 neither a static NIC nor a pool NIC has",
      { nics: [STATIC, POOL], proxy: { outgoingAddress: "198.51.100.9" } },
      /IPv4 addresses.*\(203\.0\.113\.7, 198\.51\.100\.10-198\.51\.100\.40\/24\)/,
    ],
    [
      "a NIC's gateway, while another NIC gets IPv4 by DHCP",
      { nics: [STATIC, { network: "default" }], proxy: { outgoingAddress: "203.0.113.1" } },
      /must be an address of the VM: is the gateway 203\.0\.113\.1 \(nics\[0\]\.gateway4\)/,
    ],
    [
      "a link-local address (no VM egresses from one)",
      { proxy: { outgoingAddress: "169.254.169.254" } },
      /must be an address of the VM: is a link-local address/,
    ],
  ])("refuses %s, naming the addresses it may be", (_what, news, reason) => {
    expect(failuresOf(news)).toEqual([
      { property: "proxy.outgoingAddress", reason: expect.stringMatching(reason) },
    ]);
  });

  it("does not judge a raw networkConfig (it is not read)", () => {
    const nic = { ...STATIC, mac: "52:54:00:00:00:01", nameservers: [], primary: true };
    expect(
      outgoingAddressProblem("198.51.100.1", { nics: [nic], networkConfig: "version: 2\n" }),
    ).toBeUndefined();
    expect(outgoingAddressProblem("198.51.100.1", { nics: [nic] })).toMatch(/IPv4/);
  });
});

describe("preview's warning of an address only the host reaches", () => {
  const remote = config.hosts.remote as HostConfig;
  const local = config.hosts.lab as HostConfig;
  const onBridge: HostConfig = { ...remote, nic: { kind: "bridge", bridge: "br0" } };
  it.each<[string, HostConfig, Record<string, unknown>, boolean]>([
    ["an ssh host's own network (the shorthand)", remote, {}, true],
    ["a network named on an ssh host", remote, { network: "lan" }, true],
    ["a network NIC of nics on an ssh host", remote, { nics: [{ network: "lan" }] }, true],
    ["a local host's network (this machine is the host)", local, {}, false],
    ["an ssh host whose own NIC is a bridge", onBridge, {}, false],
    ["a bridge named on an ssh host", remote, { bridge: "br0" }, false],
    [
      "a static address on an ssh host's network",
      remote,
      { nics: [{ network: "lan", addresses: ["203.0.113.7/24"] }] },
      false,
    ],
  ])("%s: %s", (_, host, news, warned) => {
    const c = decodeChecked(check(news).inputs);
    const text = unreachableAddressWarning(vmNicsOf(c), host);
    expect(text !== undefined).toBe(warned);
    if (warned) expect(text).toMatch(/libvirt network "(default|lan)" of host "remote"/);
  });
});

describe("check gives the warning as advice", () => {
  it.each<[string, Record<string, unknown>, number]>([
    ["a proxy on an ssh host's network", { host: "remote" }, 1],
    ["a proxy on a local host", { host: "lab" }, 0],
    ["a pooled proxy (its host is chosen at create)", { host: { pool: ["remote"] } }, 0],
  ])("%s: %i warning(s), no failure", (_, news, count) => {
    const r = check(news);
    expect(r.failures).toEqual([]);
    expect(r.warnings ?? []).toHaveLength(count);
  });
});
