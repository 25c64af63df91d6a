import { describe, expect, it } from "vitest";
import {
  buildCachedImageVolumeXml,
  buildOverlayVolumeXml,
  buildSeedVolumeXml,
  GIB,
  type OverlayVolumeSpec,
  overlayCapacityBytes,
} from "../../../../provider/kvm/domain/volume-xml";
import {
  attribute,
  childElement,
  descend,
  parseXml,
  textContent,
  type XmlNode,
} from "../../../../provider/kvm/domain/xml";
import { ValidationError } from "../../../../provider/kvm/validation";

const OVERLAY: OverlayVolumeSpec = {
  name: "web-1-root.qcow2",
  backingPath: "/var/lib/libvirt/images/kvmp-image-0123456789abcdef.qcow2",
  backingFormat: "qcow2",
  imageVirtualSizeBytes: 2 * GIB,
  requestedSizeBytes: 10 * GIB,
};

function overlay(overrides: Partial<OverlayVolumeSpec> = {}): XmlNode {
  return parseXml(buildOverlayVolumeXml({ ...OVERLAY, ...overrides }));
}

describe("overlay volume", () => {
  // Peer issue: a volume made from a source image could not be sized; an
  // overlay with a backing store can be larger than the image.
  it.each([
    ["request above the image size", 2 * GIB, 10 * GIB, 10 * GIB],
    ["request below the image size", 3 * GIB, 1 * GIB, 3 * GIB],
    ["request equal to the image size", 5 * GIB, 5 * GIB, 5 * GIB],
    ["unaligned image size", 2 * GIB + 512, 2 * GIB, 2 * GIB + 512],
  ])("capacity with a %s is max(image, request)", (_, image, requested, expected) => {
    expect(overlayCapacityBytes(image, requested)).toBe(expected);
    const root = overlay({ imageVirtualSizeBytes: image, requestedSizeBytes: requested });
    expect(childElement(root, "capacity")?.attrs).toEqual({ unit: "bytes" });
    expect(textContent(childElement(root, "capacity"))).toBe(String(expected));
  });

  // libvirt creates qcow2 volumes as compat 0.10 unless told otherwise.
  it("asks for qcow2 compat 1.1", () => {
    const target = childElement(overlay(), "target") as XmlNode;
    expect(attribute(childElement(target, "format"), "type")).toBe("qcow2");
    expect(textContent(childElement(target, "compat"))).toBe("1.1");
  });

  it.each(["qcow2", "raw"] as const)(
    "backs onto the cached image by path, with backing format %s",
    (format) => {
      const backing = childElement(overlay({ backingFormat: format }), "backingStore") as XmlNode;
      expect(textContent(childElement(backing, "path"))).toBe(OVERLAY.backingPath);
      expect(attribute(childElement(backing, "format"), "type")).toBe(format);
    },
  );

  it("is a sparse file volume with the given name", () => {
    const root = overlay();
    expect(root.attrs).toEqual({ type: "file" });
    expect(textContent(childElement(root, "name"))).toBe("web-1-root.qcow2");
    expect(textContent(childElement(root, "allocation"))).toBe("0");
  });

  it("escapes a hostile backing path", () => {
    const path = "/pool/x'</path><path>/etc/shadow";
    expect(textContent(descend(overlay({ backingPath: path }), "backingStore", "path"))).toBe(path);
  });

  it.each<[string, Partial<OverlayVolumeSpec>, string]>([
    ["an empty name", { name: "" }, "name"],
    ["a name with a slash", { name: "../x" }, "name"],
    ["a relative backing path", { backingPath: "x.qcow2" }, "backingPath"],
    ["an unknown backing format", { backingFormat: "vmdk" as never }, "backingFormat"],
    ["a zero image size", { imageVirtualSizeBytes: 0 }, "imageVirtualSizeBytes"],
    ["a fractional request", { requestedSizeBytes: 1.5 }, "requestedSizeBytes"],
    ["an unsafe integer", { requestedSizeBytes: 2 ** 60 }, "requestedSizeBytes"],
  ])("rejects %s", (_, overrides, property) => {
    try {
      buildOverlayVolumeXml({ ...OVERLAY, ...overrides });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).failures.map((f) => f.property)).toEqual([property]);
    }
  });
});

describe("seed volume", () => {
  it("is a raw volume of the given size", () => {
    const root = parseXml(buildSeedVolumeXml("web-1-seed.iso", 1_048_576));
    expect(textContent(childElement(root, "name"))).toBe("web-1-seed.iso");
    expect(textContent(childElement(root, "capacity"))).toBe("1048576");
    expect(attribute(descend(root, "target", "format"), "type")).toBe("raw");
    expect(descend(root, "backingStore")).toBeUndefined();
  });

  it.each([0, -1, 1.5])("rejects the size %s", (size) => {
    expect(() => buildSeedVolumeXml("s.iso", size)).toThrow(ValidationError);
  });
});

describe("cached image volume", () => {
  it.each(["qcow2", "raw"] as const)("takes the image's format %s and the given sizes", (format) => {
    const root = parseXml(
      buildCachedImageVolumeXml({
        name: `kvmp-image-0123456789abcdef.${format}`,
        format,
        capacityBytes: 123456,
        allocationBytes: 65536,
      }),
    );
    expect(attribute(descend(root, "target", "format"), "type")).toBe(format);
    expect(textContent(childElement(root, "capacity"))).toBe("123456");
    expect(textContent(childElement(root, "allocation"))).toBe("65536");
  });

  it("defaults the allocation to 0", () => {
    const xml = buildCachedImageVolumeXml({ name: "i.raw", format: "raw", capacityBytes: 1 });
    expect(textContent(childElement(parseXml(xml), "allocation"))).toBe("0");
  });

  it("rejects every bad field at once", () => {
    try {
      buildCachedImageVolumeXml({
        name: "a/b",
        format: "iso" as never,
        capacityBytes: 0,
        allocationBytes: -1,
      });
      expect.unreachable();
    } catch (err) {
      expect((err as ValidationError).failures.map((f) => f.property)).toEqual([
        "name",
        "format",
        "capacityBytes",
        "allocationBytes",
      ]);
    }
  });
});
