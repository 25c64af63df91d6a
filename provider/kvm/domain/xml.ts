/**
 * A tiny XML serializer and a strict parser front end.
 *
 * Every piece of XML this provider sends to libvirt is built as an element
 * tree and serialized here: attribute values and text are always escaped, and
 * element and attribute names are validated, so no user value (a name, a tag,
 * a path) can ever change the document's structure. Never build XML by string
 * concatenation.
 *
 * Parsing goes through fast-xml-parser with entity processing switched off:
 * this module decodes the five predefined entities and numeric character
 * references itself (libvirt and libxml2 emit `&#10;`, `&#13;`), rejects any
 * other entity reference, and so never expands DOCTYPE-declared entities.
 * Namespaces are resolved here too, so callers match elements by namespace
 * URI and local name whatever prefix the document used.
 */
import { XMLParser, XMLValidator } from "fast-xml-parser";
import { messageOf, ProviderError } from "../../errors";

/** Raised for XML that cannot be built (bad name, forbidden character) or parsed. Always permanent. */
export class XmlError extends ProviderError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("permanent", message, options);
  }
}

// ---------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------

/** An attribute value; `undefined` and `null` leave the attribute out. */
export type XmlAttrValue = string | number | undefined | null;

/** A child of an element: an element, text, or a skipped placeholder (`undefined`, `null`, `false`). */
export type XmlChild = XmlElement | string | number | undefined | null | false;

/** An element of a tree to serialize. */
export interface XmlElement {
  readonly name: string;
  readonly attrs?: Readonly<Record<string, XmlAttrValue>>;
  readonly children?: readonly XmlChild[];
}

/**
 * Builds an element. Children that are `undefined`, `null` or `false` are
 * skipped, so conditional parts can be written inline:
 * `el("os", {}, bios ? undefined : el("firmware"))`.
 */
export function el(
  name: string,
  attrs?: Readonly<Record<string, XmlAttrValue>>,
  ...children: XmlChild[]
): XmlElement {
  return { name, attrs: attrs ?? {}, children };
}

// Names: the ASCII subset of XML's Name production, with at most one prefix.
// That is all libvirt's schemas and our own namespace need.
const NAME = /^[A-Za-z_][A-Za-z0-9._-]*(?::[A-Za-z_][A-Za-z0-9._-]*)?$/;

// Characters XML 1.0 does not allow anywhere, even escaped: C0 controls other
// than tab, newline and carriage return, U+FFFE, U+FFFF, and lone surrogates.
function isForbiddenCodeUnit(s: string, i: number): boolean {
  const c = s.charCodeAt(i);
  if (c < 0x20) return c !== 0x09 && c !== 0x0a && c !== 0x0d;
  if (c === 0xfffe || c === 0xffff) return true;
  if (c >= 0xd800 && c <= 0xdbff) {
    const next = s.charCodeAt(i + 1);
    return !(next >= 0xdc00 && next <= 0xdfff);
  }
  if (c >= 0xdc00 && c <= 0xdfff) {
    const prev = i > 0 ? s.charCodeAt(i - 1) : 0;
    return !(prev >= 0xd800 && prev <= 0xdbff);
  }
  return false;
}

/** True when `name` may be used as an element or attribute name by {@link serializeXml}. */
export function isValidXmlName(name: string): boolean {
  return NAME.test(name);
}

/**
 * The first character of `value` that XML 1.0 cannot carry (control
 * characters other than tab/newline/carriage return, U+FFFE/U+FFFF, lone
 * surrogates), described as `U+XXXX`, or undefined when there is none.
 */
export function forbiddenXmlCharacter(value: string): string | undefined {
  for (let i = 0; i < value.length; i++) {
    if (isForbiddenCodeUnit(value, i))
      return `U+${value.charCodeAt(i).toString(16).toUpperCase().padStart(4, "0")}`;
  }
  return undefined;
}

function checkChars(value: string, where: string): void {
  const bad = forbiddenXmlCharacter(value);
  if (bad !== undefined) throw new XmlError(`${where} contains ${bad}, which XML cannot carry`);
}

const TEXT_ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&apos;",
  "\r": "&#13;",
};
const ATTR_ESCAPES: Record<string, string> = { ...TEXT_ESCAPES, "\n": "&#10;", "\t": "&#9;" };

/**
 * Escapes text content: `& < > " '` become entities and carriage returns a
 * character reference (so XML line-end normalisation cannot eat them).
 * Throws XmlError on characters XML cannot carry.
 */
export function escapeXmlText(value: string): string {
  checkChars(value, "text");
  return value.replace(/[&<>"'\r]/g, (c) => TEXT_ESCAPES[c] ?? c);
}

/**
 * Escapes an attribute value: as {@link escapeXmlText}, plus newline and tab
 * as character references, which attribute-value normalisation would
 * otherwise turn into spaces. Throws XmlError on characters XML cannot carry.
 */
export function escapeXmlAttr(value: string): string {
  checkChars(value, "attribute value");
  return value.replace(/[&<>"'\r\n\t]/g, (c) => ATTR_ESCAPES[c] ?? c);
}

function scalar(value: string | number, where: string): string {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new XmlError(`${where} is not a finite number: ${value}`);
    return String(value);
  }
  if (typeof value !== "string") throw new XmlError(`${where} is not a string or number`);
  return value;
}

/** Options for {@link serializeXml}. */
export interface SerializeOptions {
  /** Spaces per nesting level; 0 puts the whole document on one line. Default 2. */
  indent?: number;
}

/**
 * Serializes an element tree to a string (no XML declaration).
 *
 * Attribute values and text are escaped; names are checked against
 * {@link isValidXmlName}; characters XML cannot carry throw XmlError. Elements
 * that contain text are written on one line, so indentation never adds
 * whitespace to a text value.
 */
export function serializeXml(root: XmlElement, options: SerializeOptions = {}): string {
  const indent = options.indent ?? 2;
  const out: string[] = [];
  write(root, 0);
  return out.join("");

  function write(node: XmlElement, depth: number): void {
    if (typeof node !== "object" || node === null || typeof node.name !== "string") {
      throw new XmlError("element expected");
    }
    if (!isValidXmlName(node.name)) throw new XmlError(`invalid element name ${JSON.stringify(node.name)}`);
    let open = `<${node.name}`;
    for (const [name, raw] of Object.entries(node.attrs ?? {})) {
      if (raw === undefined || raw === null) continue;
      if (!isValidXmlName(name))
        throw new XmlError(`invalid attribute name ${JSON.stringify(name)} on <${node.name}>`);
      open += ` ${name}="${escapeXmlAttr(scalar(raw, `attribute ${name} of <${node.name}>`))}"`;
    }
    const children = (node.children ?? []).filter(
      (c): c is XmlElement | string | number => c !== undefined && c !== null && c !== false,
    );
    if (children.length === 0) {
      out.push(`${open}/>`);
      return;
    }
    const inline = indent === 0 || children.some((c) => typeof c !== "object");
    out.push(`${open}>`);
    for (const child of children) {
      if (typeof child === "object") {
        if (!inline) out.push(`\n${" ".repeat(indent * (depth + 1))}`);
        write(child, inline ? 0 : depth + 1);
      } else {
        out.push(escapeXmlText(scalar(child, `text of <${node.name}>`)));
      }
    }
    if (!inline) out.push(`\n${" ".repeat(indent * depth)}`);
    out.push(`</${node.name}>`);
  }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/** The namespace URI bound to the reserved `xml` prefix. */
export const XML_NAMESPACE = "http://www.w3.org/XML/1998/namespace";

/** A parsed element with its namespace resolved. */
export interface XmlNode {
  /** The qualified name as written, e.g. `kvmp:proxy`. */
  readonly name: string;
  /** The prefix as written, or "" when there is none. */
  readonly prefix: string;
  readonly localName: string;
  /** The resolved namespace URI, or "" for no namespace. */
  readonly namespace: string;
  /** Attribute values by qualified name as written, entities decoded. Namespace declarations included. */
  readonly attrs: Readonly<Record<string, string>>;
  /** Child elements and text (CDATA merged into text; comments dropped), in document order. */
  readonly children: readonly (XmlNode | string)[];
}

const parser = new XMLParser({
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: "",
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: false,
  removeNSPrefix: false,
  allowBooleanAttributes: false,
  processEntities: false,
  htmlEntities: false,
  ignoreDeclaration: true,
  ignorePiTags: true,
  cdataPropName: "#cdata",
  commentPropName: "#comment",
});

const PREDEFINED: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

/**
 * Decodes entity and character references in raw XML text: the five
 * predefined entities and decimal/hex character references. Any other `&`
 * (an undeclared or DOCTYPE-declared entity, a bare ampersand) throws XmlError.
 */
export function decodeXmlEntities(raw: string): string {
  return raw.replace(/&([^;&\s]*);?/g, (match, body: string) => {
    if (!match.endsWith(";"))
      throw new XmlError(`bare '&' or unterminated reference ${JSON.stringify(match)}`);
    const named = PREDEFINED[body];
    if (named !== undefined) return named;
    const num = /^#(?:x([0-9A-Fa-f]{1,6})|([0-9]{1,7}))$/.exec(body);
    if (!num) throw new XmlError(`unsupported entity reference ${JSON.stringify(match)}`);
    const cp = num[1] !== undefined ? Number.parseInt(num[1], 16) : Number.parseInt(num[2] ?? "", 10);
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      throw new XmlError(`invalid character reference ${JSON.stringify(match)}`);
    }
    const ch = String.fromCodePoint(cp);
    if (forbiddenXmlCharacter(ch) !== undefined)
      throw new XmlError(`invalid character reference ${JSON.stringify(match)}`);
    return ch;
  });
}

type RawNode = Record<string, unknown>;

/**
 * Parses a document and returns its root element, namespaces resolved.
 *
 * Strict: the input must be well-formed (checked with fast-xml-parser's
 * validator plus checks it lacks: one root element, no `<` in attribute
 * values, bound prefixes, known entities only). Literal line ends in text are
 * normalised to `\n` and literal whitespace in attribute values to spaces, as
 * XML requires; character references survive. Throws XmlError.
 */
export function parseXml(xml: string): XmlNode {
  if (typeof xml !== "string") throw new XmlError("XML input is not a string");
  const bad = forbiddenXmlCharacter(xml);
  if (bad !== undefined) throw new XmlError(`XML contains ${bad}, which XML cannot carry`);
  const valid = XMLValidator.validate(xml, { allowBooleanAttributes: false });
  if (valid !== true) {
    const { msg, line, col } = valid.err;
    throw new XmlError(`malformed XML at line ${line}, column ${col}: ${msg}`);
  }
  checkNoTextOutsideRoot(xml);
  let raw: unknown;
  try {
    raw = parser.parse(xml);
  } catch (cause) {
    throw new XmlError(`malformed XML: ${messageOf(cause)}`, { cause });
  }
  if (!Array.isArray(raw)) throw new XmlError("malformed XML: no content");
  const scope = new Map<string, string>([["xml", XML_NAMESPACE]]);
  let root: XmlNode | undefined;
  for (const node of raw as RawNode[]) {
    const converted = convert(node, scope);
    if (converted === undefined) continue;
    if (typeof converted === "string") {
      if (converted.trim() !== "") throw new XmlError("malformed XML: text outside the root element");
      continue;
    }
    if (root !== undefined) throw new XmlError("malformed XML: more than one root element");
    root = converted;
  }
  if (root === undefined) throw new XmlError("malformed XML: no root element");
  return root;
}

// fast-xml-parser silently drops text before or after the root element, and
// its validator accepts it: scan the prolog and epilog (only whitespace,
// comments, processing instructions and a DOCTYPE may appear there).
function checkNoTextOutsideRoot(xml: string): void {
  let i = 0;
  for (;;) {
    while (i < xml.length && /\s/.test(xml.charAt(i))) i++;
    if (xml.startsWith("<?", i)) i = skipPast(xml, "?>", i);
    else if (xml.startsWith("<!--", i)) i = skipPast(xml, "-->", i);
    else if (xml.startsWith("<", i)) break;
    else throw new XmlError("malformed XML: text before the root element");
  }
  let end = xml.length;
  for (;;) {
    while (end > 0 && /\s/.test(xml.charAt(end - 1))) end--;
    const tail = xml.slice(0, end);
    if (tail.endsWith("-->")) end = tail.lastIndexOf("<!--");
    else if (tail.endsWith("?>")) end = tail.lastIndexOf("<?");
    else if (tail.endsWith(">")) return;
    else throw new XmlError("malformed XML: text after the root element");
    if (end < 0) throw new XmlError("malformed XML: unbalanced comment or processing instruction");
  }
}

function skipPast(xml: string, terminator: string, from: number): number {
  const at = xml.indexOf(terminator, from);
  if (at < 0) throw new XmlError(`malformed XML: missing ${terminator}`);
  return at + terminator.length;
}

function normaliseLineEnds(s: string): string {
  return s.replace(/\r\n?/g, "\n");
}

function rawText(children: unknown): string {
  if (!Array.isArray(children)) return "";
  return children.map((c) => String((c as RawNode)["#text"] ?? "")).join("");
}

function convert(node: RawNode, parentScope: ReadonlyMap<string, string>): XmlNode | string | undefined {
  const keys = Object.keys(node).filter((k) => k !== ":@");
  const key = keys[0];
  if (key === undefined || keys.length !== 1) throw new XmlError("malformed XML: unexpected parser output");
  if (key === "#text") return decodeXmlEntities(normaliseLineEnds(String(node[key])));
  if (key === "#cdata") return normaliseLineEnds(rawText(node[key]));
  if (key === "#comment") return undefined;
  if (key.startsWith("?") || key.startsWith("!")) return undefined;

  const rawAttrs = (node[":@"] ?? {}) as Record<string, unknown>;
  const attrs: Record<string, string> = Object.create(null);
  const scope = new Map(parentScope);
  for (const [name, value] of Object.entries(rawAttrs)) {
    if (!isValidXmlName(name)) throw new XmlError(`unsupported attribute name ${JSON.stringify(name)}`);
    const rawValue = String(value);
    if (rawValue.includes("<")) throw new XmlError(`malformed XML: '<' in the value of attribute ${name}`);
    const decoded = decodeXmlEntities(rawValue.replace(/\r\n|[\r\n\t]/g, " "));
    attrs[name] = decoded;
    if (name === "xmlns") scope.set("", decoded);
    else if (name.startsWith("xmlns:")) {
      if (decoded === "") throw new XmlError(`malformed XML: empty namespace for prefix ${name.slice(6)}`);
      scope.set(name.slice(6), decoded);
    }
  }
  if (!isValidXmlName(key)) throw new XmlError(`unsupported element name ${JSON.stringify(key)}`);
  const colon = key.indexOf(":");
  const prefix = colon < 0 ? "" : key.slice(0, colon);
  const localName = colon < 0 ? key : key.slice(colon + 1);
  const namespace = scope.get(prefix);
  if (namespace === undefined) {
    if (prefix !== "")
      throw new XmlError(`malformed XML: namespace prefix ${JSON.stringify(prefix)} is not bound`);
  }
  for (const name of Object.keys(attrs)) {
    const p = name.includes(":") ? name.slice(0, name.indexOf(":")) : "";
    if (p !== "" && p !== "xmlns" && !scope.has(p)) {
      throw new XmlError(`malformed XML: namespace prefix ${JSON.stringify(p)} is not bound`);
    }
  }
  const children: (XmlNode | string)[] = [];
  const rawChildren = node[key];
  if (Array.isArray(rawChildren)) {
    for (const child of rawChildren as RawNode[]) {
      const converted = convert(child, scope);
      if (converted === undefined) continue;
      const last = children[children.length - 1];
      if (typeof converted === "string" && typeof last === "string")
        children[children.length - 1] = last + converted;
      else children.push(converted);
    }
  }
  return { name: key, prefix, localName, namespace: namespace ?? "", attrs, children };
}

// ---------------------------------------------------------------------------
// Reading parsed trees
// ---------------------------------------------------------------------------

/**
 * Child elements of `node` with the given local name (any when omitted), in
 * `namespace` — by default the parent's own namespace, which is what libvirt's
 * un-namespaced schemas and a namespaced metadata element both want.
 */
export function childElements(node: XmlNode, localName?: string, namespace = node.namespace): XmlNode[] {
  return node.children.filter(
    (c): c is XmlNode =>
      typeof c !== "string" &&
      c.namespace === namespace &&
      (localName === undefined || c.localName === localName),
  );
}

/** The first child element matching as in {@link childElements}, or undefined. */
export function childElement(
  node: XmlNode,
  localName: string,
  namespace = node.namespace,
): XmlNode | undefined {
  return childElements(node, localName, namespace)[0];
}

/** The element reached by following local names from `node` (same namespace each step), or undefined. */
export function descend(node: XmlNode | undefined, ...path: string[]): XmlNode | undefined {
  let current = node;
  for (const step of path) {
    if (current === undefined) return undefined;
    current = childElement(current, step);
  }
  return current;
}

/** The concatenated direct text children of `node` (CDATA included), untrimmed. */
export function textContent(node: XmlNode | undefined): string {
  if (node === undefined) return "";
  return node.children.filter((c): c is string => typeof c === "string").join("");
}

/** An attribute value of `node`, or undefined. */
export function attribute(node: XmlNode | undefined, name: string): string | undefined {
  if (node === undefined) return undefined;
  return Object.hasOwn(node.attrs, name) ? node.attrs[name] : undefined;
}
