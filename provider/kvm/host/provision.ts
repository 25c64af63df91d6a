/**
 * Provisioning: one VM from nothing to "running, with an address, ready",
 * within one deadline, with the rollback decision in one place.
 *
 * create (one lookup; converges onto a domain of the same owner and spec) →
 * the status read from create's own XML → the IP wait → the caller's
 * readiness gate (the resource's health check). When any of it fails, what
 * this provision made is deleted again, but only a domain whose metadata
 * names this owner (two creates of one name at once must not roll back each
 * other's VM), and volumes tagged with this owner (names.ts): a domain of
 * another owner, found at the lookup or winning the define, stays with the
 * volumes it uses. The caller learns what happened from the error:
 * {@link ProvisionError} says whether the rollback ran or failed.
 *
 * Provisions of one host and name run one after the other inside the
 * process: both would otherwise pass the lookup before either defined the
 * domain and share the volumes named after it, so the loser's rollback
 * could delete the winner's disks. Serialized, the second is refused at its
 * lookup before it makes anything.
 */
import { messageOf, ProviderError, TimeoutError } from "../../errors";
import { every, later } from "../../timers";
import type { ParsedDomain } from "../domain/domain-xml";
import { formatProviderId } from "../domain/provider-id";
import type { ProxyState } from "../domain/states";
import { report } from "../progress";
import type { AddressPools, Allocation } from "./address-pools";
import { KvmStateError, type WaitForIpOptions } from "./addresses";
import type { ConsoleTail } from "./console";
import type { CreateOptions, CreateResult, CreateSpec } from "./create";
import { FirstBootError } from "./first-boot";
import type { Placed, Placer } from "./placer";
import type { DeleteOptions, DeleteResult, VmStatus } from "./vm";

/** Options of {@link provision}. */
export interface ProvisionOptions
  extends Pick<CreateOptions, "onStep" | "now" | "adopt" | "onProgress">,
    Pick<WaitForIpOptions, "family" | "staticAddresses"> {
  /** The whole provision's deadline, ms: create, the IP wait and the readiness gate (default 10 min). */
  deadlineMs?: number;
  /** What the deadline is called in its timeout message (the resource says `timeouts.create`). */
  deadlineName?: string;
  /**
   * The spec for the host placement chose (with `pool`): what depends on
   * the host, such as a NIC taking that host's address pool. Throws when
   * the host cannot take it; the placement is then let go. Default: the
   * spec as given, on that host.
   */
  forHost?: (host: string) => CreateSpec;
  /**
   * Ends the provision early as the deadline would (the provider's Cancel):
   * the wait in progress fails with the signal's reason and what was made
   * is rolled back.
   */
  signal?: AbortSignal;
  /** Wait for the guest's address once it runs (default true; of `family`, default IPv4). */
  waitForIp?: boolean;
  /** Pause between IP polls, ms (default 1 s). */
  pollMs?: number;
  /**
   * Pause between the state reads that watch the VM while `ready` runs, ms
   * (default {@link STATE_WATCH_MS}): one that stopped fails the provision
   * at once instead of at the deadline.
   */
  stateWatchMs?: number;
  /**
   * Runs once the VM runs (with its address when waited for); a rejection
   * fails the provision. Gets the status, the milliseconds left before the
   * deadline, and the deadline's signal.
   */
  ready?: (
    status: VmStatus,
    remainingMs: number,
    signal: AbortSignal,
    deadlineName?: string,
  ) => Promise<void>;
  /**
   * Lines from inside the guest that say why a provision failed once the VM
   * ran (its cloud-init output through the agent, else what its serial
   * console printed meanwhile: `console`, read from the start until the
   * provision ends), asked before the rollback deletes it and added to the
   * error. Failures of its own are ignored. Given, the console is read.
   */
  explain?: (status: VmStatus, console: string | undefined) => Promise<string[] | undefined>;
  /**
   * Delete what this provision made when it fails (default true). false
   * leaves everything as it is: for restarting a VM the caller records.
   */
  rollback?: boolean;
  /**
   * Once the VM runs (its status read), a failure leaves it as it is for
   * inspection instead of deleting it: the {@link ProvisionError} says
   * `kept`. Before that (placement, upload, define, start: nothing of the
   * guest to look at yet), and on a cancel, what was made is rolled back
   * as without it.
   */
  keepOnFailure?: boolean;
  /**
   * Host keys to place the VM on (placer.ts): the one with the most room is
   * chosen (and reserved) before anything is made, and `spec.host` is
   * ignored. The status names the host chosen.
   */
  pool?: readonly string[];
}

/**
 * A provision failed after it may have made something. `rolledBack` true:
 * what it made was deleted again (or, of another owner, left alone, as
 * `rollback` says); false: the VM was kept for inspection (`kept`,
 * {@link ProvisionOptions.keepOnFailure}) or the rollback failed too
 * (`rollbackError`), so the VM may still exist and the caller must keep it
 * on record.
 */
export class ProvisionError extends ProviderError {
  readonly providerId: string;
  readonly rolledBack: boolean;
  readonly rollback: DeleteResult | undefined;
  readonly rollbackError: unknown;
  /** The VM was left on its host for inspection (keepOnFailure). */
  readonly kept: boolean;
  /** The VM's last known status, when it got that far. */
  readonly status: VmStatus | undefined;

  constructor(
    providerId: string,
    err: unknown,
    outcome: { rollback: DeleteResult } | { rollbackError: unknown } | { kept: true },
    status: VmStatus | undefined,
  ) {
    const rolledBack = "rollback" in outcome;
    const kept = "kept" in outcome;
    const message = kept
      ? `create of ${providerId} failed and the VM was kept for inspection: ${messageOf(err)}`
      : rolledBack
        ? `create of ${providerId} failed and was rolled back (${
            outcome.rollback.noop !== "not-ours"
              ? "the VM and its volumes were deleted"
              : outcome.rollback.foreignOwner === "unmanaged"
                ? "a domain of that name not managed by pulumi-kvm-proxy was left alone"
                : `a domain of that name that belongs to ${outcome.rollback.foreignOwner} was left alone`
          }): ${messageOf(err)}`
        : `create of ${providerId} failed (${messageOf(err)}) and deleting it again failed too (${messageOf("rollbackError" in outcome ? outcome.rollbackError : undefined)})`;
    // Rolled back or kept, the create's own kind decides whether a rerun may help; left by a failed
    // rollback, it always may.
    const ownKind = err instanceof ProviderError ? err.kind : "permanent";
    super(rolledBack || kept ? ownKind : "transient", message, {
      cause: err,
    });
    this.providerId = providerId;
    this.rolledBack = rolledBack;
    this.rollback = rolledBack ? outcome.rollback : undefined;
    this.rollbackError = "rollbackError" in outcome ? outcome.rollbackError : undefined;
    this.kept = kept;
    this.status = status;
  }
}

/** `err` with the guest's own lines added (FirstBootError carries its own already). */
async function explained(
  err: unknown,
  status: VmStatus | undefined,
  options: ProvisionOptions,
  consoleText: string | undefined,
): Promise<unknown> {
  const active = status?.state === "running" || status?.state === "provisioning";
  if (options.explain === undefined || !active || err instanceof FirstBootError) return err;
  const lines = await options.explain(status, consoleText).catch(() => undefined);
  if (lines === undefined || lines.length === 0) return err;
  const kind = err instanceof ProviderError ? err.kind : "permanent";
  return new ProviderError(kind, [messageOf(err), ...lines].join("\n"), { cause: err });
}

/** What a provision needs of the operations (KvmOperations is one). */
export interface ProvisionHost {
  readonly placer: Pick<Placer, "place" | "release">;
  readonly addresses: Pick<AddressPools, "allocate" | "release">;
  /** Provisions in flight in this process, by host and name. */
  readonly provisioning: Map<string, Promise<unknown>>;
  now(): number;
  createSlot(hostKey: string, onWait?: (ahead: number) => void): Promise<() => void>;
  create(spec: CreateSpec, options?: CreateOptions): Promise<CreateResult>;
  readStatus(
    hostKey: string,
    name: string,
    known: { uuid?: string; domain?: ParsedDomain },
  ): Promise<VmStatus>;
  waitForIpFrom(from: VmStatus, options?: WaitForIpOptions): Promise<VmStatus>;
  runState(hostKey: string, name: string, uuid: string): Promise<ProxyState>;
  delete(hostKey: string, name: string, options?: DeleteOptions): Promise<DeleteResult>;
  openConsole(hostKey: string, name: string, uuid?: string): Promise<ConsoleTail | undefined>;
}

/** See the module header. */
export async function provision(
  ops: ProvisionHost,
  given: CreateSpec,
  options: ProvisionOptions,
): Promise<VmStatus> {
  let spec = given;
  let placed: Placed | undefined;
  if (options.pool !== undefined) {
    report(options.onProgress, { kind: "placing", pool: [...options.pool] });
    placed = await ops.placer.place(options.pool, given.name, given.owner.urn, {
      memoryMiB: given.memoryMiB,
      vcpus: given.vcpus,
    });
    spec = { ...given, host: placed.host };
  }
  // Pool NICs take their addresses on the host chosen, unique over the hosts the VM could have gone to.
  let allocation: Allocation;
  try {
    if (placed !== undefined && options.forHost !== undefined)
      spec = { ...options.forHost(placed.host), host: placed.host };
    allocation = await ops.addresses.allocate(
      spec.name,
      spec.host,
      options.pool ?? [spec.host],
      spec.nics,
      spec.avoidAddresses,
    );
  } catch (err) {
    if (placed !== undefined) await ops.placer.release(placed).catch(() => undefined);
    throw err;
  }
  const pooled = allocation.reservations.volumes.length > 0;
  if (pooled) spec = { ...spec, nics: allocation.nics };
  const key = `${spec.host}\0${spec.name}`;
  const previous = ops.provisioning.get(key);
  if (previous !== undefined) report(options.onProgress, { kind: "queued" });
  const mine = (previous ?? Promise.resolve())
    .catch(() => undefined)
    .then(() => provisionNow(ops, spec, options, placed, pooled ? allocation : undefined));
  ops.provisioning.set(key, mine);
  try {
    return await mine;
  } finally {
    if (ops.provisioning.get(key) === mine) ops.provisioning.delete(key);
  }
}

/** Default pause between the state reads that watch a VM through its readiness gate, ms. */
export const STATE_WATCH_MS = 5_000;

/**
 * Watches a VM through the readiness gate, whose waits (first boot, health
 * checks) cannot tell a slow guest from one that is gone: every `everyMs`
 * one state read (virDomainGetState), and a VM that stopped, crashed or was
 * removed aborts `deadline` with a KvmStateError. A failed read is left to
 * the gate's own waits. Returns what ends the watch.
 */
function watchState(
  ops: Pick<ProvisionHost, "runState">,
  vm: VmStatus,
  everyMs: number,
  deadline: AbortController,
): () => void {
  const uuid = vm.uuid;
  if (uuid === undefined) return () => undefined;
  let reading = false;
  const timer = every(() => {
    if (reading || deadline.signal.aborted) return;
    reading = true;
    ops
      .runState(vm.host, vm.name, uuid)
      .then(
        (state) => {
          if (state !== "running" && state !== "provisioning") {
            deadline.abort(new KvmStateError(vm.host, vm.name, state, "the guest to become ready"));
          }
        },
        () => undefined,
      )
      .finally(() => {
        reading = false;
      });
  }, everyMs);
  return () => clearInterval(timer);
}

async function provisionNow(
  ops: ProvisionHost,
  spec: CreateSpec,
  options: ProvisionOptions,
  placed: Placed | undefined,
  allocation: Allocation | undefined,
): Promise<VmStatus> {
  const id = formatProviderId(spec.host, spec.name);
  const deadlineMs = options.deadlineMs ?? 600_000;
  const started = ops.now();
  const left = () => Math.max(0, deadlineMs - (ops.now() - started));
  const deadline = new AbortController();
  const timer = later(
    () => deadline.abort(new TimeoutError(`the create of ${id} to finish`, deadlineMs, options.deadlineName)),
    deadlineMs,
  );
  const { signal } = deadline;
  const cancel = () => deadline.abort(options.signal?.reason);
  if (options.signal?.aborted) cancel();
  else options.signal?.addEventListener("abort", cancel, { once: true });
  let status: VmStatus | undefined;
  let consoleTail: ConsoleTail | undefined;
  try {
    // At most the host's concurrentCreates creates in flight on it, whatever Pulumi's --parallel.
    const slot = await ops.createSlot(spec.host, (ahead) =>
      report(options.onProgress, { kind: "waiting-host", host: spec.host, ahead }),
    );
    let made: CreateResult;
    try {
      made = await ops.create(spec, {
        signal,
        ...(options.adopt !== undefined ? { adopt: options.adopt } : {}),
        ...(options.onStep !== undefined ? { onStep: options.onStep } : {}),
        ...(options.now !== undefined ? { now: options.now } : {}),
        ...(options.onProgress !== undefined ? { onProgress: options.onProgress } : {}),
      });
    } finally {
      slot();
    }
    // What the guest prints, for a failure's message (only when someone will read it).
    if (options.explain !== undefined && (options.waitForIp !== false || options.ready !== undefined)) {
      consoleTail = await ops.openConsole(spec.host, spec.name, made.uuid).catch(() => undefined);
    }
    // Defined, the domain counts on its host: its reservation goes (best effort; a rollback removes it too).
    if (placed !== undefined) await ops.placer.release(placed).catch(() => undefined);
    // Defined, its metadata records the pool's addresses: their reservations go too.
    if (allocation !== undefined) await ops.addresses.release(allocation).catch(() => undefined);
    // create's UUID and parsed XML save the lookup and the XML read.
    status = await ops.readStatus(spec.host, spec.name, { uuid: made.uuid, domain: made.domain });
    if (options.waitForIp !== false) {
      status = await ops.waitForIpFrom(status, {
        deadlineMs: left(),
        ...(options.deadlineName !== undefined ? { deadlineName: options.deadlineName } : {}),
        signal,
        ...(options.pollMs !== undefined ? { pollMs: options.pollMs } : {}),
        ...(options.onProgress !== undefined ? { onProgress: options.onProgress } : {}),
        ...(options.family !== undefined ? { family: options.family } : {}),
        ...(options.staticAddresses !== undefined ? { staticAddresses: options.staticAddresses } : {}),
      });
    }
    if (allocation !== undefined) status = { ...status, createdNics: allocation.nics };
    if (options.ready !== undefined) {
      const since = ops.now();
      const tick = () => report(options.onProgress, { kind: "ready", elapsedMs: ops.now() - since });
      tick();
      const ticker = every(tick, options.pollMs ?? 1_000);
      const unwatch = watchState(ops, status, options.stateWatchMs ?? STATE_WATCH_MS, deadline);
      try {
        await options.ready(status, left(), signal, options.deadlineName);
      } finally {
        clearInterval(ticker);
        unwatch();
      }
    }
    return status;
  } catch (caught) {
    const err = await explained(caught, status, options, consoleTail?.text());
    if (options.rollback === false) throw err;
    // Kept: the VM ran, so its console and log say something; a cancel is no failure to look at.
    if (options.keepOnFailure === true && status !== undefined && options.signal?.aborted !== true) {
      throw new ProvisionError(id, err, { kept: true }, status);
    }
    if (allocation !== undefined) await ops.addresses.release(allocation).catch(() => undefined);
    // Only what is ours: a domain of another owner (taken before us, or winning the define) stays with
    // its volumes; this create's own volumes carry its owner's tag and go (names.ts).
    let rollback: DeleteResult;
    try {
      rollback = await ops.delete(spec.host, spec.name, { owner: spec.owner.urn });
    } catch (rollbackError) {
      throw new ProvisionError(id, err, { rollbackError }, status);
    }
    throw new ProvisionError(id, err, { rollback }, status);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", cancel);
    await consoleTail?.stop();
  }
}
