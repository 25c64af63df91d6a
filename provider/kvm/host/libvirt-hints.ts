/**
 * What to do about the libvirt errors a user of this provider meets on a
 * host that lacks something, as one sentence put before libvirt's own text
 * (retry.ts KvmOperationError). Pure: libvirt's message in, a hint out.
 *
 * The messages, as libvirt 9.0 words them (captured from the test host,
 * test/libvirtd/kvm/host-objects.test.ts, where noted):
 * - a NIC on a defined network that is not started, at the domain's start
 *   (captured): "Requested operation is not valid: network 'x' is not active";
 * - a pool that is not started: "storage pool 'x' is not active";
 * - UEFI firmware autoselection that finds no firmware descriptor to match
 *   (no OVMF installed, or none fits the machine; captured with a secure-boot
 *   request on an i440fx machine): "operation failed: Unable to find any
 *   firmware to satisfy 'efi'" (libvirt's src/qemu/qemu_firmware.c,
 *   qemuFirmwareFillDomain); newer libvirt says "Unable to find 'efi'
 *   firmware that is compatible with the current configuration";
 * - a pool out of space (captured on a full tmpfs pool): at a volume's
 *   create "cannot allocate N bytes in file '...': No space left on device",
 *   at an upload "Unable to write ...: No space left on device".
 */

/** The libvirt side of a failure: its message as libvirt gave it. */
export interface LibvirtFailure {
  message: string;
}

interface Rule {
  pattern: RegExp;
  hint: (m: RegExpExecArray, host: string) => string;
}

const RULES: readonly Rule[] = [
  {
    pattern: /network '([^']+)' is not active/,
    hint: (m, host) =>
      `libvirt network '${m[1]}' on host ${host} is defined but not started: ` +
      `start it (virsh net-start ${m[1]}; virsh net-autostart ${m[1]} keeps it started)`,
  },
  {
    pattern: /storage pool '([^']+)' is not active/,
    hint: (m, host) =>
      `storage pool '${m[1]}' on host ${host} is defined but not started: ` +
      `start it (virsh pool-start ${m[1]}; virsh pool-autostart ${m[1]} keeps it started)`,
  },
  {
    pattern: /Unable to find (?:any firmware to satisfy|'\w+' firmware that is compatible)/,
    hint: (_m, host) =>
      `host ${host} has no UEFI firmware libvirt can select for this VM: install OVMF with its firmware ` +
      "descriptors (the ovmf or edk2-ovmf package, /usr/share/qemu/firmware/*.json), " +
      'or boot the image with BIOS (firmware: "bios" in its kvm:images entry)',
  },
  {
    pattern: /No space left on device|\bENOSPC\b|[Nn]ot enough space/,
    hint: (_m, host) =>
      `the storage pool on host ${host} is full: free space in it (virsh pool-info shows what is available), ` +
      "or give the host a pool with room (its pool setting); each VM's disk may grow to diskGiB",
  },
];

/** The hint for `f` on host `host`, or undefined when libvirt's text says all there is. */
export function libvirtHint(f: LibvirtFailure, host: string): string | undefined {
  for (const rule of RULES) {
    const m = rule.pattern.exec(f.message);
    if (m !== null) return rule.hint(m, host);
  }
  return undefined;
}
