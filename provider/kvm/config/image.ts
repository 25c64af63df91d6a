/**
 * Images: what a VM boots from. One identity ({@link ImageIdentity}) is used
 * everywhere an image is named: the stack config's `kvm:images` entries, an
 * image given inline or by URL, the image `check` resolves into the inputs,
 * the create spec, the image cache's volume name and (without the firmware,
 * which the domain XML carries) the VM's metadata. Where the bytes come from
 * is derived from the canonical URL ({@link imageSourceOf}). Pure.
 */
import { fileURLToPath, pathToFileURL } from "node:url";
import { given, isObject, optEnum, optString, rejectUnknown } from "../fields";
import { Failures, quote } from "../validation";

/** Disk image formats the provider handles. */
export type ImageFormat = "qcow2" | "raw";
/** Guest firmware: UEFI (OVMF, auto-selected by libvirt) or legacy BIOS (SeaBIOS). */
export type Firmware = "uefi" | "bios";

export const IMAGE_FORMATS: readonly ImageFormat[] = ["qcow2", "raw"];
export const FIRMWARES: readonly Firmware[] = ["uefi", "bios"];
export const DEFAULT_IMAGE_FORMAT: ImageFormat = "qcow2";
export const DEFAULT_FIRMWARE: Firmware = "uefi";

/** One image, defaults applied. */
export interface ImageIdentity {
  /** Canonical URL: an http(s) URL normalised by WHATWG URL, or a `file://` URL for local files. */
  url: string;
  format: ImageFormat;
  firmware: Firmware;
  /** Lower-case hex SHA-256 of the image file, when pinned. */
  sha256?: string;
  /** Proxies boot from a copy baked on each host with their packages installed (host/image-bake.ts). */
  bake?: BakeRecipe;
}

/**
 * What a baked image is made with, beside the stock image and the provider's
 * own install script: extra packages, and the builder's user-data by a keyed
 * digest (its text stays in the stack config: it may hold a mirror's
 * credentials; a plain digest, kept in the state and the VM's metadata,
 * would let anyone test guesses at it).
 */
export interface BakeRecipe {
  /** Distribution package names installed beside squid, the agent and Dante; sorted, unique. */
  packages: string[];
  /**
   * Lower-case hex HMAC-SHA-256 of the builder's user-data (UTF-8) under a
   * key derived from the stack config secret `kvm:stateKey`
   * (resource/state-key.ts), when one is given.
   */
  userDataMac?: string;
}

/** An image of the stack config: the identity plus the key it is configured under. */
export interface ImageConfig extends ImageIdentity {
  /** The key under `kvm:images`; undefined for an image given directly by URL. */
  key?: string;
  /** The builder's user-data a bake recipe names by digest (never part of the resolved identity). */
  bakeUserData?: string;
}

/** Where an image's bytes come from. */
export type ImageSource = { kind: "http"; url: string } | { kind: "file"; path: string };

/** The source of a canonical image URL (as {@link parseImageUrl} produced it). */
export function imageSourceOf(url: string): ImageSource {
  return url.startsWith("file:") ? { kind: "file", path: fileURLToPath(url) } : { kind: "http", url };
}

const IMAGE_FIELDS = ["url", "format", "firmware", "sha256", "bake"] as const;
const BAKE_FIELDS = ["packages", "userData"] as const;

/** At most this many extra packages in a bake recipe. */
export const MAX_BAKE_PACKAGES = 64;
/** At most this many characters in a bake package name. */
export const MAX_PACKAGE_NAME = 128;

/** What apt-get makes of a character no package name holds. */
const APT_READS: Readonly<Record<string, string>> = {
  "=": "apt-get reads '=' as a version",
  ":": "apt-get reads ':' as an architecture",
  "/": "apt-get reads '/' as a release",
  "*": "apt-get reads '*' as a glob",
  "?": "apt-get reads '?' as a glob",
  "[": "apt-get reads '[' as a glob",
};

/**
 * Why `p` is not a package name a bake recipe may hold, or undefined when it
 * is one. The rule is Debian policy's (5.6.1, "Package"): only lower-case
 * letters, digits, '+', '-' and '.', at least two characters, an
 * alphanumeric first. Beyond policy, no trailing '-': apt-get reads it as
 * "remove this package", and no Debian package name ends in one. A trailing
 * '+' stays (`g++`): apt-get takes a name a package has as that package
 * before it reads a trailing '+' as "install", and what apt makes of a name
 * no package has (a regular expression over '.' and '+', a trailing '+' on
 * another package's name) the builder's script refuses: it installs only
 * names apt has a package by exactly (guest/bake-script.ts). Since nothing
 * but those characters passes, no shell word, option, version, architecture,
 * release, glob or pattern reaches apt-get, dnf, yum or zypper.
 */
export function packageNameProblem(p: unknown): string | undefined {
  if (typeof p !== "string") return "must be a package name (a string)";
  if (p.length < 2) return "must be at least two characters long (Debian policy)";
  if (p.length > MAX_PACKAGE_NAME) return `must be at most ${MAX_PACKAGE_NAME} characters long`;
  if (p.startsWith("-")) return "must not start with '-': apt-get, dnf, yum and zypper read it as an option";
  if (!/^[a-z0-9]/.test(p)) return "must start with a lower-case letter or a digit (Debian policy)";
  const bad = /[^a-z0-9+.-]/.exec(p)?.[0];
  if (bad !== undefined) {
    const why = /[A-Z]/.test(bad)
      ? "package names are lower case"
      : (APT_READS[bad] ?? `${quote(bad)} is none of them`);
    return `may hold only lower-case letters, digits, '+', '-' and '.' (Debian policy): ${why}`;
  }
  if (p.endsWith("-")) return "must not end in '-': apt-get reads a trailing '-' as \"remove this package\"";
  return undefined;
}

/** Whether `p` is a package name a bake recipe may hold ({@link packageNameProblem}). */
export function isPackageName(p: unknown): p is string {
  return packageNameProblem(p) === undefined;
}

/** Why a URL that carries `user:password@` is refused; it never quotes the URL. */
export const URL_CREDENTIALS_REASON =
  "must not carry credentials (user:password@): the URL is kept in the VM's metadata and in the state; " +
  "serve the image without them, or download it and give its path";

/**
 * Whether `raw` may carry URL credentials: userinfo that the WHATWG parser
 * finds (also in `https:user:token@host` and `https:\\user@host`, which it
 * reads as authorities), or, for a string that is refused anyway, any `@` at
 * all (`user:token@host/x` parses as the scheme `user`). Such a value's
 * failures are named `<field> (secret)`: the engine prints the value beside a
 * failing top-level input, never beside a name it cannot look up.
 */
export function mayCarryCredentials(raw: string, url: URL | undefined): boolean {
  if (url !== undefined && (url.username !== "" || url.password !== "")) return true;
  return raw.includes("@");
}

/** The name a failure of a URL that may carry credentials is reported under. */
export function secretName(field: string): string {
  return `${field} (secret)`;
}

type Location = { url: string } | { problem: string };

function localFile(path: string): Location {
  if (path.includes("\0")) return { problem: "must not contain NUL characters" };
  if (path.endsWith("/")) return { problem: "must name a file, not a directory" };
  try {
    return { url: pathToFileURL(path).href };
  } catch {
    return { problem: "is not a usable local path" };
  }
}

/** The URL parser's view of `raw`: it drops leading and trailing controls and spaces, and every tab and line break. */
function asParsed(raw: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the WHATWG parser's own trimming
  return raw.replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, "").replace(/[\t\n\r]/g, "");
}

function readLocation(raw: string, url: URL | undefined): Location {
  if (raw.startsWith("/")) return localFile(raw);
  if (url === undefined)
    return { problem: "must be an https://, http:// or file: URL, or an absolute local path" };
  if (url.username !== "" || url.password !== "") return { problem: URL_CREDENTIALS_REASON };
  if (url.hash !== "") return { problem: "must not have a #fragment" };
  if (url.protocol === "https:" || url.protocol === "http:") return { url: url.href };
  if (url.protocol === "file:") {
    if (url.host !== "" && url.host !== "localhost") {
      return { problem: "file: URLs must name a local file (file:///path)" };
    }
    // `file:relative/path` parses as file:///relative/path: refused rather than read from the root.
    if (!/^file:\//i.test(asParsed(raw)) || asParsed(raw).includes("\\")) {
      return {
        problem:
          "file: URLs must give an absolute path (file:///path/to/image); a relative one is not resolved",
      };
    }
    if (url.search !== "") return { problem: "file: URLs must not have a ?query" };
    let path: string;
    try {
      path = fileURLToPath(url);
    } catch {
      return { problem: "file: URLs must not encode '/' in the path (%2F)" };
    }
    return localFile(path);
  }
  return {
    problem: `scheme ${quote(url.protocol.replace(/:$/, ""))} is not supported; use https, http or file`,
  };
}

/**
 * Parses an image location: `https://`, `http://`, `file:///abs/path` (or
 * `file:/abs/path`) or an absolute local path. Returns the canonical URL
 * (local paths become `file://` URLs, so both spellings of one file share a
 * cache entry). Records failures under `f` at `field`, or at
 * `<field> (secret)` when the value may carry credentials
 * ({@link mayCarryCredentials}); reasons never quote the value. Never throws.
 */
export function parseImageUrl(raw: string, f: Failures, field = "url"): { url: string } | undefined {
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  const location = readLocation(raw, url);
  if ("url" in location) return location;
  f.fail(mayCarryCredentials(raw, url) ? secretName(field) : field, location.problem);
  return undefined;
}

/**
 * A `bake` field: `true`, `false`, or `{packages, userData}`. Returns the
 * recipe and the user-data text, or undefined for no bake (or a failure,
 * recorded at `bake...`). The user-data's failures never quote it.
 */
function parseBake(raw: unknown, f: Failures): { recipe: BakeRecipe; userData?: string } | undefined {
  if (raw === undefined || raw === null || raw === false) return undefined;
  if (raw === true) return { recipe: { packages: [] } };
  if (!isObject(raw)) {
    f.fail("bake", "must be true, false or {packages, userData}");
    return undefined;
  }
  const before = f.list.length;
  const fb = f.at("bake");
  rejectUnknown(raw, BAKE_FIELDS, fb);
  const packages = new Set<string>();
  if (given(raw.packages)) {
    if (!Array.isArray(raw.packages)) fb.fail("packages", "must be a list of package names");
    else if (raw.packages.length > MAX_BAKE_PACKAGES)
      fb.fail("packages", `must name at most ${MAX_BAKE_PACKAGES} packages`);
    else
      raw.packages.forEach((p, i) => {
        const problem = packageNameProblem(p);
        if (problem === undefined) packages.add(p as string);
        else fb.fail(`packages[${i}]`, problem);
      });
  }
  let userData: string | undefined;
  if (given(raw.userData)) {
    if (typeof raw.userData !== "string") fb.fail("userData", "must be a string (cloud-init user-data)");
    else userData = raw.userData;
  }
  if (f.list.length > before) return undefined;
  // The user-data's digest is keyed by the stack config (stack-config.ts): this parser knows no key.
  const recipe: BakeRecipe = { packages: [...packages].sort() };
  return userData !== undefined ? { recipe, userData } : { recipe };
}

/**
 * Validates one image entry, applying defaults (format qcow2, firmware uefi).
 * `f` is positioned at `images.<key>` (or wherever the caller wants failures).
 * `bake` is read only in a `kvm:images` entry (a key given): an image given
 * inline is a resource input, kept in the state, where a builder's user-data
 * must not go.
 */
export function parseImage(key: string | undefined, input: unknown, f: Failures): ImageConfig | undefined {
  const before = f.list.length;
  if (!isObject(input)) {
    f.fail(undefined, "must be an object");
    return undefined;
  }
  rejectUnknown(input, IMAGE_FIELDS, f);
  const rawUrl = optString(input, "url", f);
  if (!given(input.url)) f.fail("url", "is required");
  const location = rawUrl === undefined ? undefined : parseImageUrl(rawUrl, f);
  const format = optEnum(input, "format", IMAGE_FORMATS, f) ?? DEFAULT_IMAGE_FORMAT;
  const firmware = optEnum(input, "firmware", FIRMWARES, f) ?? DEFAULT_FIRMWARE;
  let sha256 = optString(input, "sha256", f);
  if (sha256 !== undefined) {
    if (!/^[0-9a-fA-F]{64}$/.test(sha256)) f.fail("sha256", "must be 64 hexadecimal characters");
    sha256 = sha256.toLowerCase();
  }
  let bake: ReturnType<typeof parseBake>;
  if (given(input.bake)) {
    if (key === undefined) f.fail("bake", "is read only from a kvm:images entry; name the image by its key");
    else bake = parseBake(input.bake, f);
  }
  if (f.list.length > before || location === undefined) return undefined;
  const image: ImageConfig = { url: location.url, format, firmware };
  if (key !== undefined) image.key = key;
  if (sha256 !== undefined) image.sha256 = sha256;
  if (bake !== undefined) {
    image.bake = bake.recipe;
    if (bake.userData !== undefined) image.bakeUserData = bake.userData;
  }
  return image;
}

/**
 * Whether `v` could be a key of `kvm:images` as a resource names it: a
 * short word (letters, digits, `_`, `.`, `-`), never a secret. Anything else
 * is a location, or a mistake whose failures must not quote it.
 */
export function couldBeImageKey(v: unknown): v is string {
  return typeof v === "string" && /^[\w.-]{1,64}$/.test(v);
}

/**
 * Resolves a resource's image reference: a key of `images`, or a direct
 * location (https://, http://, file: URL or absolute path) which gets the
 * same defaults as a configured image (qcow2, UEFI, unpinned). Anything that
 * contains `:` or starts with `/` is taken as a location. Throws a
 * ValidationError at `property` (default `image`) for an unknown key or a bad
 * location.
 */
export function resolveImage(
  ref: unknown,
  images: Readonly<Record<string, ImageConfig>>,
  property = "image",
): ImageConfig {
  const f = new Failures();
  if (typeof ref !== "string" || ref === "") {
    f.fail(property, "must be an image key or an image URL");
    f.throwIfAny();
  }
  const r = ref as string;
  if (r.includes(":") || r.startsWith("/")) {
    const location = parseImageUrl(r, f, property);
    f.throwIfAny();
    return {
      url: (location as { url: string }).url,
      format: DEFAULT_IMAGE_FORMAT,
      firmware: DEFAULT_FIRMWARE,
    };
  }
  const image = Object.hasOwn(images, r) ? images[r] : undefined;
  if (image === undefined) {
    const known = Object.keys(images);
    // Quoted only when it could be a key: `token@host/x` is a URL without its scheme, not a key.
    const keyLike = couldBeImageKey(r);
    f.fail(
      keyLike ? property : secretName(property),
      `${keyLike ? `unknown image key ${quote(r)}` : "neither a key of kvm:images nor a URL"} ` +
        `(configured: ${known.length ? known.join(", ") : "none"}); ` +
        "or give an https://, http://, file: URL or absolute path",
    );
    f.throwIfAny();
  }
  return image as ImageConfig;
}
