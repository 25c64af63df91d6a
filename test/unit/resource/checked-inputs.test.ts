/**
 * The checked inputs read back from the engine (create, update, diff, the
 * plugin's old inputs): what check returns decodes as it is; a record check
 * could not have made fails, naming each field and none of its values.
 */
import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../provider/kvm/validation";
import { UNKNOWN } from "../../../provider/resource/args";
import { checkInputs } from "../../../provider/resource/check";
import { decodeChecked, recordedChecked } from "../../../provider/resource/checked-inputs";
import { readStackConfig } from "../../../provider/resource/stack-config";
import { BAD_INPUT_CONFIG } from "../../support/bad-inputs";

const config = readStackConfig((k) => BAD_INPUT_CONFIG[k]);

function checked(news: Record<string, unknown>): Record<string, unknown> {
  const r = checkInputs(
    {},
    { host: "lab", image: "debian", ...news },
    { config, randomBytes: (k) => new Uint8Array(k).fill(7) },
  );
  expect(r.failures).toEqual([]);
  return r.inputs;
}

function failuresOf(inputs: Record<string, unknown>): readonly { property: string; reason: string }[] {
  try {
    decodeChecked(inputs);
    return [];
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return (err as ValidationError).failures;
  }
}

describe("decodeChecked", () => {
  it.each<[string, Record<string, unknown>]>([
    ["the defaults", {}],
    [
      "every kind of input",
      {
        memoryMiB: 1024,
        vcpus: 2,
        diskGiB: 20,
        name: "edge-1",
        userData: "#cloud-config\n",
        vendorData: "#!/bin/sh\n",
        nics: [{ bridge: "br0", addresses: ["203.0.113.7/24"], gateway4: "203.0.113.1" }],
        proxy: { port: 8080, allowedClients: ["10.0.0.0/8"] },
        healthCheck: { url: "http://example.com/" },
        egressCheck: { url: "https://ip.example/" },
        waitForIp: "any",
        timeouts: { create: "20m" },
        keepOnFailure: true,
        tags: { team: "crawl" },
        rotation: { maxAge: "7d" },
      },
    ],
    ["a host in full", { host: { key: "far", uri: "ssh://root@far.example" } }],
    ["a pool of hosts", { host: { pool: ["lab", { key: "far", uri: "ssh://root@far.example" }] } }],
  ])("takes what check returns for %s as it is", (_, news) => {
    const inputs = checked(news);
    expect(decodeChecked(inputs)).toBe(inputs);
  });

  it("takes an import's inputs (the VM's metadata: no seed, timeouts or health check)", () => {
    const imported = {
      host: "lab",
      name: "edge-1",
      image: "debian",
      resolvedImage: { url: "https://images.example/debian.qcow2", format: "qcow2", firmware: "uefi" },
      memoryMiB: 512,
      vcpus: 1,
      diskGiB: 10,
      proxyPort: 3128,
      tags: {},
      network: "default",
    };
    expect(failuresOf(imported)).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["no resolved image (never checked)", { resolvedImage: undefined }, "image"],
    [
      "a resolved image of an unknown format",
      { resolvedImage: { url: "x", format: "vmdk", firmware: "uefi" } },
      "image",
    ],
    ["a host of another shape", { host: 7 }, "host"],
    ["memory out of range", { memoryMiB: 64 }, "memoryMiB"],
    ["a fractional vCPU count", { vcpus: 1.5 }, "vcpus"],
    ["a disk given as text", { diskGiB: "10" }, "diskGiB"],
    ["installGuestAgent as text", { installGuestAgent: "yes" }, "installGuestAgent"],
    ["a name no domain may have", { name: "-x" }, "name"],
    ["no port", { proxyPort: undefined }, "proxyPort"],
    ["waitForIp of another word", { waitForIp: "ipv5" }, "waitForIp"],
    ["a health check of another shape", { healthCheck: "yes" }, "healthCheck"],
    ["timeouts as durations (unchecked)", { timeouts: { create: "10m", delete: 300 } }, "timeouts"],
    ["a tag that is no text", { tags: { team: 7 } }, "tags"],
    ["user-data that is no text", { userData: 7 }, "userData"],
    ["NICs of another shape", { nics: "br0" }, "nics"],
    [
      "a NIC that breaks a rule",
      { nics: [{ network: "a/b", addresses: [], nameservers: [], primary: true }] },
      "nics[0].network",
    ],
  ])("refuses %s at %s", (_, change, property) => {
    const failures = failuresOf({ ...checked({}), ...change });
    expect(failures.map((x) => x.property)).toContain(property);
  });

  it("names no value of a malformed field: the inputs may hold secrets", () => {
    const secret = "hunter2-password-like-user-data";
    const failures = failuresOf({ ...checked({}), userData: { secret }, name: secret.toUpperCase() });
    expect(failures.length).toBeGreaterThan(0);
    expect(JSON.stringify(failures).toLowerCase()).not.toContain(secret);
  });

  it("refuses a preview's inputs, still unknown", () => {
    expect(failuresOf({ ...checked({}), memoryMiB: UNKNOWN })).toEqual([
      { property: "", reason: "inputs are still unknown (a preview's)" },
    ]);
  });
});

describe("recordedChecked", () => {
  it("takes what a state recorded long ago as it is: memory as libvirt holds it, a NIC of rules since tightened", () => {
    const recorded = {
      ...checked({}),
      memoryMiB: 511.5,
      nics: [{ network: "n", addresses: [], nameservers: [], gateway4: "198.51.100.1", primary: true }],
    };
    expect(failuresOf(recorded).map((x) => x.property)).toEqual(expect.arrayContaining(["memoryMiB"]));
    expect(recordedChecked(recorded)).toBe(recorded);
  });

  it("refuses what never was checked inputs: a preview's unknowns, no resolved image", () => {
    expect(() => recordedChecked({ ...checked({}), name: UNKNOWN })).toThrow(ValidationError);
    expect(() => recordedChecked({ ...checked({}), resolvedImage: undefined })).toThrow(/never checked/);
  });
});
