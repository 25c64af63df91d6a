/**
 * The checked inputs as the engine hands them back, a property bag, made
 * `CheckedInputs` again at one door. What check has just returned (create,
 * update, diff's import case) is decoded ({@link decodeChecked}): the fields
 * every such record has (the resolved image, the host, the name, the port)
 * must be there, each other field, when there, must have the shape check
 * gives it. What a state recorded long ago (the plugin's old inputs) is
 * taken as it is ({@link recordedChecked}): rules change, and a refresh or
 * a delete must not fail because of that. Below these doors the code takes
 * the types as they are. Pure.
 */
import { FIRMWARES, IMAGE_FORMATS } from "../kvm/config/image";
import { domainNameProblem } from "../kvm/domain/names";
import { isObject } from "../kvm/fields";
import { checkedNics } from "../kvm/network/nic-rules";
import { Failures, ValidationError } from "../kvm/validation";
import { type CheckedInputs, isUnknown } from "./args";
import { WAIT_MODES } from "./check-nics";
import { isHostEntry } from "./check-placement";
import { KVM_PROXY_INPUT_PROPERTIES, VALUE_CHECKED, valueProblem } from "./kvm-proxy-properties";

type Props = Record<string, unknown>;

const WAIT_FOR_IP: readonly unknown[] = [true, false, ...WAIT_MODES];

/** Why `v` is no host as check keeps it (a key, a host in full, a pool of either), or undefined. */
function hostProblem(v: unknown): string | undefined {
  const isEntry = (h: unknown) => isHostEntry(h) && typeof h.key === "string";
  if (typeof v === "string" || isEntry(v)) return undefined;
  if (isObject(v) && Array.isArray(v.pool) && v.pool.every((h) => typeof h === "string" || isEntry(h)))
    return undefined;
  return "must be a host key, a host in full ({key, uri, ...}) or {pool: [...]}";
}

/** Holds one field to `ok`, recording `reason` at it otherwise; an absent optional field passes. */
function expect(f: Failures, c: Props, key: string, ok: (v: unknown) => boolean, reason: string): void {
  if (c[key] !== undefined && !ok(c[key])) f.fail(key, reason);
}

/**
 * The checked inputs `inputs` hold, as check has just made them. Throws a
 * ValidationError naming each malformed field (quoting no value of the
 * fields that may hold secrets: the seed, the proxy block, a host in full;
 * a NIC's failure names its address or MAC as check would), or saying that
 * the inputs are still unknown (a preview's).
 */
export function decodeChecked(inputs: Props): CheckedInputs {
  if (isUnknown(inputs)) {
    throw new ValidationError([{ property: "", reason: "inputs are still unknown (a preview's)" }]);
  }
  const c = inputs;
  const f = new Failures();
  const image = c.resolvedImage;
  if (
    !isObject(image) ||
    typeof image.url !== "string" ||
    !IMAGE_FORMATS.includes(image.format as never) ||
    !FIRMWARES.includes(image.firmware as never)
  )
    f.fail("image", "the resolved image is missing or malformed: the inputs were not checked");
  const host = hostProblem(c.host);
  if (host !== undefined) f.fail("host", host);
  for (const key of VALUE_CHECKED) {
    const check = KVM_PROXY_INPUT_PROPERTIES[key].check;
    const problem = c[key] === undefined || check === undefined ? undefined : valueProblem(check, c[key]);
    if (problem !== undefined) f.fail(key, problem);
  }
  if (domainNameProblem(c.name) !== undefined)
    f.fail("name", "must be a domain name check chose or accepted");
  if (
    typeof c.proxyPort !== "number" ||
    !Number.isInteger(c.proxyPort) ||
    c.proxyPort < 1 ||
    c.proxyPort > 65535
  )
    f.fail("proxyPort", "must be a port from 1 to 65535");
  expect(f, c, "waitForIp", (v) => WAIT_FOR_IP.includes(v), 'must be true, false, "ipv4", "ipv6" or "any"');
  expect(
    f,
    c,
    "healthCheck",
    (v) => v === false || isObject(v),
    "must be false or {url, expectStatus, via, replaceAfter}",
  );
  expect(f, c, "egressCheck", (v) => isObject(v) && typeof v.url === "string", "must be {url}");
  expect(
    f,
    c,
    "timeouts",
    (v) => isObject(v) && typeof v.create === "number" && typeof v.delete === "number",
    "must be {create, delete} in seconds",
  );
  expect(
    f,
    c,
    "tags",
    (v) => isObject(v) && Object.values(v).every((t) => typeof t === "string"),
    "must be an object of string values",
  );
  expect(
    f,
    c,
    "rotation",
    (v) => isObject(v) && typeof v.maxAge === "number",
    "must be {maxAge, batch, ...}",
  );
  expect(f, c, "proxy", isObject, "must be the proxy block check made");
  for (const key of ["userData", "userDataBase64", "vendorData", "vendorDataBase64", "networkConfig"])
    expect(f, c, key, (v) => typeof v === "string", "must be text");
  if (c.nics !== undefined) {
    if (!Array.isArray(c.nics)) f.fail("nics", "must be a list of NICs");
    else checkedNics(c.nics, f);
  }
  f.throwIfAny("the checked inputs are malformed");
  return c as unknown as CheckedInputs;
}

/**
 * The checked inputs a state recorded, as they are: an older version's, or
 * rebuilt from an imported VM's metadata (its memory as libvirt holds it,
 * its NICs by the rules of their day). Only what could not be checked inputs
 * at all is refused (a preview's unknowns, no resolved image): what is
 * derived from them (how to reach the host, the seed's digests) must never
 * fail a refresh or a delete because a rule changed since.
 */
export function recordedChecked(inputs: Props): CheckedInputs {
  if (isUnknown(inputs) || !isObject(inputs.resolvedImage)) {
    throw new ValidationError([{ property: "", reason: "the recorded inputs were never checked" }]);
  }
  return inputs as unknown as CheckedInputs;
}
