/**
 * Shell text the vendor-data scripts share (guest/vendor-data.ts's guest-agent
 * bootstrap, proxy/setup.ts's squid setup): each script runs on its own, so
 * each carries its own copy, written from here. POSIX sh; expects a `log`
 * function. Pure.
 */

/**
 * How the scripts install the provider's own packages with apt-get: waiting
 * up to 5 minutes for dpkg's lock (apt-daily, unattended-upgrades), and
 * without their Recommends, which on Debian bring over 50 MB a proxy never
 * uses (the agent's GLib's: the MIME database, libxml2, ICU, translations).
 */
export const APT_INSTALL = "apt-get -o DPkg::Lock::Timeout=300 -q -y install --no-install-recommends";

/** `retry CMD...`: runs CMD up to three times, 10 and 20 s apart (a mirror that stumbles), saying so. */
export const RETRY_FUNCTION = `retry() {
	n=1
	until "$@"; do
		[ "$n" -ge 3 ] && return 1
		log "attempt $n of $* failed; trying again in $((n * 10)) s"
		sleep $((n * 10))
		n=$((n + 1))
	done
}`;

/**
 * `enable_unit UNIT`: `systemctl enable UNIT` unless the unit already starts
 * at boot (enabled, or static: pulled in by another unit or by udev). For a
 * unit with a SysV script beside it, enable runs systemd-sysv-install and a
 * daemon reload even when nothing changes: 17-21 s of a first boot under TCG
 * (measured for qemu-guest-agent and squid on Debian 12), against 0.2 s for
 * is-enabled.
 */
export const ENABLE_FUNCTION = `enable_unit() {
	case "$(systemctl is-enabled "$1" 2>/dev/null)" in
	enabled | static) ;;
	*) systemctl enable "$1" >/dev/null 2>&1 ;;
	esac
}`;
