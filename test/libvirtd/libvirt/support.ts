import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { afterEach, beforeEach } from "vitest";
import {
  type CallTrace,
  DomainUndefineFlags,
  isLibvirtError,
  Libvirt,
  LibvirtConnection,
  type LibvirtConnectionOptions,
} from "../../../provider/libvirt";
import { SshTransport } from "../../../provider/transport/ssh";
import type { Transport } from "../../../provider/transport/types";
import { UnixSocketTransport } from "../../../provider/transport/unix";
import { testHost, virshUri } from "../../support/test-host";

/**
 * Every way these tests can reach the test host's libvirtd. The suites run
 * once per entry (describe.each), so the SSH transport only needs adding here.
 */
export const transports: { name: string; make: () => Transport }[] = [
  { name: "unix", make: () => new UnixSocketTransport(testHost().socketPath) },
  {
    name: "ssh",
    make: () => {
      const host = testHost();
      return new SshTransport({
        host: host.address,
        port: host.sshPort,
        user: host.sshUser,
        privateKeyPath: host.sshKeyPath,
        knownHostsPath: host.knownHostsPath,
      });
    },
  },
];

/** KVMPT_TRACE=1 prints every libvirt call (name, args, ms, error) to stderr while debugging tests. */
const traceToStderr = process.env.KVMPT_TRACE
  ? (t: CallTrace): void => console.error(t.call, t.args, Math.round(t.durationMs), t.error?.message ?? "")
  : undefined;

export function connect(
  make: () => Transport,
  options: Omit<LibvirtConnectionOptions, "transport"> = {},
): { conn: LibvirtConnection; lv: Libvirt } {
  const conn = new LibvirtConnection({ transport: make(), onCall: traceToStderr, ...options });
  return { conn, lv: new Libvirt(conn) };
}

/**
 * A connection of its own for each test of the calling describe block over
 * `make`, closed after it, with what the test records in `created` removed
 * first by `remove`.
 */
export function connectionPerTest(
  make: () => Transport,
  remove: (lv: Libvirt, name: string) => Promise<void>,
): { readonly conn: LibvirtConnection; readonly lv: Libvirt; readonly created: string[] } {
  let current: { conn: LibvirtConnection; lv: Libvirt } | undefined;
  const created: string[] = [];
  beforeEach(() => {
    current = connect(make);
  });
  afterEach(async () => {
    const c = current as { conn: LibvirtConnection; lv: Libvirt };
    for (const name of created.splice(0)) await remove(c.lv, name);
    await c.conn.close();
  });
  const now = () => {
    if (current === undefined) throw new Error("connectionPerTest: used outside a test");
    return current;
  };
  return {
    get conn() {
      return now().conn;
    },
    get lv() {
      return now().lv;
    },
    created,
  };
}

/** A fresh name with the prefix the cleanup and cross-checks key on. */
export function uniqueName(what = ""): string {
  return `kvmpt-${what}${what ? "-" : ""}${randomUUID().slice(0, 8)}`;
}

/** virsh against the same daemon, for cross-checks: libvirt's own client as the reference. */
export function virsh(args: string[], driver = "qemu:///system"): string {
  return execFileSync("virsh", ["-q", "-c", virshUri(testHost(), driver), ...args], { encoding: "utf8" });
}

/** A minimal UEFI TCG guest: boots nothing, needs no disk, starts in well under a second. */
export function uefiDomainXml(name: string, metadata = ""): string {
  return `<domain type='qemu'>
  <name>${name}</name>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <features><acpi/></features>
  ${metadata ? `<metadata>${metadata}</metadata>` : ""}
  <os firmware='efi'>
    <type arch='x86_64' machine='q35'>hvm</type>
    <firmware><feature enabled='no' name='secure-boot'/></firmware>
  </os>
</domain>`;
}

/** Removes a domain whatever its state; missing domains are fine. */
export async function removeDomain(lv: Libvirt, name: string): Promise<void> {
  let dom: Awaited<ReturnType<Libvirt["domainLookupByName"]>>;
  try {
    dom = await lv.domainLookupByName(name);
  } catch (err) {
    if (isLibvirtError(err, "VIR_ERR_NO_DOMAIN")) return;
    throw err;
  }
  await lv.domainDestroy(dom).catch(() => {});
  await lv
    .domainUndefineFlags(
      dom,
      DomainUndefineFlags.NVRAM | DomainUndefineFlags.MANAGED_SAVE | DomainUndefineFlags.SNAPSHOTS_METADATA,
    )
    .catch((err: unknown) => {
      if (!isLibvirtError(err, "VIR_ERR_NO_DOMAIN")) throw err;
    });
}

/** Deletes a volume of the test pool if it exists. */
export async function removeVolume(lv: Libvirt, name: string): Promise<void> {
  const pool = await lv.storagePoolLookupByName(testHost().poolName);
  try {
    await lv.storageVolDelete(await lv.storageVolLookupByName(pool, name));
  } catch (err) {
    if (!isLibvirtError(err, "VIR_ERR_NO_STORAGE_VOL")) throw err;
  }
}

export function rawVolumeXml(name: string, capacityBytes: number): string {
  return `<volume><name>${name}</name><capacity unit='bytes'>${capacityBytes}</capacity><target><format type='raw'/></target></volume>`;
}

export const normalizeXml = (xml: string): string => xml.replace(/\s+/g, " ").trim();
