import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isTransient, ProviderError } from "../../../provider/errors";
import { UnixSocketTransport } from "../../../provider/transport/unix";

const dir = mkdtempSync(path.join(os.tmpdir(), "kvmpt-unix-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("UnixSocketTransport", () => {
  it("defaults to libvirtd's system socket", () => {
    expect(new UnixSocketTransport().description).toBe("unix:/var/run/libvirt/libvirt-sock");
  });

  it("a missing socket is a transient error naming the path", async () => {
    const p = path.join(dir, "absent-sock");
    const err = await new UnixSocketTransport(p).open().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect(isTransient(err)).toBe(true);
    expect((err as Error).message).toContain(p);
    expect((err as Error).message).toContain("ENOENT");
  });

  it("a socket nobody listens on (ECONNREFUSED) is transient", async () => {
    const p = path.join(dir, "dead-sock");
    // A socket file that is bound but not listening, as a crashed daemon leaves behind.
    execFileSync("python3", ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", p]);
    const err = await new UnixSocketTransport(p).open().catch((e: unknown) => e);
    expect(isTransient(err)).toBe(true);
    expect((err as Error).message).toContain(p);
    expect((err as Error).message).toContain("ECONNREFUSED");
  });

  it("opens a byte stream to a listening socket", async () => {
    const p = path.join(dir, "live-sock");
    const server = net.createServer((s) => s.end("hello"));
    await new Promise<void>((r) => server.listen(p, r));
    const stream = await new UnixSocketTransport(p).open();
    const chunks: Buffer[] = [];
    for await (const c of stream) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe("hello");
    server.close();
  });
});
