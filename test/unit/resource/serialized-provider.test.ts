import * as pulumi from "@pulumi/pulumi";
import { describe, expect, it } from "vitest";
import { PROVIDER_MODULE, serializedProvider } from "../../../provider/resource/kvm-proxy";
import * as implementation from "../../../provider/resource/provider";

// The same serialization Pulumi applies to a dynamic resource's provider (dynamic/index.ts).
async function serialize(): Promise<{ text: string; containsSecrets: boolean }> {
  const sf = await pulumi.runtime.serializeFunction(() => serializedProvider, { allowSecrets: true });
  return { text: sf.text, containsSecrets: sf.containsSecrets };
}

describe("the serialized provider (__provider)", () => {
  it("is under 4 KiB, holds no absolute path and no secret, and only requires the implementation", async () => {
    const { text, containsSecrets } = await serialize();
    expect(Buffer.byteLength(text)).toBeLessThan(4096);
    expect(containsSecrets).toBe(false);
    expect(text).not.toMatch(/\/work\/|\/home\/|\/root\/|\/tmp\/|[A-Z]:\\\\/);
    expect(text).not.toContain("__awaiter");
    expect(text).not.toContain("KvmOperations");
    const requires = [...text.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]);
    expect(new Set(requires)).toEqual(new Set([PROVIDER_MODULE]));
  });

  it("is the same text every time (the same program on two machines gives the same state)", async () => {
    expect((await serialize()).text).toBe((await serialize()).text);
  });

  it("has every method, each delegating to an export of the implementation module", async () => {
    const { text } = await serialize();
    for (const m of ["configure", "check", "diff", "create", "read", "update", "delete"]) {
      expect(text).toContain(`${m}: __f`);
      expect(text).toContain(`.${m}(`);
      expect(typeof (implementation as Record<string, unknown>)[m]).toBe("function");
    }
  });
});
