/**
 * Domain helpers, one small function per libvirt call, each turning the one
 * expected error into `undefined`/`false` (the twin of volumes.ts). The
 * drift cases they absorb, seen on libvirt 9.0:
 * - a domain undefined meanwhile: NO_DOMAIN from any call on its handle;
 * - a domain without our metadata element: NO_DOMAIN_METADATA;
 * - starting a running domain: OPERATION_INVALID "already running" /
 *   "is already active";
 * - destroying a shut-off domain: OPERATION_INVALID "domain is not running";
 * - undefining with the NVRAM flag on a driver without NVRAM (the test
 *   driver): INVALID_ARG "unsupported flags" (or ARGUMENT_UNSUPPORTED,
 *   NO_SUPPORT), after which it is undefined without that flag.
 */
import { ProviderError } from "../../errors";
import { DomainMetadataType, DomainModificationImpact, DomainUndefineFlags } from "../../libvirt/constants";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import { parseDomainXml } from "../domain/domain-xml";
import {
  METADATA_NAMESPACE,
  METADATA_PREFIX,
  metadataForSet,
  type ProxyMetadata,
  parseMetadata,
} from "../domain/metadata";
import { isActiveState } from "../domain/states";
import { hasCode } from "./volumes";

/** A domain of the name exists and is not the creator's (another owner, or unmanaged). Permanent. */
export class DomainTakenError extends ProviderError {
  constructor(host: string, name: string, owner: string | undefined) {
    super(
      "permanent",
      `domain ${name} already exists on host ${host}` +
        (owner === undefined ? " and is not managed by pulumi-kvm-proxy" : ` and belongs to ${owner}`) +
        "; choose another name (or adopt it read-only with KvmProxy.get)",
    );
  }
}

const UNDEFINE_FLAGS =
  DomainUndefineFlags.NVRAM | DomainUndefineFlags.MANAGED_SAVE | DomainUndefineFlags.SNAPSHOTS_METADATA;
/** Without NVRAM: libvirt's test driver (9.0) rejects that flag as unsupported. */
const UNDEFINE_FLAGS_NO_NVRAM = DomainUndefineFlags.MANAGED_SAVE | DomainUndefineFlags.SNAPSHOTS_METADATA;

/** The domain, or undefined when there is none (NO_DOMAIN). */
export async function lookupDomain(lv: Libvirt, name: string): Promise<Domain | undefined> {
  try {
    return await lv.domainLookupByName(name);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return undefined;
    throw err;
  }
}

/** A handle for the domain with `uuid`, without a lookup: libvirtd resolves it by the UUID and ignores the id. */
export function domainByUuid(name: string, uuid: string): Domain {
  return { name, uuid, id: -1 };
}

/** libvirt's virDomainState and reason. */
export interface LibvirtState {
  state: number;
  reason: number;
}

/** The state of the domain with `uuid`, or undefined when libvirt has none (NO_DOMAIN). */
export async function stateByUuid(
  lv: Libvirt,
  name: string,
  uuid: string,
): Promise<{ dom: Domain; libvirtState: LibvirtState } | undefined> {
  const dom = domainByUuid(name, uuid);
  try {
    return { dom, libvirtState: await lv.domainGetState(dom) };
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return undefined;
    throw err;
  }
}

/**
 * Domain `name` and its state: by `uuid` when the caller knows it (one call,
 * no lookup: libvirtd resolves the handle by its UUID), else, or when
 * libvirt has no such UUID any more, by name. `byUuid` says which; a caller
 * that must know the UUID still names `name` (a domain renamed since)
 * compares the name in the XML it reads anyway. Undefined when libvirt has
 * neither.
 */
export async function findDomain(
  lv: Libvirt,
  name: string,
  uuid?: string,
): Promise<{ dom: Domain; libvirtState: LibvirtState; byUuid: boolean } | undefined> {
  const known = uuid === undefined ? undefined : await stateByUuid(lv, name, uuid);
  if (known !== undefined) return { ...known, byUuid: true };
  const dom = await lookupDomain(lv, name);
  return dom === undefined ? undefined : { dom, libvirtState: await lv.domainGetState(dom), byUuid: false };
}

/** Starts a defined domain; one already running is fine. */
export async function startDomain(lv: Libvirt, dom: Domain): Promise<void> {
  try {
    await lv.domainCreate(dom);
  } catch (err) {
    if (
      hasCode(err, ErrorCode.OPERATION_INVALID) &&
      /already running|is already active/i.test(err.libvirtMessage)
    )
      return;
    throw err;
  }
}

/** Our metadata of `dom`, or undefined when it has none (not managed by us). */
export async function managedMetadata(lv: Libvirt, dom: Domain): Promise<ProxyMetadata | undefined> {
  try {
    return parseMetadata(await lv.domainGetMetadata(dom, DomainMetadataType.ELEMENT, METADATA_NAMESPACE));
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN_METADATA)) return undefined;
    throw err;
  }
}

/**
 * Writes our metadata element into the domain's persistent definition and,
 * when it runs, into the live one too (a running domain's live XML would
 * otherwise show the old element until its next start).
 */
export async function setManagedMetadata(
  lv: Libvirt,
  dom: Domain,
  state: LibvirtState,
  m: ProxyMetadata,
): Promise<void> {
  const flags = isActiveState(state.state)
    ? DomainModificationImpact.LIVE | DomainModificationImpact.CONFIG
    : DomainModificationImpact.CONFIG;
  await lv.domainSetMetadataElement(dom, METADATA_NAMESPACE, METADATA_PREFIX, metadataForSet(m), flags);
}

/**
 * What delete needs of a domain, from one read of its XML: the owner URN our
 * metadata names ("unmanaged" without it) and the pool volumes its disk and
 * seed name; "gone" when the domain went away meanwhile.
 */
export async function domainHoldings(
  lv: Libvirt,
  dom: Domain,
): Promise<{ owner: string; disks: string[] } | "gone"> {
  let xml: string;
  try {
    xml = await lv.domainGetXmlDesc(dom);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return "gone";
    throw err;
  }
  const parsed = parseDomainXml(xml);
  const disks = [parsed.diskPath, parsed.seedPath]
    .filter((p): p is string => p !== undefined)
    .map((p) => p.slice(p.lastIndexOf("/") + 1))
    .filter((n) => n !== "");
  return { owner: parsed.metadata?.owner.urn ?? "unmanaged", disks };
}

/** Destroys and undefines a domain, tolerating every already-gone case. True when one existed. */
export async function removeDomain(lv: Libvirt, dom: Domain): Promise<boolean> {
  try {
    await lv.domainDestroy(dom);
  } catch (err) {
    // Not running (OPERATION_INVALID) or gone meanwhile: both fine.
    if (!hasCode(err, ErrorCode.OPERATION_INVALID, ErrorCode.NO_DOMAIN)) throw err;
  }
  try {
    await lv.domainUndefineFlags(dom, UNDEFINE_FLAGS);
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return true;
    // Drivers without NVRAM support refuse the flag (INVALID_ARG "unsupported flags").
    if (!hasCode(err, ErrorCode.INVALID_ARG, ErrorCode.ARGUMENT_UNSUPPORTED, ErrorCode.NO_SUPPORT)) throw err;
    try {
      await lv.domainUndefineFlags(dom, UNDEFINE_FLAGS_NO_NVRAM);
    } catch (err2) {
      if (!hasCode(err2, ErrorCode.NO_DOMAIN)) throw err2;
    }
  }
  return true;
}
