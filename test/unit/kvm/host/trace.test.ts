import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { buildSeedIso } from "../../../../provider/kvm/guest/seed-iso";
import {
  CallTracer,
  type TraceLevel,
  type TraceRecord,
  traceLevelFromEnv,
} from "../../../../provider/kvm/host/call-tracer";
import type { CallOptions, ReadStream, RpcCaller } from "../../../../provider/libvirt/connection";
import { LibvirtError } from "../../../../provider/libvirt/errors";
import { Libvirt } from "../../../../provider/libvirt/libvirt";
import type { Procedure } from "../../../../provider/libvirt/procedures";
import type { UploadOptions, UploadSource } from "../../../../provider/libvirt/upload";

const dom = { name: "web-1", uuid: "8f0c2a43-1b7e-4c11-9a51-0d3c2b6f9e10", id: 3 };
const pool = { name: "kvmp", uuid: "990d105d-2716-4fd2-9e5a-332d6b5b5e75" };
const vol = { pool: "kvmp", name: "web-1-seed.iso", key: "/pool/web-1-seed.iso" };
const SECRET_USER_DATA = "#cloud-config\npassword: hunter2-SECRET\n";
const DOMAIN_XML = `<domain type='qemu'><name>web-1</name>${"<x/>".repeat(40)}</domain>`;
const AGENT_CMD = '{"execute":"guest-exec","arguments":{"path":"/bin/secret"}}';
const AGENT_REPLY = '{"return":{"out-data":"c2VjcmV0"}}';
const SEED = buildSeedIso({ metaData: "instance-id: web-1\n", userData: SECRET_USER_DATA });

/** A caller answering from a table; an upload drains its source and returns the byte count. */
class FakeCaller implements RpcCaller {
  drained: Buffer[] = [];

  async call<A, R>(proc: Procedure<A, R>, _args: A, _options?: CallOptions): Promise<R> {
    const replies: Record<string, unknown> = {
      virDomainLookupByName: dom,
      virDomainCreate: undefined,
      virDomainGetXMLDesc: DOMAIN_XML,
      virDomainDefineXML: dom,
      virStorageVolGetInfo: { type: 0, capacity: 67108864, allocation: 200704 },
      virDomainGetState: { state: 1, reason: 1 },
      virDomainInterfaceAddresses: [
        {
          name: "vnet0",
          hwaddr: "52:54:00:aa:bb:cc",
          addrs: [{ type: 0, addr: "192.168.213.20", prefix: 24 }],
        },
      ],
      virDomainQemuAgentCommand: AGENT_REPLY,
    };
    if (proc.call === "virDomainDestroy") {
      throw new LibvirtError(
        {
          code: 55,
          domain: 10,
          message: "Requested operation is not valid: domain is not running",
          level: 2,
          str1: null,
          str2: null,
          str3: null,
          int1: -1,
          int2: -1,
        },
        proc.call,
      );
    }
    return replies[proc.call] as R;
  }

  async upload<A>(_p: Procedure<A, void>, _a: A, source: UploadSource, _o?: UploadOptions): Promise<number> {
    let n = 0;
    for await (const chunk of source) {
      const b = Buffer.from(chunk as Uint8Array);
      this.drained.push(b);
      n += b.length;
    }
    return n;
  }

  /** A console that prints a secret the moment it is opened. */
  async readStream<A>(
    _p: Procedure<A, void>,
    _a: A,
    onData: (chunk: Buffer) => void,
    _o?: CallOptions,
  ): Promise<ReadStream> {
    onData(Buffer.from(`login: root\npassword=${SECRET_USER_DATA}\n`));
    return { ended: () => Promise.resolve(null), close: () => Promise.resolve() };
  }
}

async function traced(
  level: TraceLevel,
): Promise<{ lines: string[]; records: TraceRecord[]; fake: FakeCaller }> {
  const lines: string[] = [];
  const records: TraceRecord[] = [];
  const tracer = new CallTracer({
    level,
    sink: (l, r) => {
      lines.push(l);
      records.push(r);
    },
  });
  const fake = new FakeCaller();
  const lv = new Libvirt(tracer.wrap("edge", fake));
  await lv.domainLookupByName("web-1");
  await lv.domainDefineXml(DOMAIN_XML);
  await lv.domainCreate(dom);
  await lv.domainGetXmlDesc(dom);
  await lv.domainGetState(dom);
  await lv.storageVolGetInfo(vol);
  await lv.domainInterfaceAddresses(dom, 1);
  await lv.domainQemuAgentCommand(dom, AGENT_CMD);
  await lv.domainDestroy(dom).catch(() => undefined);
  await lv.storageVolUpload(vol, Readable.from([SEED]));
  await lv.storagePoolRefresh(pool);
  return { lines, records, fake };
}

describe("traceLevelFromEnv", () => {
  it.each([
    [undefined, 0],
    ["0", 0],
    ["", 0],
    ["1", 1],
    ["2", 2],
    ["3", 2],
    ["yes", 0],
  ])("KVMP_LOG=%s → %s", (value, level) => {
    expect(traceLevelFromEnv(value === undefined ? {} : { KVMP_LOG: value })).toBe(level);
  });
});

describe("CallTracer", () => {
  it("traces a connection opened through the host once it settles, opened or refused, and nothing at level 0", async () => {
    const lines: string[] = [];
    const tracer = new CallTracer({ level: 1, sink: (l) => lines.push(l) });
    await expect(tracer.tunnel("edge", "192.168.122.40:3128", Promise.resolve("stream"))).resolves.toBe(
      "stream",
    );
    const refused = Object.assign(new Error("ssh://root@hv could not connect"), { code: "ECONNREFUSED" });
    await expect(tracer.tunnel("edge", "[fd00::5]:3128", Promise.reject(refused))).rejects.toBe(refused);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^tcp=direct-tcpip host=edge to=192\.168\.122\.40:3128 \d+\.\dms$/);
    expect(lines[1]).toMatch(/^tcp=direct-tcpip host=edge to=\[fd00::5\]:3128 \d+\.\dms .*could not connect/);
    const silent: string[] = [];
    const off = new CallTracer({ level: 0, sink: (l) => silent.push(l) });
    await off.tunnel("edge", "192.168.122.40:3128", Promise.resolve("stream"));
    expect(silent).toEqual([]);
  });

  it.each([1, 2] as const)(
    "at level %i traces a read stream's opening call once, and never its data",
    async (level) => {
      const lines: string[] = [];
      const tracer = new CallTracer({ level, sink: (l) => lines.push(l) });
      const got: Buffer[] = [];
      await new Libvirt(tracer.wrap("edge", new FakeCaller())).domainOpenConsole(dom, (c) => got.push(c));
      expect(Buffer.concat(got).toString()).toContain(SECRET_USER_DATA);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^rpc=virDomainOpenConsole host=edge dom=web-1 /);
      expect(lines.join("\n")).not.toContain("login");
      expect(lines.join("\n")).not.toContain(SECRET_USER_DATA);
    },
  );

  it("at level 0 returns the caller untouched and no hook", () => {
    const fake = new FakeCaller();
    const tracer = new CallTracer({ level: 0, sink: () => {} });
    expect(tracer.wrap("edge", fake)).toBe(fake);
    expect(tracer.hook("edge")).toBeUndefined();
  });

  it("at level 1 writes one line per call: rpc, host, identifiers, duration, curated result", async () => {
    const { lines } = await traced(1);
    const shape = lines.map((l) => l.replace(/ \d+\.\dms/, " <d>ms"));
    expect(shape).toEqual([
      'rpc=virDomainLookupByName host=edge name="web-1" <d>ms uuid=8f0c2a43-1b7e-4c11-9a51-0d3c2b6f9e10 id=3',
      `rpc=virDomainDefineXML host=edge xml=<${DOMAIN_XML.length} chars> <d>ms uuid=8f0c2a43-1b7e-4c11-9a51-0d3c2b6f9e10 id=3`,
      "rpc=virDomainCreate host=edge dom=web-1 <d>ms",
      `rpc=virDomainGetXMLDesc host=edge dom=web-1 <d>ms chars=${DOMAIN_XML.length}`,
      "rpc=virDomainGetState host=edge dom=web-1 <d>ms state=running reason=1",
      "rpc=virStorageVolGetInfo host=edge vol=kvmp/web-1-seed.iso <d>ms capacity=67108864 allocation=200704",
      "rpc=virDomainInterfaceAddresses host=edge dom=web-1 source=1 <d>ms interfaces=1",
      `rpc=virDomainQemuAgentCommand host=edge dom=web-1 cmd=<${AGENT_CMD.length} chars> timeout=-1 <d>ms reply=<${AGENT_REPLY.length} chars>`,
      "rpc=virDomainDestroy host=edge dom=web-1 <d>ms libvirtError=VIR_ERR_OPERATION_INVALID libvirtCode=55 " +
        'error="Requested operation is not valid: domain is not running"',
      `rpc=virStorageVolUpload host=edge vol=kvmp/web-1-seed.iso <d>ms bytes=${SEED.length}`,
      "rpc=virStoragePoolRefresh host=edge pool=kvmp <d>ms",
    ]);
  });

  it("at level 2 adds the XML and addresses", async () => {
    const { lines } = await traced(2);
    expect(lines[1]).toContain(`xml=${JSON.stringify(DOMAIN_XML)}`);
    expect(lines[3]).toContain(`xml=${JSON.stringify(DOMAIN_XML)}`);
    expect(lines[6]).toContain('addresses="vnet0(52:54:00:aa:bb:cc):192.168.213.20/24"');
  });

  it.each([1, 2] as const)(
    "at level %s never logs upload bodies, user-data or agent traffic",
    async (level) => {
      const { lines, fake } = await traced(level);
      // The upload really carried the secret: the tracer saw it pass and logged none of it.
      expect(Buffer.concat(fake.drained).includes(Buffer.from("hunter2-SECRET"))).toBe(true);
      const all = lines.join("\n");
      expect(all).not.toContain("hunter2");
      expect(all).not.toContain("cloud-config");
      expect(all).not.toContain("guest-exec");
      expect(all).not.toContain("/bin/secret");
      expect(all).not.toContain("c2VjcmV0");
      expect(lines.filter((l) => l.startsWith("rpc=virStorageVolUpload"))).toEqual([
        expect.stringMatching(
          new RegExp(
            `^rpc=virStorageVolUpload host=edge vol=kvmp/web-1-seed\\.iso \\d+\\.\\dms bytes=${SEED.length}$`,
          ),
        ),
      ]);
    },
  );

  it("logs the connection's own handshake calls from its hook, and nothing else there", () => {
    const lines: string[] = [];
    const tracer = new CallTracer({ level: 1, sink: (l) => lines.push(l) });
    const hook = tracer.hook("edge");
    hook?.({ call: "virConnectOpen", args: 'name="qemu:///system" flags=0', durationMs: 1.25 });
    hook?.({ call: "virDomainCreate", args: "dom=web-1", durationMs: 2 });
    expect(lines).toEqual(['rpc=virConnectOpen host=edge name="qemu:///system" flags=0 1.3ms']);
  });

  it("survives a sink that throws", async () => {
    const tracer = new CallTracer({
      level: 1,
      sink: () => {
        throw new Error("sink broken");
      },
    });
    const lv = new Libvirt(tracer.wrap("edge", new FakeCaller()));
    await expect(lv.domainLookupByName("web-1")).resolves.toEqual(dom);
  });
});
