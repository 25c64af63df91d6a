/**
 * The ownership contract stored in each VM's domain XML: a `<metadata>` child
 * element in a namespace of our own. It marks the domain as managed by this
 * provider, names its owner (Pulumi project, stack, resource URN) and keeps
 * the few spec fields `read` cannot recover from libvirt itself.
 *
 * Format (every value an attribute, so libvirt's re-serialisation cannot
 * alter whitespace in values):
 *
 * ```xml
 * <kvmp:proxy xmlns:kvmp="https://pulumi-kvm-proxy.dev/xmlns/proxy/v1"
 *             version="1" managedBy="pulumi-kvm-proxy" createdAt="2026-01-02T03:04:05.000Z">
 *   <kvmp:owner project="infra" stack="prod" urn="urn:pulumi:prod::infra::kvm:Proxy::web" backend="3f9a01bc5e7d2a10"/>
 *   <kvmp:image ref="debian" url="https://..." format="qcow2" sha256="..."
 *               baked="kvmp-baked-<16 hex>.qcow2" bakePackages="htop jq" bakeUserDataSha256="..."/>
 *   <kvmp:spec hash="<sha256 hex>" proxyPort="3128" diskGiB="10"/>
 *   <kvmp:tag key="team" value="crawl"/>
 *   <kvmp:address segment="bridge:br-public" value="203.0.113.10/24"/>
 * </kvmp:proxy>
 * ```
 *
 * Memory, vCPUs, firmware, MAC and network are read from the domain XML
 * itself; the host and name from the provider ID.
 */
import { createHash } from "node:crypto";
import { ProviderError, UPGRADE_ACTION } from "../../errors";
import { IMAGE_FORMATS, type ImageFormat, type ImageIdentity, isPackageName } from "../config/image";
import { Failures } from "../validation";
import { parseCachedImageVolumeName } from "./names";
import {
  attribute,
  childElements,
  el,
  forbiddenXmlCharacter,
  parseXml,
  serializeXml,
  type XmlAttrValue,
  type XmlElement,
  type XmlNode,
} from "./xml";

/** The namespace URI of our metadata element (also the `uri` argument of virDomainSetMetadata/GetMetadata). */
export const METADATA_NAMESPACE = "https://pulumi-kvm-proxy.dev/xmlns/proxy/v1";
/** The prefix we write (the `key` argument of virDomainSetMetadata). Readers must not rely on it. */
export const METADATA_PREFIX = "kvmp";
/** Local name of the metadata root element. */
export const METADATA_ROOT = "proxy";
/** Value of the managed-by marker. */
export const MANAGED_BY = "pulumi-kvm-proxy";
/** Format version written; other versions are rejected by {@link parseMetadata}. */
export const METADATA_VERSION = "1";

/** Who owns a VM. */
export interface MetadataOwner {
  project: string;
  stack: string;
  urn: string;
  /**
   * Which Pulumi backend the stack lives in: a short hash of its URL (no
   * path or bucket name on the host). The orphan sweep judges only VMs of
   * the backend it runs against. Absent on VMs made before it was recorded.
   */
  backend?: string;
}

/**
 * The image a VM was created from: its identity without the firmware (the
 * domain XML carries that), plus the reference as the resource gave it (an
 * image key or a direct URL).
 */
export type MetadataImage = Pick<ImageIdentity, "url" | "format" | "sha256" | "bake"> & {
  ref: string;
  /** The baked volume (host/image-bake.ts) the VM's disk is backed by: present exactly when `bake` is. */
  baked?: string;
};

/** Everything stored in a VM's metadata element. */
export interface ProxyMetadata {
  owner: MetadataOwner;
  image: MetadataImage;
  /** SHA-256 hex of the canonical spec (see {@link hashSpec}): tells whether the live VM matches the inputs. */
  specHash: string;
  /** Creation time, ISO 8601 (as from `Date.prototype.toISOString`). */
  createdAt: string;
  proxyPort: number;
  /** The requested root disk size (the overlay may be larger: at least the image's virtual size). */
  diskGiB: number;
  /** Memory and vCPUs the VM was made with: what placement counts on its host (absent on VMs made before). */
  memoryMiB?: number;
  vcpus?: number;
  /** The storage pool holding its disks: whose capacity it counts against (absent on VMs made before). */
  storagePool?: string;
  tags: Record<string, string>;
  /**
   * The VM's static addresses (CIDR) and the segment each is on (nic.ts
   * segmentOf): what an address pool counts as taken, whichever stack made
   * the VM (absent on VMs made before it was recorded).
   */
  addresses?: MetadataAddress[];
}

/** A static address of a VM and the segment (bridge, network, macvtap parent) it is on. */
export interface MetadataAddress {
  segment: string;
  cidr: string;
}

/** Our own metadata element exists but is not valid. Always permanent. */
export class MetadataError extends ProviderError {
  constructor(reason: string) {
    super("permanent", `invalid ${MANAGED_BY} metadata: ${reason}`);
  }
}

const HEX64 = /^[0-9a-f]{64}$/;
const ISO8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;
/** Most tags a VM may carry. */
export const MAX_TAGS = 64;
const TAG_KEY = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const MAX_TAG_KEY = 128;
const MAX_TAG_VALUE = 256;

/**
 * Why a tag cannot be stored, or undefined: the one place for tag limits.
 * Stored tags (what the metadata carries and reads back) have keys of 1-128
 * characters and string values of at most 256, both carriable by XML. Tags
 * given as resource inputs (`input: true`, what `check` applies) also keep
 * their keys to letters, digits, '.', '_', ':', '/' and '-', starting with a
 * letter or digit, so they read well in `virsh dumpxml` and tools.
 */
export function tagProblem(
  key: string,
  value: unknown,
  options: { input?: boolean } = {},
): string | undefined {
  if (options.input === true && !TAG_KEY.test(key)) {
    return "key must be 1-128 letters, digits, '.', '_', ':', '/' or '-', starting with a letter or digit";
  }
  if (key === "" || key.length > MAX_TAG_KEY) return `key must be 1-${MAX_TAG_KEY} characters`;
  if (typeof value !== "string") return "value must be a string";
  if (value.length > MAX_TAG_VALUE) return `value must be at most ${MAX_TAG_VALUE} characters`;
  const bad = forbiddenXmlCharacter(value) ?? forbiddenXmlCharacter(key);
  if (bad !== undefined || value.includes("\0"))
    return `value contains ${bad ?? "U+0000"}, which XML cannot carry`;
  return undefined;
}

/**
 * Checks metadata before it is written, recording failures under `f` with
 * paths named after the resource inputs (`proxyPort`, `tags.<key>`, `owner.urn`).
 */
export function checkMetadata(m: ProxyMetadata, f: Failures = new Failures()): Failures {
  const str = (v: unknown, path: string) => {
    if (typeof v !== "string" || v === "") f.fail(path, "must be a non-empty string");
  };
  str(m.owner?.project, "owner.project");
  str(m.owner?.stack, "owner.stack");
  str(m.owner?.urn, "owner.urn");
  if (m.owner?.backend !== undefined && !/^[0-9a-f]{16}$/.test(m.owner.backend)) {
    f.fail("owner.backend", "must be 16 lower-case hexadecimal characters");
  }
  str(m.image?.ref, "image");
  str(m.image?.url, "image.url");
  if (!IMAGE_FORMATS.includes(m.image?.format)) f.fail("image.format", "must be qcow2 or raw");
  if (m.image?.sha256 !== undefined && !HEX64.test(m.image.sha256)) {
    f.fail("image.sha256", "must be 64 lower-case hexadecimal characters");
  }
  if ((m.image?.bake === undefined) !== (m.image?.baked === undefined)) {
    f.fail("image.baked", "must be given exactly when image.bake is");
  }
  const baked = m.image?.baked === undefined ? undefined : parseCachedImageVolumeName(m.image.baked);
  if (m.image?.baked !== undefined && (baked?.baked !== true || baked.partial)) {
    f.fail("image.baked", "must be a baked volume's name (kvmp-baked-<16 hex>.qcow2)");
  }
  if (m.image?.bake !== undefined) {
    const { packages, userDataMac } = m.image.bake;
    if (!Array.isArray(packages) || !packages.every(isPackageName))
      f.fail("image.bake.packages", "must be package names");
    if (userDataMac !== undefined && !HEX64.test(userDataMac))
      f.fail("image.bake.userDataMac", "must be 64 lower-case hexadecimal characters");
  }
  if (typeof m.specHash !== "string" || !HEX64.test(m.specHash)) {
    f.fail("specHash", "must be 64 lower-case hexadecimal characters");
  }
  if (!isIsoTime(m.createdAt)) f.fail("createdAt", "must be an ISO 8601 date-time");
  if (!Number.isInteger(m.proxyPort) || m.proxyPort < 1 || m.proxyPort > 65535) {
    f.fail("proxyPort", "must be an integer from 1 to 65535");
  }
  if (!Number.isInteger(m.diskGiB) || m.diskGiB < 1) f.fail("diskGiB", "must be a positive integer");
  for (const k of ["memoryMiB", "vcpus"] as const) {
    const v = m[k];
    if (v !== undefined && (!Number.isInteger(v) || v < 1)) f.fail(k, "must be a positive integer");
  }
  const tags = m.tags ?? {};
  if (typeof tags !== "object" || tags === null) f.fail("tags", "must be an object");
  else {
    const entries = Object.entries(tags);
    if (entries.length > MAX_TAGS) f.fail("tags", `at most ${MAX_TAGS} tags`);
    for (const [k, v] of entries) {
      const problem = tagProblem(k, v);
      if (problem !== undefined) f.fail(`tags.${k}`, problem);
    }
  }
  for (const [i, a] of (m.addresses ?? []).entries()) {
    if (typeof a?.segment !== "string" || !/^[a-z]+:\S{1,128}$/.test(a.segment))
      f.fail(`addresses[${i}].segment`, "must be <kind>:<name>");
    if (typeof a?.cidr !== "string" || !/^[0-9a-f.:]+\/\d{1,3}$/.test(a.cidr))
      f.fail(`addresses[${i}].cidr`, "must be an address with its prefix");
  }
  return f;
}

function isIsoTime(v: unknown): v is string {
  return typeof v === "string" && ISO8601.test(v) && !Number.isNaN(Date.parse(v));
}

/**
 * The metadata element as a tree, for embedding in the domain XML's
 * `<metadata>`. Throws ValidationError when {@link checkMetadata} finds failures.
 */
export function buildMetadataElement(m: ProxyMetadata): XmlElement {
  checkMetadata(m).throwIfAny("invalid VM metadata");
  const p = (name: string) => `${METADATA_PREFIX}:${name}`;
  return el(
    p(METADATA_ROOT),
    {
      [`xmlns:${METADATA_PREFIX}`]: METADATA_NAMESPACE,
      version: METADATA_VERSION,
      managedBy: MANAGED_BY,
      createdAt: m.createdAt,
    },
    el(p("owner"), {
      project: m.owner.project,
      stack: m.owner.stack,
      urn: m.owner.urn,
      backend: m.owner.backend,
    }),
    el(p("image"), {
      ref: m.image.ref,
      url: m.image.url,
      format: m.image.format,
      sha256: m.image.sha256,
      baked: m.image.baked,
      bakePackages: m.image.bake?.packages.join(" "),
      bakeUserDataMac: m.image.bake?.userDataMac,
    }),
    el(p("spec"), {
      hash: m.specHash,
      proxyPort: m.proxyPort,
      diskGiB: m.diskGiB,
      memoryMiB: m.memoryMiB,
      vcpus: m.vcpus,
      storagePool: m.storagePool,
    }),
    ...Object.entries(m.tags ?? {}).map(([key, value]) => el(p("tag"), { key, value })),
    ...(m.addresses ?? []).map((a) => el(p("address"), { segment: a.segment, value: a.cidr })),
  );
}

/**
 * The metadata fragment as a string: what virDomainSetMetadata takes (with
 * key {@link METADATA_PREFIX} and uri {@link METADATA_NAMESPACE}) and what
 * the domain XML embeds. Throws ValidationError on invalid metadata.
 */
export function buildMetadataXml(m: ProxyMetadata): string {
  return serializeXml(buildMetadataElement(m));
}

/**
 * Our metadata element as virDomainSetMetadata takes it: unprefixed and
 * without the xmlns declaration (libvirt applies the namespace and prefix
 * itself, and refuses a fragment that declares them: "failed to create a new
 * XML namespace").
 */
export function metadataForSet(m: ProxyMetadata): string {
  const strip = (e: XmlElement): XmlElement => {
    const attrs: Record<string, XmlAttrValue> = {};
    for (const [k, v] of Object.entries(e.attrs ?? {})) if (!k.startsWith("xmlns")) attrs[k] = v;
    return {
      name: e.name.replace(/^[^:]*:/, ""),
      attrs,
      children: (e.children ?? []).map((c) => (typeof c === "object" && c !== null ? strip(c) : c)),
    };
  };
  return serializeXml(strip(buildMetadataElement(m)));
}

/**
 * Reads our metadata from XML, accepting:
 * - the fragment as virDomainGetMetadata returns it — libvirt strips the
 *   namespace, so the root is a bare `<proxy>` (a namespaced root in our
 *   namespace, under any prefix, is accepted too);
 * - a full domain XML (or a `<metadata>` element), where it is found by
 *   namespace URI among `<metadata>`'s children whatever the prefix.
 *
 * Returns undefined when there is no element of ours: no metadata, or only
 * other tools' metadata — those are never an error. Throws MetadataError
 * (permanent) when our element is present but invalid (missing or bad fields,
 * unknown version), and XmlError when the input is not well-formed XML.
 */
export function parseMetadata(xml: string): ProxyMetadata | undefined {
  return findMetadata(parseXml(xml));
}

/** As {@link parseMetadata}, for an already parsed tree. */
export function findMetadata(root: XmlNode): ProxyMetadata | undefined {
  if (root.namespace === METADATA_NAMESPACE) {
    if (root.localName !== METADATA_ROOT)
      throw new MetadataError(`unexpected root element <${root.localName}>`);
    return decode(root);
  }
  if (root.namespace !== "") return undefined;
  if (root.localName === METADATA_ROOT) return decode(root);
  let container: XmlNode | undefined;
  if (root.localName === "metadata") container = root;
  else if (root.localName === "domain") container = childElements(root, "metadata")[0];
  if (container === undefined) return undefined;
  const ours = childElements(container, undefined, METADATA_NAMESPACE);
  if (ours.length === 0) return undefined;
  if (ours.length > 1) throw new MetadataError("more than one element in our namespace");
  const node = ours[0] as XmlNode;
  if (node.localName !== METADATA_ROOT)
    throw new MetadataError(`unexpected root element <${node.localName}>`);
  return decode(node);
}

function decode(root: XmlNode): ProxyMetadata {
  const version = attribute(root, "version");
  if (version !== METADATA_VERSION) {
    throw new MetadataError(
      `unsupported version ${JSON.stringify(version ?? null)} (this provider reads ${METADATA_VERSION}): ` +
        `another version of pulumi-kvm-proxy made this VM; ${UPGRADE_ACTION}`,
    );
  }
  const managedBy = attribute(root, "managedBy");
  if (managedBy !== MANAGED_BY) throw new MetadataError(`managedBy is ${JSON.stringify(managedBy ?? null)}`);
  const one = (name: string): XmlNode => {
    const found = childElements(root, name);
    if (found.length !== 1) throw new MetadataError(`expected exactly one <${name}>, found ${found.length}`);
    return found[0] as XmlNode;
  };
  const need = (node: XmlNode, name: string): string => {
    const v = attribute(node, name);
    if (v === undefined) throw new MetadataError(`<${node.localName}> lacks ${name}`);
    return v;
  };
  const int = (node: XmlNode, name: string): number => {
    const raw = need(node, name);
    if (!/^[0-9]{1,15}$/.test(raw))
      throw new MetadataError(`<${node.localName}> ${name} is not an integer: ${raw}`);
    return Number(raw);
  };
  const owner = one("owner");
  const image = one("image");
  const spec = one("spec");
  const tags: Record<string, string> = {};
  for (const tag of childElements(root, "tag")) {
    const key = need(tag, "key");
    if (Object.hasOwn(tags, key)) throw new MetadataError(`duplicate tag ${JSON.stringify(key)}`);
    tags[key] = need(tag, "value");
  }
  const addresses = childElements(root, "address").map((a) => ({
    segment: need(a, "segment"),
    cidr: need(a, "value"),
  }));
  const backend = attribute(owner, "backend");
  const m: ProxyMetadata = {
    owner: {
      project: need(owner, "project"),
      stack: need(owner, "stack"),
      urn: need(owner, "urn"),
      ...(backend !== undefined ? { backend } : {}),
    },
    image: { ref: need(image, "ref"), url: need(image, "url"), format: need(image, "format") as ImageFormat },
    specHash: need(spec, "hash"),
    createdAt: need(root, "createdAt"),
    proxyPort: int(spec, "proxyPort"),
    diskGiB: int(spec, "diskGiB"),
    tags,
    ...(addresses.length > 0 ? { addresses } : {}),
  };
  for (const k of ["memoryMiB", "vcpus"] as const) if (attribute(spec, k) !== undefined) m[k] = int(spec, k);
  const storagePool = attribute(spec, "storagePool");
  if (storagePool !== undefined) m.storagePool = storagePool;
  const sha256 = attribute(image, "sha256");
  if (sha256 !== undefined) m.image.sha256 = sha256;
  const baked = attribute(image, "baked");
  if (baked !== undefined) {
    m.image.baked = baked;
    const packages = attribute(image, "bakePackages") ?? "";
    m.image.bake = { packages: packages === "" ? [] : packages.split(" ") };
    // A plain digest (`bakeUserDataSha256`) written before is not read back: it named no key.
    const userDataMac = attribute(image, "bakeUserDataMac");
    if (userDataMac !== undefined) m.image.bake.userDataMac = userDataMac;
  }
  const failures = checkMetadata(m);
  if (!failures.empty) {
    throw new MetadataError(failures.list.map((x) => `${x.property}: ${x.reason}`).join("; "));
  }
  return m;
}

/**
 * SHA-256 hex of a canonical JSON rendering of `spec`: object keys sorted at
 * every level, `undefined` members dropped, arrays kept in order. Equal specs
 * hash equal regardless of key order.
 */
export function hashSpec(spec: unknown): string {
  return createHash("sha256").update(canonicalJson(spec)).digest("hex");
}

/** The canonical JSON text {@link hashSpec} hashes. Throws on values JSON cannot represent. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value))
      throw new ProviderError("permanent", `cannot hash non-finite number ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value))
    return `[${value.map((v) => (v === undefined ? "null" : canonicalJson(v))).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  throw new ProviderError("permanent", `cannot hash a value of type ${typeof value}`);
}
