/**
 * The runtime implementation of the KvmProxy dynamic provider: configure,
 * check, diff, create, read, update, delete.
 *
 * This module is never serialized. The tiny provider object KvmProxy hands to
 * Pulumi (kvm-proxy.ts) requires it by package path inside the dynamic
 * provider process, so the state's `__provider` text stays small and holds
 * no implementation, paths or secrets. One module instance serves every
 * KvmProxy of a deployment: the parsed stack config and one libvirt
 * connection per host are shared.
 */
import { randomBytes } from "node:crypto";
import { ProviderError, TimeoutError } from "../errors";
import type { HostConfig, ImageConfig, NicAttachment } from "../kvm/config";
import { HostPool } from "../kvm/hosts";
import { ImageCache } from "../kvm/image-cache";
import {
  buildMetadataElement,
  hashSpec,
  METADATA_NAMESPACE,
  METADATA_PREFIX,
  type ProxyMetadata,
} from "../kvm/metadata";
import {
  type CreateSpec,
  type DeleteResult,
  DomainTakenError,
  KvmOperations,
  lookupDomain,
  type VmStatus,
} from "../kvm/operations";
import { formatProviderId, parseProviderId } from "../kvm/provider-id";
import { type OperationContext, withRetry } from "../kvm/retry";
import { isActiveState } from "../kvm/states";
import { ValidationError } from "../kvm/validation";
import { serializeXml, type XmlAttrValue, type XmlElement } from "../kvm/xml";
import { DomainModificationImpact } from "../libvirt/constants";
import { type CheckedInputs, DEFAULTS, type KvmProxyOutputs, type ResolvedImage } from "./args";
import { asChecked, checkInputs } from "./check";
import { emptyStackConfig, readStackConfig, type StackConfig } from "./config";
import { diffProxy, seedDigest } from "./diff";
import { waitHealthy } from "./health-check";

type Props = Record<string, unknown>;

/** The `configure` request as the dynamic provider host passes it. */
export interface ConfigureRequest {
  config: { get(key: string): unknown };
}

/**
 * A create that failed after the VM existed and whose rollback failed too.
 * The dynamic provider host turns an error carrying `id` into a partial
 * failure (ResourceInitError): the engine records the VM in the state, so a
 * later `up` or `destroy` deals with it. No VM is left outside the state.
 */
export class PartialCreateError extends Error {
  readonly id: string;
  readonly properties: Props;
  readonly reasons: string[];

  constructor(message: string, id: string, properties: Props, reasons: string[]) {
    super(message);
    this.name = "PartialCreateError";
    this.id = id;
    this.properties = properties;
    this.reasons = reasons;
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Keys whose value is undefined, dropped (protobuf Structs cannot carry undefined). */
function defined<T extends Props>(o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k];
  return o;
}

/** One configured provider: stack config plus the operations over its hosts. */
export class KvmProxyRuntime {
  config: StackConfig = emptyStackConfig();
  private readonly images = new ImageCache();
  private base: KvmOperations | undefined;
  private readonly byNic = new Map<string, KvmOperations>();
  /**
   * Milliseconds between IP and health polls. 1 s keeps the delay between the
   * guest getting its address (or squid answering) and create noticing under
   * the 2 s goal; an IP poll is mostly 2 libvirt calls (see waitForIp), a
   * health poll one TCP connect or HTTP request.
   */
  pollMs = 1_000;
  /** Milliseconds between retries of a delete that failed transiently. */
  retryMs = 5_000;
  /** The create in flight for each host and domain name (see {@link create}). */
  private readonly creating = new Map<string, Promise<unknown>>();

  configure(req: ConfigureRequest): Promise<void> {
    const previous = [this.base, ...this.byNic.values()];
    this.config = readStackConfig((k) => req.config.get(k));
    this.base = undefined;
    this.byNic.clear();
    return Promise.allSettled(previous.map((o) => o?.hosts.closeAll())).then(() => undefined);
  }

  /** Closes every libvirt connection (tests; the provider process just exits). */
  async close(): Promise<void> {
    await Promise.allSettled([this.base, ...this.byNic.values()].map((o) => o?.hosts.closeAll()));
    this.base = undefined;
    this.byNic.clear();
  }

  /** The operations over every configured host. */
  ops(): KvmOperations {
    this.base ??= new KvmOperations(new HostPool(this.config.hosts), { images: this.images });
    return this.base;
  }

  /** The operations to create `c` with: the host's own NIC, or the network/bridge the resource names. */
  private opsFor(c: CheckedInputs): KvmOperations {
    const host = this.hostConfig(c.host);
    const nic: NicAttachment | undefined =
      c.bridge !== undefined
        ? { kind: "bridge", bridge: c.bridge }
        : c.network !== undefined
          ? { kind: "network", network: c.network }
          : undefined;
    if (nic === undefined || JSON.stringify(nic) === JSON.stringify(host.nic)) return this.ops();
    // The operations layer takes the NIC from the host config; a pool whose
    // copy of this host attaches elsewhere gives the same result.
    const key = `${c.host}\n${JSON.stringify(nic)}`;
    let o = this.byNic.get(key);
    if (o === undefined) {
      o = new KvmOperations(new HostPool({ [c.host]: { ...host, nic } }), { images: this.images });
      this.byNic.set(key, o);
    }
    return o;
  }

  private hostConfig(key: string): HostConfig {
    const host = Object.hasOwn(this.config.hosts, key) ? this.config.hosts[key] : undefined;
    if (host === undefined) {
      throw new ProviderError(
        "permanent",
        `host ${JSON.stringify(key)} is not in the stack config kvm:hosts (configured: ${
          Object.keys(this.config.hosts).join(", ") || "none"
        })`,
      );
    }
    return host;
  }

  check(
    olds: Props,
    news: Props,
  ): Promise<{ inputs: Props; failures: { property: string; reason: string }[] }> {
    return Promise.resolve(
      checkInputs(olds ?? {}, news, { config: this.config, randomBytes: (n) => randomBytes(n) }),
    );
  }

  diff(_id: string, olds: Props, news: Props) {
    const d = diffProxy(olds, news);
    return Promise.resolve({
      changes: d.changes,
      replaces: d.replaces,
      deleteBeforeReplace: d.deleteBeforeReplace,
    });
  }

  /**
   * Creates one proxy. Two creates of one fixed name in this process (one
   * stack's program with `--parallel`) run one after the other: both would
   * otherwise pass the adoption check before either defined the domain, and
   * share the volumes named after it, so the loser's rollback could delete
   * the winner's disks. Serialized, the second is refused by the adoption
   * check before it makes anything.
   */
  async create(inputs: Props): Promise<{ id: string; outs: Props }> {
    const c = asChecked(inputs);
    const key = `${c.host}\0${c.name}`;
    const previous = this.creating.get(key) ?? Promise.resolve();
    const mine = previous.catch(() => undefined).then(() => this.createNow(inputs, c));
    this.creating.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.creating.get(key) === mine) this.creating.delete(key);
    }
  }

  private async createNow(inputs: Props, c: CheckedInputs): Promise<{ id: string; outs: Props }> {
    const started = performance.now();
    const deadlineMs = c.timeouts.create * 1000;
    const left = () => Math.max(0, deadlineMs - (performance.now() - started));
    const id = formatProviderId(c.host, c.name);
    const o = this.opsFor(c);

    // Never adopt (and so never roll back) a domain this resource did not make.
    const before = await o.get(c.host, c.name);
    if (before.state !== "absent") {
      const urn = before.metadata?.owner.urn;
      if (urn === undefined || c.owner === undefined || urn !== c.owner.urn) {
        throw new DomainTakenError(c.host, c.name, urn);
      }
    }

    // timeouts.create bounds the libvirt steps too: create stops before its next step once it passes.
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new TimeoutError(`the create of ${id} to finish (timeouts.create)`, deadlineMs)),
      left(),
    );
    const { signal } = deadline;
    const spec = createSpec(c);
    let status: VmStatus | undefined;
    try {
      // The adoption check above just found no domain; create's XML and UUID save the reads after it.
      const made = await o.create(spec, { knownAbsent: before.state === "absent", signal });
      status = await o.get(c.host, c.name, { uuid: made.uuid, domain: made.domain });
      if (c.waitForIp) {
        status = await o.waitForIp(c.host, c.name, {
          deadlineMs: left(),
          pollMs: this.pollMs,
          from: status,
          signal,
        });
      }
      if (c.healthCheck !== false) {
        if (status.ipv4 === undefined) throw new ProviderError("permanent", "no IP to health-check");
        await waitHealthy(
          {
            ip: status.ipv4,
            proxyPort: c.proxyPort,
            ...(c.healthCheck.url !== undefined ? { url: c.healthCheck.url } : {}),
            ...(c.healthCheck.expectStatus !== undefined ? { expectStatus: c.healthCheck.expectStatus } : {}),
          },
          left(),
          { pollMs: this.pollMs },
        );
      }
      return { id, outs: outputsFrom(c, status) };
    } catch (err) {
      // Roll back: whatever this create made goes again, so no VM lives outside the state.
      // Only what is ours: another create of this name may have won the define.
      let rollback: DeleteResult;
      try {
        rollback = await o.delete(c.host, c.name, { owner: spec.owner.urn });
      } catch (rollbackErr) {
        const props: Props = {
          ...outputsFrom(c, status ?? { host: c.host, name: c.name, state: "failed" }),
          __provider: inputs.__provider,
        };
        throw new PartialCreateError(
          `create of ${id} failed (${message(err)}) and deleting it again failed too (${message(rollbackErr)}); ` +
            "it is recorded in the state: run `pulumi up` or `pulumi destroy` to retry",
          id,
          props,
          // The engine shows only these lines, so each says what it is about.
          [
            `create of ${id} failed: ${message(err)}`,
            `deleting it again failed too: ${message(rollbackErr)}; ` +
              "the VM is recorded in the state: run `pulumi up` or `pulumi destroy` to finish",
          ],
        );
      }
      const undone =
        rollback.noop === "not-ours"
          ? `a domain of that name that belongs to ${rollback.foreignOwner} was left alone`
          : "the VM and its volumes were deleted";
      throw new ProviderError(
        err instanceof ProviderError ? err.kind : "permanent",
        `create of ${id} failed and was rolled back (${undone}): ${message(err)}`,
        { cause: err },
      );
    } finally {
      clearTimeout(timer);
    }
  }

  async read(id: string, props: Props): Promise<{ id?: string; props?: Props; inputs?: Props }> {
    const { host, name } = parseProviderId(id);
    // The recorded UUID saves a lookup per VM on refresh (KvmOperations.get).
    const known = typeof props.uuid === "string" && props.uuid !== "" ? { uuid: props.uuid } : {};
    const status = await this.ops().get(host, name, known);
    if (status.state === "absent") return {};
    const adopting = typeof props.name !== "string";
    if (adopting) {
      if (status.metadata === undefined) {
        throw new ProviderError(
          "permanent",
          `domain ${name} on host ${host} is not managed by pulumi-kvm-proxy`,
        );
      }
      const inputs = inputsFromMetadata(host, name, status);
      return { id, props: { ...inputs, ...liveOutputs(inputs, status) }, inputs };
    }
    const next: Props = { ...props, ...liveOutputs(props, status) };
    if (status.ipv4 === undefined) {
      delete next.ipAddress;
      delete next.proxyUrl;
    }
    return { id, props: next };
  }

  async update(id: string, olds: Props, news: Props): Promise<{ outs: Props }> {
    const c = asChecked(news);
    const { host, name } = parseProviderId(id);
    const o = this.ops();
    const started = performance.now();
    const deadlineMs = c.timeouts.create * 1000;
    // The recorded UUID saves the lookup by name (a domain recreated by hand is still found by name).
    const known = typeof olds.uuid === "string" && olds.uuid !== "" ? { uuid: olds.uuid } : {};
    let status = await o.get(host, name, known);
    // A record left by a create whose rollback failed (no UUID: the domain was
    // never seen) is not a VM that went away: finish the create it started.
    const unfinished = olds.uuid === "";
    if (status.state === "absent" && unfinished) {
      const made = await this.opsFor(c).create(createSpec(c), { knownAbsent: true });
      status = await o.get(host, name, { uuid: made.uuid, domain: made.domain });
    }
    if (status.state === "absent") {
      throw new ProviderError(
        "permanent",
        `domain ${name} is gone from host ${host}; run \`pulumi refresh\``,
      );
    }
    if (status.state === "stopped" || status.state === "failed") {
      // The VM this resource records, whatever URN its metadata holds (a stack rename changes it).
      const made = await this.opsFor(c).create(createSpec(c), { anyOwner: true });
      status = await o.get(host, name, { uuid: made.uuid, domain: made.domain });
    }
    if (!same(olds.tags, c.tags) && status.metadata !== undefined) {
      await this.setMetadata(host, name, { ...status.metadata, tags: c.tags });
      status = await o.get(host, name, status.uuid === undefined ? {} : { uuid: status.uuid });
    }
    if (c.waitForIp && status.ipv4 === undefined) {
      status = await o.waitForIp(host, name, {
        deadlineMs: Math.max(0, deadlineMs - (performance.now() - started)),
        pollMs: this.pollMs,
        from: status,
      });
    }
    return { outs: outputsFrom(c, status) };
  }

  private async setMetadata(host: string, name: string, m: ProxyMetadata): Promise<void> {
    const lv = this.ops().hosts.libvirt(host);
    const ctx: OperationContext = { operation: "update metadata", host, domain: name };
    await withRetry(
      async () => {
        const dom = await lookupDomain(lv, name);
        if (dom === undefined)
          throw new ProviderError("permanent", `domain ${name} is gone from host ${host}`);
        const state = await lv.domainGetState(dom);
        const flags = isActiveState(state.state)
          ? DomainModificationImpact.LIVE | DomainModificationImpact.CONFIG
          : DomainModificationImpact.CONFIG;
        await lv.domainSetMetadataElement(dom, METADATA_NAMESPACE, METADATA_PREFIX, metadataForSet(m), flags);
      },
      { context: ctx },
    );
  }

  async delete(id: string, props: Props): Promise<void> {
    const { host, name } = parseProviderId(id);
    const timeouts = props.timeouts as { delete?: number } | undefined;
    const deadlineMs =
      (typeof timeouts?.delete === "number" ? timeouts.delete : DEFAULTS.deleteSeconds) * 1000;
    const started = performance.now();
    for (;;) {
      try {
        const r = await this.ops().delete(host, name);
        if (r.noop === "host-not-configured") {
          console.error(
            `warning: host ${JSON.stringify(host)} is not in kvm:hosts; ${id} is dropped from the state without touching libvirt`,
          );
        }
        return;
      } catch (err) {
        const transient = err instanceof ProviderError && err.kind === "transient";
        if (!transient || performance.now() - started + this.retryMs > deadlineMs) throw err;
        await new Promise((r) => setTimeout(r, this.retryMs));
      }
    }
  }
}

/**
 * Our metadata element as virDomainSetMetadata takes it: unprefixed and
 * without the xmlns declaration (libvirt applies the namespace and prefix
 * itself, and refuses a fragment that declares them: "failed to create a new
 * XML namespace").
 */
export function metadataForSet(m: ProxyMetadata): string {
  const strip = (e: XmlElement): XmlElement => {
    const attrs: Record<string, XmlAttrValue> = {};
    for (const [k, v] of Object.entries(e.attrs ?? {})) if (!k.startsWith("xmlns")) attrs[k] = v;
    return {
      name: e.name.replace(/^[^:]*:/, ""),
      attrs,
      children: (e.children ?? []).map((c) => (typeof c === "object" && c !== null ? strip(c) : c)),
    };
  };
  return serializeXml(strip(buildMetadataElement(m)));
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a ?? {}) === JSON.stringify(b ?? {});
}

/** The spec hash recorded in the metadata: everything that, changed, rebuilds the VM. */
export function specHashOf(c: CheckedInputs): string {
  return hashSpec({
    host: c.host,
    image: c.resolvedImage,
    userData: c.userData,
    vendorData: c.vendorData,
    installGuestAgent: c.installGuestAgent,
    memoryMiB: c.memoryMiB,
    vcpus: c.vcpus,
    diskGiB: c.diskGiB,
    network: c.network,
    bridge: c.bridge,
    macAddress: c.macAddress,
    name: c.name,
    proxyPort: c.proxyPort,
  });
}

function imageConfigOf(r: ResolvedImage): ImageConfig {
  const url = new URL(r.url);
  const image: ImageConfig = {
    url: r.url,
    source:
      url.protocol === "file:"
        ? { kind: "file", path: decodeURIComponent(url.pathname) }
        : { kind: "http", url: r.url },
    format: r.format,
    firmware: r.firmware,
  };
  if (r.sha256 !== undefined) image.sha256 = r.sha256;
  return image;
}

/** The operations layer's create spec for checked inputs. */
export function createSpec(c: CheckedInputs): CreateSpec {
  const imageRef = typeof c.image === "string" ? c.image : c.resolvedImage.url;
  const spec: CreateSpec = {
    host: c.host,
    name: c.name,
    image: imageConfigOf(c.resolvedImage),
    imageRef,
    memoryMiB: c.memoryMiB,
    vcpus: c.vcpus,
    diskGiB: c.diskGiB,
    userData: c.userData,
    installGuestAgent: c.installGuestAgent,
    owner: {
      project: c.owner?.project ?? "unknown",
      stack: c.owner?.stack ?? "unknown",
      urn: c.owner?.urn ?? `kvm://${c.host}/${c.name}`,
    },
    specHash: specHashOf(c),
    proxyPort: c.proxyPort,
    tags: c.tags,
  };
  if (c.vendorData !== undefined) spec.vendorData = c.vendorData;
  if (c.macAddress !== undefined) spec.mac = c.macAddress;
  return spec;
}

/** What libvirt says now, as output properties. */
function liveOutputs(props: Props, status: VmStatus): Props {
  const proxyPort =
    typeof props.proxyPort === "number" ? props.proxyPort : (status.metadata?.proxyPort ?? 3128);
  const out: Props = {
    host: status.host,
    name: status.name,
    domainName: status.name,
    state: status.state,
    uuid: status.uuid,
    macAddress: status.mac,
    ipAddress: status.ipv4,
    proxyUrl: status.ipv4 === undefined ? undefined : `http://${status.ipv4}:${proxyPort}`,
  };
  if (status.domain !== undefined) {
    out.memoryMiB = status.domain.memoryMiB;
    out.vcpus = status.domain.vcpus;
  }
  if (status.metadata !== undefined) out.tags = status.metadata.tags;
  return defined(out);
}

/** Outputs after create/update: the checked inputs plus what the VM reports. */
export function outputsFrom(
  c: CheckedInputs,
  status: Pick<VmStatus, "host" | "name" | "state" | "uuid" | "mac" | "ipv4">,
) {
  const { macAddress: _requested, userData, vendorData, ...rest } = c;
  const out: KvmProxyOutputs = {
    ...rest,
    userDataSha256: seedDigest(userData),
    ...(vendorData !== undefined ? { vendorDataSha256: seedDigest(vendorData) } : {}),
    domainName: c.name,
    uuid: status.uuid ?? "",
    state: status.state,
  };
  const mac = status.mac ?? c.macAddress;
  if (mac !== undefined) out.macAddress = mac;
  if (status.ipv4 !== undefined) {
    out.ipAddress = status.ipv4;
    out.proxyUrl = `http://${status.ipv4}:${c.proxyPort}`;
  }
  return defined(out as unknown as Props);
}

/** Inputs reconstructed from a VM's metadata and domain XML, for KvmProxy.get (adoption by ID). */
function inputsFromMetadata(host: string, name: string, status: VmStatus): Props {
  const m = status.metadata as ProxyMetadata;
  const resolved: ResolvedImage = {
    url: m.image.url,
    format: m.image.format,
    firmware: status.domain?.firmware ?? "uefi",
  };
  if (m.image.sha256 !== undefined) resolved.sha256 = m.image.sha256;
  const nic = status.domain?.nic;
  return defined({
    host,
    name,
    image: m.image.ref,
    resolvedImage: resolved,
    memoryMiB: status.domain?.memoryMiB,
    vcpus: status.domain?.vcpus,
    diskGiB: m.diskGiB,
    proxyPort: m.proxyPort,
    tags: m.tags,
    network: nic?.kind === "network" ? nic.network : undefined,
    bridge: nic?.kind === "bridge" ? nic.bridge : undefined,
    owner: { project: m.owner.project, stack: m.owner.stack, urn: m.owner.urn, resource: name },
  });
}

// ---------------------------------------------------------------------------
// The module-level provider the serialized stub calls.
// ---------------------------------------------------------------------------

const runtime = new KvmProxyRuntime();

/** The shared runtime (tests reach in to inspect or reconfigure it). */
export function sharedRuntime(): KvmProxyRuntime {
  return runtime;
}

export function configure(req: ConfigureRequest): Promise<void> {
  return runtime.configure(req);
}
export function check(olds: Props, news: Props) {
  return runtime.check(olds, news);
}
export function diff(id: string, olds: Props, news: Props) {
  return runtime.diff(id, olds, news);
}
export function create(inputs: Props) {
  return runtime.create(inputs);
}
export function read(id: string, props: Props) {
  return runtime.read(id, props);
}
export function update(id: string, olds: Props, news: Props) {
  return runtime.update(id, olds, news);
}
function deleteProxy(id: string, props: Props): Promise<void> {
  return runtime.delete(id, props);
}

/** Re-exported so callers can recognise bad input. */
export { deleteProxy as delete, ValidationError };
