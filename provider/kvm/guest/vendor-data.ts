/**
 * The seed's `vendor-data`: what this provider adds to the guest's cloud-init
 * beside the user's own data.
 *
 * The user's user-data is never touched: it reaches the seed byte for byte in
 * whatever format it has (cloud-config, `#!` script, `## template: jinja`,
 * MIME multipart, gzip, `#include`), so this module only builds vendor-data.
 *
 * Why a shell script and not a cloud-config: cloud-init merges vendor-data
 * cloud-config *under* the user's with its default mergers, so any key the
 * user also sets (`packages:`, `runcmd:`) silently drops ours, and `merge_how`
 * cannot help (in user-data it governs only the first source; in vendor-data
 * it is discarded). A vendor-data shell script bypasses the merger: cloud-init
 * writes it to `/var/lib/cloud/instance/scripts/vendor/` and runs it from
 * `cc_scripts_vendor` in the final stage, after the user's `packages:` and
 * before the user's `runcmd` (`scripts_user`).
 *
 * Pure: no I/O.
 */
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { ProviderError } from "../../errors";
import { isPackageName, packageNameProblem } from "../config/image";
import { PROXY_APT_PACKAGES, PROXY_SETUP_SCRIPT_FILENAME } from "../proxy/setup";
import { APT_INSTALL, ENABLE_FUNCTION, RETRY_FUNCTION } from "../vendor-shell";

/**
 * {@link GUEST_AGENT_SCRIPT}, with `alsoApt` installed in the same apt-get
 * transaction as the agent where apt-get installs it: the proxy setup's
 * squid when that script follows, so a stock Debian guest runs dpkg and its
 * triggers once instead of twice (the proxy setup then finds squid there).
 * If that install fails the agent is installed alone, as without `alsoApt`,
 * and the proxy setup installs its own packages as it always does; a failure
 * that left the agent installed is none of this script's.
 */
export function guestAgentScript(alsoApt: readonly string[] = []): string {
  // The bake's rule: Debian policy's names, nothing apt-get reads as an option, a removal or a pattern.
  const bad = alsoApt.find((name) => !isPackageName(name));
  if (bad !== undefined) {
    throw new ProviderError(
      "permanent",
      `not a package name apt-get reads as one: ${bad} (${packageNameProblem(bad)})`,
    );
  }
  const also = alsoApt.join(" ");
  const together =
    also === ""
      ? ""
      : `	# The proxy setup's packages in the same transaction (one dpkg run, one round of triggers);
	# the agent alone if that fails, and the proxy setup installs its own. A failure that left
	# the agent installed (another package's maintainer script) is no failure of this script.
	${APT_INSTALL} qemu-guest-agent ${also} && return 0
	agent_present && { log "installing ${also} beside the agent failed; the agent is there"; return 0; }
	log "installing ${also} beside the agent failed; installing the agent alone"
`;
  return `#!/bin/sh
# pulumi-kvm-proxy vendor-data: install, enable and start qemu-guest-agent so
# the provider can read this guest's addresses through the agent.
# Exits 1 with a message when the agent cannot be installed or started:
# cloud-init then reports scripts_vendor as failed, and the boot carries on.
# qemu-ga lives in sbin on Debian; keep the caller's PATH first.
PATH="\${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin"
export PATH
TAG=kvm-proxy-guest-agent

log() {
	echo "$TAG: $*" >&2
}

have() {
	command -v "$1" >/dev/null 2>&1
}

agent_present() {
	have qemu-ga && return 0
	for f in /usr/bin/qemu-ga /usr/sbin/qemu-ga /usr/libexec/qemu-ga \\
		/lib/systemd/system/qemu-guest-agent.service \\
		/usr/lib/systemd/system/qemu-guest-agent.service \\
		/etc/init.d/qemu-guest-agent; do
		[ -e "$f" ] && return 0
	done
	return 1
}

# A failed install (a mirror that stumbles) is tried three times, 10 and 20 s apart.
${RETRY_FUNCTION}

${ENABLE_FUNCTION}

apt_install() {
	apt-get -o DPkg::Lock::Timeout=300 -q update ||
		log "apt-get update failed; trying the install with the current lists"
${together}	${APT_INSTALL} qemu-guest-agent${also === "" ? "" : " || agent_present"}
}

install_agent() {
	if have apt-get; then
		DEBIAN_FRONTEND=noninteractive
		export DEBIAN_FRONTEND
		retry apt_install
	elif have dnf; then
		retry dnf -y install qemu-guest-agent
	elif have yum; then
		retry yum -y install qemu-guest-agent
	elif have zypper; then
		ZYPP_LOCK_TIMEOUT=300
		export ZYPP_LOCK_TIMEOUT
		retry zypper --non-interactive install --no-recommends qemu-guest-agent
	elif have apk; then
		retry apk add --wait 300 qemu-guest-agent
	else
		log "no supported package manager found (apt-get, dnf, yum, zypper, apk)"
		return 1
	fi
}

start_agent() {
	if [ -d /run/systemd/system ] && have systemctl; then
		# Debian and Ubuntu ship a static unit that udev starts when the
		# virtio port appears: only a disabled unit is enabled.
		enable_unit qemu-guest-agent || true
		systemctl start qemu-guest-agent
	elif have rc-service; then
		rc-update add qemu-guest-agent default >/dev/null 2>&1 || true
		rc-service qemu-guest-agent status >/dev/null 2>&1 ||
			rc-service qemu-guest-agent start
	elif have service; then
		service qemu-guest-agent start
	else
		log "no supported service manager found (systemctl, rc-service, service)"
		return 1
	fi
}

if agent_present; then
	log "qemu-guest-agent already present; not installing"
else
	if ! install_agent; then
		log "installing qemu-guest-agent failed"
		exit 1
	fi
	if ! agent_present; then
		log "qemu-guest-agent still missing after the install"
		exit 1
	fi
fi

if ! start_agent; then
	log "starting qemu-guest-agent failed (does the domain define the org.qemu.guest_agent.0 channel?)"
	exit 1
fi
log "qemu-guest-agent enabled and started"
exit 0
`;
}

/**
 * The vendor-data script that installs, enables and starts qemu-guest-agent,
 * so the provider can ask the guest for its addresses.
 *
 * - POSIX `sh`; package managers tried in order: apt-get (Debian/Ubuntu), dnf
 *   then yum (Fedora/RHEL), zypper (SUSE), apk (Alpine); services started
 *   with systemctl, OpenRC (rc-update/rc-service) or `service`.
 * - Skips the install when `qemu-ga` or a qemu-guest-agent service is already
 *   present (most cloud images ship it), waits for package locks held by
 *   first-boot jobs such as unattended-upgrades (5 minutes) instead of
 *   failing on them, and tries a failed install three times.
 * - Exit status: 0 when the agent is installed and started, 1 with a message
 *   naming the failed step otherwise. A non-zero exit does not fail the boot:
 *   cloud-init still runs every later module, including the user's `runcmd`;
 *   it only marks `scripts_vendor` failed, so `cloud-init status` reports an
 *   error and `/var/log/cloud-init-output.log` says why. That is deliberate:
 *   without the agent the provider cannot learn the guest's IP from it, and
 *   an `exit 0` would leave the operator chasing that with no trace on the
 *   guest. Users who do not want the script set `installGuestAgent: false`.
 * - ASCII only, and free of the text cloud-init takes for a MIME header, so
 *   it can be sent alone as vendor-data (cloud-init sniffs the `#!`).
 */
export const GUEST_AGENT_SCRIPT = guestAgentScript();

/** File name of the script part in the multipart; cloud-init names the script after it. */
export const GUEST_AGENT_SCRIPT_FILENAME = "kvm-proxy-guest-agent.sh";

/** File name of the user's part in the multipart (sorts after the script's, so scripts run agent first). */
export const USER_VENDOR_DATA_FILENAME = "vendor-data";

/** Options of {@link buildVendorData}. */
export interface VendorDataOptions {
  /** Add {@link GUEST_AGENT_SCRIPT}. The resource defaults this to true. */
  installGuestAgent: boolean;
  /** The user's own vendor-data, any format cloud-init knows. Strings are sent as UTF-8. */
  vendorData?: string | Buffer;
  /** The proxy setup script (kvm/proxy/setup.ts), a script part after the guest-agent one. */
  proxySetup?: string;
}

/**
 * Builds the seed's `vendor-data`, or `undefined` when there is none (the
 * seed then omits the file; NoCloud requires only `user-data` and
 * `meta-data`).
 *
 * | scripts (agent, proxy setup) | vendorData        | vendor-data                                  |
 * |------------------------------|-------------------|----------------------------------------------|
 * | none                         | undefined         | none (`undefined`)                           |
 * | none                         | given (even `""`) | `vendorData` exactly, byte for byte          |
 * | one                          | undefined or `""` | that script alone                            |
 * | otherwise                    |                   | MIME multipart: the scripts, then the user's |
 *
 * The multipart (MIME-Version 1.0, `multipart/mixed`, LF line endings) has
 * these parts:
 * 1. the scripts, each `text/x-shellscript`, 7bit: {@link GUEST_AGENT_SCRIPT}
 *    ({@link GUEST_AGENT_SCRIPT_FILENAME}) when installGuestAgent, then the
 *    proxy setup (kvm/proxy/setup.ts) when given; cloud-init runs them in order;
 * 2. the user's data, filename {@link USER_VENDOR_DATA_FILENAME}, declared
 *    `text/plain` so cloud-init re-sniffs its type from its first line
 *    (`#cloud-config`, `#!`, `## template: jinja`, `#include`, ...): this code
 *    never classifies user content. It travels 7bit when it is plain ASCII
 *    text (no NUL or other control bytes but tab, CR and LF, lines of at most
 *    998 bytes, no trailing lone CR), and base64 otherwise: cloud-init parses
 *    the multipart as a string and decodes an 8bit part's non-ASCII
 *    characters as `raw-unicode-escape`, which would mangle UTF-8, whereas a
 *    base64 part comes back as the exact bytes. Gzip data (magic `1f 8b`) is
 *    declared `application/gzip` instead, a type cloud-init decompresses
 *    before sniffing, just as it does for gzip at the top level.
 *
 * The boundary is deterministic (the same inputs give the same bytes): the
 * first candidate is derived from a SHA-256 of the scripts, and while a
 * candidate occurs anywhere in the encoded parts the next is derived from a
 * hash of the previous one. A boundary therefore never appears inside a part.
 *
 * @throws ProviderError (permanent) when a script travels beside a
 *   `vendorData` that is itself a MIME multipart (cloud-init's own test:
 *   `mime-version:` in its first 4096 bytes, after gunzip): cloud-init does
 *   not parse a multipart nested in a part, so it would be dropped. Also
 *   thrown for gzip data that does not decompress.
 */
export function buildVendorData(opts: VendorDataOptions): Buffer | undefined {
  const user =
    opts.vendorData === undefined
      ? undefined
      : typeof opts.vendorData === "string"
        ? Buffer.from(opts.vendorData, "utf8")
        : opts.vendorData;
  const scripts: { filename: string; body: Buffer }[] = [];
  if (opts.installGuestAgent) {
    const agent = opts.proxySetup !== undefined ? guestAgentScript(PROXY_APT_PACKAGES) : GUEST_AGENT_SCRIPT;
    scripts.push({ filename: GUEST_AGENT_SCRIPT_FILENAME, body: Buffer.from(agent, "ascii") });
  }
  if (opts.proxySetup !== undefined) {
    scripts.push({ filename: PROXY_SETUP_SCRIPT_FILENAME, body: Buffer.from(opts.proxySetup, "utf8") });
  }
  if (scripts.length === 0) return user;
  const userGiven = user !== undefined && user.length > 0;
  if (scripts.length === 1 && !userGiven) return (scripts[0] as { body: Buffer }).body;

  const parts: MimePart[] = scripts.map((script) => ({
    headers: [
      'Content-Type: text/x-shellscript; charset="us-ascii"',
      "MIME-Version: 1.0",
      "Content-Transfer-Encoding: 7bit",
      `Content-Disposition: attachment; filename="${script.filename}"`,
    ],
    body: script.body,
  }));
  if (userGiven)
    parts.push(userVendorDataPart(user, opts.installGuestAgent || opts.proxySetup !== undefined));
  // The boundary's seed is fixed: the same parts make the same bytes (a deterministic seed).
  return multipart(parts, Buffer.concat(scripts.map((x) => x.body)));
}

interface MimePart {
  headers: string[];
  /** The encoded body, exactly as it goes between the part's blank line and the next delimiter. */
  body: Buffer;
}

const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

function userVendorDataPart(user: Buffer, besideScripts: boolean): MimePart {
  const isGzip = user.subarray(0, 2).equals(GZIP_MAGIC);
  let inspected = user;
  if (isGzip) {
    try {
      inspected = gunzipSync(user);
    } catch (err) {
      throw new ProviderError(
        "permanent",
        "vendorData starts with the gzip magic bytes but does not decompress; cloud-init would skip it",
        { cause: err },
      );
    }
  }
  if (
    besideScripts &&
    inspected.subarray(0, 4096).toString("latin1").toLowerCase().includes("mime-version:")
  ) {
    throw new ProviderError(
      "permanent",
      "vendorData is a MIME multipart, which cloud-init cannot read nested beside this provider's scripts " +
        "(the guest-agent bootstrap and the proxy setup); give each of its parts as a single document, " +
        "or put the multipart in userData",
    );
  }
  const disposition = `Content-Disposition: attachment; filename="${USER_VENDOR_DATA_FILENAME}"`;
  if (!isGzip && isSevenBitSafe(user)) {
    return {
      headers: [
        "Content-Type: text/plain",
        "MIME-Version: 1.0",
        "Content-Transfer-Encoding: 7bit",
        disposition,
      ],
      body: user,
    };
  }
  return {
    headers: [
      isGzip ? "Content-Type: application/gzip" : "Content-Type: text/plain",
      "MIME-Version: 1.0",
      "Content-Transfer-Encoding: base64",
      disposition,
    ],
    body: base64Lines(user),
  };
}

/**
 * True when `data` survives a 7bit MIME part unchanged through Python's email
 * parser: ASCII printable plus tab/CR/LF, lines within RFC 5322's 998 bytes,
 * and no lone CR at the end (the parser strips one line ending before the
 * delimiter, and would take that CR with the LF we add).
 */
function isSevenBitSafe(data: Buffer): boolean {
  let lineLength = 0;
  for (const byte of data) {
    if (byte === 0x0a || byte === 0x0d) {
      lineLength = 0;
      continue;
    }
    if (byte !== 0x09 && (byte < 0x20 || byte > 0x7e)) return false;
    lineLength++;
    if (lineLength > 998) return false;
  }
  return data[data.length - 1] !== 0x0d;
}

/** Base64 in 76-character lines (RFC 2045), LF-terminated. */
function base64Lines(data: Buffer): Buffer {
  const encoded = data.toString("base64");
  const lines: string[] = [];
  for (let i = 0; i < encoded.length; i += 76) lines.push(encoded.slice(i, i + 76));
  return Buffer.from(`${lines.join("\n")}\n`, "ascii");
}

/**
 * Assembles a multipart/mixed message. Each body is followed by a line end
 * that belongs to the delimiter (RFC 2046 5.1.1), so the parsed payload is
 * the body exactly.
 */
function multipart(parts: MimePart[], seed: Buffer): Buffer {
  const boundary = chooseBoundary(
    parts.map((p) => p.body),
    seed,
  );
  const chunks: Buffer[] = [
    Buffer.from(`Content-Type: multipart/mixed; boundary="${boundary}"\nMIME-Version: 1.0\n\n`, "ascii"),
  ];
  for (const part of parts) {
    chunks.push(Buffer.from(`--${boundary}\n${part.headers.join("\n")}\n\n`, "ascii"));
    chunks.push(part.body);
    chunks.push(Buffer.from("\n", "ascii"));
  }
  chunks.push(Buffer.from(`--${boundary}--\n`, "ascii"));
  return Buffer.concat(chunks);
}

/** The first boundary candidate, derived from `seed`, that occurs in none of `bodies`. */
function chooseBoundary(bodies: Buffer[], seed: Buffer): string {
  let digest = createHash("sha256")
    .update("pulumi-kvm-proxy vendor-data boundary\n")
    .update(seed)
    .digest("hex");
  for (;;) {
    const candidate = `==kvm-proxy-${digest.slice(0, 32)}==`;
    if (!bodies.some((b) => b.includes(candidate))) return candidate;
    digest = createHash("sha256").update(digest).digest("hex");
  }
}
