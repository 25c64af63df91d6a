import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  callNameOf,
  type Procedure,
  Procedures,
  publicName,
  QEMU_PROGRAM,
  REMOTE_PROGRAM,
  XdrReader,
  XdrWriter,
} from "../../../provider/libvirt";
import {
  AuthType,
  KEEPALIVE_PROGRAM,
  KEEPALIVE_PROTOCOL_VERSION,
  KeepaliveProcedure,
  Limits,
  QEMU_PROTOCOL_VERSION,
  QemuProcedure,
  REMOTE_PROTOCOL_VERSION,
  RemoteProcedure,
} from "../../../provider/libvirt/constants";

describe("public call names", () => {
  it.each([
    ["domain_lookup_by_name", REMOTE_PROGRAM, "virDomainLookupByName"],
    ["domain_lookup_by_uuid", REMOTE_PROGRAM, "virDomainLookupByUUID"],
    ["domain_get_xml_desc", REMOTE_PROGRAM, "virDomainGetXMLDesc"],
    ["domain_define_xml_flags", REMOTE_PROGRAM, "virDomainDefineXMLFlags"],
    ["storage_vol_create_xml", REMOTE_PROGRAM, "virStorageVolCreateXML"],
    ["connect_list_all_domains", REMOTE_PROGRAM, "virConnectListAllDomains"],
    ["connect_get_lib_version", REMOTE_PROGRAM, "virConnectGetLibVersion"],
    ["storage_vol_upload", REMOTE_PROGRAM, "virStorageVolUpload"],
    ["domain_open_console", REMOTE_PROGRAM, "virDomainOpenConsole"],
    ["domain_agent_command", QEMU_PROGRAM, "virDomainQemuAgentCommand"],
    ["domain_update_device_flags", REMOTE_PROGRAM, "virDomainUpdateDeviceFlags"],
    ["nwfilter_lookup_by_name", REMOTE_PROGRAM, "virNWFilterLookupByName"],
    ["interface_lookup_by_name", REMOTE_PROGRAM, "virInterfaceLookupByName"],
    ["connect_list_all_node_devices", REMOTE_PROGRAM, "virConnectListAllNodeDevices"],
    ["node_device_get_xml_desc", REMOTE_PROGRAM, "virNodeDeviceGetXMLDesc"],
  ])("%s (program %i) → %s", (name, program, expected) => {
    expect(publicName(name, program)).toBe(expected);
  });

  it("every procedure's call name is derived from its protocol name", () => {
    for (const p of Object.values(Procedures) as Procedure<unknown, unknown>[]) {
      expect(p.call).toBe(publicName(p.name, p.program));
      expect(callNameOf(p.program, p.proc)).toBe(p.call);
    }
  });

  it("unknown procedures get a numeric label", () => {
    expect(callNameOf(REMOTE_PROGRAM, 9999)).toBe("procedure 9999 of program 0x20008086");
  });
});

/** The numbers a protocol file declares: its constants and its enums' members, by name. */
function declaredNumbers(file: string): Map<string, number> {
  const text = readFileSync(path.join(__dirname, "protocol", file), "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const out = new Map<string, number>();
  for (const m of text.matchAll(
    /^\s*(?:const\s+)?([A-Z][A-Z0-9_]*)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*[;,]?\s*$/gm,
  )) {
    out.set(m[1] as string, Number(m[2]));
  }
  return out;
}

describe("numbers, held to libvirt's protocol files (./protocol, libvirt 9.0.0)", () => {
  const remote = declaredNumbers("remote_protocol.x");
  const qemu = declaredNumbers("qemu_protocol.x");
  const keepalive = declaredNumbers("virkeepaliveprotocol.x");

  it("reads the files: hundreds of procedures, the programs and the limits", () => {
    expect([...remote.keys()].filter((k) => k.startsWith("REMOTE_PROC_")).length).toBeGreaterThan(400);
    expect(remote.get("REMOTE_PROC_CONNECT_OPEN")).toBe(1);
    expect(qemu.get("QEMU_PROC_DOMAIN_MONITOR_COMMAND")).toBe(1);
    expect(keepalive.get("KEEPALIVE_PROC_PONG")).toBe(2);
  });

  const tables: [string, Record<string, number>, Map<string, number>, string][] = [
    ["RemoteProcedure", RemoteProcedure, remote, "REMOTE_PROC_"],
    ["QemuProcedure", QemuProcedure, qemu, "QEMU_PROC_"],
    ["KeepaliveProcedure", KeepaliveProcedure, keepalive, "KEEPALIVE_PROC_"],
    ["AuthType", AuthType, remote, "REMOTE_AUTH_"],
    ["Limits", Limits, remote, "REMOTE_"],
    ["the programs and versions", { REMOTE_PROGRAM, REMOTE_PROTOCOL_VERSION }, remote, ""],
    ["the qemu program and version", { QEMU_PROGRAM, QEMU_PROTOCOL_VERSION }, qemu, ""],
    ["the keepalive program and version", { KEEPALIVE_PROGRAM, KEEPALIVE_PROTOCOL_VERSION }, keepalive, ""],
  ];
  it.each(tables)("%s: every entry is the file's", (_, table, declared, prefix) => {
    const wrong = Object.entries(table).filter(([name, n]) => declared.get(`${prefix}${name}`) !== n);
    expect(wrong).toEqual([]);
  });

  it("every procedure descriptor's number is its protocol name's in the file of its program", () => {
    const wrong = (Object.values(Procedures) as Procedure<unknown, unknown>[])
      .map((p) => {
        const [file, prefix] = p.program === QEMU_PROGRAM ? [qemu, "QEMU_PROC_"] : [remote, "REMOTE_PROC_"];
        return [p.name, p.proc, file.get(`${prefix}${p.name.toUpperCase()}`)] as const;
      })
      .filter(([, proc, declared]) => proc !== declared);
    expect(wrong).toEqual([]);
  });
});

describe("argument and reply layouts", () => {
  const dom = { name: "d", uuid: "00000000-0000-0000-0000-0000000000ff", id: 4 };
  const domHex = `00000001${"64000000"}${"00".repeat(15)}ff${"00000004"}`;

  it("domain_undefine_flags args: remote_nonnull_domain then unsigned flags", () => {
    const w = new XdrWriter();
    Procedures.domainUndefineFlags.encodeArgs(w, { dom, flags: 4 });
    expect(w.finish().toString("hex")).toBe(`${domHex}00000004`);
  });

  it("domain_set_metadata args: dom, type, three optional strings, flags", () => {
    const w = new XdrWriter();
    Procedures.domainSetMetadata.encodeArgs(w, {
      dom,
      type: 2,
      metadata: "<a/>",
      key: null,
      uri: "u",
      flags: 0,
    });
    expect(w.finish().toString("hex")).toBe(
      // dom, type 2, metadata "<a/>", no key, uri "u", flags 0
      [
        domHex,
        "00000002",
        "00000001000000043c612f3e",
        "00000000",
        "000000010000000175000000",
        "00000000",
      ].join(""),
    );
  });

  it("domain_update_device_flags args: dom, the device XML, flags", () => {
    const w = new XdrWriter();
    Procedures.domainUpdateDeviceFlags.encodeArgs(w, { dom, xml: "<i/>", flags: 3 });
    expect(w.finish().toString("hex")).toBe(`${domHex}000000043c692f3e00000003`);
  });

  it.each([
    [null, 0, `${"00000000"}00000000`],
    ["serial0", 2, `${"00000001"}${"00000007"}73657269616c3000${"00000002"}`],
  ])("domain_open_console args: dom, optional device name %s, flags %i", (devName, flags, rest) => {
    const w = new XdrWriter();
    Procedures.domainOpenConsole.encodeArgs(w, { dom, devName, flags });
    expect(w.finish().toString("hex")).toBe(`${domHex}${rest}`);
  });

  it("node_get_memory_stats args: nparams, cellNum (-1: all cells), flags; reply: (field, unsigned hyper) pairs, then nparams", () => {
    const w = new XdrWriter();
    Procedures.nodeGetMemoryStats.encodeArgs(w, { nparams: 4, cellNum: -1, flags: 0 });
    expect(w.finish().toString("hex")).toBe("00000004ffffffff00000000");
    const reply = new XdrWriter();
    reply.uint(2).string("free").uhyper(102400n).string("cached").uhyper(4194304n).int(2);
    const r = new XdrReader(reply.finish());
    expect(Procedures.nodeGetMemoryStats.decodeReply(r)).toEqual({
      params: [
        { field: "free", value: 102400 },
        { field: "cached", value: 4194304 },
      ],
      nparams: 2,
    });
    r.end();
    expect(Procedures.nodeGetMemoryStats.call).toBe("virNodeGetMemoryStats");
  });

  it("nwfilter_lookup_by_name reply: name then the 16-byte UUID", () => {
    const w = new XdrWriter();
    w.string("clean-traffic").fixedOpaque(Buffer.alloc(16, 0xab), 16);
    const r = new XdrReader(w.finish());
    expect(Procedures.nwfilterLookupByName.decodeReply(r)).toEqual({
      name: "clean-traffic",
      uuid: "abababab-abab-abab-abab-abababababab",
    });
    r.end();
  });

  it("network_lookup_by_name reply: name then the 16-byte UUID; network_is_active and storage_pool_is_active send it back and read an int", () => {
    const w = new XdrWriter();
    w.string("default").fixedOpaque(Buffer.alloc(16, 0xcd), 16);
    const bytes = w.finish();
    const r = new XdrReader(bytes);
    const net = Procedures.networkLookupByName.decodeReply(r);
    r.end();
    expect(net).toEqual({ name: "default", uuid: "cdcdcdcd-cdcd-cdcd-cdcd-cdcdcdcdcdcd" });
    const args = new XdrWriter();
    Procedures.networkIsActive.encodeArgs(args, { net });
    expect(args.finish().toString("hex")).toBe(bytes.toString("hex"));
    const poolArgs = new XdrWriter();
    Procedures.storagePoolIsActive.encodeArgs(poolArgs, { pool: net });
    expect(poolArgs.finish().toString("hex")).toBe(bytes.toString("hex"));
    for (const [value, active] of [
      [0, false],
      [1, true],
    ] as const) {
      const reply = new XdrWriter();
      reply.int(value);
      expect(Procedures.networkIsActive.decodeReply(new XdrReader(reply.finish()))).toBe(active);
      const again = new XdrWriter();
      again.int(value);
      expect(Procedures.storagePoolIsActive.decodeReply(new XdrReader(again.finish()))).toBe(active);
    }
    expect([
      Procedures.networkLookupByName.proc,
      Procedures.networkIsActive.proc,
      Procedures.storagePoolIsActive.proc,
    ]).toEqual([46, 152, 154]);
    expect(Procedures.networkIsActive.call).toBe("virNetworkIsActive");
  });

  it("interface_lookup_by_name reply: name then MAC, both strings", () => {
    const w = new XdrWriter();
    w.string("eth0").string("52:54:00:00:00:01");
    const r = new XdrReader(w.finish());
    expect(Procedures.interfaceLookupByName.decodeReply(r)).toEqual({
      name: "eth0",
      mac: "52:54:00:00:00:01",
    });
    r.end();
  });

  it("connect_list_all_node_devices: need_results and flags; reply names then the count", () => {
    const w = new XdrWriter();
    Procedures.connectListAllNodeDevices.encodeArgs(w, { needResults: true, flags: 16 });
    expect(w.finish().toString("hex")).toBe("0000000100000010");
    const reply = new XdrWriter();
    reply.uint(2).string("net_lo_00_00_00_00_00_00").string("net_eth0_52_54_00_00_00_01").uint(2);
    const r = new XdrReader(reply.finish());
    expect(Procedures.connectListAllNodeDevices.decodeReply(r)).toEqual([
      { name: "net_lo_00_00_00_00_00_00" },
      { name: "net_eth0_52_54_00_00_00_01" },
    ]);
    r.end();
  });

  it("storage_vol_upload args carry 64-bit offset and length", () => {
    const w = new XdrWriter();
    Procedures.storageVolUpload.encodeArgs(w, {
      vol: { pool: "p", name: "n", key: "k" },
      offset: 5,
      length: 2n ** 40n,
      flags: 0,
    });
    expect(w.finish().toString("hex")).toBe(
      "00000001" +
        "70000000" +
        "00000001" +
        "6e000000" +
        "00000001" +
        "6b000000" +
        "0000000000000005" +
        "0000010000000000" +
        "00000000",
    );
  });

  it("domain_interface_addresses reply decodes interfaces with optional hwaddr and addresses", () => {
    const w = new XdrWriter();
    w.uint(2);
    w.string("vnet0").optional("52:54:00:aa:bb:cc", (w2, v) => w2.string(v));
    w.uint(2).int(0).string("192.168.122.23").uint(24).int(1).string("fe80::1").uint(64);
    w.string("lo")
      .optional(null as string | null, (w2, v) => w2.string(v))
      .uint(0);
    const r = new XdrReader(w.finish());
    expect(Procedures.domainInterfaceAddresses.decodeReply(r)).toEqual([
      {
        name: "vnet0",
        hwaddr: "52:54:00:aa:bb:cc",
        addrs: [
          { type: 0, addr: "192.168.122.23", prefix: 24 },
          { type: 1, addr: "fe80::1", prefix: 64 },
        ],
      },
      { name: "lo", hwaddr: null, addrs: [] },
    ]);
    r.end();
  });

  it("domain_interface_stats: the domain and the device out, eight hypers back in rx-then-tx order", () => {
    const w = new XdrWriter();
    Procedures.domainInterfaceStats.encodeArgs(w, { dom, device: "vnet7" });
    const args = new XdrReader(w.finish());
    expect(args.string()).toBe("d");
    args.fixedOpaque(16);
    expect(args.int()).toBe(4);
    expect(args.string()).toBe("vnet7");
    args.end();
    const reply = new XdrWriter();
    for (const v of [2n ** 40n, 5n, 0n, 1n, 123456n, 6n, -1n, 0n]) reply.hyper(v);
    const r = new XdrReader(reply.finish());
    expect(Procedures.domainInterfaceStats.decodeReply(r)).toEqual({
      rxBytes: 2 ** 40,
      rxPackets: 5,
      rxErrs: 0,
      rxDrop: 1,
      txBytes: 123456,
      txPackets: 6,
      txErrs: -1,
      txDrop: 0,
    });
    r.end();
  });

  it("storage_vol_get_info reply: char type is a 4-byte int, sizes are unsigned hyper", () => {
    const r = new XdrReader(Buffer.from("00000000" + "0000000040000000" + "0000000000001000", "hex"));
    expect(Procedures.storageVolGetInfo.decodeReply(r)).toEqual({
      type: 0,
      capacity: 2 ** 30,
      allocation: 4096,
    });
    r.end();
  });

  it("connect_list_all_domains reply: array then the count", () => {
    const w = new XdrWriter();
    w.uint(1);
    w.string("d")
      .fixedOpaque(Buffer.from("00000000000000000000000000000000ff".slice(2), "hex"), 16)
      .int(4);
    w.uint(1);
    const r = new XdrReader(w.finish());
    expect(Procedures.connectListAllDomains.decodeReply(r)).toEqual([dom]);
    r.end();
  });
});
