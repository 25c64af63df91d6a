import { describe, expect, it } from "vitest";
import { consoleLines } from "../../../provider/kvm/guest/console-text";
import { CallTracer } from "../../../provider/kvm/host/call-tracer";
import { ConsoleTail } from "../../../provider/kvm/host/console";
import { KvmOperations } from "../../../provider/kvm/host/operations";
import { testHost } from "../../support/test-host";
import { hostPool } from "../kvm/ops-helpers";
import { connectionPerTest, removeDomain, transports, uniqueName } from "./support";

/**
 * A guest with a serial console and no disk: the firmware prints to it, then finds nothing to boot.
 * OVMF draws its shell there with terminal escapes, and spends about ten seconds of a core under TCG
 * doing so; SeaBIOS prints a few lines (268 bytes) and idles, at half a second.
 */
function consoleDomainXml(name: string, firmware: "uefi" | "bios"): string {
  const os =
    firmware === "uefi"
      ? `<os firmware='efi'>
    <type arch='x86_64' machine='q35'>hvm</type>
    <firmware><feature enabled='no' name='secure-boot'/></firmware>
  </os>`
      : `<os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <bios useserial='yes'/>
  </os>`;
  return `<domain type='qemu'>
  <name>${name}</name>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <features><acpi/></features>
  ${os}
  <devices>
    <serial type='pty'><target port='0'/></serial>
    <console type='pty'><target type='serial' port='0'/></console>
  </devices>
</domain>`;
}

async function until(what: string, test: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!test()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.each(transports)("the serial console over $name", ({ make }) => {
  const t = connectionPerTest(make, removeDomain);

  /** A running guest printing on its console: SeaBIOS's lines unless a test reads OVMF's. */
  async function running(firmware: "uefi" | "bios" = "bios") {
    const name = uniqueName("console");
    t.created.push(name);
    const dom = await t.lv.domainDefineXmlFlags(consoleDomainXml(name, firmware), 0);
    return t.lv.domainCreateWithFlags(dom, 0);
  }

  it("reads what the firmware prints, which reads as plain lines for an error", async () => {
    const dom = await running("uefi");
    const tail = await ConsoleTail.open(t.lv, dom);
    expect(tail).toBeDefined();
    // With no disk OVMF starts its shell, drawing on the serial console with terminal escapes.
    await until("the firmware's shell prompt", () => (tail?.text() ?? "").includes("Shell>"));
    await tail?.stop();
    const text = tail?.text() ?? "";
    expect(text).toContain("\u001b[");
    const lines = consoleLines(text);
    expect(lines.some((l) => l.startsWith("UEFI Interactive Shell"))).toBe(true);
    const controls = [...lines.join("\n")].filter((c) => c < " " && c !== "\n" && c !== "\t");
    expect(controls).toEqual([]);
  });

  it("stops reading when stopped: nothing more arrives", async () => {
    const dom = await running();
    const tail = await ConsoleTail.open(t.lv, dom);
    await until("console output", () => (tail?.text() ?? "").length > 0);
    await tail?.stop();
    const seen = tail?.text();
    await new Promise((r) => setTimeout(r, 3_000));
    expect(tail?.text()).toBe(seen);
    // Released: another client can open it now.
    const next = await ConsoleTail.open(t.lv, dom);
    expect(next).toBeDefined();
    await next?.stop();
  });

  it("is refused while another client holds it: undefined, and the holder keeps it", async () => {
    const dom = await running();
    const first = await ConsoleTail.open(t.lv, dom);
    expect(first).toBeDefined();
    expect(await ConsoleTail.open(t.lv, dom)).toBeUndefined();
    await first?.stop();
  });

  it("is undefined for a domain that does not run", async () => {
    const name = uniqueName("console-off");
    t.created.push(name);
    const dom = await t.lv.domainDefineXmlFlags(consoleDomainXml(name, "bios"), 0);
    expect(await ConsoleTail.open(t.lv, dom)).toBeUndefined();
  });

  it("keeps only the last bytes of a long output", async () => {
    const dom = await running();
    const tail = await ConsoleTail.open(t.lv, dom, 16);
    await until("console output", () => (tail?.text() ?? "").length >= 16);
    await tail?.stop();
    expect(Buffer.byteLength(tail?.text() ?? "")).toBeLessThanOrEqual(16 * 3);
  });

  it.each([0, 2] as const)(
    "opens through the host operations' wrapped connection too (trace level %i), as create does: by the UUID it knows, without a lookup",
    async (level) => {
      const dom = await running();
      const lines: string[] = [];
      const pool = hostPool(testHost(), { tracer: new CallTracer({ level, sink: (l) => lines.push(l) }) });
      const ops = new KvmOperations(pool);
      try {
        const tail = await ops.openConsole("local", dom.name, dom.uuid);
        expect(tail).toBeDefined();
        await until("console output", () => (tail?.text() ?? "").length > 0);
        await tail?.stop();
        if (level > 0) {
          expect(lines.filter((l) => l.startsWith("rpc=virDomainOpenConsole"))).toHaveLength(1);
          expect(lines.filter((l) => l.startsWith("rpc=virDomainLookupByName"))).toEqual([]);
        }
      } finally {
        await pool.closeAll();
      }
    },
  );
});
