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

import { durationText } from "../errors";
import {
  couldBeImageKey,
  type ImageConfig,
  type ImageIdentity,
  mayCarryCredentials,
  parseImage,
  resolveImage,
  secretName,
} from "../kvm/config/image";
import { macAddressProblem } from "../kvm/domain/domain-xml";
import { MAX_TAGS, tagProblem } from "../kvm/domain/metadata";
import { AUTONAME_RANDOM_BYTES, autoDomainName, domainNameProblem } from "../kvm/domain/names";
import { MIN_DEADLINE_SECONDS, parseDuration } from "../kvm/duration";
import { given, isObject } from "../kvm/fields";
import { poolCapacity } from "../kvm/network/address-pool";
import {
  hostPoolCapacity,
  missingHostPools,
  namesHostPool,
  resolveHostPools,
} from "../kvm/network/host-pools";
import { type NicSpec, readNicFields } from "../kvm/network/nic";
import { type CheckedNic, checkedNics } from "../kvm/network/nic-rules";
import type { ProxySetup } from "../kvm/proxy/setup";
import { makeCa as makeCaNow } from "../kvm/tls/certificate";
import { issuedAtCreate, type TlsCa } from "../kvm/tls/proxy-tls";
import { Failures, internalFailure, quote, ValidationError, type ValidationFailure } from "../kvm/validation";
import {
  type CheckedInputs,
  DEFAULTS,
  isUnknown,
  MAX_TIMEOUT_SECONDS,
  type OwnerInput,
  UNKNOWN,
} from "./args";
import {
  type AddressClaim,
  type CheckedNetworking,
  checkNetworking,
  checkWaitForIp,
  macClaimProblem,
  outgoingAddressProblem,
  unreachableAddressWarning,
} from "./check-nics";
import { candidateHosts, checkHost, checkRotation, type HostClaim, hostKeysOf } from "./check-placement";
import { checkProxy } from "./check-proxy";
import { checkSeed, readSeedInput, SEED_FIELD } from "./check-seed";
import { decodeChecked } from "./checked-inputs";
import { defaultUserData } from "./default-user-data";
import {
  INPUT_PROPERTIES,
  KVM_PROXY_INPUT_PROPERTIES,
  VALUE_CHECKED,
  type ValueCheck,
  valueProblem,
} from "./kvm-proxy-properties";
import { proxySetupOf, vmNicSpecsOf, vmNicsOf } from "./mapping";
import type { StackConfig } from "./stack-config";

/** The properties check accepts: the inputs, and what the class (`owner`), check itself or the engine set. */
const KNOWN_PROPERTIES = new Set<string>([
  ...INPUT_PROPERTIES,
  "__provider",
  "owner",
  "autoname",
  "resolvedImage",
]);

/** What check needs besides the inputs. */
export interface CheckContext {
  config: StackConfig;
  /** Random bytes for autonames (at least 4). */
  randomBytes: (n: number) => Uint8Array;
  /** Claims of static addresses across the proxies of this program (check-nics.ts); none: not checked. */
  claimAddress?: AddressClaim;
  /** A new CA for a proxy with `proxy.tls: {}` (default: kvm/tls/certificate.ts makeCa, now). */
  makeCa?: (commonName: string) => TlsCa;
  /** Claims of host keys given in full across the proxies of this program (check-placement.ts); none: not checked. */
  claimHost?: HostClaim;
}

/** The result handed back to the engine. */
export interface CheckOutcome {
  inputs: Record<string, unknown>;
  failures: ValidationFailure[];
  /** Advice for preview (a proxy's address only its host reaches); never a failure. */
  warnings?: string[];
}

/** Why a certificate issued at create cannot be made: it names the VM's static addresses. */
const TLS_NEEDS_ADDRESSES =
  "issues the proxy's certificate at create for the addresses clients reach it at, which a DHCP address is " +
  "not known before the VM boots: give the primary NIC static addresses or an addressPool (nics), or give " +
  "proxy.tls.certificate and privateKey (a certificate of yours, for a name or address you know)";

/** Preview's warning for a proxy with TLS and SOCKS: RFC 1929 sends the password in clear. */
const SOCKS_BESIDE_TLS =
  "proxy.socks carries no TLS: SOCKS5 sends the username and password in clear (RFC 1929), whatever proxy.tls " +
  "does for the HTTP port; keep SOCKS to networks you trust, or leave it out";

/** The proxy's setup as preview builds its seed: a certificate issued at create stood in for by its CA's. */
function withPreviewTls(c: Parameters<typeof proxySetupOf>[0]): ProxySetup {
  const setup = proxySetupOf(c);
  const tls = setup.tls;
  if (tls === undefined || !issuedAtCreate(tls)) return setup;
  return { ...setup, tls: { certificate: tls.ca.certificate, privateKey: tls.ca.privateKey } };
}

/** A CA made now for a proxy with `proxy.tls: {}`. */
function defaultMakeCa(commonName: string): TlsCa {
  const ca = makeCaNow({ commonName, now: new Date() });
  return { certificate: ca.certificatePem, privateKey: ca.privateKeyPem, made: true };
}

/**
 * Runs the check of one property; a throw (a bug: every bad value should be
 * a failure) becomes a failure at `property`, so check itself never throws.
 */
function guard<T>(f: Failures, property: string, fallback: T, run: () => T): T {
  try {
    return run();
  } catch (err) {
    f.fail(property, internalFailure(err));
    return fallback;
  }
}

/** `v` held to `check` (the registry's rule), failures at `property`; absent or not known yet: `def`. */
function checked<T extends number | boolean>(
  f: Failures,
  property: string,
  check: ValueCheck,
  v: unknown,
  def: T,
): T {
  if (v === undefined || v === null || v === UNKNOWN) return def;
  const problem = valueProblem(check, v);
  if (problem === undefined) return v as T;
  f.fail(property, problem);
  return def;
}

/** The inputs checked by their row alone (VALUE_CHECKED): each value, or its default. */
function checkValues(f: Failures, news: Record<string, unknown>): Record<string, number | boolean> {
  const out: Record<string, number | boolean> = {};
  for (const key of VALUE_CHECKED) {
    const { check, default: def } = KVM_PROXY_INPUT_PROPERTIES[key];
    if (check !== undefined && (typeof def === "number" || typeof def === "boolean"))
      out[key] = checked(f, key, check, news[key], def);
  }
  return out;
}

/**
 * The NICs the preview's seed is built with (vmNicsOf); none when they break
 * a rule, which check reported at the NIC's own field already.
 */
function previewNics(c: Parameters<typeof vmNicSpecsOf>[0]): CheckedNic[] {
  return checkedNics(vmNicSpecsOf(c)) ?? [];
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
  if (image.bake !== undefined) resolved.bake = image.bake;
  return resolved;
}

/**
 * A URL fetched through the proxy (`healthCheck.url`, `egressCheck.url`),
 * normalised; failures at `property`, or at `<property> (secret)` when it
 * may carry credentials: the URL is kept in the outputs as plain text, so
 * it must not carry any.
 */
function probeUrl(f: Failures, property: string, raw: unknown): string | undefined {
  let url: URL | undefined;
  try {
    url = typeof raw === "string" ? new URL(raw) : undefined;
  } catch {
    url = undefined;
  }
  const field = typeof raw === "string" && mayCarryCredentials(raw, url) ? secretName(property) : property;
  if (url === undefined) f.fail(field, "must be an http:// or https:// URL");
  else if (url.protocol !== "http:" && url.protocol !== "https:") {
    f.fail(field, `scheme ${quote(url.protocol.replace(/:$/, ""))} is not supported; use http or https`);
  } else if (url.username !== "" || url.password !== "") {
    f.fail(
      field,
      "must not carry credentials (user:password@): the URL is kept in the outputs as plain text",
    );
  } else return url.href;
  return undefined;
}

type CheckedHealthCheck = Exclude<CheckedInputs["healthCheck"], false>;
const HEALTH_CHECK_FIELDS: readonly string[] = [
  "url",
  "expectStatus",
  "via",
  "replaceAfter",
] satisfies (keyof CheckedHealthCheck)[];
/**
 * Shortest healthCheck.replaceAfter: a proxy is judged by the probes of
 * refreshes and updates, and one failed probe is not a failing proxy.
 */
export const MIN_REPLACE_AFTER_SECONDS = 30;

function checkHealth(f: Failures, v: unknown, waitForIp: boolean): CheckedInputs["healthCheck"] {
  if (v === undefined || v === null) return waitForIp ? {} : false;
  if (v === false) return false;
  if (v === UNKNOWN) return {};
  if (!isObject(v)) {
    f.fail("healthCheck", "must be false or {url, expectStatus, via, replaceAfter}");
    return false;
  }
  const out: CheckedHealthCheck = {};
  for (const k of Object.keys(v)) {
    if (!HEALTH_CHECK_FIELDS.includes(k))
      f.fail(`healthCheck.${k}`, `unknown property (known: ${HEALTH_CHECK_FIELDS.join(", ")})`);
  }
  if (given(v.replaceAfter) && v.replaceAfter !== UNKNOWN) {
    const after = parseDuration(v.replaceAfter);
    if (after === undefined || after < MIN_REPLACE_AFTER_SECONDS) {
      f.fail(
        "healthCheck.replaceAfter",
        `must be a duration of at least ${MIN_REPLACE_AFTER_SECONDS}s, such as "15m" (a proxy failing that long is replaced at the next up)`,
      );
    } else out.replaceAfter = after;
  }
  if (given(v.via) && v.via !== UNKNOWN) {
    if (v.via === "local" || v.via === "host") out.via = v.via;
    else
      f.fail(
        "healthCheck.via",
        'must be "local" (from the machine running Pulumi) or "host" (through the VM\'s host)',
      );
  }
  if (given(v.url) && v.url !== UNKNOWN) {
    const url = probeUrl(f, "healthCheck.url", v.url);
    if (url !== undefined) out.url = url;
  } else if (v.url === UNKNOWN) out.url = UNKNOWN;
  if (given(v.expectStatus)) {
    if (!given(v.url)) f.fail("healthCheck.expectStatus", "applies only with healthCheck.url");
    // 1xx are interim responses: an HTTP client never delivers one as the answer.
    out.expectStatus = checked(
      f,
      "healthCheck.expectStatus",
      { integer: { min: 200, max: 599 } },
      v.expectStatus,
      DEFAULTS.expectStatus,
    );
  } else if (out.url !== undefined) out.expectStatus = DEFAULTS.expectStatus;
  // Named after waitForIp, a boolean: the engine prints the value of a failing top-level
  // input, and healthCheck's may hold a URL with credentials.
  if (!waitForIp)
    f.fail(
      "waitForIp",
      "is false, but healthCheck needs the guest's IP: set healthCheck: false, or waitForIp: true",
    );
  return out;
}

function checkEgress(f: Failures, v: unknown, waitForIp: boolean): CheckedInputs["egressCheck"] {
  if (v === undefined || v === null || v === UNKNOWN) return undefined;
  if (!isObject(v)) {
    f.fail("egressCheck", "must be {url}: an IP echo fetched through the proxy");
    return undefined;
  }
  for (const k of Object.keys(v))
    if (k !== "url") f.fail(`egressCheck.${k}`, "unknown property (known: url)");
  if (!waitForIp)
    f.fail(
      "waitForIp",
      "is false, but egressCheck needs the guest's IP: set waitForIp: true, or drop egressCheck",
    );
  if (v.url === UNKNOWN) return { url: UNKNOWN };
  if (!given(v.url)) {
    f.fail(
      "egressCheck.url",
      "is required: an IP echo (http:// or https://) that answers with the client's address",
    );
    return undefined;
  }
  const url = probeUrl(f, "egressCheck.url", v.url);
  return url === undefined ? undefined : { url };
}

const DEFAULT_TIMEOUTS: CheckedInputs["timeouts"] = {
  create: DEFAULTS.createSeconds,
  delete: DEFAULTS.deleteSeconds,
};

function checkTimeouts(f: Failures, v: unknown): CheckedInputs["timeouts"] {
  const out: CheckedInputs["timeouts"] = { ...DEFAULT_TIMEOUTS };
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
    } else if (secs < MIN_DEADLINE_SECONDS || secs > MAX_TIMEOUT_SECONDS) {
      f.fail(
        `timeouts.${k}`,
        `must be at least ${durationText(MIN_DEADLINE_SECONDS * 1000)} and at most ${durationText(MAX_TIMEOUT_SECONDS * 1000)} (24h)`,
      );
    } else out[k] = secs;
  }
  return out;
}

/**
 * The engine's customTimeouts for one request (seconds; 0 or absent when
 * the program set none) as `timeouts.create` or `timeouts.delete`: held to
 * the maximum check holds `timeouts` to (MAX_TIMEOUT_SECONDS, 24 h), which
 * they bypass. Above it: capped to it, with the warning to give on the
 * resource (Node fires a timer set past 2^31-1 ms, about 24.8 days, at
 * once; timers.ts states the whole rule for deadlines).
 */
export function engineTimeout(
  seconds: number | undefined,
  name: string,
): { seconds?: number; warning?: string } {
  if (seconds === undefined || !(seconds > 0)) return {};
  if (seconds <= MAX_TIMEOUT_SECONDS) return { seconds };
  return {
    seconds: MAX_TIMEOUT_SECONDS,
    warning:
      `${name} of ${Number.isFinite(seconds) ? durationText(seconds * 1000) : "no limit"} is above the provider's ` +
      `maximum of ${durationText(MAX_TIMEOUT_SECONDS * 1000)} (24h): the provider waits 24h`,
  };
}

function checkTags(f: Failures, v: unknown): Record<string, string> {
  if (v === undefined || v === null || v === UNKNOWN) return {};
  if (!isObject(v)) {
    f.fail("tags", "must be an object of string values");
    return {};
  }
  const entries = Object.entries(v);
  if (entries.length > MAX_TAGS) f.fail("tags", `at most ${MAX_TAGS} tags (got ${entries.length})`);
  const out: [string, string][] = [];
  for (const [k, val] of entries) {
    // An unknown value still has a known key to check.
    const problem = tagProblem(k, val === UNKNOWN ? "" : val, { input: true });
    if (problem !== undefined) f.fail(`tags.${k}`, problem);
    else out.push([k, val as string]);
  }
  return Object.fromEntries(out);
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
  // A failure of a whole config key fails the resources that depend on it, at that input:
  // kvm:images only those naming an image by key (a key is no secret, unlike an inline URL).
  for (const x of config.general) {
    const images = x.property.startsWith("kvm:images");
    if (images && !couldBeImageKey(news.image)) continue;
    f.fail(images ? "image" : "host", `stack config ${x.property}: ${x.reason}`);
  }

  // Named so that the engine prints no value beside it (it prints a failing top-level input's): a misspelt
  // property may hold anything, a key or a password.
  for (const k of Object.keys(news)) {
    if (!KNOWN_PROPERTIES.has(k)) {
      f.fail(secretName(k), "unknown property");
    }
  }

  const owner = checkOwner(news.owner);
  // The resource a host's key is claimed for: its URN, else its name (none: not claimed).
  const claimant =
    owner?.urn ?? (typeof news.name === "string" && news.name !== UNKNOWN ? news.name : undefined);
  const hostClaims =
    ctx.claimHost !== undefined && claimant !== undefined
      ? { claim: ctx.claimHost, owner: claimant }
      : undefined;
  // A host given in full may hold key material: a failure of the check itself is not named after it.
  const host = guard(f, secretName("host"), undefined, () => checkHost(f, news.host, config, hostClaims));
  const rotation = guard(f, "rotation", undefined, () => checkRotation(f, news.rotation));
  // Guards of inputs that may hold a secret (an inline image's URL, a password) use a secret name.
  const resolvedImage = guard(f, secretName("image"), undefined, () =>
    checkImage(f, news.image, config.images, config.imageFailures),
  );

  const waitForIp = checkWaitForIp(f, news.waitForIp);
  const valued = checkValues(f, news);
  const installGuestAgent = valued.installGuestAgent === true;
  const makeCa = ctx.makeCa ?? defaultMakeCa;
  const checkedProxy = guard(f, secretName("proxy"), { port: DEFAULTS.proxyPort, proxy: undefined }, () =>
    checkProxy(f, news, {
      old: isObject(olds.proxy) ? olds.proxy.tls : undefined,
      // Any text is a resource name to the engine; a certificate's commonName takes no control characters.
      makeCa: () =>
        // biome-ignore lint/suspicious/noControlCharactersInRegex: replacing control characters is the point
        makeCa(`pulumi-kvm-proxy ${owner?.resource ?? "proxy"}`.replace(/[\0-\x1f\x7f]/g, " ").slice(0, 64)),
    }),
  );
  const proxyPort = checkedProxy.port ?? DEFAULTS.proxyPort;

  const seedInput = (part: "userData" | "vendorData") =>
    guard(f, SEED_FIELD[part], { pending: false }, () => readSeedInput(f, news, part));
  const userData = seedInput("userData");
  const vendorData = seedInput("vendorData");
  // One NIC rule for the host config and the resource (nic.ts); unknowns pass.
  guard(f, "network", undefined, () => readNicFields(news, f, { isPending: (x) => x === UNKNOWN }));
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

  if (typeof macAddress === "string" && macAddress !== UNKNOWN && ctx.claimAddress !== undefined) {
    const problem = macClaimProblem(
      { claim: ctx.claimAddress, hosts: hostKeysOf(news.host) },
      macAddress,
      owner?.urn ?? (typeof name === "string" ? name : "unnamed"),
    );
    if (problem !== undefined) f.fail("macAddress", problem);
  }

  const networking = guard(f, "nics", {} as CheckedNetworking, () =>
    checkNetworking(f, news, {
      name: name === UNKNOWN ? undefined : name,
      owner: owner?.urn,
      hosts: hostKeysOf(news.host),
      ...(ctx.claimAddress !== undefined ? { claim: ctx.claimAddress } : {}),
    }),
  );

  // A NIC naming a host's address pool: every host the proxy may go to has it; on one host, it takes it now.
  const candidates = candidateHosts(news.host, config);
  if (Array.isArray(networking.nics) && networking.nics.some(namesHostPool) && candidates !== undefined) {
    const nics = networking.nics;
    if (host !== undefined) {
      const resolved = resolveHostPools(nics, host, f);
      if (resolved !== undefined) networking.nics = resolved;
    } else for (const h of candidates) missingHostPools(nics, h, f);
  }

  // A rotating fleet's members each hold a pool address, and a batch of replacements takes more at once.
  if (Array.isArray(networking.nics) && rotation !== undefined) {
    const need = BigInt((rotation.size ?? 1) + rotation.batch);
    networking.nics.forEach((n, i) => {
      // A host's pool over a pool of hosts: the members spread, so the hosts' pools add up.
      const room =
        n.addressPool !== undefined
          ? poolCapacity(n.addressPool)
          : n.hostPool !== undefined && candidates !== undefined
            ? hostPoolCapacity(n.hostPool, candidates)
            : undefined;
      if (room !== undefined && room < need)
        f.fail(
          `nics[${i}].addressPool`,
          `holds ${room} address${room === 1n ? "" : "es"} per family; the fleet needs ${need}: its size (${rotation.size ?? 1}) and a rotation batch (${rotation.batch}) created before their predecessors go`,
        );
    });
  }

  // Against the NICs only once check-proxy.ts found it an address a VM may have.
  const outgoing = checkedProxy.proxy?.outgoingAddress;
  const refused = f.list.some((x) => x.property === "proxy.outgoingAddress");
  if (typeof outgoing === "string" && outgoing !== UNKNOWN && !refused) {
    const problem = outgoingAddressProblem(outgoing, networking);
    if (problem !== undefined) f.fail("proxy.outgoingAddress", problem);
  }

  // A certificate issued at create names the VM's static addresses: the primary NIC must have some.
  const tls = checkedProxy.proxy?.tls;
  if (tls !== undefined && !isUnknown(tls) && issuedAtCreate(tls) && networking.nics !== UNKNOWN) {
    // Without `nics`, the one-NIC shorthand: DHCP.
    const nics = Array.isArray(networking.nics) ? networking.nics : [];
    const primary = nics.find((n) => n.primary) ?? nics[0];
    if (
      primary === undefined ||
      (primary.addresses.length === 0 && primary.addressPool === undefined && primary.hostPool === undefined)
    )
      f.fail("proxy.tls", TLS_NEEDS_ADDRESSES);
  }

  // The proxy's setup script as create adds it (mapping.ts proxySetupOf), once everything it is made of is known.
  const proxyKnown =
    checkedProxy.port !== undefined && news.proxy !== UNKNOWN && !isUnknown(checkedProxy.proxy ?? null);
  const nicsKnown = networking.nics !== UNKNOWN;
  // A certificate issued at create stands in as the CA's own pair: the seed's size is what it checks.
  const proxy =
    proxyKnown && nicsKnown
      ? withPreviewTls({
          proxyPort: checkedProxy.port ?? DEFAULTS.proxyPort,
          ...(checkedProxy.proxy !== undefined ? { proxy: checkedProxy.proxy } : {}),
          ...(networking.nics !== undefined ? { nics: networking.nics as NicSpec[] } : {}),
        })
      : ("pending" as const);
  // A bug in the seed builder is named after user-data: a secret name, whatever caused it.
  guard(f, SEED_FIELD.userData, undefined, () =>
    checkSeed(f, {
      name,
      networkConfig: typeof networking.networkConfig === "string" ? networking.networkConfig : undefined,
      nics: previewNics({
        ...(Array.isArray(networking.nics) ? { nics: networking.nics } : {}),
        ...(typeof network === "string" && network !== UNKNOWN ? { network } : {}),
        ...(typeof bridge === "string" && bridge !== UNKNOWN ? { bridge } : {}),
        ...(typeof macAddress === "string" && macAddress !== UNKNOWN ? { macAddress } : {}),
      }),
      userData,
      vendorData,
      installGuestAgent,
      installGuestAgentKnown: news.installGuestAgent !== UNKNOWN,
      proxy,
    }),
  );

  const healthCheck = guard(f, secretName("healthCheck"), false, () =>
    checkHealth(f, news.healthCheck, waitForIp !== false),
  );
  const egressCheck = guard(f, "egressCheck", undefined, () =>
    checkEgress(f, news.egressCheck, waitForIp !== false),
  );
  const timeouts = guard(f, "timeouts", DEFAULT_TIMEOUTS, () => checkTimeouts(f, news.timeouts));
  const tags = guard(f, "tags", {}, () => checkTags(f, news.tags));

  if (!f.empty) return { inputs: { ...news }, failures: f.list };

  const out: Record<string, unknown> = {
    host: news.host,
    image: news.image,
    ...Object.fromEntries(
      VALUE_CHECKED.map((k) => [k, news[k] === UNKNOWN ? UNKNOWN : valued[k]] as const).filter(
        // keepOnFailure only when set: false and absent are one value, so neither is a change.
        ([k, v]) => k !== "keepOnFailure" || v !== false,
      ),
    ),
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
  if (news.egressCheck === UNKNOWN) out.egressCheck = UNKNOWN;
  else if (egressCheck !== undefined) out.egressCheck = egressCheck;
  if (news.rotation === UNKNOWN) out.rotation = UNKNOWN;
  else if (rotation !== undefined) out.rotation = rotation;
  if (news.proxy === UNKNOWN) out.proxy = UNKNOWN;
  else if (checkedProxy.proxy !== undefined) out.proxy = checkedProxy.proxy;
  if (vendorData.pending) {
    for (const k of ["vendorData", "vendorDataBase64"]) if (news[k] !== undefined) out[k] = news[k];
  } else if (vendorData.base64 !== undefined) out.vendorDataBase64 = vendorData.base64;
  else if (vendorData.text !== undefined) out.vendorData = vendorData.text;
  if (networking.nics !== undefined) out.nics = networking.nics;
  if (networking.networkConfig !== undefined) out.networkConfig = networking.networkConfig;
  if (network !== undefined) out.network = network;
  if (bridge !== undefined) out.bridge = bridge;
  if (macAddress !== undefined) out.macAddress = macAddress;
  if (autoname) out.autoname = true;
  if (owner !== undefined) out.owner = owner;
  const warning =
    host === undefined || isUnknown(out)
      ? undefined
      : // Advice: a bug in it fails nothing.
        guard(new Failures(), "network", undefined, () =>
          unreachableAddressWarning(vmNicsOf(decodeChecked(out)), host),
        );
  const warnings = [
    ...(warning !== undefined ? [warning] : []),
    ...(checkedProxy.proxy?.tls !== undefined && checkedProxy.proxy.socks !== undefined
      ? [SOCKS_BESIDE_TLS]
      : []),
  ];
  return { inputs: out, failures: [], ...(warnings.length > 0 ? { warnings } : {}) };
}
