import { describe, expect, it } from "vitest";
import { isTransient } from "../../../provider/errors";
import {
  DomainMetadataType,
  DomainState,
  DomainUndefineFlags,
  LibvirtError,
  ListAllDomainsFlags,
} from "../../../provider/libvirt";
import {
  connectionPerTest,
  normalizeXml,
  removeDomain,
  transports,
  uefiDomainXml,
  uniqueName,
  virsh,
} from "./support";

const NS = "https://example.invalid/test";

describe.each(transports)("domains over $name", ({ make }) => {
  const t = connectionPerTest(make, removeDomain);

  async function define(what: string, metadata = "") {
    const name = uniqueName(what);
    t.created.push(name);
    return t.lv.domainDefineXmlFlags(uefiDomainXml(name, metadata), 0);
  }

  it("talks to the QEMU driver of a libvirt 9.x daemon", async () => {
    expect(await t.lv.connectGetType()).toBe("QEMU");
    expect(Math.floor((await t.lv.connectGetLibVersion()) / 1_000_000)).toBeGreaterThanOrEqual(9);
  });

  it("defines, starts, stops and undefines a UEFI TCG domain", async () => {
    const dom = await define("life");
    expect(dom.id).toBe(-1);
    expect(dom.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(await t.lv.domainGetState(dom)).toMatchObject({ state: DomainState.SHUTOFF });

    const running = await t.lv.domainCreateWithFlags(dom, 0);
    expect(running.id).toBeGreaterThan(0);
    expect(await t.lv.domainGetState(running)).toMatchObject({ state: DomainState.RUNNING });
    expect((await t.lv.domainLookupByUuid(dom.uuid)).name).toBe(dom.name);

    // An ACPI request to a guest without an OS is accepted (and ignored); destroy stops it for real.
    await t.lv.domainShutdown(running);
    await t.lv.domainDestroyFlags(running, 0);
    // VIR_DOMAIN_SHUTOFF_DESTROYED = 2
    expect(await t.lv.domainGetState(dom)).toEqual({ state: DomainState.SHUTOFF, reason: 2 });

    // UEFI domains keep an NVRAM file: plain undefine refuses, the NVRAM flag removes both.
    const refused = await t.lv.domainUndefineFlags(dom, 0).catch((e: unknown) => e);
    expect(refused).toMatchObject({ codeName: "VIR_ERR_OPERATION_INVALID", call: "virDomainUndefineFlags" });
    await t.lv.domainUndefineFlags(dom, DomainUndefineFlags.NVRAM);
    await expect(t.lv.domainLookupByName(dom.name)).rejects.toMatchObject({ codeName: "VIR_ERR_NO_DOMAIN" });
  });

  it("starts with domain_create and stops with domain_destroy too", async () => {
    const dom = await define("plain");
    await t.lv.domainCreate(dom);
    const running = await t.lv.domainLookupByName(dom.name);
    expect(running.id).toBeGreaterThan(0);
    await t.lv.domainDestroy(running);
    expect((await t.lv.domainGetState(dom)).state).toBe(DomainState.SHUTOFF);
  });

  it("NO_DOMAIN arrives as code 42 named VIR_ERR_NO_DOMAIN from virDomainLookupByName", async () => {
    const name = uniqueName("missing");
    const err = await t.lv.domainLookupByName(name).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({ code: 42, codeName: "VIR_ERR_NO_DOMAIN", call: "virDomainLookupByName" });
    expect((err as LibvirtError).message).toContain(name);
    expect(isTransient(err)).toBe(false);
  });

  it("rejects invalid XML with a permanent error from virDomainDefineXML", async () => {
    const err = await t.lv.domainDefineXml("<domain type='qemu'><name>x").catch((e: unknown) => e);
    // libvirt reports XML syntax errors as XML_DETAIL (35), with the parser's position in the message.
    expect(err).toMatchObject({
      codeName: "VIR_ERR_XML_DETAIL",
      call: "virDomainDefineXML",
      kind: "permanent",
    });
  });

  it("sets custom-namespace metadata and reads it back", async () => {
    const dom = await define("meta");
    await t.lv.domainSetMetadata(
      dom,
      DomainMetadataType.ELEMENT,
      `<info owner="kvmp" n="1"/>`,
      "kvmptest",
      NS,
      0,
    );
    const read = await t.lv.domainGetMetadata(dom, DomainMetadataType.ELEMENT, NS, 0);
    // libvirt 9.0 returns the element without the prefix and without repeating the namespace.
    expect(read).toMatch(/^<info( xmlns="[^"]+")? owner="kvmp" n="1"\/>$/);
    expect(await t.lv.domainGetXmlDesc(dom, 0)).toContain(`<kvmptest:info xmlns:kvmptest="${NS}"`);

    // Removing it makes the read fail with NO_DOMAIN_METADATA.
    await t.lv.domainSetMetadataElement(dom, NS, "kvmptest", null);
    await expect(t.lv.domainGetMetadata(dom, DomainMetadataType.ELEMENT, NS, 0)).rejects.toMatchObject({
      codeName: "VIR_ERR_NO_DOMAIN_METADATA",
    });
  });

  it("lists all domains, agreeing with virsh", async () => {
    const a = await define("list");
    const b = await define("list");
    await t.lv.domainCreateWithFlags(b, 0);
    const ours = (await t.lv.connectListAllDomains(0)).map((d) => d.name);
    const theirs = virsh(["list", "--all", "--name"]).split("\n").filter(Boolean);
    const mine = (names: string[]) => names.filter((n) => n === a.name || n === b.name).sort();
    expect(mine(ours)).toEqual([a.name, b.name].sort());
    expect(mine(theirs)).toEqual(mine(ours));

    const active = (await t.lv.connectListAllDomains(ListAllDomainsFlags.ACTIVE)).map((d) => d.name);
    expect(active).toContain(b.name);
    expect(active).not.toContain(a.name);
  });

  it("returns the same domain XML as virsh dumpxml", async () => {
    const dom = await define("xml");
    const ours = await t.lv.domainGetXmlDesc(dom, 0);
    expect(normalizeXml(ours)).toBe(normalizeXml(virsh(["dumpxml", dom.name])));
    expect(ours).toContain(`<uuid>${dom.uuid}</uuid>`);
    expect(ours).toMatch(/<os firmware=['"]efi['"]>/);
  });

  it("reaches the QEMU program: an agent command on a domain without an agent fails cleanly", async () => {
    const dom = await t.lv.domainCreateWithFlags(await define("agent"), 0);
    const err = await t.lv
      .domainQemuAgentCommand(dom, '{"execute":"guest-ping"}', 5)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibvirtError);
    expect(err).toMatchObject({
      call: "virDomainQemuAgentCommand",
      codeName: "VIR_ERR_ARGUMENT_UNSUPPORTED",
    });
  });

  it("asks for interface addresses from the lease source", async () => {
    const dom = await t.lv.domainCreateWithFlags(await define("ifaddr"), 0);
    // No NIC, so no leases: an empty list, not an error.
    expect(await t.lv.domainInterfaceAddresses(dom, 0, 0)).toEqual([]);
  });
});
