/**
 * `check` for the proxy block: `proxy: {port, auth: {username, password},
 * allowedClients, allowedDestinations, outgoingAddress,
 * publicClientsWithoutAuth, socks}` and its shorthand `proxyPort`. Every failure
 * names its field; the password's failures name
 * `proxy.auth.password (secret)` and never quote anything of it.
 *
 * The password never reaches the provider: the KvmProxy class hashes it in
 * the program (kvm/proxy/password-hash.ts) and sends `{username, passwordHash}`,
 * or `{username, passwordProblem}` when the password breaks a rule, which
 * check reports here (the class cannot fail a preview itself).
 */
import { UPGRADE_ACTION } from "../errors";
import { given, isObject } from "../kvm/fields";
import { ipProblem } from "../kvm/network/ip";
import { type AddressSpan, addressSpan, vmAddressProblem } from "../kvm/network/vm-address";
import { checkAllowedClients, checkAllowedDestinations, DEFAULT_ALLOWED_CLIENTS } from "../kvm/proxy/access";
import { isPasswordHash } from "../kvm/proxy/password-hash";
import { LOOPBACK_PROBE_PORT } from "../kvm/proxy/setup";
import { type ProxyTls, readProxyTls, type TlsCa } from "../kvm/tls/proxy-tls";
import { Failures } from "../kvm/validation";
import { type CheckedProxy, type CheckedProxyAuth, DEFAULTS, UNKNOWN } from "./args";

type Obj = Record<string, unknown>;
interface Fail {
  fail(property: string | undefined, reason: string): void;
}

/** What `proxy.tls` needs besides the inputs: the old inputs' TLS (a CA made before is kept), and how to make one. */
export interface TlsContext {
  /** `proxy.tls` of the old inputs, as check left it. */
  old?: unknown;
  /** A new CA for the proxy (kvm/tls/certificate.ts makeCa). */
  makeCa: () => TlsCa;
}

/**
 * `proxy.tls` checked: as given, or with the CA made for the proxy, the
 * old inputs' while the program gives none of its own (so the CA, and what
 * clients trust, stays across updates); undefined when absent or unknown.
 */
function checkTls(f: Fail, v: unknown, ctx: TlsContext): ProxyTls | undefined {
  // Not known yet (preview): the block stays unknown, so that nothing is judged of it.
  if (v === UNKNOWN || JSON.stringify(v ?? null).includes(UNKNOWN))
    return given(v) ? (UNKNOWN as never) : undefined;
  const own = new Failures();
  const tls = readProxyTls(own, v);
  for (const x of own.list) f.fail(x.property, x.reason);
  if (tls !== "make") return tls;
  const old = ctx.old as { ca?: TlsCa } | undefined;
  if (
    old?.ca?.made === true &&
    typeof old.ca.certificate === "string" &&
    typeof old.ca.privateKey === "string"
  )
    return { ca: old.ca };
  return { ca: ctx.makeCa() };
}

/** TCP ports the guest's own services hold: sshd, systemd-resolved's stub and LLMNR. */
export const RESERVED_GUEST_PORTS: Readonly<Record<number, string>> = {
  22: "sshd",
  53: "the DNS stub resolver (systemd-resolved)",
  5355: "LLMNR (systemd-resolved)",
  [LOOPBACK_PROBE_PORT]: "squid's loopback listener for the provider's own probes (with proxy.tls)",
};

/** The name the password's failures use: the engine prints a failing top-level value, and this is no top-level name. */
export const PASSWORD_FIELD = "proxy.auth.password (secret)";

const USERNAME = /^[A-Za-z0-9._-]{1,64}$/;
/**
 * A username SOCKS can have: Dante checks it against a system account
 * (kvm/proxy/dante.ts), which useradd makes for names of this form only.
 */
const SOCKS_USERNAME = /^[a-z_][a-z0-9_-]{0,31}$/;
/**
 * System and image accounts a SOCKS username must not name: their
 * password would become the proxy's (the setup script also refuses any
 * account of the image that is not the proxy's).
 */
export const RESERVED_ACCOUNTS: readonly string[] = [
  ...["root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy"],
  ...["www-data", "backup", "list", "irc", "gnats", "nobody", "nogroup", "sshd", "squid", "messagebus"],
  ...["admin", "debian", "ubuntu", "fedora", "centos", "alpine", "cloud-user", "ec2-user", "operator"],
];
const PROXY_FIELDS = [
  "port",
  "auth",
  "allowedClients",
  "allowedDestinations",
  "outgoingAddress",
  "publicClientsWithoutAuth",
  "socks",
  "tls",
];
/** What the class sends in `proxy.auth` (the user writes username and password). */
const AUTH_FIELDS = ["username", "passwordHash", "passwordProblem"];

/** Why `port` cannot be the proxy's, or undefined. */
export function proxyPortProblem(port: unknown): string | undefined {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    return "must be an integer from 1 to 65535";
  }
  const holder = RESERVED_GUEST_PORTS[port];
  if (holder !== undefined) return `${port} is taken by ${holder} on the guest; choose another port`;
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

/** `proxy.auth` as the class sends it; undefined when absent or unknown. */
function checkAuth(f: Fail, v: unknown): CheckedProxyAuth | undefined {
  if (!given(v) || v === UNKNOWN) return undefined;
  if (!isObject(v)) {
    f.fail("proxy.auth", "must be {username, password}");
    return undefined;
  }
  for (const k of Object.keys(v)) {
    if (k === "password") {
      f.fail(
        PASSWORD_FIELD,
        "reached the provider unhashed: create the proxy with the KvmProxy class, which hashes it in the program",
      );
    } else if (!AUTH_FIELDS.includes(k))
      f.fail(`proxy.auth.${k}`, "unknown property (known: username, password)");
  }
  const { username, passwordHash, passwordProblem } = v;
  if (!given(username)) f.fail("proxy.auth.username", "is required");
  else if (username !== UNKNOWN && (typeof username !== "string" || !USERNAME.test(username))) {
    f.fail("proxy.auth.username", "must be 1-64 letters, digits, '.', '_' or '-'");
  }
  if (typeof passwordProblem === "string") {
    f.fail(PASSWORD_FIELD, passwordProblem);
    return undefined;
  }
  if (!given(passwordHash) && !Object.hasOwn(v, "password")) {
    f.fail(PASSWORD_FIELD, "is required with proxy.auth (set it as a secret)");
  } else if (given(passwordHash) && passwordHash !== UNKNOWN && !isPasswordHash(passwordHash)) {
    f.fail(
      PASSWORD_FIELD,
      `was not hashed by this version of the KvmProxy class (the program's pulumi-kvm-proxy and the provider differ): ${UPGRADE_ACTION}`,
    );
  }
  return { username: username as string, passwordHash: passwordHash as string };
}

/**
 * `proxy.socks` (`{}` or `{port}`), beside the proxy's HTTP `port`: its own
 * port, and with auth a username a system account can have.
 */
function checkSocks(
  f: Fail,
  v: unknown,
  httpPort: number | undefined,
  auth: unknown,
): { port: number } | undefined {
  if (!given(v) || v === UNKNOWN) return undefined;
  if (!isObject(v)) {
    f.fail("proxy.socks", "must be {} or {port}: a SOCKS5 listener beside the HTTP one");
    return undefined;
  }
  for (const k of Object.keys(v))
    if (k !== "port") f.fail(`proxy.socks.${k}`, "unknown property (known: port)");
  let port: number = DEFAULTS.socksPort;
  if (given(v.port) && v.port !== UNKNOWN) {
    const problem = proxyPortProblem(v.port);
    if (problem !== undefined) f.fail("proxy.socks.port", problem);
    else port = v.port as number;
  }
  if (httpPort !== undefined && port === httpPort)
    f.fail("proxy.socks.port", `${port} is the HTTP proxy's port: SOCKS needs a port of its own`);
  const username = isObject(auth) ? auth.username : undefined;
  if (typeof username === "string" && username !== UNKNOWN) {
    if (!SOCKS_USERNAME.test(username)) {
      f.fail(
        "proxy.auth.username",
        "with proxy.socks, must be 1-32 lower-case letters, digits, '_' or '-', not starting with a digit or '-' (SOCKS checks it against a system account of the VM)",
      );
    } else if (RESERVED_ACCOUNTS.includes(username)) {
      f.fail(
        "proxy.auth.username",
        `with proxy.socks, ${username} would be a system or image account of the VM (its password the proxy's): choose another`,
      );
    }
  }
  return { port };
}

/** Whether `v` is a list whose entries are all known. */
function knownList(v: unknown): v is unknown[] {
  return Array.isArray(v) && !v.includes(UNKNOWN);
}

/**
 * Checks `news.proxy` and `news.proxyPort`. Returns the effective port
 * (undefined while unknown) and the checked block when one was given
 * (undefined when not, or while unknown).
 */
export function checkProxy(
  f: Fail,
  news: Obj,
  tlsContext: TlsContext,
): { port: number | undefined; proxy: CheckedProxy | undefined } {
  const raw = news.proxy;
  if (raw === UNKNOWN) return { port: checkPort(f, news, undefined), proxy: undefined };
  if (given(raw) && !isObject(raw)) {
    // Named with "(secret)": the engine prints a failing top-level value, and a string here may be a URL with credentials.
    f.fail("proxy (secret)", "must be {port, auth, allowedClients, allowedDestinations, outgoingAddress}");
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
  const openOptOut = proxy.publicClientsWithoutAuth;
  if (given(openOptOut) && openOptOut !== UNKNOWN && typeof openOptOut !== "boolean") {
    f.fail("proxy.publicClientsWithoutAuth", "must be true or false");
  }
  const authKnown = given(proxy.auth) ? proxy.auth !== UNKNOWN : true;
  let allowedClients: string[] | undefined;
  const clients = proxy.allowedClients;
  if (given(clients) && clients !== UNKNOWN) {
    if (!Array.isArray(clients) || clients.length === 0) {
      f.fail("proxy.allowedClients", "must be a non-empty list of address ranges");
    } else if (knownList(clients) && authKnown) {
      checkAllowedClients(f, "proxy.allowedClients", clients, {
        auth: given(proxy.auth),
        publicClientsWithoutAuth: openOptOut === true,
      });
      allowedClients = clients as string[];
    } else allowedClients = clients as string[];
  }
  let allowedDestinations: string[] | undefined;
  const destinations = proxy.allowedDestinations;
  if (given(destinations) && destinations !== UNKNOWN) {
    if (!Array.isArray(destinations)) {
      f.fail("proxy.allowedDestinations", "must be a list of address ranges");
    } else {
      if (knownList(destinations)) checkAllowedDestinations(f, "proxy.allowedDestinations", destinations);
      allowedDestinations = destinations as string[];
    }
  }
  const out = proxy.outgoingAddress;
  if (given(out) && out !== UNKNOWN) {
    const problem = ipProblem(out) ?? vmAddressProblem(addressSpan(out as string) as AddressSpan);
    if (problem !== undefined) f.fail("proxy.outgoingAddress", `must be an address of the VM: ${problem}`);
  }
  const socks = checkSocks(f, proxy.socks, port, proxy.auth);
  const tls = checkTls(f, proxy.tls, tlsContext);
  return {
    port,
    proxy: {
      port: port ?? DEFAULTS.proxyPort,
      ...(socks !== undefined ? { socks } : {}),
      ...(tls !== undefined ? { tls } : {}),
      ...(auth !== undefined ? { auth } : {}),
      allowedClients: allowedClients ?? [...DEFAULT_ALLOWED_CLIENTS],
      allowedDestinations: allowedDestinations ?? [],
      ...(given(out) ? { outgoingAddress: out as string } : {}),
      ...(openOptOut === true ? { publicClientsWithoutAuth: true as const } : {}),
    },
  };
}
