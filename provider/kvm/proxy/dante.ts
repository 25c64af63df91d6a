/**
 * The SOCKS5 listener beside squid (`proxy.socks`): Dante's server, the one
 * packaged SOCKS server that checks passwords against hashes (Debian 12 and
 * Ubuntu `dante-server`, run as danted; Alpine's as sockd; Debian 13 dropped
 * the package, so its images need Dante baked in), with the same clients,
 * credentials and destination rules as the HTTP proxy (proxy/access.ts).
 * Pure: danted.conf, the shell part of the proxy's setup script that
 * installs and starts it, and the greeting probe's program.
 *
 * Facts (Dante 1.4.2 on Debian 12, read with `danted -V` and real requests,
 * test/libvirtd/proxy/dante-rules.test.ts):
 * - A list-valued keyword (`command:`, `socksmethod:`) runs to the end of its
 *   line: a rule is written one keyword per line.
 * - `client` rules act at TCP accept: a client outside them is closed before
 *   any SOCKS byte, so no password is ever asked of it (as squid's 403).
 * - The `username` method checks the system password file with crypt(3)
 *   (root is needed to read /etc/shadow: `user.privileged: root`) and ignores
 *   the account's expiry, which sshd and login honour: the proxy's user is a
 *   system account, expired since 1970, with no shell and no home.
 * - A destination given by name (SOCKS5 with the name, curl's
 *   `--socks5-hostname`) is resolved by Dante and checked against the
 *   address rules, as squid's `dst` does.
 * - `external.rotation: route` picks the source address the routing table
 *   would (every interface listed); with `none` the first external address of
 *   the target's family is taken: the outgoing address, listed first.
 */

import { APT_INSTALL } from "../vendor-shell";
import {
  type AccessRules,
  INWARD_DESTINATIONS,
  minimalRanges,
  NEVER_DESTINATIONS,
  ONLINK_ACL_FILE,
  OWN_ACL_FILE,
} from "./access";

/** What the SOCKS listener is set up with (beside squid's own setup). */
export interface SocksInputs extends AccessRules {
  port: number;
  /** The username whose password (its hash, in the system account) SOCKS clients give. */
  auth?: { username: string; passwordHash: string };
  outgoingAddress?: string;
}

/** The system account's comment, by which the script knows an account it made. */
export const SOCKS_ACCOUNT_COMMENT = "pulumi-kvm-proxy socks";

/** Destination ports a SOCKS client may connect to: web ports and unprivileged ones (no mail, no low services). */
export const SOCKS_PORTS: readonly string[] = ["port = 80", "port = 443", "port 1025-65535"];

/** Placeholders the script fills in on the guest (what only the booted VM knows). */
const EXTERNAL = "@KVMP_SOCKS_EXTERNAL@";
const DISCOVERED_OWN = "@KVMP_SOCKS_OWN@";
const DISCOVERED_ONLINK = "@KVMP_SOCKS_ONLINK@";

const WORLD = ["0.0.0.0/0", "::/0"];

function rule(kind: string, lines: readonly string[]): string {
  return [`${kind} {`, ...lines.map((l) => `\t${l}`), "}"].join("\n");
}

function blocks(to: readonly string[]): string[] {
  return to.map((r) => rule("socks block", [`from: 0/0 to: ${r}`, "log: error"]));
}

function passes(to: readonly string[], auth: boolean): string[] {
  return to.flatMap((r) =>
    SOCKS_PORTS.map((p) =>
      rule("socks pass", [
        `from: 0/0 to: ${r} ${p}`,
        "command: connect",
        `socksmethod: ${auth ? "username" : "none"}`,
      ]),
    ),
  );
}

/** The clients as Dante reads them: `0/0` for the world (both families). */
function clientRanges(allowed: readonly string[]): string[] {
  return allowed.some((r) => WORLD.includes(r)) ? ["0/0"] : minimalRanges(allowed);
}

/**
 * danted.conf for `s`, with the placeholders the setup script fills in (the
 * external interfaces, and the addresses and on-link subnets found at first
 * boot, one `socks block` each). Rules match first to last: clients (and
 * the VM's own processes) at accept; then never the VM itself, link-local,
 * multicast, reserved; never the VM's own addresses; the opened ranges;
 * never the inward ones; then outward, to {@link SOCKS_PORTS}, CONNECT only.
 */
export function buildDantedConf(s: SocksInputs): string {
  const auth = s.auth !== undefined;
  const never = NEVER_DESTINATIONS.flatMap((x) => x.ranges);
  const inward = INWARD_DESTINATIONS.flatMap((x) => x.ranges);
  const clients = [...clientRanges(s.allowedClients), "127.0.0.0/8", "::1/128"];
  return [
    "# Written by pulumi-kvm-proxy at first boot.",
    "logoutput: syslog",
    `internal: 0.0.0.0 port = ${s.port}`,
    `internal: :: port = ${s.port}`,
    EXTERNAL,
    "user.privileged: root",
    "user.unprivileged: nobody",
    "clientmethod: none",
    `socksmethod: ${auth ? "username" : "none"}`,
    ...clients.map((r) => rule("client pass", [`from: ${r} to: 0/0`])),
    rule("client block", ["from: 0/0 to: 0/0", "log: error"]),
    ...blocks(never),
    ...blocks(minimalRanges(s.ownAddresses.map((a) => (a.includes(":") ? `${a}/128` : `${a}/32`)))),
    DISCOVERED_OWN,
    ...passes(minimalRanges(s.allowedDestinations), auth),
    ...blocks(
      minimalRanges([
        ...inward,
        ...s.onLink.map((r) => (r.includes("/") ? r : r.includes(":") ? `${r}/128` : `${r}/32`)),
      ]),
    ),
    DISCOVERED_ONLINK,
    ...passes(["0/0"], auth),
    rule("socks block", ["from: 0/0 to: 0/0", "log: error"]),
    "",
  ].join("\n");
}

/**
 * The SOCKS greeting probe, in Python 3 (argv: port): offers "no
 * authentication" and "username/password" and prints the server's choice,
 * `socks 0502` for a listener that requires the password, `socks 0500` for
 * one that requires nothing, or `error ...`.
 */
export const SOCKS_GREETING_PROGRAM = `import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(bytes([5, 2, 0, 2]))
    r = s.recv(2)
    print("socks " + r.hex())
except Exception as e:
    print("error " + type(e).__name__ + ": " + str(e)[:200].replace("\\n", " "))
`;

/** The server's choice a listener set up as `auth` says must give to a client offering both methods. */
export function expectedGreeting(auth: boolean): string {
  return auth ? "0502" : "0500";
}

/**
 * The shell part of the proxy's setup script that sets SOCKS up (after
 * squid, whose files of the VM's own addresses and on-link subnets it
 * reads): installs Dante when missing, makes the proxy user's system
 * account with the password's hash, writes the configuration, (re)starts
 * the server and waits until it answers the greeting. Fails the script
 * (cloud-init reports it) with the reason.
 */
export function buildSocksSetup(s: SocksInputs): string {
  const conf = buildDantedConf(s);
  if (conf.split("\n").includes("KVMP_EOF")) throw new Error("the SOCKS setup holds the heredoc delimiter");
  const greeting = expectedGreeting(s.auth !== undefined);
  const account =
    s.auth === undefined
      ? ""
      : `# The proxy user's system account: its password the hash squid checks, no shell, no home,
# expired since 1970 (sshd and login refuse it; Dante's username method checks only the password).
socks_user='${s.auth.username}'
if id "$socks_user" >/dev/null 2>&1; then
	comment=$(getent passwd "$socks_user" | cut -d: -f5)
	[ "$comment" = "${SOCKS_ACCOUNT_COMMENT}" ] || fail "user $socks_user exists on the image and is not the proxy's: choose another proxy.auth.username"
	usermod --password '${s.auth.passwordHash}' --expiredate 1970-01-02 "$socks_user" || fail "usermod failed"
else
	command -v useradd >/dev/null 2>&1 || fail "useradd is missing: the SOCKS user cannot be made"
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	useradd --system --no-create-home --home-dir /nonexistent --shell "$nologin" \\
		--comment '${SOCKS_ACCOUNT_COMMENT}' --password '${s.auth.passwordHash}' "$socks_user" ||
		fail "useradd $socks_user failed"
	# useradd leaves a system account's expiry unset, whatever --expiredate says.
	usermod --expiredate 1970-01-02 "$socks_user" || fail "usermod --expiredate failed"
fi
`;
  const external =
    s.outgoingAddress === undefined
      ? `	for i in $ifaces; do echo "external: $i"; done
	echo "external.rotation: route"`
      : `	echo "external: ${s.outgoingAddress}"
	for i in $ifaces; do echo "external: $i"; done
	echo "external.rotation: none"`;
  return `
# SOCKS5 on port ${s.port} (Dante), the same clients, credentials and destinations as squid.
socks_install() {
	if command -v apt-get >/dev/null 2>&1; then
		${APT_INSTALL} dante-server ||
			{ apt-get -o DPkg::Lock::Timeout=300 -q update && ${APT_INSTALL} dante-server; }
	elif command -v dnf >/dev/null 2>&1; then
		dnf -y install dante-server
	elif command -v yum >/dev/null 2>&1; then
		yum -y install dante-server
	elif command -v apk >/dev/null 2>&1; then
		apk add --wait 300 --no-cache dante-server
	elif command -v zypper >/dev/null 2>&1; then
		zypper --non-interactive install dante-server
	else
		return 1
	fi
}
if ! command -v danted >/dev/null 2>&1 && ! command -v sockd >/dev/null 2>&1; then
	log "installing dante-server"
	DEBIAN_FRONTEND=noninteractive
	export DEBIAN_FRONTEND
	retry socks_install
fi
if command -v danted >/dev/null 2>&1; then
	socks_bin=danted socks_conf=/etc/danted.conf socks_service=danted
elif command -v sockd >/dev/null 2>&1; then
	socks_bin=sockd socks_conf=/etc/sockd.conf socks_service=sockd
else
	fail "dante-server could not be installed: proxy.socks needs an image with Dante, or a distribution that packages it (Debian 12, Ubuntu, Alpine do; Debian 13 does not)"
fi
${account}ifaces=$(ip -o link show 2>/dev/null | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2 }')
[ -n "$ifaces" ] || fail "no network interface for SOCKS to go out through"
cat >"$socks_conf.new" <<'KVMP_EOF'
${conf.trimEnd()}
KVMP_EOF
{
${external}
} >"$socks_conf.external"
# The VM's own addresses and on-link subnets found at first boot (squid's files), one block each.
block_rules() { grep -v '^#' "$1" 2>/dev/null | awk 'NF { a = $1; if (index(a, "/") == 0) a = a "/" (index(a, ":") ? 128 : 32); printf "socks block {\n\tfrom: 0/0 to: %s\n\tlog: error\n}\n", a }'; }
block_rules ${OWN_ACL_FILE} >"$socks_conf.own"
block_rules ${ONLINK_ACL_FILE} >"$socks_conf.onlink"
awk -v ext="$socks_conf.external" -v own="$socks_conf.own" -v onlink="$socks_conf.onlink" '
	function insert(file,   l) { while ((getline l < file) > 0) print l }
	$0 == "${EXTERNAL}" { insert(ext); next }
	$0 == "${DISCOVERED_OWN}" { insert(own); next }
	$0 == "${DISCOVERED_ONLINK}" { insert(onlink); next }
	{ print }
' "$socks_conf.new" >"$socks_conf.tmp" && mv -f "$socks_conf.tmp" "$socks_conf"
rm -f "$socks_conf.new" "$socks_conf.external" "$socks_conf.own" "$socks_conf.onlink"
"$socks_bin" -V -f "$socks_conf" || fail "$socks_conf does not parse"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	enable_unit "$socks_service"
	systemctl restart "$socks_service"
elif command -v rc-service >/dev/null 2>&1; then
	rc-update add "$socks_service" default >/dev/null 2>&1
	rc-service "$socks_service" restart
else
	"$socks_bin" -D -f "$socks_conf"
fi
i=0
while [ "$i" -lt 60 ]; do
	if [ "$(python3 -c '${SOCKS_GREETING_PROGRAM.replaceAll("'", "'\\''")}' ${s.port} 2>/dev/null)" = "socks ${greeting}" ]; then
		log "SOCKS5 is listening on port ${s.port}"
		break
	fi
	i=$((i + 1))
	sleep 1
done
[ "$i" -lt 60 ] || fail "SOCKS5 ($socks_bin) did not answer on port ${s.port}"
`;
}
