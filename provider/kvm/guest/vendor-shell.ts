/**
 * Shell text the vendor-data scripts share (cloud-init.ts's guest-agent
 * bootstrap, proxy-setup.ts's squid setup): each script runs on its own, so
 * each carries its own copy, written from here. POSIX sh; expects a `log`
 * function. Pure.
 */

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
