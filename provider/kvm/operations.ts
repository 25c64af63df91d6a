/**
 * The KVM operations the Pulumi resource drives: create, get, delete, list,
 * waitForIp and pruneImages. Each converges rather than assumes: create
 * reuses whatever a cut-short earlier attempt left and rebuilds only what
 * must be fresh; delete tolerates every already-gone case. Transient
 * failures are retried with bounded backoff; whatever surfaces is a
 * KvmOperationError naming host, domain, libvirt call and code.
 */
import { Readable } from "node:stream";
import { isTransient, ProviderError, TimeoutError } from "../errors";
import {
  DomainMetadataType,
  DomainUndefineFlags,
  InterfaceAddressSource,
  IpAddrType,
} from "../libvirt/constants";
import { ErrorCode } from "../libvirt/error-codes";
import type { Libvirt } from "../libvirt/libvirt";
import type { Domain, DomainInterface, StoragePool } from "../libvirt/types";
import { buildVendorData } from "./cloud-init";
import type { ImageConfig } from "./config";
import { buildDomainXml, type ParsedDomain, parseDomainXml } from "./domain-xml";
import type { HostPool } from "./hosts";
import { ImageCache } from "./image-cache";
import { METADATA_NAMESPACE, type MetadataOwner, type ProxyMetadata, parseMetadata } from "./metadata";
import { overlayVolumeName, seedVolumeName } from "./names";
import { formatProviderId } from "./provider-id";
import {
  classifyError,
  type OperationContext,
  type RetryEnv,
  type RetryPolicy,
  sleep,
  toOperationError,
  withRetry,
} from "./retry";
import { buildMetaData, buildSeedIso } from "./seed-iso";
import { isActiveState, isRoutableIpv4, mapDomainState, type ProxyState } from "./states";
import { buildOverlayVolumeXml, buildSeedVolumeXml, GIB } from "./volume-xml";
import {
  createFreshVolume,
  deleteVolume,
  hasCode,
  lookupPool,
  lookupVolume,
  refreshPool,
  volumeInfo,
} from "./volumes";

/** What create needs for one VM. */
export interface CreateSpec {
  /** Host key from the provider configuration. */
  host: string;
  /** Domain name (also the guest hostname unless `hostname` is given). */
  name: string;
  /** The resolved image (config.ts resolveImage). */
  image: ImageConfig;
  /** The image reference as the resource gave it (key or URL), recorded in the metadata. */
  imageRef: string;
  memoryMiB: number;
  vcpus: number;
  /** Requested root disk size; the overlay is at least the image's virtual size. */
  diskGiB: number;
  /** cloud-init user-data, placed in the seed byte for byte. */
  userData: string | Buffer;
  /** Extra vendor-data (see cloud-init.ts buildVendorData). */
  vendorData?: string | Buffer;
  /** Add the guest-agent bootstrap to vendor-data (default true). */
  installGuestAgent?: boolean;
  /** NoCloud network-config, when given. */
  networkConfig?: string | Buffer;
  /** cloud-init instance-id (default: the domain name). */
  instanceId?: string;
  /** Guest hostname (default: the domain name). */
  hostname?: string;
  mac?: string;
  owner: MetadataOwner;
  specHash: string;
  proxyPort: number;
  tags?: Record<string, string>;
}

/** What create reports. */
export interface CreateResult {
  host: string;
  name: string;
  providerId: string;
  uuid: string;
  /** The NIC's MAC address (lower case). */
  mac: string | undefined;
  /** False when the domain already existed and was only started. */
  defined: boolean;
  /** The domain's live XML, read once it was started (parsed). */
  domain: ParsedDomain;
  /** True when this create uploaded the base image. */
  imageUploaded: boolean;
}

/** Create's steps, in order; a step hook runs before each (tests cut creates short there). */
export const CREATE_STEPS = [
  "lookup-domain",
  "pool",
  "image",
  "overlay",
  "seed-volume",
  "seed-upload",
  "paths",
  "define",
  "start",
] as const;
export type CreateStep = (typeof CREATE_STEPS)[number];

/** Options of {@link KvmOperations.create}. */
export interface CreateOptions {
  /** Runs before each step; a throw or rejection aborts the create there. */
  onStep?: (step: CreateStep) => void | Promise<void>;
  /** Creation time recorded in the metadata (default now). */
  now?: () => Date;
  /**
   * The caller looked the domain up just now and found none: the first
   * attempt skips its own lookup (a retry after a failure still looks, since
   * that attempt may have defined it). Saves a round trip per create.
   */
  knownAbsent?: boolean;
  /**
   * Start an existing domain of the name whatever owner its metadata names
   * (the caller knows it is its own, e.g. restarting the VM its state
   * records, whose URN a stack rename may have changed). By default create
   * converges only onto a domain of `spec.owner` and fails with
   * {@link DomainTakenError} on any other.
   */
  anyOwner?: boolean;
  /**
   * Ends the create early (the resource's `timeouts.create`): checked before
   * each step and each retry, and given to the seed upload and to this
   * create's wait for the cached image. A libvirt call already running ends
   * on its own deadline (callTimeout). The rejection carries the signal's
   * reason; the caller rolls back what was made.
   */
  signal?: AbortSignal;
}

/** What get reports. */
export interface VmStatus {
  host: string;
  name: string;
  state: ProxyState;
  uuid?: string;
  /** libvirt's virDomainState and reason. */
  libvirtState?: { state: number; reason: number };
  /** First routable IPv4 of the guest. */
  ipv4?: string;
  ipSource?: "agent" | "lease";
  mac?: string;
  metadata?: ProxyMetadata;
  /** The parsed domain XML. */
  domain?: ParsedDomain;
}

/** What delete did. */
export interface DeleteResult {
  /** True when a domain was destroyed/undefined. */
  domainRemoved: boolean;
  /** Per-VM volumes removed. */
  volumesRemoved: string[];
  /** Why nothing could be done, when that was the case (still a success). */
  noop?: "host-not-configured" | "pool-missing" | "not-ours";
  /** With noop "not-ours": the owner the domain's metadata names, or "unmanaged". */
  foreignOwner?: string;
}

/** Options of {@link KvmOperations.delete}. */
export interface DeleteOptions {
  /**
   * Delete only what belongs to this owner URN: a domain of the name whose
   * metadata names another owner, or none, is left alone with its volumes
   * (they back it). A create's rollback passes its own: two creates of one
   * name at once must not roll back each other's VM.
   */
  owner?: string;
}

/** A managed VM found by list. */
export interface ManagedVm {
  host: string;
  name: string;
  uuid: string;
  providerId: string;
  metadata: ProxyMetadata;
}

/** What list reports. */
export interface ListResult {
  vms: ManagedVm[];
  /** Domains that looked like ours but could not be read. */
  skipped: { host: string; name: string; reason: string }[];
}

/** Options of {@link KvmOperations.waitForIp}. */
export interface WaitForIpOptions {
  /** Overall deadline (default 5 min). */
  deadlineMs?: number;
  /** Pause between polls (default 1 s). */
  pollMs?: number;
  signal?: AbortSignal;
  /**
   * The VM's status as the caller read it just now ({@link KvmOperations.get}):
   * the wait starts from it instead of reading it again.
   */
  from?: VmStatus;
}

/** Options of {@link KvmOperations}. */
export interface KvmOperationsOptions {
  images?: ImageCache;
  retry?: RetryPolicy;
  /** Clock and sleep, injectable so tests never wait on wall-clock time. */
  env?: RetryEnv;
  /**
   * How long a domain define that ran past its RPC deadline may still land,
   * counted from the deadline (default 60 s). Until then nothing concludes the
   * domain is absent: see {@link KvmOperations.delete}.
   */
  defineGraceMs?: number;
  /** Pause between lookups while waiting for such a define (default 1 s). */
  definePollMs?: number;
}

/**
 * A define ran past its deadline and had not landed within the grace: the
 * domain may still appear. Transient, so the caller keeps the VM on record
 * (a failed rollback records it in the state) and the next run deletes it.
 */
export class DefineInDoubtError extends ProviderError {
  constructor(host: string, name: string, graceMs: number) {
    super(
      "transient",
      `the define of domain ${name} on host ${host} timed out and had not landed ${graceMs} ms later; ` +
        "libvirtd may still define it, so it is not known to be gone",
    );
  }
}

const UNDEFINE_FLAGS =
  DomainUndefineFlags.NVRAM | DomainUndefineFlags.MANAGED_SAVE | DomainUndefineFlags.SNAPSHOTS_METADATA;
/** Without NVRAM: libvirt's test driver (9.0) rejects that flag as unsupported. */
const UNDEFINE_FLAGS_NO_NVRAM = DomainUndefineFlags.MANAGED_SAVE | DomainUndefineFlags.SNAPSHOTS_METADATA;

/** Agent failures that mean "no address from the agent yet", not a broken VM. */
const AGENT_NOT_READY = [
  ErrorCode.AGENT_UNRESPONSIVE,
  ErrorCode.AGENT_UNSYNCED,
  ErrorCode.OPERATION_INVALID,
  ErrorCode.ARGUMENT_UNSUPPORTED, // no agent channel in the domain
  ErrorCode.OPERATION_UNSUPPORTED,
  ErrorCode.NO_SUPPORT,
  ErrorCode.OPERATION_TIMEOUT,
];

/** Lease lookups fail like this when the NIC is not on a libvirt network with DHCP. */
const LEASE_NOT_AVAILABLE = [
  ErrorCode.OPERATION_INVALID,
  ErrorCode.ARGUMENT_UNSUPPORTED,
  ErrorCode.OPERATION_UNSUPPORTED,
  ErrorCode.NO_SUPPORT,
  ErrorCode.NO_NETWORK,
];

/** The KVM core operations over a set of hosts. */
export class KvmOperations {
  readonly hosts: HostPool;
  readonly images: ImageCache;
  private readonly retry: RetryPolicy;
  private readonly env: RetryEnv;
  private readonly defineGraceMs: number;
  private readonly definePollMs: number;
  /**
   * Defines whose reply never came within the deadline, by host and name,
   * with the time the deadline passed. libvirtd drops nothing it received:
   * a slow define lands later, after a rollback that looked too early.
   */
  private readonly definesInDoubt = new Map<string, number>();

  constructor(hosts: HostPool, options: KvmOperationsOptions = {}) {
    this.hosts = hosts;
    this.env = options.env ?? {};
    this.images = options.images ?? new ImageCache({ retryEnv: this.env });
    this.retry = options.retry ?? {};
    this.defineGraceMs = options.defineGraceMs ?? 60_000;
    this.definePollMs = options.definePollMs ?? 1_000;
  }

  /**
   * Creates (or converges) VM `spec.name` on `spec.host` and starts it.
   *
   * An existing domain is only started (already running is fine). Otherwise:
   * the base image is cached on the host (uploaded once, verified); the
   * per-VM overlay is reused or created (qcow2, compat 1.1, capacity
   * max(image virtual size, diskGiB)); the seed ISO is rebuilt every time
   * (its volume deleted and recreated, so a truncated seed from a cancelled
   * attempt is never kept); both paths are resolved with
   * virStorageVolGetPath; the domain is defined with our metadata and
   * started. Rerunning after a failure at any step converges to one domain.
   */
  async create(spec: CreateSpec, options: CreateOptions = {}): Promise<CreateResult> {
    const ctx: OperationContext = { operation: "create", host: spec.host, domain: spec.name };
    return this.retrying(
      ctx,
      (attempt) => this.createOnce(spec, options, options.knownAbsent === true && attempt === 1),
      options.signal,
    );
  }

  private async createOnce(
    spec: CreateSpec,
    options: CreateOptions,
    skipLookup: boolean,
  ): Promise<CreateResult> {
    const { signal } = options;
    const step = async (s: CreateStep): Promise<void> => {
      signal?.throwIfAborted();
      await options.onStep?.(s);
    };
    const host = this.hosts.config(spec.host);
    const lv = this.hosts.libvirt(spec.host);
    const base = { host: spec.host, name: spec.name, providerId: formatProviderId(spec.host, spec.name) };

    await step("lookup-domain");
    const late = await this.awaitDefineInDoubt(lv, spec.host, spec.name);
    const existing =
      typeof late === "object"
        ? late
        : late === undefined && skipLookup
          ? undefined
          : await lookupDomain(lv, spec.name);
    if (existing !== undefined) {
      // Converge only onto our own: after a failed attempt, the domain found
      // may be another create's of the same name (another stack) that won.
      if (options.anyOwner !== true) {
        const owner = (await managedMetadata(lv, existing))?.owner.urn;
        if (owner !== spec.owner.urn) throw new DomainTakenError(spec.host, spec.name, owner);
      }
      await step("start");
      await startDomain(lv, existing);
      const parsed = parseDomainXml(await lv.domainGetXmlDesc(existing));
      return {
        ...base,
        uuid: existing.uuid,
        mac: parsed.mac,
        defined: false,
        imageUploaded: false,
        domain: parsed,
      };
    }

    await step("pool");
    const pool = await lookupPool(lv, host.pool);
    if (pool === undefined) {
      throw new ProviderError(
        "permanent",
        `storage pool ${JSON.stringify(host.pool)} does not exist on host ${spec.host}`,
      );
    }

    await step("image");
    // Other creates may share this upload: the signal ends this create's wait, not the upload.
    const image = await untilAborted(this.images.ensure({ host: spec.host, lv, pool }, spec.image), signal);

    await step("overlay");
    const overlay = await this.ensureOverlay(lv, pool, spec, image.path, image.virtualSize);

    await step("seed-volume");
    const iso = buildSeedIso({
      metaData: buildMetaData({
        instanceId: spec.instanceId ?? spec.name,
        localHostname: spec.hostname ?? spec.name,
      }),
      userData: spec.userData,
      ...optional(
        "vendorData",
        buildVendorData({
          installGuestAgent: spec.installGuestAgent ?? true,
          ...optional("vendorData", spec.vendorData),
        }),
      ),
      ...optional("networkConfig", spec.networkConfig),
    });
    const seedName = seedVolumeName(spec.name);
    const seed = await createFreshVolume(
      lv,
      pool,
      seedName,
      buildSeedVolumeXml(seedName, iso.length),
      this.env,
    );

    await step("seed-upload");
    await lv.storageVolUpload(seed, Readable.from([iso]), signal === undefined ? {} : { signal });

    await step("paths");
    const diskPath = await lv.storageVolGetPath(overlay);
    const seedPath = await lv.storageVolGetPath(seed);

    await step("define");
    const metadata: ProxyMetadata = {
      owner: spec.owner,
      image: {
        ref: spec.imageRef,
        url: spec.image.url,
        format: spec.image.format,
        ...optional("sha256", spec.image.sha256),
      },
      specHash: spec.specHash,
      createdAt: (options.now ?? (() => new Date()))().toISOString(),
      proxyPort: spec.proxyPort,
      diskGiB: spec.diskGiB,
      tags: spec.tags ?? {},
    };
    const xml = buildDomainXml({
      name: spec.name,
      domainType: host.domainType,
      memoryMiB: spec.memoryMiB,
      vcpus: spec.vcpus,
      firmware: spec.image.firmware,
      diskPath,
      seedPath,
      nic: host.nic,
      metadata,
      ...optional("mac", spec.mac),
    });
    const dom = await this.define(lv, spec.host, spec.name, xml);

    await step("start");
    await startDomain(lv, dom);
    const parsed = parseDomainXml(await lv.domainGetXmlDesc(dom));
    return {
      ...base,
      uuid: dom.uuid,
      mac: parsed.mac,
      defined: true,
      imageUploaded: image.uploaded,
      domain: parsed,
    };
  }

  /** virDomainDefineXML, remembering a define whose deadline passed: its outcome is unknown. */
  private async define(lv: Libvirt, hostKey: string, name: string, xml: string): Promise<Domain> {
    const key = doubtKey(hostKey, name);
    try {
      const dom = await lv.domainDefineXml(xml);
      this.definesInDoubt.delete(key);
      return dom;
    } catch (err) {
      // Only a deadline leaves the call running in libvirtd; an error reply means it did not define.
      if (err instanceof TimeoutError) this.definesInDoubt.set(key, this.now());
      throw err;
    }
  }

  /**
   * When a define of `name` is in doubt, polls for the domain until it
   * appears (returned) or the grace since its deadline passes ("expired";
   * the doubt is dropped either way). Undefined when nothing was in doubt.
   */
  private async awaitDefineInDoubt(
    lv: Libvirt,
    hostKey: string,
    name: string,
  ): Promise<Domain | "expired" | undefined> {
    const key = doubtKey(hostKey, name);
    const since = this.definesInDoubt.get(key);
    if (since === undefined) return undefined;
    const wait = this.env.sleep ?? sleep;
    for (;;) {
      try {
        const dom = await lookupDomain(lv, name);
        if (dom !== undefined) {
          this.definesInDoubt.delete(key);
          return dom;
        }
      } catch (err) {
        // A lookup that cannot reach libvirtd proves nothing: keep waiting within the grace.
        if (classifyError(err) !== "transient") throw err;
      }
      if (this.now() - since >= this.defineGraceMs) {
        this.definesInDoubt.delete(key);
        return "expired";
      }
      await wait(this.definePollMs);
    }
  }

  private now(): number {
    return (this.env.now ?? (() => performance.now()))();
  }

  /** Reuses the per-VM overlay when libvirt has it and its file exists; creates it otherwise. */
  private async ensureOverlay(
    lv: Libvirt,
    pool: StoragePool,
    spec: CreateSpec,
    backingPath: string,
    virtualSize: number,
  ) {
    const name = overlayVolumeName(spec.name);
    const found = await lookupVolume(lv, pool, name);
    if (found !== undefined && (await volumeInfo(lv, found)) !== undefined) return found;
    const xml = buildOverlayVolumeXml({
      name,
      backingPath,
      backingFormat: spec.image.format,
      imageVirtualSizeBytes: virtualSize,
      requestedSizeBytes: spec.diskGiB * GIB,
    });
    // A stale entry (file gone) or an unknown file is replaced by a fresh overlay.
    return createFreshVolume(lv, pool, name, xml, this.env);
  }

  /**
   * The VM's state: libvirt's state plus the first routable IPv4 (guest agent
   * first, then the DHCP lease), mapped onto provider states, with the
   * parsed domain and our metadata. A missing domain is `absent`; a host not
   * in the configuration is a permanent error (a typo must not look like a
   * missing VM, which the resource would rebuild).
   *
   * `known.uuid` (the UUID the state recorded) saves the lookup by name:
   * libvirtd resolves a domain handle by its UUID, so the state call goes
   * straight to it. A domain since deleted, recreated or renamed falls back
   * to the lookup by name, so the answer is the same as without it. With the
   * UUID a refresh makes 3 calls per running VM (see test/pulumi/call-counts).
   * `known.domain`, the XML the caller parsed just now (create's), saves the
   * XML read too.
   */
  async get(
    hostKey: string,
    name: string,
    known: { uuid?: string; domain?: ParsedDomain } = {},
  ): Promise<VmStatus> {
    const ctx: OperationContext = { operation: "get", host: hostKey, domain: name };
    return this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      let found = known.uuid === undefined ? undefined : await stateByUuid(lv, name, known.uuid);
      let domain =
        found === undefined
          ? undefined
          : (known.domain ?? parseDomainXml(await lv.domainGetXmlDesc(found.dom)));
      if (found === undefined || domain?.name !== name) {
        const byName = await lookupDomain(lv, name);
        if (byName === undefined) return { host: hostKey, name, state: "absent" };
        found = { dom: byName, libvirtState: await lv.domainGetState(byName) };
        domain = parseDomainXml(await lv.domainGetXmlDesc(byName));
      }
      const { dom, libvirtState } = found;
      const ip = isActiveState(libvirtState.state)
        ? await guestIpv4(lv, dom, domain.mac, domain.guestAgent)
        : undefined;
      const status: VmStatus = {
        host: hostKey,
        name,
        state: mapDomainState(libvirtState, ip?.addr),
        uuid: dom.uuid,
        libvirtState,
        domain,
        ...optional("mac", domain.mac),
        ...optional("metadata", domain.metadata),
      };
      if (ip !== undefined) {
        status.ipv4 = ip.addr;
        status.ipSource = ip.source;
      }
      return status;
    });
  }

  /**
   * Deletes VM `name` on `hostKey`: destroys it (not running is fine),
   * undefines it with its NVRAM, managed save and snapshot metadata, and
   * removes its overlay and seed volumes by name. Everything already gone is
   * fine; a host no longer configured or a missing pool is a successful no-op.
   * Cached images stay (see {@link pruneImages}).
   */
  async delete(hostKey: string, name: string, options: DeleteOptions = {}): Promise<DeleteResult> {
    if (!this.hosts.has(hostKey))
      return { domainRemoved: false, volumesRemoved: [], noop: "host-not-configured" };
    const ctx: OperationContext = { operation: "delete", host: hostKey, domain: name };
    // A define of this name still in flight would land after we looked (the rollback leak): wait for it first.
    let late: Domain | "expired" | undefined;
    try {
      late = await this.awaitDefineInDoubt(this.hosts.libvirt(hostKey), hostKey, name);
    } catch (err) {
      throw toOperationError(ctx, err);
    }
    const result = await this.retrying(ctx, async (): Promise<DeleteResult> => {
      const lv = this.hosts.libvirt(hostKey);
      const host = this.hosts.config(hostKey);
      let dom = await lookupDomain(lv, name);
      if (dom !== undefined && options.owner !== undefined) {
        const owner = await ownerOf(lv, dom);
        if (owner === "gone") dom = undefined;
        else if (owner !== options.owner)
          return { domainRemoved: false, volumesRemoved: [], noop: "not-ours", foreignOwner: owner };
      }
      const domainRemoved = dom !== undefined && (await removeDomain(lv, dom));
      const pool = await lookupPool(lv, host.pool);
      if (pool === undefined) return { domainRemoved, volumesRemoved: [], noop: "pool-missing" };
      const names = [overlayVolumeName(name), seedVolumeName(name)];
      const removed: string[] = [];
      const missing: string[] = [];
      for (const n of names) {
        const vol = await lookupVolume(lv, pool, n);
        if (vol === undefined) missing.push(n);
        else if (await deleteVolume(lv, vol)) removed.push(n);
      }
      if (missing.length > 0) {
        // A file libvirt does not know about (created or restored behind its
        // back) is only found after a refresh; done only when something was missing.
        await refreshPool(lv, pool, this.env);
        for (const n of missing) {
          const vol = await lookupVolume(lv, pool, n);
          if (vol !== undefined && (await deleteVolume(lv, vol))) removed.push(n);
        }
      }
      return { domainRemoved, volumesRemoved: removed };
    });
    if (late === "expired" && !result.domainRemoved) {
      // Everything else is gone, but the domain may yet appear: say so, so the caller keeps it on record.
      throw toOperationError(ctx, new DefineInDoubtError(hostKey, name, this.defineGraceMs));
    }
    return result;
  }

  /**
   * Every managed domain on every configured host, recognised by our
   * metadata element. Domains without it are not ours; domains that vanish
   * meanwhile or whose metadata cannot be read are skipped (and reported).
   * Fails only when a host cannot be listed at all.
   */
  async list(): Promise<ListResult> {
    const perHost = await Promise.all(this.hosts.keys.map((key) => this.listHost(key)));
    return { vms: perHost.flatMap((r) => r.vms), skipped: perHost.flatMap((r) => r.skipped) };
  }

  /** As {@link list}, for one host. */
  async listHost(hostKey: string): Promise<ListResult> {
    const ctx: OperationContext = { operation: "list", host: hostKey };
    const lv = this.hosts.libvirt(hostKey);
    const domains = await this.retrying(ctx, () => lv.connectListAllDomains(0));
    const result: ListResult = { vms: [], skipped: [] };
    for (const dom of domains) {
      try {
        const metadata = await managedMetadata(lv, dom);
        if (metadata === undefined) continue;
        result.vms.push({
          host: hostKey,
          name: dom.name,
          uuid: dom.uuid,
          providerId: formatProviderId(hostKey, dom.name),
          metadata,
        });
      } catch (err) {
        if (hasCode(err, ErrorCode.NO_DOMAIN)) continue;
        result.skipped.push({
          host: hostKey,
          name: dom.name,
          reason: err instanceof Error ? err.message : String(err),
        });
      }
    }
    return result;
  }

  /**
   * Waits until the VM is running with a routable IPv4. Fails permanently when
   * the VM is absent, stopped or failed, and with a TimeoutError naming the VM
   * and host at the deadline.
   *
   * Between full reads ({@link get}: state, XML and addresses, 3-4 calls)
   * it polls only the addresses: the guest agent, then the DHCP lease (2 calls),
   * so a short poll interval stays cheap. A full read happens first (unless
   * the caller hands its own over in `from`), when a
   * probe finds an address (to return the whole status), when a probe fails in
   * a way that may mean the domain changed state, and every {@link FULL_READ_MS}
   * in any case (a paused or crashed guest answers probes like a booting one).
   * At the default 1 s interval a wait costs about 2.2-2.4 calls per second.
   */
  async waitForIp(hostKey: string, name: string, options: WaitForIpOptions = {}): Promise<VmStatus> {
    const deadlineMs = options.deadlineMs ?? 300_000;
    const pollMs = options.pollMs ?? 1_000;
    const wait = this.env.sleep ?? sleep;
    const started = this.now();
    const fullEvery = Math.max(1, Math.round(FULL_READ_MS / pollMs));
    const ctx: OperationContext = { operation: "wait for IP", host: hostKey, domain: name };
    let status = options.from ?? (await this.get(hostKey, name));
    for (let poll = 1; ; poll++) {
      if (status.state === "running") return status;
      if (status.state !== "provisioning") {
        throw new KvmStateError(hostKey, name, status.state, "an IPv4 address");
      }
      if (this.now() - started + pollMs > deadlineMs) {
        throw new TimeoutError(
          `an IPv4 address of domain ${name} on host ${hostKey} (guest agent or DHCP lease)`,
          deadlineMs,
        );
      }
      await wait(pollMs, options.signal);
      if (poll % fullEvery !== 0 && status.uuid !== undefined) {
        const dom = domainByUuid(name, status.uuid);
        const lv = this.hosts.libvirt(hostKey);
        const mac = status.mac;
        const probe = await this.retrying(ctx, () => probeAddress(lv, dom, mac));
        if (probe === "none") continue;
      }
      // The UUID read last time saves the lookup by name (see get).
      status = await this.get(hostKey, name, status.uuid === undefined ? {} : { uuid: status.uuid });
    }
  }

  /**
   * Deletes cached images on `hostKey` that no managed domain uses, and stale
   * partial markers. Refuses (permanent error) when some domain's metadata
   * cannot be read, since its image would be unknown. Returns the volumes removed.
   */
  async pruneImages(hostKey: string): Promise<string[]> {
    const ctx: OperationContext = { operation: "prune images", host: hostKey };
    const listed = await this.listHost(hostKey);
    if (listed.skipped.length > 0) {
      throw toOperationError(
        ctx,
        new ProviderError(
          "permanent",
          `cannot tell which images are in use: unreadable metadata on ${listed.skipped.map((s) => s.name).join(", ")}`,
        ),
      );
    }
    const inUse = new Set(
      listed.vms.map((vm) =>
        ImageCache.volumeName({
          url: vm.metadata.image.url,
          format: vm.metadata.image.format,
          firmware: "uefi",
          source: { kind: "file", path: "/" },
          ...optional("sha256", vm.metadata.image.sha256),
        }),
      ),
    );
    return this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      const pool = await lookupPool(lv, this.hosts.config(hostKey).pool);
      if (pool === undefined) return [];
      return this.images.prune({ host: hostKey, lv, pool }, inUse);
    });
  }

  private retrying<T>(
    ctx: OperationContext,
    fn: (attempt: number) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    return withRetry(fn, { ...this.retry, ...this.env, context: ctx, ...optional("signal", signal) });
  }
}

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

/** The VM is in a state the caller cannot wait through. Permanent. */
export class KvmStateError extends ProviderError {
  readonly host: string;
  readonly domain: string;
  readonly state: ProxyState;

  constructor(host: string, domain: string, state: ProxyState, waitingFor: string) {
    super("permanent", `domain ${domain} on host ${host} is ${state} while waiting for ${waitingFor}`);
    this.host = host;
    this.domain = domain;
    this.state = state;
  }
}

/** `p`, or the signal's reason as soon as it aborts (`p` runs on; its outcome is then ignored). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function doubtKey(hostKey: string, name: string): string {
  return `${hostKey}\0${name}`;
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

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
function domainByUuid(name: string, uuid: string): Domain {
  return { name, uuid, id: -1 };
}

/** The state of the domain with `uuid`, or undefined when libvirt has none (NO_DOMAIN). */
async function stateByUuid(
  lv: Libvirt,
  name: string,
  uuid: string,
): Promise<{ dom: Domain; libvirtState: { state: number; reason: number } } | undefined> {
  const dom = domainByUuid(name, uuid);
  try {
    return { dom, libvirtState: await lv.domainGetState(dom) };
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return undefined;
    throw err;
  }
}

/** Starts a defined domain; one already running is fine. */
async function startDomain(lv: Libvirt, dom: Domain): Promise<void> {
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
async function managedMetadata(lv: Libvirt, dom: Domain): Promise<ProxyMetadata | undefined> {
  try {
    return parseMetadata(await lv.domainGetMetadata(dom, DomainMetadataType.ELEMENT, METADATA_NAMESPACE));
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN_METADATA)) return undefined;
    throw err;
  }
}

/** The owner URN our metadata of `dom` names, "unmanaged" without it, "gone" when the domain went away. */
async function ownerOf(lv: Libvirt, dom: Domain): Promise<string> {
  try {
    return (await managedMetadata(lv, dom))?.owner.urn ?? "unmanaged";
  } catch (err) {
    if (hasCode(err, ErrorCode.NO_DOMAIN)) return "gone";
    throw err;
  }
}

/** Destroys and undefines a domain, tolerating every already-gone case. True when one existed. */
async function removeDomain(lv: Libvirt, dom: Domain): Promise<boolean> {
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

/** First routable IPv4 of `iface`s, preferring the interface with `mac`. */
export function firstRoutableIpv4(ifaces: readonly DomainInterface[], mac?: string): string | undefined {
  const ordered = mac === undefined ? ifaces : [...ifaces].sort((a, b) => rank(a) - rank(b));
  function rank(i: DomainInterface): number {
    return i.hwaddr?.toLowerCase() === mac ? 0 : 1;
  }
  for (const i of ordered) {
    for (const a of i.addrs) {
      if (a.type === IpAddrType.IPV4 && isRoutableIpv4(a.addr)) return a.addr;
    }
  }
  return undefined;
}

/**
 * The guest's IPv4: the agent first (authoritative), then the DHCP lease (may
 * be stale for reused MACs). An agent the live XML shows disconnected (or a
 * domain without the channel) is not asked: libvirt would only refuse.
 */
async function guestIpv4(
  lv: Libvirt,
  dom: Domain,
  mac: string | undefined,
  agent?: ParsedDomain["guestAgent"],
): Promise<{ addr: string; source: "agent" | "lease" } | undefined> {
  if (agent !== "none" && agent !== "disconnected") {
    try {
      const addr = firstRoutableIpv4(
        await lv.domainInterfaceAddresses(dom, InterfaceAddressSource.AGENT),
        mac,
      );
      if (addr !== undefined) return { addr, source: "agent" };
    } catch (err) {
      if (!hasCode(err, ...AGENT_NOT_READY)) throw err;
    }
  }
  try {
    const addr = firstRoutableIpv4(await lv.domainInterfaceAddresses(dom, InterfaceAddressSource.LEASE), mac);
    if (addr !== undefined) return { addr, source: "lease" };
  } catch (err) {
    if (!hasCode(err, ...LEASE_NOT_AVAILABLE)) throw err;
  }
  return undefined;
}

/** How often {@link KvmOperations.waitForIp} does a full read between its cheap address probes. */
const FULL_READ_MS = 5_000;

/** Agent errors that only mean "no answer yet" from a running domain (not connected, not synced, slow). */
const AGENT_SILENT = [ErrorCode.AGENT_UNRESPONSIVE, ErrorCode.AGENT_UNSYNCED, ErrorCode.OPERATION_TIMEOUT];
/** Errors that say the source does not exist for this domain: asking again changes nothing. */
const SOURCE_ABSENT = [
  ErrorCode.ARGUMENT_UNSUPPORTED,
  ErrorCode.OPERATION_UNSUPPORTED,
  ErrorCode.NO_SUPPORT,
  ErrorCode.NO_NETWORK,
];

/**
 * One cheap address probe for waitForIp: the agent's addresses, then the
 * lease's. 'found' when either has a routable IPv4; 'none' when neither has one
 * yet; 'check' when an answer may mean the domain is no longer running (e.g.
 * OPERATION_INVALID, NO_DOMAIN), which a full read then classifies.
 */
async function probeAddress(
  lv: Libvirt,
  dom: Domain,
  mac: string | undefined,
): Promise<"found" | "none" | "check"> {
  try {
    const agent = await lv.domainInterfaceAddresses(dom, InterfaceAddressSource.AGENT);
    if (firstRoutableIpv4(agent, mac) !== undefined) return "found";
  } catch (err) {
    if (!hasCode(err, ...AGENT_SILENT, ...SOURCE_ABSENT)) return checkOrRetry(err);
  }
  try {
    const lease = await lv.domainInterfaceAddresses(dom, InterfaceAddressSource.LEASE);
    if (firstRoutableIpv4(lease, mac) !== undefined) return "found";
  } catch (err) {
    if (!hasCode(err, ...SOURCE_ABSENT)) return checkOrRetry(err);
  }
  return "none";
}

/** A transient failure (a dropped connection) goes to the retry loop; anything else asks for a full read. */
function checkOrRetry(err: unknown): "check" {
  if (isTransient(err)) throw err;
  return "check";
}
