import { describe, expect, it } from "vitest";
import { libvirtHint } from "../../../../provider/kvm/host/libvirt-hints";
import { KvmOperationError } from "../../../../provider/kvm/host/retry";
import { ErrorCode, ErrorDomain } from "../../../../provider/libvirt/error-codes";
import { LibvirtError } from "../../../../provider/libvirt/errors";

/** libvirt's messages as libvirt 9.0 gave them on the test host (libvirt-hints.ts says where each comes from). */
const CASES: [string, number, string, string, string[]][] = [
  [
    "a NIC on a network that is not started",
    ErrorCode.OPERATION_INVALID,
    "virDomainCreateWithFlags",
    "Requested operation is not valid: network 'lab-net' is not active",
    ["lab-net", "virsh net-start lab-net", "net-autostart"],
  ],
  [
    "a pool that is not started",
    ErrorCode.OPERATION_INVALID,
    "virStorageVolCreateXML",
    "Requested operation is not valid: storage pool 'images' is not active",
    ["images", "virsh pool-start images"],
  ],
  [
    "no UEFI firmware to select (libvirt up to 9)",
    ErrorCode.OPERATION_FAILED,
    "virDomainCreateWithFlags",
    "operation failed: Unable to find any firmware to satisfy 'efi'",
    ["OVMF", 'firmware: "bios"', "kvm:images"],
  ],
  [
    "no UEFI firmware to select (newer libvirt)",
    ErrorCode.OPERATION_FAILED,
    "virDomainDefineXMLFlags",
    "operation failed: Unable to find 'efi' firmware that is compatible with the current configuration",
    ["OVMF", 'firmware: "bios"'],
  ],
  [
    "a full pool at a volume's create",
    ErrorCode.SYSTEM_ERROR,
    "virStorageVolCreateXML",
    "cannot allocate 33554432 bytes in file '/var/lib/libvirt/images/web-1-seed.iso': No space left on device",
    ["full", "pool setting", "diskGiB", "virsh pool-info"],
  ],
  [
    "a full pool during an upload",
    ErrorCode.SYSTEM_ERROR,
    "virStorageVolUpload",
    "Unable to write /var/lib/libvirt/images/debian-12.qcow2: No space left on device",
    ["full", "pool setting"],
  ],
];

describe("libvirt errors a user can meet, with what to do", () => {
  it.each(CASES)("%s", (_what, code, call, message, names) => {
    const hint = libvirtHint({ message }, "edge");
    expect(hint).toContain("host edge");
    for (const n of names) expect(hint).toContain(n);

    // In the operation's error: the hint first, libvirt's own text kept after it.
    const cause = new LibvirtError(
      {
        code,
        domain: ErrorDomain.QEMU,
        message,
        level: 2,
        str1: null,
        str2: null,
        str3: null,
        int1: 0,
        int2: 0,
      },
      call,
    );
    const err = new KvmOperationError({ operation: "create", host: "edge", domain: "web-1" }, cause);
    expect(
      err.message.startsWith(
        `create of domain web-1 on host edge failed: ${hint}; ${call} failed: ${message} (`,
      ),
    ).toBe(true);
  });

  it.each([
    "XML error: bad domain",
    "Domain not found: no domain with matching name 'web-1'",
    "internal error: process exited while connecting to monitor",
  ])("adds nothing to %s", (message) => {
    expect(libvirtHint({ message }, "edge")).toBeUndefined();
  });
});
