import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  AUTONAME_RANDOM_BYTES,
  autoDomainName,
  bakeBuilderName,
  bakedImageVolumeName,
  bakeSeedVolumeName,
  cachedImageState,
  cachedImageVolumeName,
  DOMAIN_NAME_MAX,
  domainNameProblem,
  imageCacheKey,
  isValidDomainName,
  overlayVolumeName,
  parseBakeBuilderName,
  parseCachedImageVolumeName,
  partialMarkerVolumeName,
  perVmVolumeNames,
  seedVolumeName,
} from "../../../../provider/kvm/domain/names";

const RANDOM = Uint8Array.from([0x3f, 0x9a, 0x01, 0xbc]);
const SHA = "c".repeat(64);

describe("domain names", () => {
  it.each(["a", "web-1", "Web_1.prod", "0proxy", "a".repeat(DOMAIN_NAME_MAX)])("accepts %j", (name) => {
    expect(domainNameProblem(name)).toBeUndefined();
    expect(isValidDomainName(name)).toBe(true);
  });

  it.each([
    ["empty", ""],
    ["too long", "a".repeat(DOMAIN_NAME_MAX + 1)],
    ["a leading dot", ".hidden"],
    ["a leading dash", "-rf"],
    ["a leading underscore", "_x"],
    ["a slash", "a/b"],
    ["a space", "a b"],
    ["a quote", "a'b"],
    ["XML", "a<b"],
    ["non-ASCII", "prøxy"],
    ["a colon", "a:b"],
  ])("rejects a name with %s", (_, name) => {
    expect(domainNameProblem(name)).toBeDefined();
  });

  it("rejects a non-string", () => {
    expect(domainNameProblem(7)).toBe("must be a non-empty string");
  });
});

describe("autoDomainName", () => {
  it("appends the random bytes as hex", () => {
    expect(autoDomainName("web-proxy", RANDOM)).toBe("web-proxy-3f9a01bc");
  });

  it.each([
    ["Web Proxy", "web-proxy-3f9a01bc"],
    ["proxy::EU/west", "proxy-eu-west-3f9a01bc"],
    ["--x--", "x-3f9a01bc"],
    ["", "proxy-3f9a01bc"],
    ["ünïcode", "n-code-3f9a01bc"],
    ["!!!", "proxy-3f9a01bc"],
    ["a.b_c", "a.b_c-3f9a01bc"],
  ])("sanitises %j to %j", (resource, expected) => {
    expect(autoDomainName(resource, RANDOM)).toBe(expected);
  });

  it("shortens long resource names to fit 63 characters, without a trailing separator", () => {
    const name = autoDomainName(`${"a".repeat(53)}-${"b".repeat(20)}`, RANDOM);
    expect(name).toBe(`${"a".repeat(53)}-3f9a01bc`);
    expect(name.length).toBeLessThanOrEqual(DOMAIN_NAME_MAX);
  });

  it.each(["x", "Web Proxy", "a".repeat(200), "...", "-a-", "名前"])(
    "always yields a valid domain name for %j",
    (r) => {
      expect(isValidDomainName(autoDomainName(r, RANDOM))).toBe(true);
    },
  );

  it("uses only the first bytes and is deterministic for the same bytes", () => {
    expect(autoDomainName("p", Uint8Array.from([1, 2, 3, 4, 5, 6]))).toBe("p-01020304");
    expect(autoDomainName("p", RANDOM)).toBe(autoDomainName("p", RANDOM));
  });

  it("refuses too few random bytes", () => {
    expect(() => autoDomainName("p", new Uint8Array(AUTONAME_RANDOM_BYTES - 1))).toThrow(/random bytes/);
  });
});

describe("per-VM volume names", () => {
  it("names the overlay <domain>-root.qcow2", () => {
    expect(overlayVolumeName("web-1")).toBe("web-1-root.qcow2");
  });

  it("names the seed <domain>-seed.iso", () => {
    expect(seedVolumeName("web-1")).toBe("web-1-seed.iso");
  });

  it("lists both for Delete", () => {
    expect(perVmVolumeNames("web-1")).toEqual(["web-1-root.qcow2", "web-1-seed.iso"]);
  });

  it.each(["", "../x", "a/b"])("refuses the invalid domain name %j", (name) => {
    expect(() => overlayVolumeName(name)).toThrow(/invalid domain name/);
    expect(() => seedVolumeName(name)).toThrow(/invalid domain name/);
  });
});

describe("cached image names", () => {
  const image = { url: "https://example.com/d.qcow2", sha256: SHA, format: "qcow2" as const };

  it("names the volume kvmp-image-<16 hex>.<format>", () => {
    expect(cachedImageVolumeName(image)).toMatch(/^kvmp-image-[0-9a-f]{16}\.qcow2$/);
    expect(cachedImageVolumeName({ ...image, format: "raw" })).toMatch(/^kvmp-image-[0-9a-f]{16}\.raw$/);
  });

  it("is deterministic", () => {
    expect(cachedImageVolumeName({ ...image })).toBe(cachedImageVolumeName(image));
  });

  it("hashes the URL, a newline and the checksum", () => {
    // sha256("https://example.com/d.qcow2\n" + "c"*64), first 16 hex characters
    const expected = createHash("sha256").update(`${image.url}\n${SHA}`).digest("hex").slice(0, 16);
    expect(imageCacheKey(image)).toBe(expected);
  });

  it.each([
    ["another URL", { url: "https://example.com/e.qcow2" }],
    ["another checksum", { sha256: "d".repeat(64) }],
    ["no checksum", { sha256: undefined }],
    ["another format", { format: "raw" as const }],
  ])("gives a different volume for %s, so a changed image never replaces one in use", (_, change) => {
    expect(cachedImageVolumeName({ ...image, ...change })).not.toBe(cachedImageVolumeName(image));
  });

  it("treats an upper-case checksum like the lower-case one", () => {
    expect(imageCacheKey({ url: image.url, sha256: SHA.toUpperCase() })).toBe(imageCacheKey(image));
  });

  it("marks a partial upload with a .partial volume beside the image", () => {
    const name = cachedImageVolumeName(image);
    expect(partialMarkerVolumeName(name)).toBe(`${name}.partial`);
  });

  it("refuses a marker for a name that is not a cached image", () => {
    expect(() => partialMarkerVolumeName("web-1-root.qcow2")).toThrow(/not a cached-image volume/);
  });

  const stock = { key: "0123456789abcdef", baked: false };
  const baked = { key: "0123456789abcdef", baked: true };
  it.each([
    ["kvmp-image-0123456789abcdef.qcow2", { ...stock, format: "qcow2", partial: false }],
    ["kvmp-image-0123456789abcdef.raw", { ...stock, format: "raw", partial: false }],
    ["kvmp-image-0123456789abcdef.qcow2.partial", { ...stock, format: "qcow2", partial: true }],
    ["kvmp-baked-0123456789abcdef.qcow2", { ...baked, format: "qcow2", partial: false }],
    ["kvmp-baked-0123456789abcdef.qcow2.partial", { ...baked, format: "qcow2", partial: true }],
    ["kvmp-baked-0123456789abcdef.raw", undefined],
    ["kvmp-bake-0123456789abcdef-seed.iso", undefined],
    ["kvmp-image-0123456789abcdef.vmdk", undefined],
    ["kvmp-image-0123456789ABCDEF.qcow2", undefined],
    ["kvmp-image-0123.qcow2", undefined],
    ["web-1-root.qcow2", undefined],
    ["kvmp-image-0123456789abcdef.qcow2.partial.partial", undefined],
  ])("parses %s", (name, expected) => {
    const parsed = parseCachedImageVolumeName(name);
    if (expected === undefined) expect(parsed).toBeUndefined();
    else expect(parsed).toEqual({ ...expected, imageVolumeName: name.replace(/\.partial$/, "") });
  });

  it("names a bake's volume, builder and seed after its key, and reads the key back from the builder", () => {
    const key = "0123456789abcdef";
    expect(bakedImageVolumeName(key)).toBe("kvmp-baked-0123456789abcdef.qcow2");
    expect(partialMarkerVolumeName(bakedImageVolumeName(key))).toBe(
      "kvmp-baked-0123456789abcdef.qcow2.partial",
    );
    expect(bakeBuilderName(key)).toBe("kvmp-bake-0123456789abcdef");
    expect(bakeSeedVolumeName(key)).toBe("kvmp-bake-0123456789abcdef-seed.iso");
    expect(parseBakeBuilderName(bakeBuilderName(key))).toBe(key);
    expect(parseBakeBuilderName("kvmp-bake-0123")).toBeUndefined();
    expect(parseBakeBuilderName("edge-1")).toBeUndefined();
  });

  it.each(["", "0123", "0123456789ABCDEF", "0123456789abcdef/../x"])("refuses %j as a bake key", (key) => {
    expect(() => bakedImageVolumeName(key)).toThrow(/not a bake key/);
    expect(() => bakeBuilderName(key)).toThrow(/not a bake key/);
  });

  // An interrupted upload must never be taken as a complete image (history:
  // a cancelled upload left a truncated seed no later attempt would repair).
  it.each([
    [{ image: true, marker: false }, "complete"],
    [{ image: true, marker: true }, "partial"],
    [{ image: false, marker: true }, "partial"],
    [{ image: false, marker: false }, "absent"],
  ] as const)("reads %j as %s", (existing, state) => {
    expect(cachedImageState(existing)).toBe(state);
  });
});
