/**
 * `check`: validates every input and every config reference of a KvmProxy,
 * applies defaults, resolves the image and chooses the domain name. Every
 * failure names the property (`memoryMiB`, `image.sha256`, `tags.team`) and
 * they are all reported together, at preview, before anything is created.
 *
 * Values not known yet (during preview) arrive as {@link UNKNOWN}; they are
 * passed through unvalidated. Pure apart from the random bytes of autonames,
 * which the caller supplies.
 */

import type { HostConfig } from "../kvm/config";
import { MAX_MEMORY_MIB, MAX_VCPUS, MIN_MEMORY_MIB, macAddressProblem } from "../kvm/domain-xml";
import { parseDuration } from "../kvm/duration";
import {
  FIRMWARES,
  IMAGE_FORMATS,
  type ImageConfig,
  type ImageIdentity,
  parseImage,
  resolveImage,
} from "../kvm/image";
import { MAX_TAGS, tagProblem } from "../kvm/metadata";
import { AUTONAME_RANDOM_BYTES, autoDomainName, domainNameProblem } from "../kvm/names";
import { readNicFields } from "../kvm/nic";
import { Failures, ValidationError, type ValidationFailure } from "../kvm/validation";
import {
  type CheckedInputs,
  DEFAULTS,
  MAX_DISK_GIB,
  MAX_TIMEOUT_SECONDS,
  type OwnerInput,
  REPLACE_PROPERTIES,
  UNKNOWN,
  UPDATE_PROPERTIES,
} from "./args";
import { checkProxy } from "./check-proxy";
import { checkSeed, readSeedInput } from "./check-seed";
import type { StackConfig } from "./config";
import { defaultUserData } from "./squid";

/**
 * Every input property a KvmProxy accepts: those that rebuild the VM and those
 * updated in place (plus `owner`, set by the class, and `autoname`, set by check).
 */
export const INPUT_PROPERTIES: readonly string[] = [...REPLACE_PROPERTIES, ...UPDATE_PROPERTIES];

const INTERNAL = ["__provider", "owner", "autoname", "resolvedImage"];

/** What check needs besides the inputs. */
export interface CheckContext {
  config: StackConfig;
  /** Random bytes for autonames (at least 4). */
  randomBytes: (n: number) => Uint8Array;
}

/** The result handed back to the engine. */
export interface CheckOutcome {
  inputs: Record<string, unknown>;
  failures: ValidationFailure[];
}

/** True when `v` is (or, for objects and arrays, contains) an unknown value. */
export function isUnknown(v: unknown): boolean {
  if (v === UNKNOWN) return true;
  if (Array.isArray(v)) return v.some(isUnknown);
  if (typeof v === "object" && v !== null) return Object.values(v).some(isUnknown);
  return false;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Parses a duration: a non-negative number of seconds, or text such as
 * `"45s"`, `"10m"`, `"1h30m"`, `"2h"` (units h, m, s; a bare number is
 * seconds). Returns seconds, or undefined when unparsable.
 */
function intIn(f: Failures, property: string, v: unknown, min: number, max: number, def: number): number {
  if (v === undefined || v === null) return def;
  if (v === UNKNOWN) return def;
  if (typeof v !== "number" || !Number.isInteger(v)) {
    f.fail(property, `must be an integer from ${min} to ${max}`);
    return def;
  }
  if (v < min || v > max) {
    f.fail(property, `must be an integer from ${min} to ${max} (got ${v})`);
    return def;
  }
  return v;
}

function optBool(f: Failures, property: string, v: unknown, def: boolean): boolean {
  if (v === undefined || v === null || v === UNKNOWN) return def;
  if (typeof v !== "boolean") {
    f.fail(property, "must be true or false");
    return def;
  }
  return v;
}

/** The image reference resolved against the config, or undefined (failures recorded at `image`). */
function checkImage(
  f: Failures,
  v: unknown,
  images: StackConfig["images"],
  imageFailures: StackConfig["imageFailures"],
) {
  if (v === undefined || v === null) {
    f.fail("image", "is required: a key of kvm:images, an image URL, or {url, format, firmware, sha256}");
    return undefined;
  }
  if (isUnknown(v)) return undefined;
  let image: ImageConfig | undefined;
  if (typeof v === "string") {
    const broken = Object.hasOwn(imageFailures, v) ? imageFailures[v] : undefined;
    if (broken !== undefined) {
      for (const x of broken) f.fail("image", `stack config ${x.property}: ${x.reason}`);
      return undefined;
    }
    try {
      image = resolveImage(v, images, "image");
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      for (const x of err.failures) f.fail(x.property, x.reason);
      return undefined;
    }
  } else if (isObject(v)) {
    image = parseImage(undefined, v, f.at("image"));
  } else {
    f.fail("image", "must be an image key, an image URL, or {url, format, firmware, sha256}");
    return undefined;
  }
  if (image === undefined) return undefined;
  const resolved: ImageIdentity = { url: image.url, format: image.format, firmware: image.firmware };
  if (image.sha256 !== undefined) resolved.sha256 = image.sha256;
  return resolved;
}

function checkHealth(f: Failures, v: unknown, waitForIp: boolean): CheckedInputs["healthCheck"] {
  if (v === undefined || v === null) return waitForIp ? {} : false;
  if (v === false) return false;
  if (v === UNKNOWN) return {};
  if (!isObject(v)) {
    f.fail("healthCheck", "must be false or {url, expectStatus}");
    return false;
  }
  const out: { url?: string; expectStatus?: number } = {};
  for (const k of Object.keys(v)) {
    if (k !== "url" && k !== "expectStatus")
      f.fail(`healthCheck.${k}`, "unknown property (known: url, expectStatus)");
  }
  if (v.url !== undefined && v.url !== UNKNOWN) {
    let url: URL | undefined;
    try {
      url = typeof v.url === "string" ? new URL(v.url) : undefined;
    } catch {
      url = undefined;
    }
    if (url === undefined) f.fail("healthCheck.url", "must be an http:// or https:// URL");
    else if (url.protocol !== "http:" && url.protocol !== "https:") {
      f.fail(
        "healthCheck.url",
        `scheme ${JSON.stringify(url.protocol.replace(/:$/, ""))} is not supported; use http or https`,
      );
    } else out.url = url.href;
  } else if (v.url === UNKNOWN) out.url = UNKNOWN;
  if (v.expectStatus !== undefined) {
    if (v.url === undefined) f.fail("healthCheck.expectStatus", "applies only with healthCheck.url");
    // 1xx are interim responses: an HTTP client never delivers one as the answer.
    out.expectStatus = intIn(f, "healthCheck.expectStatus", v.expectStatus, 200, 599, DEFAULTS.expectStatus);
  } else if (out.url !== undefined) out.expectStatus = DEFAULTS.expectStatus;
  if (!waitForIp)
    f.fail("healthCheck", "needs the guest's IP: set healthCheck: false when waitForIp is false");
  return out;
}

function checkTimeouts(f: Failures, v: unknown): CheckedInputs["timeouts"] {
  const out: CheckedInputs["timeouts"] = { create: DEFAULTS.createSeconds, delete: DEFAULTS.deleteSeconds };
  if (v === undefined || v === null || v === UNKNOWN) return out;
  if (!isObject(v)) {
    f.fail("timeouts", "must be {create, delete}");
    return out;
  }
  for (const k of Object.keys(v)) {
    if (k !== "create" && k !== "delete") f.fail(`timeouts.${k}`, "unknown property (known: create, delete)");
  }
  for (const k of ["create", "delete"] as const) {
    const raw = v[k];
    if (raw === undefined || raw === null || raw === UNKNOWN) continue;
    const secs = parseDuration(raw);
    if (secs === undefined) {
      f.fail(`timeouts.${k}`, 'must be seconds or a duration such as "90s", "10m", "1h30m"');
    } else if (secs <= 0 || secs > MAX_TIMEOUT_SECONDS) {
      f.fail(`timeouts.${k}`, `must be more than 0 and at most ${MAX_TIMEOUT_SECONDS} seconds (24h)`);
    } else out[k] = secs;
  }
  return out;
}

function checkTags(f: Failures, v: unknown): Record<string, string> {
  if (v === undefined || v === null || v === UNKNOWN) return {};
  if (!isObject(v)) {
    f.fail("tags", "must be an object of string values");
    return {};
  }
  const entries = Object.entries(v);
  if (entries.length > MAX_TAGS) f.fail("tags", `at most ${MAX_TAGS} tags (got ${entries.length})`);
  const out: Record<string, string> = {};
  for (const [k, val] of entries) {
    const problem = val === UNKNOWN ? undefined : tagProblem(k, val, { input: true });
    if (problem !== undefined) f.fail(`tags.${k}`, problem);
    else out[k] = val as string;
  }
  return out;
}

function checkName(f: Failures, v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (v === UNKNOWN) return UNKNOWN;
  const problem = domainNameProblem(v);
  if (problem !== undefined) {
    f.fail("name", problem);
    return undefined;
  }
  return v as string;
}

function checkHostRef(f: Failures, v: unknown, config: StackConfig): HostConfig | undefined {
  if (v === undefined || v === null || v === "") {
    f.fail("host", "is required: a key of the stack config kvm:hosts");
    return undefined;
  }
  if (v === UNKNOWN) return undefined;
  if (typeof v !== "string") {
    f.fail("host", "must be a string: a key of the stack config kvm:hosts");
    return undefined;
  }
  const broken = Object.hasOwn(config.hostFailures, v) ? config.hostFailures[v] : undefined;
  if (broken !== undefined) {
    for (const x of broken) f.fail("host", `stack config ${x.property}: ${x.reason}`);
    return undefined;
  }
  const host = Object.hasOwn(config.hosts, v) ? config.hosts[v] : undefined;
  if (host === undefined) {
    const known = Object.keys(config.hosts);
    f.fail(
      "host",
      `unknown host ${JSON.stringify(v)}: not a key of the stack config kvm:hosts (configured: ${
        known.length > 0 ? known.join(", ") : "none"
      })`,
    );
  }
  return host;
}

function checkOwner(v: unknown): OwnerInput | undefined {
  if (!isObject(v)) return undefined;
  const out: Partial<OwnerInput> = {};
  for (const k of ["project", "stack", "urn", "resource"] as const) {
    if (typeof v[k] === "string") out[k] = v[k] as string;
  }
  return out.project !== undefined && out.stack !== undefined ? (out as OwnerInput) : undefined;
}

/**
 * Validates `news` (with `olds` for a stable autoname) and returns the
 * checked inputs plus every failure. On failure the inputs are the news
 * as given (the engine stops anyway).
 */
export function checkInputs(
  olds: Record<string, unknown>,
  news: Record<string, unknown>,
  ctx: CheckContext,
): CheckOutcome {
  const f = new Failures();
  const { config } = ctx;
  for (const x of config.general) f.fail("host", `stack config ${x.property}: ${x.reason}`);

  for (const k of Object.keys(news)) {
    if (!INPUT_PROPERTIES.includes(k) && !INTERNAL.includes(k)) {
      f.fail(k, "unknown property");
    }
  }

  checkHostRef(f, news.host, config);
  const resolvedImage = checkImage(f, news.image, config.images, config.imageFailures);

  const waitForIp = optBool(f, "waitForIp", news.waitForIp, DEFAULTS.waitForIp);
  const installGuestAgent = optBool(
    f,
    "installGuestAgent",
    news.installGuestAgent,
    DEFAULTS.installGuestAgent,
  );
  const checkedProxy = checkProxy(f, news);
  const proxyPort = checkedProxy.port ?? DEFAULTS.proxyPort;
  const memoryMiB = intIn(f, "memoryMiB", news.memoryMiB, MIN_MEMORY_MIB, MAX_MEMORY_MIB, DEFAULTS.memoryMiB);
  const vcpus = intIn(f, "vcpus", news.vcpus, 1, MAX_VCPUS, DEFAULTS.vcpus);
  const diskGiB = intIn(f, "diskGiB", news.diskGiB, 1, MAX_DISK_GIB, DEFAULTS.diskGiB);

  const userData = readSeedInput(f, news, "userData");
  const vendorData = readSeedInput(f, news, "vendorData");
  // One NIC rule for the host config and the resource (nic.ts); unknowns pass.
  readNicFields(news, f, { isPending: (x) => x === UNKNOWN });
  const network = news.network ?? undefined;
  const bridge = news.bridge ?? undefined;

  let macAddress: string | undefined;
  if (news.macAddress !== undefined && news.macAddress !== null) {
    if (news.macAddress === UNKNOWN) macAddress = UNKNOWN;
    else {
      const problem = macAddressProblem(news.macAddress);
      if (problem !== undefined) f.fail("macAddress", problem);
      else macAddress = (news.macAddress as string).toLowerCase();
    }
  }

  const owner = checkOwner(news.owner);
  let name = checkName(f, news.name);
  let autoname = false;
  if (news.name === undefined || news.name === null) {
    autoname = true;
    if (
      olds.autoname === true &&
      typeof olds.name === "string" &&
      domainNameProblem(olds.name) === undefined
    ) {
      name = olds.name;
    } else {
      name = autoDomainName(owner?.resource ?? "proxy", ctx.randomBytes(AUTONAME_RANDOM_BYTES));
    }
  }

  checkSeed(f, {
    name,
    userData,
    vendorData,
    installGuestAgent,
    installGuestAgentKnown: news.installGuestAgent !== UNKNOWN,
  });

  const healthCheck = checkHealth(f, news.healthCheck, waitForIp);
  const timeouts = checkTimeouts(f, news.timeouts);
  const tags = checkTags(f, news.tags);

  if (!f.empty) return { inputs: { ...news }, failures: f.list };

  const out: Record<string, unknown> = {
    host: news.host,
    image: news.image,
    installGuestAgent: news.installGuestAgent === UNKNOWN ? UNKNOWN : installGuestAgent,
    memoryMiB: news.memoryMiB === UNKNOWN ? UNKNOWN : memoryMiB,
    vcpus: news.vcpus === UNKNOWN ? UNKNOWN : vcpus,
    diskGiB: news.diskGiB === UNKNOWN ? UNKNOWN : diskGiB,
    name,
    proxyPort: checkedProxy.port === undefined ? UNKNOWN : proxyPort,
    healthCheck: news.healthCheck === UNKNOWN ? UNKNOWN : healthCheck,
    waitForIp: news.waitForIp === UNKNOWN ? UNKNOWN : waitForIp,
    timeouts: news.timeouts === UNKNOWN ? UNKNOWN : timeouts,
    tags: news.tags === UNKNOWN ? UNKNOWN : tags,
  };
  out.resolvedImage = resolvedImage ?? UNKNOWN;
  // Each seed input as given; without user-data of either kind, the default.
  if (userData.pending) {
    for (const k of ["userData", "userDataBase64"]) if (news[k] !== undefined) out[k] = news[k];
  } else if (userData.base64 !== undefined) out.userDataBase64 = userData.base64;
  else out.userData = userData.text ?? defaultUserData();
  if (news.proxy === UNKNOWN) out.proxy = UNKNOWN;
  else if (checkedProxy.proxy !== undefined) out.proxy = checkedProxy.proxy;
  if (vendorData.pending) {
    for (const k of ["vendorData", "vendorDataBase64"]) if (news[k] !== undefined) out[k] = news[k];
  } else if (vendorData.base64 !== undefined) out.vendorDataBase64 = vendorData.base64;
  else if (vendorData.text !== undefined) out.vendorData = vendorData.text;
  if (network !== undefined) out.network = network;
  if (bridge !== undefined) out.bridge = bridge;
  if (macAddress !== undefined) out.macAddress = macAddress;
  if (autoname) out.autoname = true;
  if (owner !== undefined) out.owner = owner;
  return { inputs: out, failures: [] };
}

/** The checked inputs as the typed record create/update use (after preview, nothing is unknown). */
export function asChecked(inputs: Record<string, unknown>): CheckedInputs {
  const resolved = inputs.resolvedImage as ImageIdentity | undefined;
  if (resolved === undefined || isUnknown(inputs)) {
    throw new ValidationError([{ property: "", reason: "inputs were not checked or are still unknown" }]);
  }
  if (!IMAGE_FORMATS.includes(resolved.format) || !FIRMWARES.includes(resolved.firmware)) {
    throw new ValidationError([{ property: "image", reason: "resolved image is malformed" }]);
  }
  return inputs as unknown as CheckedInputs;
}
