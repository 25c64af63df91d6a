/**
 * The proxy inside the guest: squid as an authenticated, restricted forward
 * proxy, set up by a vendor-data shell script (a script, like the guest-agent
 * bootstrap, because cloud-init's merge drops vendor cloud-config keys the
 * user's cloud-config also has; a script is never merged). Pure: the
 * configuration text, the script, and the password hash squid's helper
 * checks (the password itself never reaches the seed).
 *
 * Facts (squid 5.7 on Debian 12 run by hand; 6.x/7.x from source):
 * - `basic_ncsa_auth` accepts MD5-crypt (`$1$`) through the libc's crypt()
 *   and through squid's own copy of PHK's md5crypt, so it works whatever the
 *   libc (glibc, musl) or build; it lives in /usr/lib/squid (Debian, Ubuntu,
 *   Alpine) or /usr/lib64/squid (Fedora, RHEL).
 * - AppArmor (Debian/Ubuntu) lets squid's helpers read only /etc/squid/**:
 *   the password file lives there.
 * - Usernames are lower-cased by squid unless `casesensitive on`.
 * - `to_linklocal` is predefined only from squid 6: our own ACL name.
 * - A plain `GET /` to the proxy port is answered by squid itself (400,
 *   `X-Squid-Error: ERR_INVALID_URL`) before any access check: the script and
 *   the health check use it to tell squid from another listener (sshd on 22).
 */
import { createHash, createHmac } from "node:crypto";

/** Client ranges admitted when the resource names none: the private, CGNAT and link-local ranges (squid's `localnet`). */
export const DEFAULT_ALLOWED_CLIENTS: readonly string[] = [
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "100.64.0.0/10",
  "fc00::/7",
  "fe80::/10",
];

/** Where the script writes the password file (AppArmor lets squid's helpers read /etc/squid only). */
export const PASSWORD_FILE = "/etc/squid/kvm-proxy.passwd";
/** The prefix of the name squid gives itself in Via and X-Cache (neutral: not the VM's name). */
export const VISIBLE_HOSTNAME_PREFIX = "kvm-proxy-";
/** The realm of squid's Basic challenge. */
export const AUTH_REALM = "pulumi-kvm-proxy";
/** The file name of the script part in vendor-data. */
export const PROXY_SETUP_SCRIPT_FILENAME = "kvm-proxy-squid.sh";

/** What the guest's squid is set up with. */
export interface ProxySetup extends SquidConfInputs {
  /** Basic authentication: the username and the MD5-crypt hash of the password ({@link squidPasswordHash}). */
  auth?: { username: string; passwordHash: string };
}

/** What squid.conf is written from: the setup without the password hash (the password file holds it). */
export interface SquidConfInputs {
  port: number;
  /** Basic authentication (squid.conf needs only to know there is some). */
  auth?: { username: string };
  /** Client CIDRs admitted; everyone else gets 403. */
  allowedClients: readonly string[];
  /** The source address of squid's outgoing connections (an address of the VM). */
  outgoingAddress?: string;
}

// ---------------------------------------------------------------------------
// MD5-crypt (PHK's FreeBSD md5crypt, which squid's crypt_md5.cc copies)
// ---------------------------------------------------------------------------

const ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

function to64(v: number, n: number): string {
  let s = "";
  let x = v;
  for (let i = 0; i < n; i++) {
    s += ITOA64[x & 63];
    x >>>= 6;
  }
  return s;
}

/** `$1$<salt>$<hash>`: MD5-crypt of `password` with `salt` (at most 8 characters of `./0-9A-Za-z`). */
export function md5Crypt(password: string, salt: string): string {
  if (!/^[./0-9A-Za-z]{1,8}$/.test(salt))
    throw new Error("md5Crypt: the salt must be 1-8 characters of ./0-9A-Za-z");
  const magic = "$1$";
  const pw = Buffer.from(password, "utf8");
  const s = Buffer.from(salt, "ascii");
  const md5 = () => createHash("md5");
  const alt = md5().update(pw).update(s).update(pw).digest();
  const ctx = md5().update(pw).update(magic).update(s);
  for (let n = pw.length; n > 0; n -= 16) ctx.update(alt.subarray(0, Math.min(16, n)));
  for (let i = pw.length; i > 0; i >>= 1) ctx.update(i & 1 ? Buffer.of(0) : pw.subarray(0, 1));
  let f = ctx.digest();
  for (let i = 0; i < 1000; i++) {
    const d = md5();
    d.update(i & 1 ? pw : f);
    if (i % 3 !== 0) d.update(s);
    if (i % 7 !== 0) d.update(pw);
    d.update(i & 1 ? f : pw);
    f = d.digest();
  }
  const b = (i: number) => f[i] as number;
  return (
    `${magic}${salt}$` +
    to64((b(0) << 16) | (b(6) << 8) | b(12), 4) +
    to64((b(1) << 16) | (b(7) << 8) | b(13), 4) +
    to64((b(2) << 16) | (b(8) << 8) | b(14), 4) +
    to64((b(3) << 16) | (b(9) << 8) | b(15), 4) +
    to64((b(4) << 16) | (b(10) << 8) | b(5), 4) +
    to64(b(11), 2)
  );
}

/**
 * The password hash written into the seed. Its salt is derived from the
 * password and `context` (the username and the VM) rather than drawn at
 * random, so the seed is byte-identical for the same inputs; two VMs with
 * one password still get different hashes.
 */
export function squidPasswordHash(password: string, context: string): string {
  const mac = createHmac("sha256", password).update(`pulumi-kvm-proxy squid salt\0${context}`).digest();
  let salt = "";
  for (let i = 0; i < 8; i++) salt += ITOA64[(mac[i] as number) & 63];
  return md5Crypt(password, salt);
}

// ---------------------------------------------------------------------------
// squid.conf and the script
// ---------------------------------------------------------------------------

/** The helper path placeholder the script replaces with the guest's own path. */
const HELPER = "@KVMP_AUTH_HELPER@";

/**
 * squid.conf for `p`. Every directive parses on squid 5.x, 6.x and 7.x. Its
 * `visible_hostname` is {@link squidName}: squid names itself so in the Via
 * and X-Cache headers of every reply, which lets the health check tell this
 * configuration from the image's own squid (which answers until the setup
 * script has reloaded it) and from a squid set up differently by hand.
 */
export function buildSquidConf(p: SquidConfInputs): string {
  const directives = squidDirectives(p);
  return [
    "# Written by pulumi-kvm-proxy at first boot; the original is squid.conf.kvm-proxy-orig.",
    `visible_hostname ${nameOf(directives)}`,
    ...directives,
    "",
  ].join("\n");
}

/** The name squid set up for `p` gives itself: the prefix and a digest of the rest of its squid.conf. */
export function squidName(p: SquidConfInputs): string {
  return nameOf(squidDirectives(p));
}

function nameOf(directives: readonly string[]): string {
  const digest = createHash("sha256").update(directives.join("\n"), "utf8").digest("hex");
  return `${VISIBLE_HOSTNAME_PREFIX}${digest.slice(0, 12)}`;
}

/** squid.conf's directives after its name. */
function squidDirectives(p: SquidConfInputs): string[] {
  const lines = [`http_port ${p.port}`];
  if (p.auth !== undefined) {
    lines.push(
      `auth_param basic program ${HELPER} ${PASSWORD_FILE}`,
      `auth_param basic realm ${AUTH_REALM}`,
      "auth_param basic children 5 startup=1 idle=1",
      "auth_param basic credentialsttl 5 minutes",
      "auth_param basic casesensitive on",
      "acl kvmp_users proxy_auth REQUIRED",
    );
  }
  const clients = p.allowedClients.some((c) => c === "0.0.0.0/0" || c === "::/0")
    ? ["all"]
    : [...new Set(p.allowedClients)];
  lines.push(
    `acl kvmp_clients src ${clients.join(" ")}`,
    "acl SSL_ports port 443",
    "acl Safe_ports port 80 21 443 70 210 280 488 591 777 1025-65535",
    "acl kvmp_linklocal dst 169.254.0.0/16 fe80::/10",
    // Outside clients: 403 before any challenge, with or without credentials.
    "http_access deny !kvmp_clients",
    "http_access deny !Safe_ports",
    "http_access deny CONNECT !SSL_ports",
    // Without it an authenticated client can read squid's cache manager.
    "http_access deny manager",
  );
  if (p.auth !== undefined) lines.push("http_access deny !kvmp_users");
  lines.push(
    "http_access deny to_localhost",
    "http_access deny kvmp_linklocal",
    p.auth !== undefined ? "http_access allow kvmp_users" : "http_access allow kvmp_clients",
    "http_access deny all",
  );
  if (p.outgoingAddress !== undefined) lines.push(`tcp_outgoing_address ${p.outgoingAddress}`);
  lines.push(
    "cache deny all",
    // Via in replies tells a client (and the health check) it went through squid; targets see neither.
    "via on",
    "request_header_access Via deny all",
    "forwarded_for delete",
    "httpd_suppress_version_string on",
    "shutdown_lifetime 3 seconds",
  );
  return lines;
}

/** The password file's one line: `user:hash`. */
export function passwordFileLine(auth: { username: string; passwordHash: string }): string {
  return `${auth.username}:${auth.passwordHash}\n`;
}

/**
 * The vendor-data script: installs squid when missing (apt, dnf/yum, apk,
 * zypper), writes the password file and squid.conf, enables and (re)starts
 * squid, and waits until the port answers as squid does; on failure it
 * prints squid's own reason (cache.log) and exits non-zero, which
 * cloud-init reports.
 */
export function buildProxySetupScript(p: ProxySetup): string {
  const conf = buildSquidConf(p);
  const passwd = p.auth === undefined ? undefined : passwordFileLine(p.auth);
  for (const text of [conf, passwd ?? ""]) {
    if (text.split("\n").includes("KVMP_EOF")) throw new Error("the squid setup holds the heredoc delimiter");
  }
  return `#!/bin/sh
# pulumi-kvm-proxy: squid as the VM's forward proxy (port ${p.port}${p.auth !== undefined ? ", basic auth" : ""}).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
log() { echo "kvm-proxy-squid: $*"; }
fail() { log "$*"; exit 1; }

if ! command -v squid >/dev/null 2>&1; then
	log "installing squid"
	if command -v apt-get >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive
		export DEBIAN_FRONTEND
		apt-get -y install squid || { apt-get update && apt-get -y install squid; }
	elif command -v dnf >/dev/null 2>&1; then
		dnf -y install squid
	elif command -v yum >/dev/null 2>&1; then
		yum -y install squid
	elif command -v apk >/dev/null 2>&1; then
		apk add --no-cache squid
	elif command -v zypper >/dev/null 2>&1; then
		zypper --non-interactive install squid
	fi
fi
command -v squid >/dev/null 2>&1 || fail "squid is not installed and no package manager could install it"

user=$(squid -v 2>/dev/null | tr ' ' '\\n' | sed -n "s/^'*--with-default-user=\\([A-Za-z0-9_.-]*\\).*/\\1/p" | head -n 1)
if [ -z "$user" ]; then
	if id squid >/dev/null 2>&1; then user=squid; else user=proxy; fi
fi
group=$(id -gn "$user" 2>/dev/null || echo root)
mkdir -p /etc/squid
${
  passwd === undefined
    ? `rm -f ${PASSWORD_FILE}`
    : `helper=""
for d in /usr/lib/squid /usr/lib64/squid /usr/libexec/squid; do
	if [ -x "$d/basic_ncsa_auth" ]; then helper="$d/basic_ncsa_auth"; break; fi
done
[ -n "$helper" ] || fail "squid's basic_ncsa_auth helper was not found"
umask 077
cat >${PASSWORD_FILE}.new <<'KVMP_EOF'
${passwd.trimEnd()}
KVMP_EOF
chown "root:$group" ${PASSWORD_FILE}.new
chmod 0640 ${PASSWORD_FILE}.new
mv -f ${PASSWORD_FILE}.new ${PASSWORD_FILE}`
}
umask 022
if [ -f /etc/squid/squid.conf ] && [ ! -f /etc/squid/squid.conf.kvm-proxy-orig ]; then
	cp -p /etc/squid/squid.conf /etc/squid/squid.conf.kvm-proxy-orig
fi
cat >/etc/squid/squid.conf.new <<'KVMP_EOF'
${conf.trimEnd()}
KVMP_EOF
${passwd === undefined ? "" : `sed -i "s#${HELPER}#$helper#" /etc/squid/squid.conf.new\n`}mv -f /etc/squid/squid.conf.new /etc/squid/squid.conf
squid -k parse -f /etc/squid/squid.conf >/dev/null 2>&1 || { squid -k parse -f /etc/squid/squid.conf; fail "squid.conf does not parse"; }

# A running squid rereads its configuration and reopens its ports on reload
# (under a second); a stopped one is started.
log_file=/var/log/squid/cache.log
seen=$(wc -l <"$log_file" 2>/dev/null || echo 0)
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl enable squid >/dev/null 2>&1
	if systemctl is-active --quiet squid; then systemctl reload squid; else systemctl restart squid; fi
elif command -v rc-service >/dev/null 2>&1; then
	rc-update add squid default >/dev/null 2>&1
	if rc-service squid status >/dev/null 2>&1; then rc-service squid reload; else rc-service squid start; fi
elif squid -k check >/dev/null 2>&1; then
	squid -k reconfigure
else
	squid
fi

# Ready when squid reports our port open; sshd or anything else on it is not squid.
i=0
while [ "$i" -lt 60 ]; do
	if tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -q "Accepting HTTP Socket connections at.*:${p.port}[, ]"; then
		log "squid is listening on port ${p.port}"
		exit 0
	fi
	if tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -q "FATAL"; then break; fi
	i=$((i + 1))
	sleep 1
done
tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -E "FATAL|commBind|ERROR" | head -n 20
fail "squid did not open port ${p.port}"
`;
}
