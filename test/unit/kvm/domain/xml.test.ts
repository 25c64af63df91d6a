import { describe, expect, it } from "vitest";
import { ProviderError } from "../../../../provider/errors";
import {
  attribute,
  childElement,
  childElements,
  decodeXmlEntities,
  el,
  escapeXmlAttr,
  escapeXmlText,
  forbiddenXmlCharacter,
  parseXml,
  serializeXml,
  textContent,
  XmlError,
} from "../../../../provider/kvm/domain/xml";

const HOSTILE = [
  "plain",
  "a'/><disk type='volume'",
  'a"/><disk type="volume"',
  "]]>",
  "<![CDATA[x]]>",
  "&",
  "&amp;",
  "<",
  ">",
  "tab\there",
  "new\nline",
  "cr\rhere",
  "crlf\r\nhere",
  "  padded  ",
  "",
  "unicode ✓ 😀 é",
  "<!-- comment -->",
  "&#60;",
  "<?pi x?>",
];

describe("serializeXml", () => {
  it("writes nested elements with attributes and text", () => {
    const xml = serializeXml(el("a", { x: "1", n: 2 }, el("b", {}, "t"), el("c")));
    expect(xml).toBe('<a x="1" n="2">\n  <b>t</b>\n  <c/>\n</a>');
  });

  it("writes one line with indent 0", () => {
    expect(serializeXml(el("a", {}, el("b"), el("c")), { indent: 0 })).toBe("<a><b/><c/></a>");
  });

  it("leaves out undefined and null attributes and skipped children", () => {
    expect(serializeXml(el("a", { x: undefined, y: null, z: "1" }, undefined, null, false, el("b")))).toBe(
      '<a z="1">\n  <b/>\n</a>',
    );
  });

  it("never indents inside an element that holds text", () => {
    expect(serializeXml(el("a", {}, " x ", el("b"), "y"))).toBe("<a> x <b/>y</a>");
  });

  it.each(HOSTILE)("escapes %j so it parses back unchanged in text and attributes", (value) => {
    const xml = serializeXml(el("root", { v: value }, el("t", {}, value)));
    const root = parseXml(xml);
    expect(attribute(root, "v")).toBe(value);
    expect(textContent(childElement(root, "t"))).toBe(value);
  });

  it.each(HOSTILE)("does not let %j add structure", (value) => {
    const root = parseXml(serializeXml(el("root", { v: value }, el("t", {}, value))));
    expect(Object.keys(root.attrs)).toEqual(["v"]);
    expect(childElements(root).map((c) => c.name)).toEqual(["t"]);
    expect(childElements(childElement(root, "t") as never)).toEqual([]);
  });

  it.each([
    ["&", "&amp;"],
    ["<", "&lt;"],
    [">", "&gt;"],
    ['"', "&quot;"],
    ["'", "&apos;"],
    ["\r", "&#13;"],
    ["\n", "&#10;"],
    ["\t", "&#9;"],
  ])("escapes %j in attribute values as %s", (raw, escaped) => {
    expect(escapeXmlAttr(raw)).toBe(escaped);
  });

  it("keeps newlines and tabs literal in text", () => {
    expect(escapeXmlText("a\nb\tc")).toBe("a\nb\tc");
  });

  it.each([
    "\u0000",
    "\u0001",
    "\u0008",
    "\u000b",
    "\u000c",
    "\u001f",
    "\ufffe",
    "\uffff",
    "\ud800",
    "\udc00x",
  ])("rejects %j, which XML cannot carry", (bad) => {
    expect(() => serializeXml(el("a", {}, `x${bad}`))).toThrow(XmlError);
    expect(() => serializeXml(el("a", { v: bad }))).toThrow(XmlError);
  });

  it("accepts a proper surrogate pair", () => {
    expect(forbiddenXmlCharacter("😀")).toBeUndefined();
  });

  it.each(["", "1a", "a b", "a>b", "a/", "a:b:c", "-a", "a'"])("rejects the element name %j", (name) => {
    expect(() => serializeXml(el(name))).toThrow(XmlError);
  });

  it.each(["", "a b", "a=", 'a"', "x/><y"])("rejects the attribute name %j", (name) => {
    expect(() => serializeXml(el("a", { [name]: "1" }))).toThrow(XmlError);
  });

  it("rejects a non-finite number", () => {
    expect(() => serializeXml(el("a", {}, Number.NaN))).toThrow(XmlError);
    expect(() => serializeXml(el("a", { n: Number.POSITIVE_INFINITY }))).toThrow(XmlError);
  });

  it("raises a permanent ProviderError", () => {
    try {
      serializeXml(el("a b"));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ProviderError);
      expect((err as ProviderError).kind).toBe("permanent");
    }
  });
});

describe("parseXml", () => {
  it("resolves namespaces whatever the prefix", () => {
    const root = parseXml('<x:a xmlns:x="urn:one"><x:b/><c xmlns="urn:two"/><d/></x:a>');
    expect(root).toMatchObject({ prefix: "x", localName: "a", namespace: "urn:one" });
    const [b, c, d] = root.children.filter((n) => typeof n !== "string") as never[];
    expect(b).toMatchObject({ localName: "b", namespace: "urn:one" });
    expect(c).toMatchObject({ localName: "c", namespace: "urn:two" });
    expect(d).toMatchObject({ localName: "d", namespace: "" });
  });

  it("matches child elements in the parent's namespace by default", () => {
    const root = parseXml('<y:a xmlns:y="urn:one" xmlns:z="urn:two"><y:b/><z:b/></y:a>');
    expect(childElements(root, "b").map((n) => n.name)).toEqual(["y:b"]);
    expect(childElements(root, "b", "urn:two").map((n) => n.name)).toEqual(["z:b"]);
  });

  it.each([
    ["&lt;&gt;&amp;&quot;&apos;", "<>&\"'"],
    ["&#60;&#x3C;&#x3c;", "<<<"],
    ["&#10;&#13;&#9;", "\n\r\t"],
    ["&#x1F600;", "😀"],
  ])("decodes the references in %j (libvirt and libxml2 emit numeric ones)", (raw, decoded) => {
    expect(textContent(parseXml(`<a>${raw}</a>`))).toBe(decoded);
    expect(attribute(parseXml(`<a v="${raw}"/>`), "v")).toBe(decoded);
  });

  it("keeps CDATA content literally", () => {
    expect(textContent(parseXml("<a>x<![CDATA[<b>&amp;]]>y</a>"))).toBe("x<b>&amp;y");
  });

  it("normalises literal line ends in text and literal whitespace in attributes", () => {
    const root = parseXml('<a v="1\n2\t3">x\r\ny\rz</a>');
    expect(attribute(root, "v")).toBe("1 2 3");
    expect(textContent(root)).toBe("x\ny\nz");
  });

  it("drops comments and the XML declaration", () => {
    const root = parseXml('<?xml version="1.0"?>\n<!-- hi --><a><!-- c -->t</a>');
    expect(root.children).toEqual(["t"]);
  });

  it("does not expand DOCTYPE-declared entities", () => {
    expect(() => parseXml('<!DOCTYPE a [<!ENTITY e "boom">]><a>&e;</a>')).toThrow(XmlError);
  });

  it("does not expand nested entity bombs", () => {
    const bomb =
      '<!DOCTYPE a [<!ENTITY a "x"><!ENTITY b "&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;">]><a>&c;</a>';
    expect(() => parseXml(bomb)).toThrow(XmlError);
  });

  it.each([
    ["not XML", "hello"],
    ["empty", ""],
    ["unclosed", "<a><b></a>"],
    ["two roots", "<a/><b/>"],
    ["text after root", "<a/>x"],
    ["text before root", "x<a/>"],
    ["text hidden between root and a comment", "<a/>x<!-- c -->"],
    ["duplicate attribute", '<a b="1" b="2"/>'],
    ["'<' in an attribute", '<a b="<"/>'],
    ["bare ampersand", "<a>x & y</a>"],
    ["unknown entity", "<a>&nbsp;</a>"],
    ["unterminated reference", '<a b="&amp"/>'],
    ["reference to a control character", "<a>&#1;</a>"],
    ["reference beyond Unicode", "<a>&#x110000;</a>"],
    ["unbound prefix", "<p:a/>"],
    ["control character", "<a>\u0001</a>"],
    ["prototype-polluting attribute", '<a __proto__="x"/>'],
  ])("rejects %s", (_, xml) => {
    expect(() => parseXml(xml)).toThrow(XmlError);
  });

  it("reports where malformed XML broke", () => {
    expect(() => parseXml("<a>\n<b></a>")).toThrow(/line 2/);
  });
});

describe("decodeXmlEntities", () => {
  it("leaves text without references alone", () => {
    expect(decodeXmlEntities("a b c")).toBe("a b c");
  });
});
