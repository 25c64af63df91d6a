/**
 * What a bake's builder VM runs (host/image-bake.ts): a vendor-data script
 * that installs the proxy's packages into a stock image, then hands over to a
 * one-shot unit ordered after cloud-init's final stage, which cleans the
 * instance state, prints one result line on the serial console and powers
 * the builder off. Also the bake key (what names the baked volume) and the
 * reader of the result line. Pure.
 *
 * - Installed: squid, qemu-guest-agent, Dante where the distribution
 *   packages it (Debian 12 and Ubuntu do, Debian 13 does not), and the
 *   recipe's packages (with apt, only names it has a package by exactly;
 *   another fails the bake, named), with the same lock wait and retries as
 *   the proxy's own scripts (vendor-shell.ts); what the image has already is
 *   kept as it is (`--no-upgrade`, as the proxy's own scripts skip it).
 *   Dante is then disabled: only a proxy that asks for SOCKS enables it.
 *   squid and the agent stay enabled, as the proxy's first boot leaves them.
 * - Cleaned, so every proxy booted from the baked disk is a first boot of its
 *   own: cloud-init's instance state, logs and seed (`cloud-init clean`), the
 *   machine-id (emptied: systemd makes a new one at the next boot), SSH host
 *   keys (cloud-init makes new ones), the network configuration cloud-init
 *   wrote and the DHCP leases, the package cache and lists, the journal and
 *   logs, the bake's own unit and scripts.
 * - Why a unit after cloud-final: cleaning cloud-init's state while its final
 *   stage still runs would have it write its result into the cleaned image.
 * - The result line is `kvmp-bake-result: ok`, or `kvmp-bake-result: failed
 *   <why>` after the last lines of cloud-init's output log. It is written to
 *   /dev/ttyS0, the domain's serial console, which the provider reads.
 */
import { createHash } from "node:crypto";
import type { BakeRecipe } from "../config/image";
import { APT_INSTALL, RETRY_FUNCTION } from "../vendor-shell";

/** What starts the result line on the console. */
export const BAKE_RESULT_PREFIX = "kvmp-bake-result: ";

/** The packages every bake installs (apt names; other managers have no Dante, see the script). */
export const BAKED_PACKAGES = ["squid", "qemu-guest-agent"] as const;

const FINISH_UNIT = "kvmp-bake-finish.service";
const FINISH_SCRIPT = "/usr/local/sbin/kvmp-bake-finish";
const INSTALL_RESULT = "/run/kvmp-bake.install";

/** The finish script: runs once cloud-init is done; cleans, reports, powers off. */
const FINISH = `#!/bin/sh
# pulumi-kvm-proxy bake: clean this builder's instance state, say how the
# install went on the serial console, power off.
PATH="\${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin"
export PATH
result=$(cat ${INSTALL_RESULT} 2>/dev/null) || result="failed the install script did not run"
errors=$(python3 -c 'import json; print(len(json.load(open("/run/cloud-init/result.json"))["v1"]["errors"]))' 2>/dev/null) || errors=unknown
if [ "$result" = ok ] && [ "$errors" != 0 ]; then
	result="failed cloud-init reported errors ($errors) in the builder's first boot"
fi
if [ "$result" != ok ]; then
	tail -n 30 /var/log/cloud-init-output.log 2>/dev/null | sed 's/^/kvmp-bake-log: /' >/dev/ttyS0
fi
if command -v apt-get >/dev/null 2>&1; then
	apt-get clean
	rm -rf /var/lib/apt/lists/*
fi
command -v dnf >/dev/null 2>&1 && dnf clean all >/dev/null 2>&1
cloud-init clean --logs --seed >/dev/null 2>&1 || rm -rf /var/lib/cloud/instances /var/lib/cloud/instance /var/lib/cloud/data /var/lib/cloud/seed /var/log/cloud-init*.log
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id /etc/ssh/ssh_host_*
rm -f /etc/netplan/50-cloud-init.yaml /etc/network/interfaces.d/50-cloud-init /etc/network/interfaces.d/50-cloud-init.cfg \\
	/etc/systemd/network/10-cloud-init-*.network /etc/NetworkManager/system-connections/cloud-init-*
rm -rf /var/lib/dhcp/*.leases /var/lib/dhclient/* /var/lib/NetworkManager/*.lease /var/lib/systemd/network/*
rm -rf /var/log/journal/* /tmp/* /var/tmp/* /root/.bash_history
find /var/log -type f -exec truncate -s 0 {} + 2>/dev/null
rm -f /etc/systemd/system/${FINISH_UNIT} ${FINISH_SCRIPT}
sync
echo "${BAKE_RESULT_PREFIX}$result" >/dev/ttyS0
systemctl poweroff
`;

/**
 * `apt_install`: the apt-get branch, run under `retry` with the recipe's
 * names in `$EXTRA` (`fail` and `log` are the script's). After the update it
 * refuses, with `fail` (no retry), an extra name apt has no package by
 * exactly: for such a name apt-get installs what nobody named (a regular
 * expression over its '.' and '+': `exim4-daemon-l.ght` installs a mail
 * server; `curl+` is "install curl"; a virtual name installs a provider).
 * `apt-cache pkgnames` prints the names of real packages (no purely virtual
 * one) and reads its argument as a plain prefix, so it is asked once for
 * all. APT::Cmd::Pattern-Only (apt 2.0 and later) keeps apt-get from reading
 * a regular expression should another update (apt-daily) change the lists
 * between that check and the install.
 */
const APT_INSTALL_FUNCTION = `apt_install() {
	apt-get -o DPkg::Lock::Timeout=300 -q update || return 1
	known=$(apt-cache pkgnames) || return 1
	for p in $EXTRA; do
		printf '%s\\n' "$known" | grep -qxF -- "$p" ||
			fail "apt has no package named $p (bake.packages must name real packages exactly: no virtual package, no pattern)"
	done
	# The proxy's own packages without their Recommends (a proxy uses none of them); the recipe's as
	# apt-get installs them by default, Recommends included.
	apt-get -o DPkg::Lock::Timeout=300 -q -y --no-upgrade install --no-install-recommends ${BAKED_PACKAGES.join(" ")} || return 1
	if [ -n "$EXTRA" ]; then
		apt-get -o DPkg::Lock::Timeout=300 -o APT::Cmd::Pattern-Only=true -q -y --no-upgrade install $EXTRA || return 1
	fi
	# Dante where the release packages it; only a proxy with SOCKS enables it.
	if apt-cache show dante-server >/dev/null 2>&1; then
		${APT_INSTALL} dante-server || return 1
		systemctl disable --now danted >/dev/null 2>&1
	fi
	return 0
}`;

/**
 * The builder's vendor-data script for `recipe`. Its package names are
 * checked by config/image.ts (packageNameProblem): lower-case letters,
 * digits and `+.-`, never a leading or trailing '-', so no shell word, glob
 * or option reaches a package manager. apt-get installs only names it has a
 * package by exactly ({@link APT_INSTALL_FUNCTION}). dnf, yum and zypper get
 * the names as they are: the package of that name, else what they make of
 * it (`name-version`, `name.arch`, a capability another package provides);
 * none of them reads a regular expression.
 */
export function buildBakeScript(recipe: BakeRecipe): string {
  const extra = recipe.packages.join(" ");
  return `#!/bin/sh
# pulumi-kvm-proxy bake: install the proxy's packages into this builder; the
# finish unit (after cloud-init) cleans it and powers it off.
PATH="\${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin"
export PATH
TAG=kvm-proxy-bake
log() {
	echo "$TAG: $*" >&2
}
${RETRY_FUNCTION}
finish_after_cloud_init() {
	cat >${FINISH_SCRIPT} <<'KVMP_EOF'
${FINISH.trimEnd()}
KVMP_EOF
	chmod 0755 ${FINISH_SCRIPT}
	cat >/etc/systemd/system/${FINISH_UNIT} <<'KVMP_EOF'
[Unit]
Description=pulumi-kvm-proxy bake: clean and power off
After=cloud-final.service
[Service]
Type=oneshot
ExecStart=${FINISH_SCRIPT}
KVMP_EOF
	systemctl daemon-reload
	systemctl start --no-block ${FINISH_UNIT}
}
fail() {
	log "$*"
	echo "failed $*" >${INSTALL_RESULT}
	finish_after_cloud_init
	exit 1
}
DEBIAN_FRONTEND=noninteractive
export DEBIAN_FRONTEND
EXTRA="${extra}"
${APT_INSTALL_FUNCTION}
command -v systemctl >/dev/null 2>&1 || { log "a bake needs systemd"; exit 1; }
if command -v apt-get >/dev/null 2>&1; then
	retry apt_install || fail "the packages could not be installed with apt-get"
elif command -v dnf >/dev/null 2>&1; then
	retry dnf -y install ${BAKED_PACKAGES.join(" ")} $EXTRA || fail "the packages could not be installed with dnf"
elif command -v yum >/dev/null 2>&1; then
	retry yum -y install ${BAKED_PACKAGES.join(" ")} $EXTRA || fail "the packages could not be installed with yum"
elif command -v zypper >/dev/null 2>&1; then
	retry zypper --non-interactive install ${BAKED_PACKAGES.join(" ")} $EXTRA || fail "the packages could not be installed with zypper"
else
	fail "no package manager this bake knows (apt-get, dnf, yum, zypper)"
fi
command -v squid >/dev/null 2>&1 || fail "squid is not installed"
echo ok >${INSTALL_RESULT}
finish_after_cloud_init
`;
}

/**
 * The 16-hex key naming a bake (its volume, builder and seed, names.ts):
 * SHA-256 over the cached stock image's volume name (its URL, checksum and
 * format), the recipe and the script itself, so a change of any of them
 * bakes anew.
 */
export function bakeKey(stockVolumeName: string, recipe: BakeRecipe): string {
  return createHash("sha256")
    .update(
      JSON.stringify({
        stock: stockVolumeName,
        packages: recipe.packages,
        userDataMac: recipe.userDataMac ?? null,
        script: buildBakeScript(recipe),
      }),
    )
    .digest("hex")
    .slice(0, 16);
}

/** What the builder said on its console. */
export type BakeResult = { ok: true } | { ok: false; reason: string; lines: string[] };

/**
 * Reads the result line (and, for a failure, the log lines before it) from
 * the console text; undefined when no result line was printed.
 */
export function parseBakeResult(consoleText: string): BakeResult | undefined {
  const lines = consoleText.replace(/\r/g, "").split("\n");
  let at = lines.length - 1;
  while (at >= 0 && !(lines[at] as string).startsWith(BAKE_RESULT_PREFIX)) at--;
  if (at < 0) return undefined;
  const said = (lines[at] as string).slice(BAKE_RESULT_PREFIX.length).trim();
  if (said === "ok") return { ok: true };
  const reason = said.replace(/^failed\s*/, "") || "no reason given";
  const log = lines
    .slice(0, at)
    .filter((l) => l.startsWith("kvmp-bake-log: "))
    .map((l) => l.slice("kvmp-bake-log: ".length));
  return { ok: false, reason, lines: log };
}
