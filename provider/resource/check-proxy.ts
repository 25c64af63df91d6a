/**
 * `check` for the proxy block: `proxy: {port, auth: {username, password},
 * allowedClients, outgoingAddress}` and its shorthand `proxyPort`. Every
 * failure names its field; the password's failures name
 * `proxy.auth.password (secret)` and never quote it.
 */
import { isIP } from "node:net";
import { DEFAULT_ALLOWED_CLIENTS } from "../kvm/proxy-setup";
import { quote } from "../kvm/validation";
import { DEFAULTS, type ProxyAuth, UNKNOWN } from "./args";

type Obj = Record<string, unknown>;
interface Fail {
  fail(property: string | undefined, reason: string): void;
}

/** TCP ports the guest's own services hold: sshd, systemd-resolved's stub and LLMNR. */
export const RESERVED_GUEST_PORTS: Readonly<Record<number, string>> = {
  22: "sshd",
  53: "the DNS stub resolver (systemd-resolved)",
  5355: "LLMNR (systemd-resolved)",
};

/** The name the password's failures use: the engine prints a failing top-level value, and this is no top-level name. */
export const PASSWORD_FIELD = "proxy.auth.password (secret)";

const USERNAME = /^[A-Za-z0-9._-]{1,64}$/;
const PROXY_FIELDS = ["port", "auth", "allowedClients", "outgoingAddress"];

/** The checked proxy block: what the inputs keep. */
export interface CheckedProxy {
  port: number;
  auth?: ProxyAuth;
  allowedClients: string[];
  outgoingAddress?: string;
}

function isObject(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const given = (v: unknown) => v !== undefined && v !== null;

/** Why `port` cannot be the proxy's, or undefined. */
export function proxyPortProblem(port: unknown): string | undefined {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    return "must be an integer from 1 to 65535";
  }
  const holder = RESERVED_GUEST_PORTS[port];
  if (holder !== undefined) return `${port} is taken by ${holder} on the guest; choose another port`;
  return undefined;
}

/** Why `v` is not a CIDR (or a single address), or undefined. */
export function cidrProblem(v: unknown): string | undefined {
  if (typeof v !== "string") return "must be a CIDR string such as 203.0.113.0/24 or 2001:db8::/32";
  const [addr, prefix, ...rest] = v.split("/");
  const family = isIP(addr ?? "");
  if (family === 0 || rest.length > 0) return `${quote(v)} is not a CIDR such as 203.0.113.0/24`;
  if (prefix === undefined) return undefined;
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max) {
    return `${quote(v)} has a prefix length that is not 0-${max}`;
  }
  return undefined;
}

/** The port of `proxy` (or the `proxyPort` shorthand, not both), checked. Undefined while unknown. */
function checkPort(f: Fail, news: Obj, proxy: Obj | undefined): number | undefined {
  const viaBlock = proxy?.port;
  if (given(viaBlock) && given(news.proxyPort)) {
    f.fail("proxy.port", "give either proxy.port or proxyPort (its shorthand), not both");
    return DEFAULTS.proxyPort;
  }
  const [field, v] = given(viaBlock) ? ["proxy.port", viaBlock] : ["proxyPort", news.proxyPort];
  if (v === UNKNOWN) return undefined;
  if (!given(v)) return DEFAULTS.proxyPort;
  const problem = proxyPortProblem(v);
  if (problem !== undefined) {
    f.fail(field, problem);
    return DEFAULTS.proxyPort;
  }
  return v as number;
}

function checkAuth(f: Fail, v: unknown): ProxyAuth | undefined {
  if (!given(v) || v === UNKNOWN) return undefined;
  if (!isObject(v)) {
    f.fail("proxy.auth", "must be {username, password}");
    return undefined;
  }
  for (const k of Object.keys(v)) {
    if (k !== "username" && k !== "password")
      f.fail(`proxy.auth.${k}`, "unknown property (known: username, password)");
  }
  const { username, password } = v;
  if (!given(username)) f.fail("proxy.auth.username", "is required");
  else if (username !== UNKNOWN && (typeof username !== "string" || !USERNAME.test(username))) {
    f.fail("proxy.auth.username", "must be 1-64 letters, digits, '.', '_' or '-'");
  }
  if (!given(password)) f.fail(PASSWORD_FIELD, "is required with proxy.auth (set it as a secret)");
  else if (password !== UNKNOWN) {
    if (typeof password !== "string" || password === "") f.fail(PASSWORD_FIELD, "must be a non-empty string");
    else if (/[\r\n\0]/.test(password)) f.fail(PASSWORD_FIELD, "must not contain line breaks or NUL");
    else if (password.length > 256) f.fail(PASSWORD_FIELD, "must be at most 256 characters");
  }
  return { username: username as string, password: password as string };
}

/**
 * Checks `news.proxy` and `news.proxyPort`. Returns the effective port
 * (undefined while unknown) and the checked block when one was given
 * (undefined when not, or while unknown).
 */
export function checkProxy(
  f: Fail,
  news: Obj,
): { port: number | undefined; proxy: CheckedProxy | undefined } {
  const raw = news.proxy;
  if (raw === UNKNOWN) return { port: checkPort(f, news, undefined), proxy: undefined };
  if (given(raw) && !isObject(raw)) {
    f.fail("proxy", "must be {port, auth, allowedClients, outgoingAddress}");
    return { port: DEFAULTS.proxyPort, proxy: undefined };
  }
  const proxy = given(raw) ? (raw as Obj) : undefined;
  const port = checkPort(f, news, proxy);
  if (proxy === undefined) return { port, proxy: undefined };
  for (const k of Object.keys(proxy)) {
    if (!PROXY_FIELDS.includes(k))
      f.fail(`proxy.${k}`, `unknown property (known: ${PROXY_FIELDS.join(", ")})`);
  }
  const auth = checkAuth(f, proxy.auth);
  let allowedClients: string[] | undefined;
  if (given(proxy.allowedClients) && proxy.allowedClients !== UNKNOWN) {
    if (!Array.isArray(proxy.allowedClients) || proxy.allowedClients.length === 0) {
      f.fail("proxy.allowedClients", "must be a non-empty list of CIDRs (0.0.0.0/0 and ::/0 admit everyone)");
    } else {
      proxy.allowedClients.forEach((c, i) => {
        const problem = c === UNKNOWN ? undefined : cidrProblem(c);
        if (problem !== undefined) f.fail(`proxy.allowedClients[${i}]`, problem);
      });
      allowedClients = proxy.allowedClients as string[];
    }
  }
  const out = proxy.outgoingAddress;
  if (given(out) && out !== UNKNOWN && (typeof out !== "string" || isIP(out) === 0)) {
    f.fail("proxy.outgoingAddress", "must be an IPv4 or IPv6 address of the VM");
  }
  return {
    port,
    proxy: {
      port: port ?? DEFAULTS.proxyPort,
      ...(auth !== undefined ? { auth } : {}),
      allowedClients: allowedClients ?? [...DEFAULT_ALLOWED_CLIENTS],
      ...(given(out) ? { outgoingAddress: out as string } : {}),
    },
  };
}
