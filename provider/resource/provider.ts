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
import { CancelledError, durationText, messageOf, ProviderError } from "../errors";
import { formatProviderId, parseProviderId } from "../kvm/domain/provider-id";
import { HostPool } from "../kvm/host/hosts";
import { ImageBaker } from "../kvm/host/image-bake";
import { ImageCache } from "../kvm/host/image-cache";
import { type CreateSpec, KvmOperations, type VmStatus } from "../kvm/host/operations";
import { ProvisionError } from "../kvm/host/provision";
import { namesHostPool, resolveHostPools } from "../kvm/network/host-pools";
import type { NicSpec } from "../kvm/network/nic";
import type { Progress, ProgressListener } from "../kvm/progress";
import { Failures, ValidationError } from "../kvm/validation";
import { proxyAddressOf, waitOptionsOf } from "./address-outputs";
import { type CheckedInputs, DEFAULTS, ownerUrnOf, placementOf } from "./args";
import { backendIdentity } from "./backend";
import { checkInputs } from "./check";
import { checkHostEntry, hostKeysOf, isHostEntry } from "./check-placement";
import { decodeChecked } from "./checked-inputs";
import { bandwidthChanges, collisions, diffProxy, keptReplaceNote, same } from "./diff";
import { type EngineLog, engineLogFromArgv } from "./engine-log";
import { failedTooLong, replaceAfterOf, withFailingSince } from "./failing-health";
import { isSealed } from "./host-connection";
import { HostsInFull, secretStrings } from "./hosts-in-full";
import {
  createSpec,
  inputsFromMetadata,
  liveOutputs,
  outputsFrom,
  withBakeUserData,
  withHostPools,
  withPoolAddresses,
} from "./mapping";
import type { KeptAfterFailure, ProxyHealth } from "./outputs";
import { probeInputsOf } from "./probe-target";
import { progressText } from "./progress-text";
import { Readiness } from "./readiness";
import { decodeState, type RecordedState } from "./recorded-state";
import { blockedNow, nameOfUrn, retiredNow } from "./retirement";
import { ageSeconds, type Member, RotationRounds, type RotationSettings } from "./rotation";
import { emptyStackConfig, readStackConfig, type StackConfig } from "./stack-config";

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

/** What a create's or update's deadline is called in its timeout message (default `timeouts.create`). */
export interface DeadlineOptions {
  deadlineName?: string;
}

/** One configured provider: stack config plus the operations over its hosts. */
export class KvmProxyRuntime {
  config: StackConfig = emptyStackConfig();
  private readonly images = new ImageCache();
  private readonly baker = new ImageBaker();
  private operations: KvmOperations | undefined;
  /**
   * Milliseconds between IP and health polls. 1 s keeps the delay between the
   * guest getting its address (or squid answering) and create noticing under
   * the 2 s goal; an IP poll is mostly 2 libvirt calls (see waitForIp), a
   * health poll one HTTP request (or SOCKS greeting) through the proxy.
   */
  pollMs = 1_000;
  /** Which proxies due for rotation are replaced in this up (rotation.ts). */
  readonly rotations = new RotationRounds();
  /** Deadline of the one probe a refresh or update makes, ms. */
  probeTimeoutMs = 5_000;
  /** Where progress and warnings go: the engine's Log RPC (see engine-log.ts); replaceable by tests. */
  log: EngineLog | undefined;
  /** Secret strings of the configuration, masked in anything logged. */
  private secrets: string[] = [];
  /** Hosts given in full: who gives which, and what the outputs keep of them (hosts-in-full.ts). */
  readonly hostsInFull = new HostsInFull(() => this.config);

  /** A warning on resource `urn` (the stack without one) through the engine's log. */
  warn(urn: string | undefined, text: string): void {
    this.engineLog().warn(urn, text);
  }

  /** Text written for both doors with its config keys named as this door reads them (the plugin: `kvmproxy:`). */
  wording: (text: string) => string = (text) => text;

  private engineLog(): EngineLog {
    this.log ??= engineLogFromArgv(process.argv, {
      redact: (t) => this.wording(this.redact(t)),
      minIntervalMs: 1_000,
    });
    return this.log;
  }

  /** `text` with every configured secret (keys, passphrases) masked. */
  redact(text: string): string {
    let out = text;
    for (const s of this.secrets) out = out.split(s).join("***");
    return out;
  }

  /** The Pulumi backend's identity, recorded in each VM's owner (read once: the process serves one deployment). */
  private backendId: string | undefined | null = null;
  private backend(): string | undefined {
    if (this.backendId === null) this.backendId = backendIdentity();
    return this.backendId;
  }

  /** A progress listener that shows each report as the resource's status line in Pulumi's display. */
  private progressTo(urn: string | undefined): ProgressListener {
    const log = this.engineLog();
    // Phase changes, and an upload's last bytes, are always shown; polls and upload ticks are throttled.
    const force = (p: Progress) =>
      p.kind === "step" ||
      p.kind === "queued" ||
      (p.kind === "image-upload" && p.totalBytes !== undefined && p.bytes >= p.totalBytes);
    return (p) => log.status(urn, progressText(p), { force: force(p) });
  }

  configure(req: ConfigureRequest): Promise<void> {
    const previous = this.operations;
    this.config = readStackConfig((k) => req.config.get(k));
    this.secrets = secretsOf(this.config, req.config.get("kvm:sshPrivateKey"));
    this.operations = undefined;
    return Promise.allSettled([previous?.hosts.closeAll()]).then(() => undefined);
  }

  /** Aborted by {@link cancel}: creates and updates in flight end and roll back. */
  private readonly cancelled = new AbortController();

  /**
   * The engine's Cancel: every create or update in flight fails at its
   * next wait with a CancelledError and rolls back what it made (the
   * connections stay open for that); later ones fail before they start.
   */
  cancel(): void {
    this.cancelled.abort(new CancelledError());
  }

  /** Closes every libvirt connection (tests; the provider process just exits). */
  async close(): Promise<void> {
    await this.operations?.hosts.closeAll();
    this.operations = undefined;
  }

  /** The operations over every configured host: one pool, one connection per host. */
  ops(): KvmOperations {
    this.operations ??= new KvmOperations(new HostPool(this.config.hosts), {
      images: this.images,
      baker: this.baker,
    });
    return this.operations;
  }

  /**
   * Makes a host given in full (a `host` input, or the `hostConnection` a
   * state records) known to the operations, by the rules of check; its key
   * material joins the secrets every message is cleaned of. Anything else
   * (a key of kvm:hosts, a pool) is left to the configuration.
   */
  private registerHost(given: unknown): void {
    const v = this.hostsInFull.opened(given);
    const pool =
      typeof v === "object" && v !== null && !isHostEntry(v) ? (v as { pool?: unknown }).pool : undefined;
    if (Array.isArray(pool)) {
      for (const item of pool) this.registerHost(item);
      return;
    }
    if (!isHostEntry(v)) return;
    const f = new Failures();
    const host = checkHostEntry(f, v, this.config);
    // Not known yet (a preview): nothing to reach.
    if (host === undefined && f.empty) return;
    if (host === undefined) {
      // Reasons quote no key material (host-config.ts), so they can be shown.
      throw new ProviderError("permanent", f.list.map((x) => `${x.property}: ${x.reason}`).join("; "));
    }
    // A refresh registers the same host for every proxy on it: its secrets are added once.
    if (!this.ops().hosts.register(host)) return;
    this.secrets = [...new Set([...this.secrets, ...secretStrings([host])])].sort(
      (a, b) => b.length - a.length,
    );
  }

  /** What create waits for and refresh probes (readiness.ts), over these operations. */
  private readiness(): Readiness {
    return new Readiness(this.ops(), {
      pollMs: this.pollMs,
      probeTimeoutMs: this.probeTimeoutMs,
      progress: (urn) => this.progressTo(urn),
      warn: (urn, text) => this.engineLog().warn(urn, text),
    });
  }

  async check(
    olds: Props,
    news: Props,
  ): Promise<{ inputs: Props; failures: { property: string; reason: string }[] }> {
    const r = checkInputs(olds ?? {}, news, {
      config: this.config,
      randomBytes: (n) => randomBytes(n),
      claimAddress: (host, address, owner) => this.claim(host, address, owner),
      claimHost: (key, connection, owner) => this.hostsInFull.claim(key, connection, owner),
    });
    if (r.failures.length === 0) r.failures.push(...this.hostsInFull.stateKeyFailures(r.inputs.host));
    const { warnings, ...outcome } = r;
    // Once per text: a fleet on one network hears each once.
    const fresh = (warnings ?? []).filter((w) => !this.warned.has(w));
    if (fresh.length > 0) {
      const urn = (r.inputs.owner as { urn?: string } | undefined)?.urn;
      for (const w of fresh) {
        this.warned.add(w);
        this.engineLog().warn(urn, w);
      }
      await this.engineLog()
        .flush()
        .catch(() => undefined);
    }
    return outcome;
  }

  /** Warnings given in this process. */
  private readonly warned = new Set<string>();

  /** Static addresses the proxies of this program give out, per host (check-nics.ts). */
  private readonly addressClaims = new Map<string, string>();
  private claim(host: string, address: string, owner: string): string | undefined {
    const key = `${host}\0${address}`;
    const first = this.addressClaims.get(key);
    if (first !== undefined && first !== owner) return first;
    this.addressClaims.set(key, owner);
    return undefined;
  }

  async diff(id: string, oldsIn: Props, news: Props) {
    const olds = decodeState(this.hostsInFull.openedOlds(oldsIn));
    const d = diffProxy(olds, this.onVmHost(id, olds, news));
    const urn = (news.owner as { urn?: string } | undefined)?.urn;
    const kept = keptReplaceNote(olds);
    if (kept !== undefined) {
      this.engineLog().info(urn, kept);
      await this.engineLog().flush();
      return { changes: d.changes, replaces: d.replaces, deleteBeforeReplace: d.deleteBeforeReplace };
    }
    // Failing too long (keyed by the output that records it: no input changed), retired, or holding a
    // blocked address: replaced (created first, then the old VM deleted), whatever its rotation's turn.
    const now = Date.now();
    const failing = failedTooLong(olds, replaceAfterOf(news.healthCheck), now);
    const demanded =
      failing !== undefined
        ? { key: "health", note: failing }
        : urn !== undefined
          ? retiredNow(olds, nameOfUrn(urn), this.config.retire, this.config.blocked, now)
          : undefined;
    if (d.replaces.length === 0 && demanded !== undefined) {
      this.engineLog().info(urn, demanded.note);
      const kept = collisions(olds, news);
      if (kept.length > 0) this.engineLog().info(urn, `replace (delete first: ${kept.join(", ")})`);
      await this.engineLog().flush();
      return { changes: true, replaces: [demanded.key], deleteBeforeReplace: kept.length > 0 };
    }
    const rotation = news.rotation as RotationSettings | undefined;
    if (d.replaces.length === 0 && typeof rotation === "object" && rotation !== null) {
      // Due for rotation and this member's turn in this up: replaced (created first, then its predecessor deleted).
      if (
        await this.rotations.turn(rotation, { id, createdAt: olds.createdAt }, () =>
          this.membersOf(rotation, olds, news),
        )
      ) {
        const age = ageSeconds(olds.createdAt) ?? 0;
        this.engineLog().info(
          urn,
          `rotating: ${durationText(age * 1000)} old, over its maxAge of ${durationText(rotation.maxAge * 1000)} (at most ${rotation.batch} per up)`,
        );
        const kept = collisions(olds, news);
        if (kept.length > 0) this.engineLog().info(urn, `replace (delete first: ${kept.join(", ")})`);
        await this.engineLog().flush();
        return { changes: true, replaces: ["rotation"], deleteBeforeReplace: kept.length > 0 };
      }
    }
    if (d.deleteBeforeReplace) {
      this.engineLog().info(urn, `replace (delete first: ${collisions(olds, news).join(", ")})`);
      await this.engineLog().flush();
    }
    return { changes: d.changes, replaces: d.replaces, deleteBeforeReplace: d.deleteBeforeReplace };
  }

  /**
   * `news` with its NICs naming a host's address pool resolved on the host
   * the VM lives on (its ID's), so that they compare with the state's as an
   * inline pool's. As they are when that host or its pool is not known:
   * they then differ, and the replacement's create says why.
   */
  private onVmHost(id: string, olds: RecordedState, news: Props): Props {
    const nics = news.nics;
    if (!Array.isArray(nics) || !(nics as NicSpec[]).some(namesHostPool)) return news;
    if (!isSealed(olds.hostConnection)) this.registerHost(olds.hostConnection);
    this.registerHost(news.host);
    const { host } = parseProviderId(id);
    if (!this.ops().hosts.has(host)) return news;
    const resolved = resolveHostPools(nics as NicSpec[], this.ops().hosts.config(host));
    return resolved === undefined ? news : { ...news, nics: resolved };
  }

  /** The members of a proxy's rotation group on its hosts (its own and its pool's). */
  private membersOf(rotation: RotationSettings, olds: RecordedState, news: Props): Promise<Member[]> {
    const owner = news.owner as { project?: unknown; stack?: unknown } | undefined;
    // A record whose seal does not open is left to the new host (diff's `opened`).
    if (!isSealed(olds.hostConnection)) this.registerHost(olds.hostConnection);
    this.registerHost(news.host);
    const keys = [...new Set([olds.host, ...hostKeysOf(news.host)])].filter(
      (k): k is string => typeof k === "string" && this.ops().hosts.has(k),
    );
    if (
      rotation.group === undefined ||
      typeof owner?.project !== "string" ||
      typeof owner.stack !== "string"
    ) {
      return Promise.resolve([]);
    }
    return this.ops().groupMembers(keys, {
      project: owner.project,
      stack: owner.stack,
      group: rotation.group,
    });
  }

  /** What the KVM core makes of checked inputs; a pool never hands out an address blocked now (kvm:blockedAddresses). */
  private specOf(c: CheckedInputs, host?: string): CreateSpec {
    const avoid = blockedNow(this.config.blocked, Date.now());
    return {
      ...withBakeUserData(createSpec(c, this.backend(), host), c, this.config.images),
      ...(avoid.length > 0 ? { avoidAddresses: avoid } : {}),
    };
  }

  /**
   * Creates one proxy: the KVM core provisions it (created, running, with
   * its address, and healthy within `timeouts.create`, or rolled back); this
   * maps the inputs onto its spec and the outcome onto outputs or errors.
   */
  async create(inputs: Props, options: DeadlineOptions = {}): Promise<{ id: string; outs: Props }> {
    const checked = decodeChecked(inputs);
    const { pool } = placementOf(checked.host);
    this.registerHost(checked.host);
    // A NIC naming a host's address pool takes the pool of the host the VM goes to: placement's, with a pool.
    const onHost = (key: string) =>
      checked.nics?.some(namesHostPool) === true
        ? withHostPools(checked, this.ops().hosts.config(key))
        : checked;
    const placed = placementOf(checked.host);
    let c = placed.pool === undefined ? onHost(placed.key) : checked;
    const spec = this.specOf(c);
    const forHost = (key: string) => {
      c = onHost(key);
      return this.specOf(c, key);
    };
    let health: ProxyHealth | undefined;
    try {
      const status = await this.ops().provision(spec, {
        ...(pool !== undefined ? { pool, forHost } : {}),
        onProgress: this.progressTo(c.owner?.urn),
        deadlineMs: c.timeouts.create * 1000,
        deadlineName: options.deadlineName ?? "timeouts.create",
        signal: this.cancelled.signal,
        waitForIp: c.waitForIp !== false,
        ...waitOptionsOf(c),
        ...(c.keepOnFailure === true ? { keepOnFailure: true } : {}),
        pollMs: this.pollMs,
        ready: async (status: VmStatus, remainingMs: number, signal: AbortSignal, deadlineName?: string) => {
          health = await this.readiness().gate(
            withPoolAddresses(c, status.createdNics),
            status,
            remainingMs,
            signal,
            deadlineName,
          );
        },
        // The guest's cloud-init log through its agent; without an agent, what its serial console printed.
        explain: (status: VmStatus, consoleText: string | undefined) =>
          this.ops().guestOutput(status.host, status.name, this.secrets, consoleText),
      });
      // The state records a pool NIC's address as the VM has it (diff compares pool NICs without it).
      const made = withPoolAddresses(c, status.createdNics);
      const outs = outputsFrom(made, status, health);
      // Once it is healthy (or not checked), which address targets see: a warning at worst, never a rollback.
      if (health?.ok !== false) {
        const egress = await this.readiness().egressChecked(
          made,
          status,
          proxyAddressOf(made.nics, status),
          c.owner?.urn,
          3,
        );
        if (egress !== undefined) outs.egressAddress = egress;
      }
      return { id: formatProviderId(status.host, c.name), outs: this.hostsInFull.sealed(outs) };
    } catch (err) {
      if (!(err instanceof ProvisionError) || err.rolledBack) throw err;
      if (err.kept) throw this.keptError(err, c, inputs.__provider);
      const id = err.providerId;
      const props: Props = {
        ...this.hostsInFull.sealed(
          outputsFrom(
            withPoolAddresses(c, err.status?.createdNics),
            err.status ?? { host: parseProviderId(id).host, name: c.name, state: "failed" },
          ),
        ),
        __provider: inputs.__provider,
      };
      const cause = messageOf(err.cause);
      throw new PartialCreateError(
        `${err.message}; it is recorded in the state: run \`pulumi up\` or \`pulumi destroy\` to retry`,
        id,
        props,
        // The engine shows only these lines, so each says what it is about.
        [
          `create of ${id} failed: ${cause}`,
          `deleting it again failed too: ${messageOf(err.rollbackError)}; ` +
            "the VM is recorded in the state: run `pulumi up` or `pulumi destroy` to finish",
        ],
      );
    } finally {
      await this.engineLog().flush();
    }
  }

  /**
   * The error of a create whose VM `keepOnFailure` kept: a partial failure,
   * so the engine records it, marked `keptAfterFailure` (diff replaces it at
   * the next `up`), its health failed; the message and reasons say how to
   * look at it and what removes it.
   */
  private keptError(err: ProvisionError, c: CheckedInputs, provider: unknown): PartialCreateError {
    const id = err.providerId;
    const { host, name } = parseProviderId(id);
    const status = err.status ?? { host, name, state: "failed" as const };
    const cause = messageOf(err.cause);
    const reason = this.redact(cause.split("\n", 1)[0] ?? "");
    const failedAt = new Date().toISOString();
    const outs = outputsFrom(withPoolAddresses(c, status.createdNics), status, {
      ok: false,
      checkedAt: failedAt,
      reason,
    });
    const mark: KeptAfterFailure = { failedAt, reason };
    const props: Props = {
      ...this.hostsInFull.sealed({ ...outs, keptAfterFailure: mark }),
      __provider: provider,
    };
    const how = this.ops().inspectCommands(host, name);
    const look = `its log: \`${how.log}\`; its console: \`${how.console}\``;
    const cleanUp = "the next `pulumi up` replaces it (deleting it first), `pulumi destroy` deletes it";
    return new PartialCreateError(
      `${err.message}\nthe VM ${name} on host ${host} was kept for inspection (keepOnFailure): ${look}; ${cleanUp}`,
      id,
      props,
      // The engine shows only these lines, so each says what it is about.
      [
        `create of ${id} failed: ${cause}`,
        `the VM ${name} on host ${host} was kept for inspection (keepOnFailure): ${look}`,
        `${cleanUp}: it is recorded in the state, marked keptAfterFailure`,
      ],
    );
  }

  async read(id: string, recorded: Props): Promise<{ id?: string; props?: Props; inputs?: Props }> {
    const props = decodeState(recorded);
    const { host, name } = parseProviderId(id);
    this.registerHost(props.hostConnection);
    // The recorded UUID saves a lookup per VM on refresh (KvmOperations.get).
    const status = await this.ops().get(host, name, props.uuid ? { uuid: props.uuid } : {});
    if (status.state === "absent") return {};
    const adopting = props.name === undefined;
    if (adopting) {
      if (status.metadata === undefined) {
        throw new ProviderError(
          "permanent",
          `domain ${name} on host ${host} is not managed by pulumi-kvm-proxy`,
        );
      }
      const inputs = inputsFromMetadata(host, name, status);
      // The spec hash stands for the seed digests the metadata does not hold (diff.ts adoptedDiff).
      const adoptedSpecHash = status.metadata.specHash;
      return { id, props: { ...inputs, ...liveOutputs(inputs, status), adoptedSpecHash }, inputs };
    }
    const next: Props = { ...props, ...liveOutputs(props, status) };
    const ip = proxyAddressOf(props.nics, status);
    if (ip === undefined) {
      delete next.ipAddress;
      delete next.ipv6Address;
      delete next.proxyUrl;
      delete next.socksUrl;
    }
    // A VM that runs but whose proxy fails is degraded.
    const { health, egressAddress } = await this.readiness().probeProxy(
      probeInputsOf(props),
      { host, name, state: status.state },
      ip,
      ownerUrnOf(props),
      1,
    );
    if (health !== undefined) {
      next.health = withFailingSince(props.health, health);
      if (!health.ok) next.state = "degraded";
    } else delete next.health;
    if (egressAddress !== undefined) next.egressAddress = egressAddress;
    else delete next.egressAddress;
    await this.engineLog()
      .flush()
      .catch(() => undefined);
    return { id, props: this.hostsInFull.sealed(next) };
  }

  async update(
    id: string,
    recorded: Props,
    news: Props,
    options: DeadlineOptions = {},
  ): Promise<{ outs: Props }> {
    const olds = decodeState(recorded);
    // A pool NIC keeps the address its VM was made with (the state's).
    const c = withPoolAddresses(decodeChecked(this.onVmHost(id, olds, news)), olds.nics);
    const { host, name } = parseProviderId(id);
    // How the host is reached now (a host given in full may have a new address or key).
    this.registerHost(c.host);
    const o = this.ops();
    // The recorded UUID saves the lookup by name (a domain recreated by hand is still found by name).
    let status = await o.get(host, name, olds.uuid ? { uuid: olds.uuid } : {});
    // A record left by a create whose rollback failed (no UUID: the domain was
    // never seen) is not a VM that went away: finish the create it started.
    const unfinished = olds.uuid === "" && status.state === "absent";
    if (status.state === "absent" && !unfinished) {
      throw new ProviderError(
        "permanent",
        `domain ${name} is gone from host ${host}; run \`pulumi refresh\``,
      );
    }
    const deadline = {
      deadlineMs: c.timeouts.create * 1000,
      deadlineName: options.deadlineName ?? "timeouts.create",
      pollMs: this.pollMs,
      signal: this.cancelled.signal,
    };
    if (unfinished || status.state === "stopped" || status.state === "failed") {
      // Restart (or finish) the VM this resource records, whatever URN its
      // metadata holds (a stack rename changes it); never roll it back.
      status = await o.provision(this.specOf(c, host), {
        ...deadline,
        onProgress: this.progressTo(c.owner?.urn),
        adopt: unfinished ? "own" : "any",
        waitForIp: c.waitForIp !== false,
        ...waitOptionsOf(c),
        rollback: false,
        // Started again (or finished): up waits until it answers, as a create does.
        ready: async (st: VmStatus, remainingMs: number, signal: AbortSignal, deadlineName?: string) => {
          await this.readiness().gate(c, st, remainingMs, signal, deadlineName, unfinished);
        },
      });
    }
    // Rate limits change in place, on the running domain and its definition.
    for (const [mac, bandwidth] of bandwidthChanges(olds.nics, c.nics)) {
      await o.setBandwidth(host, name, mac, bandwidth);
    }
    if (!same(olds.tags ?? {}, c.tags) && status.metadata !== undefined) {
      await o.setTags(host, name, c.tags, status.uuid === undefined ? {} : { uuid: status.uuid });
      status = await o.get(host, name, status.uuid === undefined ? {} : { uuid: status.uuid });
    }
    if (c.waitForIp !== false && proxyAddressOf(c.nics, status) === undefined) {
      status = await o.waitForIp(host, name, {
        ...waitOptionsOf(c),
        deadlineMs: deadline.deadlineMs,
        deadlineName: deadline.deadlineName,
        signal: deadline.signal,
        pollMs: this.pollMs,
        onProgress: this.progressTo(c.owner?.urn),
      });
    }
    // A degraded proxy (or any) is probed again: the outputs say what it is now.
    const ip = proxyAddressOf(c.nics, status);
    const { health, egressAddress } = await this.readiness().probeProxy(
      c,
      { host, name, state: status.state },
      ip,
      c.owner?.urn,
      3,
    );
    if (health !== undefined && !health.ok) {
      const why = this.readiness().explained(c, host, ip, health.reason ?? "");
      this.engineLog().warn(c.owner?.urn, `the proxy is degraded: ${why}`);
    }
    const outs = outputsFrom(c, status, health && withFailingSince(olds.health, health));
    if (egressAddress !== undefined) outs.egressAddress = egressAddress;
    await this.engineLog().flush();
    return { outs: this.hostsInFull.sealed(outs) };
  }

  async delete(id: string, recorded: Props): Promise<void> {
    const props = decodeState(recorded);
    const { host, name } = parseProviderId(id);
    // The connection the state records: the resource that made the host may already say otherwise.
    this.registerHost(props.hostConnection);
    const deadlineMs = (props.timeouts?.delete ?? DEFAULTS.deleteSeconds) * 1000;
    const urn = ownerUrnOf(props);
    const log = this.engineLog();
    log.status(urn, "deleting the domain and its volumes", { force: true });
    try {
      // The operation retries transient failures until timeouts.delete.
      const r = await this.ops().delete(host, name, {
        deadlineMs,
        ...(urn !== undefined ? { volumeOwner: urn } : {}),
      });
      if (r.noop === "host-not-configured") {
        log.warn(
          urn,
          `host ${JSON.stringify(host)} is not in kvm:hosts; ${id} is dropped from the state without touching libvirt`,
        );
      }
    } finally {
      await log.flush();
    }
  }
}

/** The secret strings of the configuration: private keys (and each of their lines) and passphrases. */
function secretsOf(config: StackConfig, sharedKey: unknown): string[] {
  return secretStrings(Object.values(config.hosts), sharedKey);
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
