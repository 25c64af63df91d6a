import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  DomainState,
  InterfaceAddressSource,
  type Libvirt,
  type LibvirtConnection,
  type LibvirtError,
} from "../../../provider/libvirt";
import { connect, transports, uniqueName, virsh } from "./support";

const testDomainXml = (name: string): string =>
  `<domain type='test'><name>${name}</name><memory>1024</memory><os><type>hvm</type></os></domain>`;

// libvirt's in-memory test driver, reached through the same daemon. Its state
// lives only while a connection to it is open, so each test opens its own.
describe.each(transports)("test:///default over $name", ({ make }) => {
  let conn: LibvirtConnection;
  let lv: Libvirt;

  beforeEach(() => {
    ({ conn, lv } = connect(make, { uri: "test:///default" }));
  });

  afterEach(async () => {
    await conn.close();
  });

  it("opens the test driver with connect_open", async () => {
    expect(await lv.connectGetType()).toBe("TEST");
    const doms = await lv.connectListAllDomains(0);
    // Other suites may share the in-memory driver; its built-in domain is always there.
    const test = doms.find((d) => d.name === "test");
    expect(test?.id).toBe(1);
    expect(await lv.domainGetState(test as NonNullable<typeof test>)).toMatchObject({
      state: DomainState.RUNNING,
    });
    expect(virsh(["list", "--all", "--name"], "test:///default").split("\n")).toContain("test");
  });

  it("matches 200 calls in flight at once to their own replies", async () => {
    // 100 fresh domains (the test driver defines them in memory) and 100 names that do not exist.
    const prefix = uniqueName("many");
    const defined = await Promise.all(
      Array.from({ length: 100 }, (_, i) => lv.domainDefineXml(testDomainXml(`${prefix}-${i}`))),
    );
    const uuidOf = new Map(defined.map((d) => [d.name, d.uuid]));
    try {
      const names = Array.from(
        { length: 200 },
        (_, i) => `${prefix}-${i % 2 === 0 ? i / 2 : `missing-${i}`}`,
      );
      // All 200 are issued before any reply is read: one stream, 200 serials outstanding.
      const results = await Promise.all(
        names.map((n) =>
          lv.domainLookupByName(n).then(
            (d) => ({ asked: n, name: d.name, uuid: d.uuid }),
            (e: unknown) => ({ asked: n, error: (e as LibvirtError).codeName }),
          ),
        ),
      );
      for (const r of results) {
        if (uuidOf.has(r.asked))
          expect(r).toEqual({ asked: r.asked, name: r.asked, uuid: uuidOf.get(r.asked) });
        else expect(r).toEqual({ asked: r.asked, error: "VIR_ERR_NO_DOMAIN" });
      }
      expect(new Set(defined.map((d) => d.uuid)).size).toBe(100);
    } finally {
      await Promise.all(defined.map((d) => lv.domainUndefineFlags(d, 0)));
    }
  });

  it("gives no memory figures (no support, as placement's fallback to free memory expects), but its free memory", async () => {
    const err = await lv.nodeGetMemoryStats().then(
      () => undefined,
      (e: unknown) => e as LibvirtError,
    );
    expect(err?.codeName).toBe("VIR_ERR_NO_SUPPORT");
    expect(await lv.nodeGetFreeMemory()).toBeGreaterThan(0);
  });

  it("reports the test driver's made-up interface address", async () => {
    const dom = await lv.domainLookupByName("test");
    const ifaces = await lv.domainInterfaceAddresses(dom, InterfaceAddressSource.LEASE, 0);
    const ours = ifaces.flatMap((i) => i.addrs.map((a) => `${a.addr}/${a.prefix}`));
    expect(ours).toHaveLength(1);
    expect(ours[0]).toMatch(/^192\.168\.122\.\d+\/24$/);
    // virsh, on its own connection to the same in-memory driver, reports the same.
    expect(virsh(["domifaddr", "test", "--source", "lease"], "test:///default")).toContain(ours[0]);
  });

  it("looks a domain up by UUID and back", async () => {
    const dom = await lv.domainLookupByName("test");
    expect(await lv.domainLookupByUuid(dom.uuid)).toEqual(dom);
  });
});
