/**
 * The proxy inside the guest: squid as an authenticated, restricted forward
 * proxy, set up by a vendor-data shell script (a script, like the guest-agent
 * bootstrap, because cloud-init's merge drops vendor cloud-config keys the
 * user's cloud-config also has; a script is never merged). Pure: the
 * configuration text and the script. Who may use the proxy and where it may
 * go is access.ts; the password hash is password-hash.ts (the password
 * itself never reaches the seed).
 *
 * Facts (squid 5.7 on Debian 12 run by hand; 6.x/7.x from source):
 * - `basic_ncsa_auth` checks passwords with the libc's crypt(); it lives in
 *   /usr/lib/squid (Debian, Ubuntu, Alpine) or /usr/lib64/squid (Fedora, RHEL).
 * - AppArmor (Debian/Ubuntu) lets squid's helpers read only /etc/squid/**:
 *   the password file lives there.
 * - Usernames are lower-cased by squid unless `casesensitive on`.
 * - A plain `GET /` to the proxy port is answered by squid itself (400,
 *   `X-Squid-Error: ERR_INVALID_URL`, with its visible_hostname in Via and
 *   X-Cache) before any access check: the script and the health check use
 *   it to tell this squid from another listener (sshd on 22) and from the
 *   image's own squid.
 */
import { createHash } from "node:crypto";
import { issuedAtCreate, type ProxyTls } from "../tls/proxy-tls";
import { APT_INSTALL, ENABLE_FUNCTION, RETRY_FUNCTION } from "../vendor-shell";
import { type AccessRules, ONLINK_ACL_FILE, OWN_ACL_FILE, squidAccess } from "./access";
import { buildSocksSetup } from "./dante";

/** Where the script writes the password file (AppArmor lets squid's helpers read /etc/squid only). */
export const PASSWORD_FILE = "/etc/squid/kvm-proxy.passwd";
/** The prefix of the name squid gives itself in Via and X-Cache (neutral: not the VM's name). */
export const VISIBLE_HOSTNAME_PREFIX = "kvm-proxy-";
/** The realm of squid's Basic challenge. */
export const AUTH_REALM = "pulumi-kvm-proxy";
/** The file name of the script part in vendor-data. */
export const PROXY_SETUP_SCRIPT_FILENAME = "kvm-proxy-squid.sh";

/**
 * What the proxy setup installs with apt-get where squid is missing; the
 * guest-agent script installs them in its own transaction when both run
 * (kvm/guest/vendor-data.ts `guestAgentScript`). Every apt-get install of the
 * provider's own packages leaves their Recommends out: on Debian 12 and 13
 * squid's and the agent's pull in libicu, libxml2, the MIME database (and its
 * rebuild at install), GLib's translations and xdg-user-dirs, over 50 MB that
 * a proxy never uses, about half of what a stock image's first boot unpacks.
 */
export const PROXY_APT_PACKAGES: readonly string[] = ["squid"];
/** Where the script writes the certificate and key squid serves with TLS (AppArmor lets squid read /etc/squid). */
export const TLS_DIR = "/etc/squid/kvm-proxy-tls";
/**
 * With TLS, the port of a plain listener on the guest's loopback, for the
 * provider's probes run inside the guest (guest-probe.ts: Python's urllib
 * speaks no TLS to a proxy). It opens nothing new: squid admits the VM's
 * own processes without credentials on its proxy port already.
 */
export const LOOPBACK_PROBE_PORT = 59128;

/** What the guest's squid (and its SOCKS5 listener beside it) is set up with. */
export interface ProxySetup extends SquidConfInputs {
  /** Basic authentication: the username and the hash of the password (password-hash.ts). */
  auth?: { username: string; passwordHash: string };
  /** SOCKS5 on `port` too (kvm/proxy/dante.ts), with the same clients, credentials and destinations. */
  socks?: { port: number };
  /**
   * TLS on `port` (kvm/tls/proxy-tls.ts): the certificate squid serves, or
   * the CA that issues it, which create turns into one (`servedTls`) once
   * the VM's addresses are known; the script takes only a served one.
   */
  tls?: ProxyTls;
}

/** What squid.conf is written from: the setup without the password hash (the password file holds it). */
export interface SquidConfInputs extends AccessRules {
  port: number;
  /** Basic authentication (squid.conf needs only to know there is some). */
  auth?: { username: string };
  /** The source address of squid's outgoing connections (an address of the VM). */
  outgoingAddress?: string;
  /**
   * Listen with TLS on `port` (certificate and key in {@link TLS_DIR}), and
   * plainly on the loopback's probe port: `true`, or the setup's TLS itself.
   */
  tls?: boolean | ProxyTls;
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
  const lines =
    p.tls !== undefined && p.tls !== false
      ? [
          `https_port ${p.port} tls-cert=${TLS_DIR}/cert.pem tls-key=${TLS_DIR}/key.pem`,
          `http_port 127.0.0.1:${LOOPBACK_PROBE_PORT}`,
        ]
      : [`http_port ${p.port}`];
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
  const access = squidAccess({
    auth: p.auth !== undefined,
    allowedClients: p.allowedClients,
    allowedDestinations: p.allowedDestinations,
    ownAddresses: p.ownAddresses,
    onLink: p.onLink,
  });
  lines.push(...access.acls, ...access.rules);
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

/** Without proxy.socks: a Dante the image brings (a baked image has it) stays off. */
export const NO_SOCKS_FUNCTION = `no_socks() {
	if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled --quiet danted 2>/dev/null; then
		systemctl disable --now danted >/dev/null 2>&1 || log "danted could not be turned off"
	fi
}
`;

/**
 * The vendor-data script: installs squid when missing (apt, dnf/yum, apk,
 * zypper), writes the password file and squid.conf, enables and (re)starts
 * squid, and waits until the port answers as squid does; on failure it
 * prints squid's own reason (cache.log) and exits non-zero, which
 * cloud-init reports.
 */
export function buildProxySetupScript(p: ProxySetup): string {
  if (p.tls !== undefined && issuedAtCreate(p.tls))
    throw new Error("the proxy's certificate is issued at create: the setup takes the one served");
  const served = p.tls;
  const conf = buildSquidConf(p);
  const passwd = p.auth === undefined ? undefined : passwordFileLine(p.auth);
  for (const text of [conf, passwd ?? "", served?.certificate ?? "", served?.privateKey ?? ""]) {
    if (text.split("\n").includes("KVMP_EOF")) throw new Error("the squid setup holds the heredoc delimiter");
  }
  const socks =
    p.socks === undefined
      ? undefined
      : buildSocksSetup({
          port: p.socks.port,
          ...(p.auth !== undefined ? { auth: p.auth } : {}),
          allowedClients: p.allowedClients,
          allowedDestinations: p.allowedDestinations,
          ownAddresses: p.ownAddresses,
          onLink: p.onLink,
          ...(p.outgoingAddress !== undefined ? { outgoingAddress: p.outgoingAddress } : {}),
        });
  return `#!/bin/sh
# pulumi-kvm-proxy: squid as the VM's forward proxy (port ${p.port}${p.auth !== undefined ? ", basic auth" : ""}${p.socks !== undefined ? `, SOCKS5 on ${p.socks.port}` : ""}).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
log() { echo "kvm-proxy-squid: $*"; }
fail() { log "$*"; exit 1; }

# A package manager busy with first-boot jobs (apt-daily, unattended-upgrades)
# is waited for (5 minutes); a failed install (a mirror that stumbles) is
# tried three times, 10 and 20 s apart.
${RETRY_FUNCTION}
${ENABLE_FUNCTION}
apt_install() {
	${APT_INSTALL} ${PROXY_APT_PACKAGES.join(" ")} ||
		{ apt-get -o DPkg::Lock::Timeout=300 -q update && ${APT_INSTALL} ${PROXY_APT_PACKAGES.join(" ")}; }
}
if ! command -v squid >/dev/null 2>&1; then
	log "installing squid"
	if command -v apt-get >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive
		export DEBIAN_FRONTEND
		retry apt_install
	elif command -v dnf >/dev/null 2>&1; then
		retry dnf -y install squid
	elif command -v yum >/dev/null 2>&1; then
		retry yum -y install squid
	elif command -v apk >/dev/null 2>&1; then
		retry apk add --wait 300 --no-cache squid
	elif command -v zypper >/dev/null 2>&1; then
		ZYPP_LOCK_TIMEOUT=300
		export ZYPP_LOCK_TIMEOUT
		retry zypper --non-interactive install squid
	fi
fi
command -v squid >/dev/null 2>&1 || fail "squid is not installed and no package manager could install it"

${socks === undefined ? NO_SOCKS_FUNCTION : `socks_setup() {\n${socks.trim()}\n}\n`}user=$(squid -v 2>/dev/null | tr ' ' '\\n' | sed -n "s/^'*--with-default-user=\\([A-Za-z0-9_.-]*\\).*/\\1/p" | head -n 1)
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
${
  served === undefined
    ? `rm -rf ${TLS_DIR}`
    : `umask 077
mkdir -p ${TLS_DIR}
cat >${TLS_DIR}/cert.pem <<'KVMP_EOF'
${served.certificate.trimEnd()}
KVMP_EOF
cat >${TLS_DIR}/key.pem.new <<'KVMP_EOF'
${served.privateKey.trimEnd()}
KVMP_EOF
chown -R "root:$group" ${TLS_DIR}
chmod 0750 ${TLS_DIR}
chmod 0644 ${TLS_DIR}/cert.pem
chmod 0640 ${TLS_DIR}/key.pem.new
mv -f ${TLS_DIR}/key.pem.new ${TLS_DIR}/key.pem`
}
umask 022
# What the VM itself holds now (its addresses, its subnets and gateways), for
# the destination rules: the static NICs are in squid.conf already, DHCP and
# SLAAC ones are known only here.
{
	echo "# the VM's own addresses at first boot (pulumi-kvm-proxy)"
	if command -v ip >/dev/null 2>&1; then
		ip -o addr show scope global 2>/dev/null | awk '{ split($4, a, "/"); print a[1] }'
	fi
} >${OWN_ACL_FILE}.new
{
	echo "# the VM's on-link subnets and gateways at first boot (pulumi-kvm-proxy)"
	if command -v ip >/dev/null 2>&1; then
		ip -o -4 route show scope link 2>/dev/null | awk '$2 == "dev" { print $1 }'
		ip -o -6 route show 2>/dev/null | awk '$2 == "dev" && $1 != "default" && $1 !~ /^(fe80|ff)/ { print $1 }'
		ip -o -4 route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "via") print $(i + 1) }'
		ip -o -6 route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "via" && $(i + 1) !~ /^fe80:/) print $(i + 1) }'
	fi
} >${ONLINK_ACL_FILE}.new
mv -f ${OWN_ACL_FILE}.new ${OWN_ACL_FILE}
mv -f ${ONLINK_ACL_FILE}.new ${ONLINK_ACL_FILE}
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
	enable_unit squid
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
	if tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -qE "Accepting HTTPS? Socket connections at.*:${p.port}[, ]"; then
		log "squid is listening on port ${p.port}"
${socks === undefined ? "\t\tno_socks\n\t\texit 0" : "\t\tsocks_setup\n\t\texit 0"}
	fi
	if tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -q "FATAL"; then break; fi
	i=$((i + 1))
	sleep 1
done
tail -n "+$((seen + 1))" "$log_file" 2>/dev/null | grep -E "FATAL|commBind|ERROR" | head -n 20
fail "squid did not open port ${p.port}"
`;
}
