import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CallTracer,
  fileSink,
  sinkFromEnv,
  stderrSink,
  traceLevelFromEnv,
} from "../../../../provider/kvm/host/call-tracer";
import type { CallOptions, ReadStream, RpcCaller } from "../../../../provider/libvirt/connection";
import { Libvirt } from "../../../../provider/libvirt/libvirt";
import type { Procedure } from "../../../../provider/libvirt/procedures";

const dom = { name: "web-1", uuid: "8f0c2a43-1b7e-4c11-9a51-0d3c2b6f9e10", id: 3 };

/** Answers every lookup with `dom`; nothing else is called here. */
const caller: RpcCaller = {
  call<A, R>(_proc: Procedure<A, R>, _args: A, _options?: CallOptions): Promise<R> {
    return Promise.resolve(dom as R);
  },
  upload(): Promise<number> {
    return Promise.reject(new Error("not used"));
  },
  readStream(): Promise<ReadStream> {
    return Promise.reject(new Error("not used"));
  },
};

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "kvmp-trace-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("KVMP_TRACE_FILE", () => {
  it("turns level 1 on when KVMP_LOG is unset, and leaves an explicit KVMP_LOG alone", () => {
    expect(traceLevelFromEnv({ KVMP_TRACE_FILE: "/x" })).toBe(1);
    expect(traceLevelFromEnv({ KVMP_TRACE_FILE: "/x", KVMP_LOG: "" })).toBe(1);
    expect(traceLevelFromEnv({ KVMP_TRACE_FILE: "/x", KVMP_LOG: "2" })).toBe(2);
    expect(traceLevelFromEnv({ KVMP_TRACE_FILE: "/x", KVMP_LOG: "0" })).toBe(0);
    expect(traceLevelFromEnv({ KVMP_TRACE_FILE: "" })).toBe(0);
  });

  it("selects the file sink only when set", () => {
    expect(sinkFromEnv({})).toBe(stderrSink);
    expect(sinkFromEnv({ KVMP_TRACE_FILE: "" })).toBe(stderrSink);
    expect(sinkFromEnv({ KVMP_TRACE_FILE: path.join(dir, "t") })).not.toBe(stderrSink);
  });

  it("appends one whole line per call from every tracer writing to it, owner-only", async () => {
    const file = path.join(dir, "trace.log");
    const a = new Libvirt(new CallTracer({ level: 1, sink: fileSink(file) }).wrap("edge", caller));
    const b = new Libvirt(new CallTracer({ level: 1, sink: fileSink(file) }).wrap("core", caller));
    await Promise.all([a.domainLookupByName("web-1"), b.domainLookupByName("web-1")]);
    await a.domainLookupByName("web-2");
    const lines = readFileSync(file, "utf8").split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toHaveLength(3);
    expect(lines.filter((l) => /^rpc=virDomainLookupByName host=edge name="web-1" /.test(l))).toHaveLength(1);
    expect(lines.filter((l) => /^rpc=virDomainLookupByName host=core name="web-1" /.test(l))).toHaveLength(1);
    expect(lines[2]).toMatch(/^rpc=virDomainLookupByName host=edge name="web-2" \d+\.\dms uuid=/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it("is what a tracer built from the environment writes to", async () => {
    const file = path.join(dir, "env.log");
    const saved = { log: process.env.KVMP_LOG, file: process.env.KVMP_TRACE_FILE };
    delete process.env.KVMP_LOG;
    process.env.KVMP_TRACE_FILE = file;
    try {
      const tracer = new CallTracer();
      expect(tracer.level).toBe(1);
      await new Libvirt(tracer.wrap("edge", caller)).domainLookupByName("web-1");
    } finally {
      if (saved.log === undefined) delete process.env.KVMP_LOG;
      else process.env.KVMP_LOG = saved.log;
      if (saved.file === undefined) delete process.env.KVMP_TRACE_FILE;
      else process.env.KVMP_TRACE_FILE = saved.file;
    }
    expect(readFileSync(file, "utf8")).toMatch(/^rpc=virDomainLookupByName host=edge name="web-1" .*\n$/);
  });
});
