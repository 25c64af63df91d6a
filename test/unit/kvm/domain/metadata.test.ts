import { describe, expect, it } from "vitest";
import { isTransient } from "../../../../provider/errors";
import {
  buildMetadataXml,
  canonicalJson,
  hashSpec,
  MANAGED_BY,
  METADATA_NAMESPACE,
  MetadataError,
  parseMetadata,
} from "../../../../provider/kvm/domain/metadata";
import { XmlError } from "../../../../provider/kvm/domain/xml";
import { ValidationError } from "../../../../provider/kvm/validation";
import { SHA, sampleMetadata } from "../fixtures";

const NS = METADATA_NAMESPACE;

/** What virDomainGetMetadata returned on the test host: namespace stripped, re-indented. */
function asLibvirtReturnsIt(xml: string): string {
  return xml.replace(/<(\/?)kvmp:/g, "<$1").replace(/ xmlns:kvmp="[^"]*"/, "");
}

describe("buildMetadataXml", () => {
  it("writes the ownership contract in our namespace", () => {
    expect(buildMetadataXml(sampleMetadata())).toBe(
      [
        `<kvmp:proxy xmlns:kvmp="${NS}" version="1" managedBy="${MANAGED_BY}" createdAt="2026-09-04T14:04:00.000Z">`,
        '  <kvmp:owner project="infra" stack="prod" urn="urn:pulumi:prod::infra::kvm:index:Proxy::web"/>',
        `  <kvmp:image ref="debian" url="https://cloud.debian.org/images/debian-13.qcow2" format="qcow2" sha256="${SHA}"/>`,
        `  <kvmp:spec hash="${"b".repeat(64)}" proxyPort="3128" diskGiB="10"/>`,
        '  <kvmp:tag key="team" value="crawl"/>',
        '  <kvmp:tag key="env" value="prod"/>',
        "</kvmp:proxy>",
      ].join("\n"),
    );
  });

  it("records a baked image with its recipe, reads it back, and refuses a bake without its volume", () => {
    const image = {
      ...sampleMetadata().image,
      bake: { packages: ["htop", "jq"], userDataMac: "c".repeat(64) },
      baked: "kvmp-baked-0123456789abcdef.qcow2",
    };
    const xml = buildMetadataXml(sampleMetadata({ image }));
    expect(xml).toContain(
      `baked="kvmp-baked-0123456789abcdef.qcow2" bakePackages="htop jq" bakeUserDataMac="${"c".repeat(64)}"`,
    );
    expect(parseMetadata(asLibvirtReturnsIt(xml))?.image).toEqual(image);
    const bare = {
      ...sampleMetadata().image,
      bake: { packages: [] },
      baked: "kvmp-baked-0123456789abcdef.qcow2",
    };
    expect(parseMetadata(buildMetadataXml(sampleMetadata({ image: bare })))?.image).toEqual(bare);
    const { baked: _baked, ...unbaked } = image;
    expect(() => buildMetadataXml(sampleMetadata({ image: unbaked }))).toThrow(/image\.baked/);
    expect(() => buildMetadataXml(sampleMetadata({ image: { ...image, baked: "other.qcow2" } }))).toThrow(
      /image\.baked/,
    );
  });

  it("records the owner's backend identity when known, reads it back, and refuses one that is not 16 hex", () => {
    const m = sampleMetadata({ owner: { ...sampleMetadata().owner, backend: "0123456789abcdef" } });
    expect(buildMetadataXml(m)).toContain('backend="0123456789abcdef"');
    expect(parseMetadata(buildMetadataXml(m))?.owner.backend).toBe("0123456789abcdef");
    expect(parseMetadata(buildMetadataXml(sampleMetadata()))?.owner).not.toHaveProperty("backend");
    expect(() =>
      buildMetadataXml(sampleMetadata({ owner: { ...sampleMetadata().owner, backend: "/home/me/.pulumi" } })),
    ).toThrow(/owner\.backend/);
  });

  it("records each static address with its segment (what address pools count), and reads them back as libvirt returns them", () => {
    const addresses = [
      { segment: "bridge:br-public", cidr: "203.0.113.10/24" },
      { segment: "bridge:br-public", cidr: "2001:db8::10/64" },
      { segment: "direct:eth1", cidr: "198.51.100.4/24" },
    ];
    const xml = buildMetadataXml(sampleMetadata({ addresses }));
    expect(xml).toContain('  <kvmp:address segment="bridge:br-public" value="203.0.113.10/24"/>');
    expect(parseMetadata(asLibvirtReturnsIt(xml))?.addresses).toEqual(addresses);
    expect(parseMetadata(asLibvirtReturnsIt(buildMetadataXml(sampleMetadata())))?.addresses).toBeUndefined();
    expect(() => buildMetadataXml(sampleMetadata({ addresses: [{ segment: "br0", cidr: "x" }] }))).toThrow(
      /addresses\[0\]\.segment: must be <kind>:<name>.*addresses\[0\]\.cidr/s,
    );
  });

  it("leaves out an unpinned checksum", () => {
    const m = sampleMetadata();
    delete m.image.sha256;
    expect(buildMetadataXml(m)).not.toContain("sha256");
  });

  it.each<[string, Partial<Parameters<typeof sampleMetadata>[0]>, string]>([
    ["port 0", { proxyPort: 0 }, "proxyPort"],
    ["a fractional port", { proxyPort: 3128.5 }, "proxyPort"],
    ["a zero disk", { diskGiB: 0 }, "diskGiB"],
    ["a bad spec hash", { specHash: "xyz" }, "specHash"],
    ["a date that is not ISO 8601", { createdAt: "Tue, 1 Sep 2026" }, "createdAt"],
    ["an impossible date", { createdAt: "2026-13-45T99:99:99Z" }, "createdAt"],
    ["an empty tag key", { tags: { "": "x" } }, "tags."],
    ["an overlong tag value", { tags: { k: "v".repeat(257) } }, "tags.k"],
    ["an empty URN", { owner: { project: "p", stack: "s", urn: "" } }, "owner.urn"],
  ])("rejects %s, naming the property", (_, change, property) => {
    try {
      buildMetadataXml(sampleMetadata(change));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).failures.map((f) => f.property)).toContain(property);
    }
  });

  it("rejects more than 64 tags", () => {
    const tags = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"]));
    expect(() => buildMetadataXml(sampleMetadata({ tags }))).toThrow(/at most 64 tags/);
  });
});

describe("parseMetadata", () => {
  const m = sampleMetadata();
  const built = buildMetadataXml(m);

  it.each([
    ["the fragment as built", built],
    ["the fragment as virDomainGetMetadata returns it (namespace stripped)", asLibvirtReturnsIt(built)],
    ["another prefix", built.replaceAll("kvmp:", "x:").replace("xmlns:kvmp", "xmlns:x")],
    ["a default namespace", built.replaceAll("kvmp:", "").replace("xmlns:kvmp", "xmlns")],
    [
      "reordered attributes and double-quoted with single quotes",
      built.replace(`version="1" managedBy="${MANAGED_BY}"`, `managedBy='${MANAGED_BY}' version='1'`),
    ],
    ["a full domain XML", `<domain type="kvm"><name>web-1</name><metadata>${built}</metadata></domain>`],
    [
      "a domain XML with other tools' metadata around ours",
      `<domain type="kvm"><metadata><a:x xmlns:a="urn:a"/>${built}<b:y xmlns:b="urn:b"><b:z/></b:y></metadata></domain>`,
    ],
    ["a bare <metadata> element", `<metadata>${built}</metadata>`],
  ])("reads %s", (_, xml) => {
    expect(parseMetadata(xml)).toEqual(m);
  });

  it.each([
    ["a domain without metadata", '<domain type="kvm"><name>x</name></domain>'],
    [
      "a domain with only other tools' metadata",
      '<domain><metadata><a:proxy xmlns:a="urn:other" version="1"/></metadata></domain>',
    ],
    [
      "another tool's fragment",
      '<libosinfo:libosinfo xmlns:libosinfo="http://libosinfo.org/xmlns/libvirt/domain/1.0"/>',
    ],
    ["an unrelated un-namespaced element", "<config><x/></config>"],
    ["a look-alike in a near-miss namespace", `<k:proxy xmlns:k="${NS}/"/>`],
  ])("returns undefined for %s", (_, xml) => {
    expect(parseMetadata(xml)).toBeUndefined();
  });

  it.each([
    ["missing owner", built.replace(/\s*<kvmp:owner[^>]*\/>/, ""), "owner"],
    ["an unknown version", built.replace('version="1"', 'version="2"'), "version"],
    ["a foreign managedBy", built.replace(`managedBy="${MANAGED_BY}"`, 'managedBy="terraform"'), "managedBy"],
    ["a non-numeric port", built.replace('proxyPort="3128"', 'proxyPort="http"'), "proxyPort"],
    ["a port out of range", built.replace('proxyPort="3128"', 'proxyPort="70000"'), "proxyPort"],
    ["a bad format", built.replace('format="qcow2"', 'format="vmdk"'), "image.format"],
    ["a duplicate tag", built.replace('key="env"', 'key="team"'), "duplicate tag"],
    ["a tag without value", built.replace(' value="prod"', ""), "value"],
    ["two of our elements", `<metadata>${built}${built}</metadata>`, "more than one"],
  ])("rejects our element with %s as MetadataError", (_, xml, reason) => {
    expect(() => parseMetadata(xml)).toThrow(MetadataError);
    expect(() => parseMetadata(xml)).toThrow(reason);
  });

  it("names the action for a VM another version made: the package to upgrade and the command", () => {
    expect(() => parseMetadata(built.replace('version="1"', 'version="2"'))).toThrow(
      /unsupported version "2" \(this provider reads 1\): another version of pulumi-kvm-proxy made this VM; upgrade pulumi-kvm-proxy .*npm install pulumi-kvm-proxy@latest/,
    );
  });

  it("fails permanently on our malformed element", () => {
    try {
      parseMetadata(built.replace('version="1"', 'version="9"'));
      expect.unreachable();
    } catch (err) {
      expect(isTransient(err)).toBe(false);
    }
  });

  it("throws XmlError for input that is not XML", () => {
    expect(() => parseMetadata("not xml")).toThrow(XmlError);
  });

  it.each([
    ["a tag that looks like XML", { "a'/><x": "</kvmp:proxy>&amp;" }],
    ["newlines, tabs and carriage returns", { multi: "line 1\nline 2\r\n\tindented  " }],
    ["CDATA terminators", { "]]>": "<![CDATA[" }],
    ["non-ASCII", { ключ: "值 😀" }],
    ["an empty value", { empty: "" }],
  ])("round-trips %s unchanged, also through libvirt's namespace stripping", (_, tags) => {
    const meta = sampleMetadata({ tags });
    const xml = buildMetadataXml(meta);
    expect(parseMetadata(xml)).toEqual(meta);
    expect(parseMetadata(asLibvirtReturnsIt(xml))).toEqual(meta);
  });

  it("reads libvirt's re-serialisation with numeric references and literal apostrophes", () => {
    // As dumped by libvirt 9.0 on the test host for a value "a&b\n" / "x <y> ' \r".
    const xml = built.replace('key="team" value="crawl"', 'key="a&amp;b&#10;" value="x &lt;y&gt; \' &#13;"');
    expect(parseMetadata(xml)?.tags).toEqual({ "a&b\n": "x <y> ' \r", env: "prod" });
  });
});

describe("hashSpec", () => {
  it("ignores key order at every level", () => {
    expect(hashSpec({ a: 1, b: { c: [1, 2], d: "x" } })).toBe(hashSpec({ b: { d: "x", c: [1, 2] }, a: 1 }));
  });

  it("drops undefined members", () => {
    expect(hashSpec({ a: 1, b: undefined })).toBe(hashSpec({ a: 1 }));
  });

  it.each([
    [{ a: 1 }, { a: 2 }],
    [{ a: [1, 2] }, { a: [2, 1] }],
    [{ a: "1" }, { a: 1 }],
    [{ a: null }, {}],
  ])("distinguishes %j from %j", (x, y) => {
    expect(hashSpec(x)).not.toBe(hashSpec(y));
  });

  it("is SHA-256 hex of the canonical JSON", () => {
    expect(canonicalJson({ b: [true, null], a: "x" })).toBe('{"a":"x","b":[true,null]}');
    expect(hashSpec({})).toBe("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
  });

  it.each([Number.NaN, () => 1, Symbol("s"), 10n])("refuses %s", (v) => {
    expect(() => hashSpec({ v })).toThrow();
  });
});
