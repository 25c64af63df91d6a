/**
 * `check` for what goes into the seed: user-data and vendor-data, each given
 * as text (`userData`, written as UTF-8) or as bytes (`userDataBase64`, for
 * gzip-compressed or other binary cloud-init data, the convention of other
 * Pulumi providers), never both; then the seed's files are made once with the
 * same function create uses (kvm/guest/seed.ts `seedFiles`, which `buildSeed` writes
 * into the ISO), so what cannot make a seed fails at preview naming its
 * field. Writing the ISO itself cannot fail for files `seedFiles` made (it
 * checks their sizes) and costs half a millisecond, so check skips it.
 */

import { type SeedField, seedFiles } from "../kvm/guest/seed";
import { MAX_SEED_FILE_BYTES } from "../kvm/guest/seed-iso";
import type { CheckedNic } from "../kvm/network/nic-rules";
import type { ProxySetup } from "../kvm/proxy/setup";
import { type Failures, ValidationError } from "../kvm/validation";
import { UNKNOWN } from "./args";

/**
 * How failures of the seed inputs name their property. The engine prints the
 * value of a failing property beside the reason when the name is a top-level
 * input, and these values are secrets (KvmProxy marks them so) that may also
 * be megabytes long: a name it cannot look up keeps the value out of the
 * output, and still names the field.
 */
export const SEED_FIELD = {
  userData: "userData (secret)",
  vendorData: "vendorData (secret)",
  userDataBase64: "userDataBase64 (secret)",
  vendorDataBase64: "vendorDataBase64 (secret)",
} as const;

/** One seed input after check: as given (text or base64), and its bytes. */
export interface SeedInput {
  /** The text input, when given that way. */
  text?: string;
  /** The base64 input as given, when given that way. */
  base64?: string;
  /** What goes into the seed: the text (UTF-8) or the decoded bytes. */
  data?: string | Buffer;
  /** Either input is not known yet (preview). */
  pending: boolean;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The bytes of a base64 input, or undefined when it is not base64 (whitespace, such as `base64`'s line breaks, is allowed). */
export function decodeBase64(v: string): Buffer | undefined {
  const clean = v.replace(/\s+/g, "");
  if (clean.length % 4 !== 0 || !BASE64.test(clean)) return undefined;
  return Buffer.from(clean, "base64");
}

function tooBig(f: Failures, property: string, bytes: number): boolean {
  if (bytes <= MAX_SEED_FILE_BYTES) return false;
  f.fail(property, `is ${bytes} bytes, over the seed limit of ${MAX_SEED_FILE_BYTES} bytes`);
  return true;
}

/** Reads `<part>` and `<part>Base64` of `news`: at most one, a string, base64 where it says so, within the seed limit. */
export function readSeedInput(
  f: Failures,
  news: Record<string, unknown>,
  part: "userData" | "vendorData",
): SeedInput {
  const textKey = part;
  const b64Key = `${part}Base64` as const;
  const text = news[textKey];
  const b64 = news[b64Key];
  const given = (v: unknown) => v !== undefined && v !== null;
  if (text === UNKNOWN || b64 === UNKNOWN) return { pending: true };
  if (given(text) && given(b64)) {
    f.fail(SEED_FIELD[b64Key], `give either ${textKey} or ${b64Key}, not both`);
    return { pending: false };
  }
  if (given(text)) {
    if (typeof text !== "string") {
      f.fail(SEED_FIELD[textKey], "must be a string");
      return { pending: false };
    }
    return tooBig(f, SEED_FIELD[textKey], Buffer.byteLength(text, "utf8"))
      ? { pending: false }
      : { text, data: text, pending: false };
  }
  if (given(b64)) {
    const bytes = typeof b64 === "string" ? decodeBase64(b64) : undefined;
    if (bytes === undefined) {
      f.fail(
        SEED_FIELD[b64Key],
        "must be base64 (A-Z, a-z, 0-9, '+', '/', '=' padding; whitespace is ignored)",
      );
      return { pending: false };
    }
    return tooBig(f, SEED_FIELD[b64Key], bytes.length)
      ? { pending: false }
      : { base64: b64 as string, data: bytes, pending: false };
  }
  return { pending: false };
}

/**
 * Makes the seed's files create would write (kvm/guest/seed.ts `seedFiles`, the
 * same function, with the proxy's setup script create always adds), so that
 * input that cannot make them fails here, naming the field it came from.
 * The name is also the guest hostname and cloud-init instance-id.
 */
export function checkSeed(
  f: Failures,
  s: {
    name: string | undefined;
    /** The user's own network-config, when given. */
    networkConfig?: string | undefined;
    /** The VM's NICs (vmNicsOf), from which the seed builds a network-config when they need one. */
    nics: readonly CheckedNic[];
    userData: SeedInput;
    vendorData: SeedInput;
    installGuestAgent: boolean;
    installGuestAgentKnown: boolean;
    /** The proxy's setup script's inputs, as create makes them; "pending" while any is unknown. */
    proxy: ProxySetup | "pending";
  },
): void {
  if (s.name === UNKNOWN || s.userData.pending || s.vendorData.pending || !s.installGuestAgentKnown) return;
  if (s.proxy === "pending") return;
  const fieldOf = (part: "userData" | "vendorData", input: SeedInput) =>
    input.base64 !== undefined ? SEED_FIELD[`${part}Base64`] : SEED_FIELD[part];
  try {
    seedFiles({
      name: s.name ?? "placeholder",
      userData: s.userData.data ?? "",
      installGuestAgent: s.installGuestAgent,
      ...(s.vendorData.data !== undefined ? { vendorData: s.vendorData.data } : {}),
      ...(s.networkConfig !== undefined ? { networkConfig: s.networkConfig } : {}),
      nics: s.nics,
      proxy: s.proxy,
    });
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    for (const x of err.failures) {
      const field = x.property as SeedField;
      if (field === "name") f.fail("name", `is not usable as the guest hostname: ${x.reason}`);
      else if (field === "userData") f.fail(fieldOf("userData", s.userData), x.reason);
      else if (field === "vendorData") f.fail(fieldOf("vendorData", s.vendorData), x.reason);
      else if (field === "networkConfig") f.fail("networkConfig", x.reason);
      else f.fail(field, x.reason);
    }
  }
}
