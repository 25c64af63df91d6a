/**
 * The KVM operations the Pulumi resource drives: provision (create, wait for
 * an address, a readiness gate, rollback), create, get, delete, list,
 * waitForIp, setTags and pruneImages. Each converges rather than assumes:
 * create reuses whatever a cut-short earlier attempt left and rebuilds only
 * what must be fresh; delete tolerates every already-gone case.
 *
 * Retry lives in one place, {@link KvmOperations.retrying}: every public
 * operation is one retried unit (bounded backoff with jitter for transient
 * failures), and nothing above or below it loops on failures. Whatever
 * surfaces is a KvmOperationError naming host, domain, libvirt call and code.
 */
import { messageOf, ProviderError } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import { type ParsedDomain, parseDomainXml } from "../domain/domain-xml";
import type { ProxyMetadata } from "../domain/metadata";
import { formatProviderId } from "../domain/provider-id";
import { isActiveState, mapDomainState, type ProxyState } from "../domain/states";
import {
  GUEST_PROBE_INTERPRETER,
  type GuestProbeReply,
  guestProbeArgs,
  type ProbeBounds,
  parseGuestProbe,
} from "../guest/guest-probe";
import type { NicBandwidth } from "../network/nic";
import { SOCKS_GREETING_PROGRAM } from "../proxy/dante";
import { AddressPools } from "./address-pools";
import { addressFields, guestAddresses, type WaitForIpOptions, waitForAddress } from "./addresses";
import { ConsoleTail } from "./console";
import { type CreateOptions, type CreateResult, type CreateSpec, createOnce } from "./create";
import { DefineInDoubtError, DefineLedger } from "./define-ledger";
import { deleteOnce } from "./delete";
import {
  domainByUuid,
  findDomain,
  lookupDomain,
  managedMetadata,
  setManagedMetadata,
  stateByUuid,
} from "./domains";
import { type FirstBootOptions, outputTail, waitFirstBoot } from "./first-boot";
import { type GroupMatch, type GroupMember, groupMembers } from "./fleet-members";
import { runInGuest } from "./guest-agent";
import type { HostPool } from "./hosts";
import { ImageBaker } from "./image-bake";
import { ImageCache } from "./image-cache";
import { guestOutputText, inspectCommands } from "./inspect";
import { setInterfaceBandwidth } from "./interfaces";
import { Placer } from "./placer";
import { type ProvisionOptions, provision } from "./provision";
import { type OperationContext, type RetryEnv, type RetryPolicy, toOperationError, withRetry } from "./retry";
import { Semaphore } from "./semaphore";
import { type NicCounters, nicCounters, squidRequests } from "./traffic";
import type { DeleteOptions, DeleteResult, VmStatus } from "./vm";
import { hasCode } from "./volumes";

/** What a program run in the guest for a probe may take beyond its own deadline: the interpreter's start, the agent's polls, ms. */
const GUEST_RUN_MARGIN_MS = 10_000;

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

/** Options of {@link KvmOperations}. */
export interface KvmOperationsOptions {
  images?: ImageCache;
  baker?: ImageBaker;
  retry?: RetryPolicy;
  /** Clock and sleep, injectable so tests never wait on wall-clock time. */
  env?: RetryEnv;
  /**
   * How long a domain define that ran past its RPC deadline may still land,
   * counted from the deadline (default 60 s). Until then nothing concludes the
   * domain is absent: see define-ledger.ts.
   */
  defineGraceMs?: number;
  /** Pause between lookups while waiting for such a define (default 1 s). */
  definePollMs?: number;
}

/** The KVM core operations over a set of hosts. */
export class KvmOperations {
  readonly hosts: HostPool;
  readonly images: ImageCache;
  readonly baker: ImageBaker;
  readonly env: RetryEnv;
  private readonly retry: RetryPolicy;
  private readonly ledger: DefineLedger;
  /** The provision in flight for each host and domain name (see {@link provision}). */
  readonly provisioning = new Map<string, Promise<unknown>>();
  /** Placement over pools of hosts (placer.ts). */
  readonly placer: Placer;
  /** Address pools over the hosts (address-pools.ts). */
  readonly addresses: AddressPools;
  /** Creates in flight per host, bounded by its capacity's concurrentCreates. */
  private readonly createSlots = new Map<string, Semaphore>();

  constructor(hosts: HostPool, options: KvmOperationsOptions = {}) {
    this.hosts = hosts;
    this.env = options.env ?? {};
    this.images = options.images ?? new ImageCache({ retryEnv: this.env });
    this.baker = options.baker ?? new ImageBaker({ retryEnv: this.env });
    this.retry = options.retry ?? {};
    this.placer = new Placer(hosts, this.env);
    this.addresses = new AddressPools(hosts, this.env);
    this.ledger = new DefineLedger({
      env: this.env,
      ...(options.defineGraceMs !== undefined ? { graceMs: options.defineGraceMs } : {}),
      ...(options.definePollMs !== undefined ? { pollMs: options.definePollMs } : {}),
    });
  }

  /**
   * Creates (or converges) VM `spec.name` on `spec.host` and starts it: see
   * create.ts for the steps. Rerunning after a failure at any step converges
   * to one domain.
   */
  async create(spec: CreateSpec, options: CreateOptions = {}): Promise<CreateResult> {
    const ctx: OperationContext = { operation: "create", host: spec.host, domain: spec.name };
    return this.retrying(ctx, () => createOnce(this.createContext(), spec, options), options.signal);
  }

  /**
   * Provisions VM `spec.name` to "running, with an address, ready": create,
   * the IP wait, the caller's readiness gate, all within one deadline, and
   * the rollback decision when any of it fails (see provision.ts).
   */
  provision(spec: CreateSpec, options: ProvisionOptions = {}): Promise<VmStatus> {
    return provision(this, spec, options);
  }

  /** Waits for a create slot on `hostKey`; returns the function that gives it back. */
  createSlot(hostKey: string, onWait?: (ahead: number) => void): Promise<() => void> {
    let s = this.createSlots.get(hostKey);
    if (s === undefined) {
      s = new Semaphore(this.hosts.config(hostKey).capacity.concurrentCreates);
      this.createSlots.set(hostKey, s);
    }
    return s.acquire(onWait);
  }

  /** The members of a rotation group on hosts `keys` (fleet-members.ts). */
  groupMembers(keys: readonly string[], match: GroupMatch): Promise<GroupMember[]> {
    const ctx: OperationContext = { operation: "list group", host: keys.join(",") };
    return this.retrying(ctx, () => groupMembers(this.hosts, keys, match));
  }

  private createContext() {
    return { hosts: this.hosts, images: this.images, baker: this.baker, ledger: this.ledger, env: this.env };
  }

  /**
   * The VM's state: libvirt's state plus the guest's addresses (guest agent
   * first, then the DHCP lease: the first routable IPv4, the first global
   * IPv6, every address per NIC; addresses.ts), mapped onto provider states,
   * with the parsed domain and our metadata. A missing domain is `absent`; a host not
   * in the configuration is a permanent error (a typo must not look like a
   * missing VM, which the resource would rebuild).
   *
   * `known.uuid` (the UUID the state recorded) saves the lookup by name:
   * libvirtd resolves a domain handle by its UUID, so the state call goes
   * straight to it. A domain since deleted, recreated or renamed falls back
   * to the lookup by name, so the answer is the same as without it. With the
   * UUID a refresh makes 3 calls per running VM (see test/pulumi/call-counts).
   */
  async get(hostKey: string, name: string, known: { uuid?: string } = {}): Promise<VmStatus> {
    return this.readStatus(hostKey, name, known);
  }

  /**
   * The state of the domain with `uuid` as one virDomainGetState reads it
   * ("provisioning" while it runs: no address is looked for), "absent" when
   * libvirt has none. No retry: a watch reads again.
   */
  async runState(hostKey: string, name: string, uuid: string): Promise<ProxyState> {
    const found = await stateByUuid(this.hosts.libvirt(hostKey), name, uuid);
    return mapDomainState(found?.libvirtState, undefined);
  }

  /**
   * As {@link get}; `known.domain`, XML the caller parsed just now (create's),
   * saves the XML read too. For the core's own sequences (provision), which
   * hold that XML: the resource layer reads with {@link get}.
   */
  async readStatus(
    hostKey: string,
    name: string,
    known: { uuid?: string; domain?: ParsedDomain },
  ): Promise<VmStatus> {
    const ctx: OperationContext = { operation: "get", host: hostKey, domain: name };
    return this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      let found = await findDomain(lv, name, known.uuid);
      if (found === undefined) return { host: hostKey, name, state: "absent" };
      let domain =
        found.byUuid && known.domain !== undefined
          ? known.domain
          : parseDomainXml(await lv.domainGetXmlDesc(found.dom));
      if (domain.name !== name) {
        // The UUID names another domain now (this one renamed or recreated): by name.
        found = await findDomain(lv, name);
        if (found === undefined) return { host: hostKey, name, state: "absent" };
        domain = parseDomainXml(await lv.domainGetXmlDesc(found.dom));
      }
      const { dom, libvirtState } = found;
      const ip = isActiveState(libvirtState.state) ? await guestAddresses(lv, dom, domain) : undefined;
      return {
        host: hostKey,
        name,
        state: mapDomainState(libvirtState, ip?.ipv4?.addr ?? ip?.ipv6),
        uuid: dom.uuid,
        libvirtState,
        domain,
        ...(domain.mac !== undefined ? { mac: domain.mac } : {}),
        ...(domain.metadata !== undefined ? { metadata: domain.metadata } : {}),
        ...(ip !== undefined ? addressFields(ip) : {}),
      };
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
    let late: Awaited<ReturnType<DefineLedger["settle"]>>;
    try {
      late = await this.ledger.settle(this.hosts.libvirt(hostKey), hostKey, name);
    } catch (err) {
      throw toOperationError(ctx, err);
    }
    const policy =
      options.deadlineMs === undefined ? {} : { deadlineMs: options.deadlineMs, maxAttempts: Infinity };
    const result = await this.retrying(
      ctx,
      () => deleteOnce(this.hosts, this.env, hostKey, name, options),
      undefined,
      policy,
    );
    if (late === "expired" && !result.domainRemoved) {
      // Everything else is gone, but the domain may yet appear: say so, so the caller keeps it on record.
      throw toOperationError(ctx, new DefineInDoubtError(hostKey, name, this.ledger.graceMs));
    }
    return result;
  }

  /**
   * Replaces the tags in VM `name`'s metadata (the persistent definition,
   * and the live one while it runs), keeping the rest of the metadata. Fails
   * permanently for a domain that is gone or not managed by us.
   */
  async setTags(
    hostKey: string,
    name: string,
    tags: Record<string, string>,
    known: { uuid?: string } = {},
  ): Promise<void> {
    const ctx: OperationContext = { operation: "update metadata", host: hostKey, domain: name };
    await this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      const found = await findDomain(lv, name, known.uuid);
      if (found === undefined)
        throw new ProviderError("permanent", `domain ${name} is gone from host ${hostKey}`);
      const m = await managedMetadata(lv, found.dom);
      if (m === undefined) {
        throw new ProviderError(
          "permanent",
          `domain ${name} on host ${hostKey} is not managed by pulumi-kvm-proxy`,
        );
      }
      await setManagedMetadata(lv, found.dom, found.libvirtState, { ...m, tags });
    });
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
          reason: messageOf(err),
        });
      }
    }
    return result;
  }

  /**
   * Waits until the VM is running with an address of `options.family`
   * (default a routable IPv4); with `options.staticAddresses`, the configured
   * ones answer while no guest agent does. Fails permanently when the VM is
   * absent, stopped or failed, and with a TimeoutError naming the VM and
   * host at the deadline. See {@link waitForIpFrom}.
   */
  async waitForIp(hostKey: string, name: string, options: WaitForIpOptions = {}): Promise<VmStatus> {
    return this.waitForIpFrom(await this.get(hostKey, name), options);
  }

  /**
   * As {@link waitForIp}, from a status just read (provision's; the resource
   * layer waits with {@link waitForIp}): cheap address probes between full
   * reads, see addresses.ts `waitForAddress`.
   */
  waitForIpFrom(from: VmStatus, options: WaitForIpOptions = {}): Promise<VmStatus> {
    return waitForAddress(this, from, options);
  }

  /**
   * Sets the rate limits of VM `name`'s NIC `mac` (an empty `bandwidth`
   * removes them) in place: on the running domain and its definition, or the
   * definition alone while it is stopped (interfaces.ts). Fails permanently
   * for a domain that is gone or has no NIC with that MAC.
   */
  async setBandwidth(hostKey: string, name: string, mac: string, bandwidth: NicBandwidth): Promise<void> {
    const ctx: OperationContext = { operation: "update bandwidth", host: hostKey, domain: name };
    await this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      const dom = await lookupDomain(lv, name);
      if (dom === undefined)
        throw new ProviderError("permanent", `domain ${name} is gone from host ${hostKey}`);
      await setInterfaceBandwidth(lv, dom, mac, bandwidth);
    });
  }

  /** The domain `name` on `hostKey`, or a permanent error naming it gone. */
  private async domainOf(hostKey: string, name: string) {
    const lv = this.hosts.libvirt(hostKey);
    const dom = await lookupDomain(lv, name);
    if (dom === undefined)
      throw new ProviderError("permanent", `domain ${name} is gone from host ${hostKey}`);
    return { lv, dom };
  }

  /**
   * Waits until cloud-init has finished VM `name`'s first boot (read through
   * its guest agent; first-boot.ts): throws a FirstBootError naming the
   * modules that failed, or the signal's reason at the deadline.
   */
  async waitFirstBoot(hostKey: string, name: string, options: FirstBootOptions): Promise<void> {
    const ctx: OperationContext = { operation: "wait for the first boot", host: hostKey, domain: name };
    await this.retrying(
      ctx,
      async () => {
        const { lv, dom } = await this.domainOf(hostKey, name);
        await waitFirstBoot(lv, dom, {
          ...options,
          ...(this.env.now !== undefined ? { now: this.env.now } : {}),
        });
      },
      options.signal,
    );
  }

  /**
   * VM `name`'s serial console from now on (console.ts); undefined when it
   * cannot be had. A known UUID names the domain without a lookup.
   */
  async openConsole(hostKey: string, name: string, uuid?: string): Promise<ConsoleTail | undefined> {
    try {
      const { lv, dom } =
        uuid === undefined
          ? await this.domainOf(hostKey, name)
          : { lv: this.hosts.libvirt(hostKey), dom: domainByUuid(name, uuid) };
      return await ConsoleTail.open(lv, dom);
    } catch {
      return undefined;
    }
  }

  /** The last lines of cloud-init's output in VM `name`, redacted; undefined when the agent cannot give them. */
  async guestOutputTail(
    hostKey: string,
    name: string,
    secrets: readonly string[] = [],
  ): Promise<string[] | undefined> {
    try {
      const { lv, dom } = await this.domainOf(hostKey, name);
      return await outputTail(lv, dom, secrets);
    } catch {
      return undefined;
    }
  }

  /**
   * What VM `name` says about itself, masked (inspect.ts): cloud-init's
   * output through its agent, else `consoleText`, what its serial console
   * printed. The lines a create's error and the `console` command show.
   */
  guestOutput(
    hostKey: string,
    name: string,
    secrets: readonly string[],
    consoleText: string | undefined,
  ): Promise<string[]> {
    return guestOutputText(this, hostKey, name, secrets, consoleText);
  }

  /** The commands an operator looks at VM `name` with (inspect.ts), the host's URI filled in when configured. */
  inspectCommands(hostKey: string, name: string): { log: string; console: string } {
    return inspectCommands(hostKey, name, this.hosts.has(hostKey) ? this.hosts.config(hostKey) : undefined);
  }

  /**
   * One request for `url` through the squid on `port` inside VM `name`,
   * within `bounds`, run by its guest agent (guest-probe.ts); undefined when
   * the agent does not answer.
   */
  async probeInGuest(
    hostKey: string,
    name: string,
    port: number,
    url: string,
    bounds: ProbeBounds,
    signal?: AbortSignal,
  ): Promise<GuestProbeReply | undefined> {
    const ctx: OperationContext = { operation: "probe in the guest", host: hostKey, domain: name };
    return this.retrying(
      ctx,
      async () => {
        const { lv, dom } = await this.domainOf(hostKey, name);
        const args = guestProbeArgs(port, url, bounds);
        const run = await runInGuest(lv, dom, GUEST_PROBE_INTERPRETER, args, {
          // The program ends itself at its deadline; beyond it, the interpreter's start and the agent's polls.
          timeoutMs: bounds.deadlineMs + GUEST_RUN_MARGIN_MS,
          ...(signal !== undefined ? { signal } : {}),
        });
        return run === undefined ? undefined : parseGuestProbe(run.stdout.toString("utf8"), run.exitcode);
      },
      signal,
    );
  }

  /**
   * The SOCKS greeting inside the guest (kvm/proxy/dante.ts), through its
   * agent: the server's choice as hex (`0502`), `{error}` when there is no
   * answer, undefined when the agent does not answer.
   */
  async socksInGuest(
    hostKey: string,
    name: string,
    port: number,
    signal?: AbortSignal,
  ): Promise<{ reply: string } | { error: string } | undefined> {
    const ctx: OperationContext = { operation: "SOCKS greeting in the guest", host: hostKey, domain: name };
    return this.retrying(
      ctx,
      async () => {
        const { lv, dom } = await this.domainOf(hostKey, name);
        const run = await runInGuest(
          lv,
          dom,
          GUEST_PROBE_INTERPRETER,
          ["-c", SOCKS_GREETING_PROGRAM, String(port)],
          {
            timeoutMs: 20_000,
            ...(signal !== undefined ? { signal } : {}),
          },
        );
        if (run === undefined) return undefined;
        const out = run.stdout.toString("utf8").trim();
        if (out.startsWith("socks ")) return { reply: out.slice(6) };
        return {
          error: out.startsWith("error ") ? out.slice(6) : `no greeting (exit ${run.exitcode ?? "unknown"})`,
        };
      },
      signal,
    );
  }

  /** VM `name`'s NICs' counters (traffic.ts); empty when it is not running. */
  async nicCounters(hostKey: string, name: string): Promise<NicCounters[]> {
    const ctx: OperationContext = { operation: "NIC counters", host: hostKey, domain: name };
    return this.retrying(ctx, async () => {
      const { lv, dom } = await this.domainOf(hostKey, name);
      return nicCounters(lv, dom);
    });
  }

  /**
   * The requests VM `name`'s squid answered since its boot, by status class
   * (traffic.ts), or why they could not be counted; undefined when its agent
   * does not answer.
   */
  async squidRequests(hostKey: string, name: string, signal?: AbortSignal): ReturnType<typeof squidRequests> {
    const ctx: OperationContext = { operation: "request count in the guest", host: hostKey, domain: name };
    return this.retrying(
      ctx,
      async () => {
        const { lv, dom } = await this.domainOf(hostKey, name);
        return squidRequests(lv, dom, signal);
      },
      signal,
    );
  }

  /**
   * Deletes cached and baked images on `hostKey` that no managed domain
   * uses, stale partial markers, and bake builders (with their seeds) that
   * are shut off, boot from this pool's baked volume, and whose bake is over
   * (no marker in the pool). A stock image stays while a proxy's baked image
   * it backs is in use. Refuses (permanent error) when some
   * domain's metadata cannot be read, since its image would be unknown.
   * Returns the volumes and builder domains removed.
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
      listed.vms.flatMap((vm) => [
        ImageCache.volumeName(vm.metadata.image),
        ...(vm.metadata.image.baked !== undefined ? [vm.metadata.image.baked] : []),
      ]),
    );
    return this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      const pool = await this.hosts.pool(hostKey);
      if (pool === undefined) return [];
      const loc = { host: hostKey, lv, pool };
      const removed: string[] = [];
      for (const b of await this.baker.leftoverBuilders(loc))
        removed.push(...(await this.baker.removeBuilder(loc, b)));
      removed.push(...(await this.images.prune(loc, inUse, (name) => this.baker.baking(loc, name))));
      return removed;
    });
  }

  /**
   * Bake builders on `hostKey` whose bake is over and that nothing will
   * finish: shut off, booting from this host's pool's baked volume (domains
   * are host-wide, markers per pool), and without that volume's marker. With
   * `remove`, each is undefined with its NVRAM and its seed deleted. Returns
   * each builder's name and, when removed, what went.
   */
  async leftoverBuilders(
    hostKey: string,
    opts: { remove: boolean },
  ): Promise<{ name: string; removed: string[] }[]> {
    const ctx: OperationContext = { operation: "list bake builders", host: hostKey };
    return this.retrying(ctx, async () => {
      const lv = this.hosts.libvirt(hostKey);
      const pool = await this.hosts.pool(hostKey);
      if (pool === undefined) return [];
      const loc = { host: hostKey, lv, pool };
      const out: { name: string; removed: string[] }[] = [];
      for (const b of await this.baker.leftoverBuilders(loc))
        out.push({ name: b.dom.name, removed: opts.remove ? await this.baker.removeBuilder(loc, b) : [] });
      return out;
    });
  }

  /** The monotonic clock of the retry environment, ms. */
  now(): number {
    return (this.env.now ?? (() => performance.now()))();
  }

  /**
   * The one retry wrapper: runs `fn` as one operation, retrying transient
   * failures with the operation policy (overridden per call by `policy`),
   * and wraps what surfaces in a KvmOperationError for `ctx`.
   */
  retrying<T>(
    ctx: OperationContext,
    fn: (attempt: number) => Promise<T>,
    signal?: AbortSignal,
    policy: RetryPolicy = {},
  ): Promise<T> {
    return withRetry(fn, {
      ...this.retry,
      ...policy,
      ...this.env,
      context: ctx,
      ...(signal !== undefined ? { signal } : {}),
    });
  }
}

export type { AddressFamily, WaitForIpOptions } from "./addresses";
export { KvmStateError } from "./addresses";
export type { CreateOptions, CreateResult, CreateSpec, CreateStep } from "./create";
export { CREATE_STEPS } from "./create";
export { DomainTakenError } from "./domains";
export type { DeleteOptions, DeleteResult, VmStatus } from "./vm";
