/**
 * A host's side of a VM's NICs against the real libvirtd (interfaces.ts):
 * rate limits changed in place (virDomainUpdateDeviceFlags), nwfilters and
 * macvtap parent devices looked up before a create.
 *
 * The domains here have no disk: QEMU starts them (TCG) and they sit in
 * firmware, which is all a NIC change needs. Host interfaces are veth pairs
 * made in the test host's network namespace (where libvirtd runs) after the
 * daemon started, as a macvtap parent made by hand would be.
 *
 * A limit applied live runs tc in libvirtd's namespace: htb, sfq and a
 * police action, which the test machine's kernel lacks in part; the test
 * host gives libvirtd a tc that maps those onto what the kernel has
 * (scripts/test-host.d/tc-shim, docs/contributing/decisions.md), so the live change is
 * real here as on a production host.
 */
import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  attribute,
  childElement,
  childElements,
  parseXml,
  type XmlNode,
} from "../../../provider/kvm/domain/xml";
import type { HostPool } from "../../../provider/kvm/host/hosts";
import {
  checkNicsOnHost,
  hostInterfaceExists,
  interfaceKnown,
  NicHostError,
  netDeviceKnown,
  nwfilterExists,
  setInterfaceBandwidth,
} from "../../../provider/kvm/host/interfaces";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { attachmentFields, type NicAttachment, type NicSpec } from "../../../provider/kvm/network/nic";
import { DomainXmlFlags } from "../../../provider/libvirt/constants";
import type { Libvirt } from "../../../provider/libvirt/libvirt";
import type { Domain } from "../../../provider/libvirt/types";
import { type TestHost, testHost } from "../../support/test-host";
import { hostPool, uniqueName, virsh, virshQuiet } from "./ops-helpers";

const host: TestHost = testHost();
let pool: HostPool;
let lv: Libvirt;
const domains = new Set<string>();
const filters = new Set<string>();
const links = new Set<string>();
const retry = { maxAttempts: 2, initialDelayMs: 10, maxDelayMs: 50, deadlineMs: 20_000 };

/** A command inside the test host's network namespace. */
function inNetns(...args: string[]): string {
  return execFileSync("ip", ["netns", "exec", host.netns, ...args], { encoding: "utf8", stdio: "pipe" });
}

/** A veth pair in the namespace, both ends up; returns the first end's name (15 bytes at most). */
function veth(tag: string): string {
  const a = `kv${tag}${process.pid % 100000}a`;
  inNetns("ip", "link", "add", a, "type", "veth", "peer", "name", `${a.slice(0, -1)}b`);
  links.add(a);
  inNetns("ip", "link", "set", a, "up");
  return a;
}

/** A domain without disks: two NICs, the first on the NAT network (with `bandwidth` inside), the second on its bridge. */
function defineDomain(tag: string, bandwidth = ""): Promise<Domain> {
  const name = uniqueName(tag);
  domains.add(name);
  return lv.domainDefineXml(`<domain type='qemu'>
  <name>${name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <interface type='network'><source network='${host.network}'/><model type='virtio'/>${bandwidth}</interface>
    <interface type='bridge'><source bridge='${host.networkBridge}'/><model type='virtio'/></interface>
  </devices>
</domain>`);
}

function nics(xml: string): XmlNode[] {
  return childElements(childElement(parseXml(xml), "devices") as XmlNode, "interface");
}

function macOf(nic: XmlNode): string {
  return attribute(childElement(nic, "mac"), "address") as string;
}

/** The NIC's `<bandwidth>` as `{inbound, outbound}` averages (undefined: no element). */
function limitsOf(nic: XmlNode): Record<string, string | undefined> | undefined {
  const bw = childElement(nic, "bandwidth");
  if (bw === undefined) return undefined;
  const avg = (d: string) => attribute(childElement(bw, d), "average");
  return { inbound: avg("inbound"), outbound: avg("outbound") };
}

/** Everything of a NIC but its bandwidth, to see nothing else changed. */
function restOf(nic: XmlNode): string[] {
  return childElements(nic)
    .filter((c) => c.localName !== "bandwidth")
    .map((c) => `${c.name} ${JSON.stringify(c.attrs)}`);
}

async function xmlOf(dom: Domain, flags = 0): Promise<XmlNode[]> {
  return nics(await lv.domainGetXmlDesc(dom, flags));
}

function nic(attachment: NicAttachment, more: Partial<NicSpec> = {}): NicSpec {
  return { ...attachmentFields(attachment), addresses: [], nameservers: [], primary: false, ...more };
}

beforeAll(() => {
  pool = hostPool(host);
  lv = pool.libvirt("local");
});

afterAll(async () => {
  await pool.closeAll();
  for (const d of domains) {
    virshQuiet(host, "destroy", d);
    virshQuiet(host, "undefine", d);
  }
  for (const f of filters) virshQuiet(host, "nwfilter-undefine", f);
  for (const l of links) {
    try {
      inNetns("ip", "link", "del", l);
    } catch {
      // already gone
    }
  }
});

describe("setInterfaceBandwidth on a stopped domain: the definition", () => {
  it("sets, changes and removes the limits of one NIC, in KiB/s, leaving the rest of both NICs alone", async () => {
    const dom = await defineDomain("bw-off", "<bandwidth><inbound average='10'/></bandwidth>");
    const [first, second] = await xmlOf(dom, DomainXmlFlags.INACTIVE);
    const mac = macOf(first as XmlNode);

    await setInterfaceBandwidth(lv, dom, mac.toUpperCase(), { inboundKbps: 8000, outboundKbps: 16000 });
    let [a, b] = await xmlOf(dom, DomainXmlFlags.INACTIVE);
    // 8000 kbit/s = 976.6 KiB/s, 16000 kbit/s = 1953.1 KiB/s: rounded up.
    expect(limitsOf(a as XmlNode)).toEqual({ inbound: "977", outbound: "1954" });
    expect(restOf(a as XmlNode)).toEqual(restOf(first as XmlNode));
    expect(restOf(b as XmlNode)).toEqual(restOf(second as XmlNode));
    expect(limitsOf(b as XmlNode)).toBeUndefined();

    await setInterfaceBandwidth(lv, dom, mac, { outboundKbps: 800 });
    [a] = await xmlOf(dom, DomainXmlFlags.INACTIVE);
    expect(limitsOf(a as XmlNode)).toEqual({ inbound: undefined, outbound: "98" });

    await setInterfaceBandwidth(lv, dom, mac, {});
    [a, b] = await xmlOf(dom, DomainXmlFlags.INACTIVE);
    expect(limitsOf(a as XmlNode)).toBeUndefined();
    expect(restOf(a as XmlNode)).toEqual(restOf(first as XmlNode));
    expect(restOf(b as XmlNode)).toEqual(restOf(second as XmlNode));
  });

  it("a MAC the domain has no NIC with is a permanent error naming it", async () => {
    const dom = await defineDomain("bw-nomac");
    await expect(
      setInterfaceBandwidth(lv, dom, "52:54:00:00:00:00", { inboundKbps: 1 }),
    ).rejects.toMatchObject({
      kind: "permanent",
      message: expect.stringContaining("no NIC with MAC 52:54:00:00:00:00"),
    });
  });
});

describe("KvmOperations.setBandwidth on a running domain: live and definition together", () => {
  async function running(tag: string): Promise<{ dom: Domain; mac: string; ops: KvmOperations }> {
    const dom = await defineDomain(tag);
    await lv.domainCreate(dom);
    const [first] = await xmlOf(dom, DomainXmlFlags.INACTIVE);
    return { dom, mac: macOf(first as XmlNode), ops: new KvmOperations(pool, { retry }) };
  }

  it("a limit set, changed and removed shows in the live and the inactive XML", async () => {
    const { dom, mac, ops } = await running("bw-live");
    for (const [bw, want] of [
      [
        { inboundKbps: 8000, outboundKbps: 800 },
        { inbound: "977", outbound: "98" },
      ],
      [{ inboundKbps: 16000 }, { inbound: "1954", outbound: undefined }],
      [{}, undefined],
    ] as const) {
      await ops.setBandwidth("local", dom.name, mac, bw);
      expect(limitsOf((await xmlOf(dom))[0] as XmlNode)).toEqual(want);
      expect(limitsOf((await xmlOf(dom, DomainXmlFlags.INACTIVE))[0] as XmlNode)).toEqual(want);
    }
  });

  it("a domain that is gone is a permanent error naming it", async () => {
    const ops = new KvmOperations(pool, { retry });
    const name = uniqueName("bw-gone");
    await expect(ops.setBandwidth("local", name, "52:54:00:00:00:01", {})).rejects.toMatchObject({
      kind: "permanent",
      message: expect.stringContaining(`domain ${name} is gone from host local`),
    });
  });
});

describe("nwfilters", () => {
  it("a filter the host has exists; after it is undefined it does not", async () => {
    const name = `kvmpt-flt-${process.pid}`;
    filters.add(name);
    const file = `/tmp/${name}.xml`;
    execFileSync("sh", [
      "-c",
      `printf '%s' "<filter name='${name}' chain='ipv4'><rule action='accept' direction='inout'><ip/></rule></filter>" > ${file}`,
    ]);
    virsh(host, "nwfilter-define", file);
    expect(await nwfilterExists(lv, name)).toBe(true);
    await expect(
      checkNicsOnHost(lv, "local", [nic({ kind: "network", network: host.network }, { filter: name })]),
    ).resolves.toBeUndefined();
    virsh(host, "nwfilter-undefine", name);
    expect(await nwfilterExists(lv, name)).toBe(false);
  });
});

describe("host interfaces (macvtap parents)", () => {
  it("the interface driver sees a veth made after libvirtd started; a missing name is not found", async () => {
    const dev = veth("if");
    expect(await interfaceKnown(lv, dev)).toBe(true);
    expect(await hostInterfaceExists(lv, dev)).toBe(true);
    expect(await interfaceKnown(lv, `kvnone${process.pid % 100000}`)).toBe(false);
    expect(await hostInterfaceExists(lv, `kvnone${process.pid % 100000}`)).toBe(false);
  });

  it("node devices know an interface present when libvirtd started (lo), not a prefix of its name nor a missing one", async () => {
    expect(await netDeviceKnown(lv, "lo")).toBe(true);
    expect(await netDeviceKnown(lv, "l")).toBe(false);
    expect(await netDeviceKnown(lv, `kvnone${process.pid % 100000}`)).toBe(false);
  });
});

describe("checkNicsOnHost", () => {
  it("passes NICs whose parent device and filter exist, and NICs that need neither", async () => {
    const dev = veth("ok");
    await expect(
      checkNicsOnHost(lv, "local", [
        nic({ kind: "network", network: host.network }),
        nic({ kind: "bridge", bridge: "no-such-br" }), // a bridge is libvirt's to check at start
        nic({ kind: "direct", dev, mode: "bridge" }),
      ]),
    ).resolves.toBeUndefined();
  });

  it("names every NIC whose parent device or filter the host lacks, all at once", async () => {
    const dev = veth("ck");
    const missingDev = `kvnone${process.pid % 100000}`;
    const missingFilter = `kvmpt-none-${process.pid}`;
    const err = await checkNicsOnHost(lv, "local", [
      nic({ kind: "direct", dev, mode: "vepa" }),
      nic({ kind: "direct", dev: missingDev, mode: "bridge" }),
      nic({ kind: "network", network: host.network }, { filter: missingFilter }),
      nic({ kind: "direct", dev: missingDev, mode: "private" }, { filter: missingFilter }),
    ]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NicHostError);
    expect(err).toMatchObject({ kind: "permanent", host: "local" });
    expect((err as NicHostError).failures.map((f) => f.property)).toEqual([
      "nics[1].direct.dev",
      "nics[2].filter",
      "nics[3].direct.dev",
      "nics[3].filter",
    ]);
    expect((err as Error).message).toContain(
      `nics[1].direct.dev: host local has no interface "${missingDev}"`,
    );
    expect((err as Error).message).toContain(`nics[2].filter: host local has no nwfilter "${missingFilter}"`);
  });
});
