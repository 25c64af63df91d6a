/**
 * What a create waits for before it returns, and what refresh and update
 * probe: the first boot finished (cloud-init's result, through the guest
 * agent), then the health check (health-check.ts) from here, and for
 * proxies with auth and a URL the request inside the guest. The resource
 * layer's one owner of "ready", and of the egress check (egress.ts), which
 * goes the same ways.
 */
import { ProviderError, TimeoutError } from "../errors";
import type { KvmOperations, VmStatus } from "../kvm/host/operations";
import { hostPort } from "../kvm/network/ip";
import type { ProgressListener } from "../kvm/progress";
import { tlsPublic } from "../kvm/tls/proxy-tls";
import { ECHO_BODY_LIMIT, egressExpectationOf, egressMismatch, readEchoReply } from "../probes/egress";
import { withProbeHint } from "../probes/failure-hints";
import {
  fetchThrough,
  GATE_PROBE_MS,
  judgeSocks,
  judgeStatus,
  type ProbeResult,
  type ProbeTarget,
  probeOnce,
  socksGreeting,
  waitHealthy,
} from "../probes/health-check";
import { sleep } from "../timers";
import { proxyAddressOf } from "./address-outputs";
import type { CheckedInputs } from "./args";
import type { ProxyHealth } from "./outputs";
import {
  egressProbeOf,
  guestProbeOf,
  guestProbePort,
  type ProbeInputs,
  probeTargetOf,
  probeVia,
} from "./probe-target";

/** What the egress check read: the address the echo saw, or why there is none. */
export type EgressReading = { ok: true; address: string } | { ok: false; reason: string };

/** What readiness needs of the runtime around it. */
export interface ReadinessOptions {
  /** Pause between polls, ms. */
  pollMs: number;
  /** Deadline of the one probe a refresh or update makes, ms. */
  probeTimeoutMs: number;
  /** Where a resource's progress goes. */
  progress: (urn: string | undefined) => ProgressListener;
  /** A warning on a resource. */
  warn: (urn: string | undefined, text: string) => void;
}

/** See the module header. */
export class Readiness {
  constructor(
    private readonly ops: KvmOperations,
    private readonly o: ReadinessOptions,
  ) {}

  /**
   * Provision's readiness gate: cloud-init has finished the first boot (read
   * through the guest agent, which the vendor script installs; without it
   * nothing can be read, and the health check alone decides), then the
   * health check passes. Says what it saw. `firstBoot` false (a VM started
   * again): the health check alone.
   */
  async gate(
    c: CheckedInputs,
    status: VmStatus,
    remainingMs: number,
    signal: AbortSignal,
    deadlineName = "timeouts.create",
    firstBoot = true,
  ): Promise<ProxyHealth | undefined> {
    const since = performance.now();
    // A VM started again has finished its first boot before: its result file is an old boot's.
    if (firstBoot && c.installGuestAgent && c.waitForIp !== false) {
      await this.ops.waitFirstBoot(status.host, status.name, {
        signal,
        pollMs: Math.max(this.o.pollMs, 1_000),
        onProgress: this.o.progress(c.owner?.urn),
      });
    }
    if (c.healthCheck === false) return undefined;
    return this.healthGate(c, status, remainingMs - (performance.now() - since), signal, deadlineName);
  }

  /** The health check: waits until it passes (or throws), and says what it saw. */
  private async healthGate(
    c: CheckedInputs,
    status: VmStatus,
    remainingMs: number,
    signal: AbortSignal,
    deadlineName: string,
  ): Promise<ProxyHealth> {
    const ip = proxyAddressOf(c.nics, status);
    const target = ip === undefined ? undefined : probeTargetOf(c, ip, this.connector(c, status.host, ip));
    if (target === undefined) throw new ProviderError("permanent", "no IP to health-check");
    const since = performance.now();
    let r: ProbeResult = await waitHealthy(target, remainingMs, {
      pollMs: this.o.pollMs,
      signal,
      deadlineName,
    });
    const inGuest = guestProbeOf(c);
    if (inGuest !== undefined) {
      r = await this.waitGuestProbe(
        status,
        { ...target, guestPort: guestProbePort(c) },
        inGuest,
        remainingMs - (performance.now() - since),
        signal,
        deadlineName,
      );
    }
    const socksPort = c.proxy?.socks?.port;
    if (socksPort !== undefined) {
      const left = remainingMs - (performance.now() - since);
      const socks = await this.waitSocks(c, status, ip as string, socksPort, left, signal, deadlineName);
      if (socks.ok && socks.note !== undefined) this.o.warn(c.owner?.urn, socks.note);
    }
    if (r.ok && r.note !== undefined) this.o.warn(c.owner?.urn, r.note);
    return {
      ok: true,
      checkedAt: new Date().toISOString(),
      ...(r.ok && r.note !== undefined ? { reason: r.note } : {}),
    };
  }

  /** One SOCKS greeting: inside the guest when `inGuest` (its agent), else from here (or through the host). */
  private async socksOnce(
    c: ProbeInputs,
    vm: Pick<VmStatus, "host" | "name">,
    ip: string,
    port: number,
    inGuest: boolean,
    signal?: AbortSignal,
  ): Promise<ProbeResult> {
    const auth = c.proxy?.auth !== undefined;
    if (inGuest) {
      const a = await this.ops.socksInGuest(vm.host, vm.name, port, signal);
      if (a === undefined)
        return {
          ok: false,
          reason: "the guest agent does not answer (the SOCKS check runs inside the guest)",
        };
      return judgeSocks(a, { auth, where: `port ${port}, inside the guest`, closedIsRefusal: false });
    }
    const connect = this.connector(c, vm.host, ip, port);
    const a = await socksGreeting(
      { ip, port, ...(connect !== undefined ? { connect } : {}) },
      this.o.probeTimeoutMs,
    );
    return judgeSocks(a, { auth, where: hostPort(ip, port), closedIsRefusal: true });
  }

  /**
   * The SOCKS listener at create: its greeting inside the guest when the
   * agent was installed (its loopback is always a client), else from here,
   * until it answers as set up or the time is up.
   */
  private async waitSocks(
    c: CheckedInputs,
    status: Pick<VmStatus, "host" | "name">,
    ip: string,
    port: number,
    remainingMs: number,
    signal: AbortSignal,
    deadlineName: string,
  ): Promise<ProbeResult> {
    const until = performance.now() + remainingMs;
    for (;;) {
      const r = await this.socksOnce(c, status, ip, port, c.installGuestAgent, signal);
      if (r.ok) return r;
      if (performance.now() + this.o.pollMs > until) {
        throw new TimeoutError(
          `a healthy proxy (its SOCKS5 listener); last failure: ${r.reason}`,
          remainingMs,
          deadlineName,
        );
      }
      await sleep(this.o.pollMs);
    }
  }

  /**
   * How a probe of the VM at `ip` on `host` connects when it goes through
   * the host (probe-target.ts probeVia): an SSH channel from there to the
   * proxy port. Undefined: directly from here (also for a host that is this
   * machine, a unix socket).
   */
  private connector(c: ProbeInputs, host: string, ip: string, port = c.proxyPort): ProbeTarget["connect"] {
    const config = this.ops.hosts.config(host);
    if (config.endpoint.kind !== "ssh" || probeVia(c, config) !== "host") return undefined;
    return () => this.ops.hosts.tunnel(host, ip, port) ?? Promise.reject(new Error("no tunnel"));
  }

  /** One probe of `url` inside the guest (proxies with auth): judged as a reply from here. */
  private async guestProbeOnce(
    status: Pick<VmStatus, "host" | "name">,
    target: { ip: string; proxyPort: number; guestPort: number; squidName: string },
    probe: { url: string; expectStatus?: number },
    signal?: AbortSignal,
  ): Promise<ProbeResult> {
    const reply = await this.ops.probeInGuest(
      status.host,
      status.name,
      target.guestPort,
      probe.url,
      { deadlineMs: GATE_PROBE_MS, bodyBytes: 0 },
      signal,
    );
    if (reply === undefined)
      return { ok: false, reason: "the guest agent does not answer (the in-guest probe needs it)" };
    if ("error" in reply)
      return { ok: false, reason: `${probe.url} through the proxy, inside the guest: ${reply.error}` };
    return judgeStatus(reply.status, { via: reply.via, "x-cache": reply.xCache }, { ...target, ...probe });
  }

  /** Repeats {@link guestProbeOnce} until it passes or the time is up. */
  private async waitGuestProbe(
    status: Pick<VmStatus, "host" | "name">,
    target: { ip: string; proxyPort: number; guestPort: number; squidName: string },
    probe: { url: string; expectStatus?: number },
    remainingMs: number,
    signal: AbortSignal,
    deadlineName: string,
  ): Promise<ProbeResult> {
    const until = performance.now() + remainingMs;
    for (;;) {
      const r = await this.guestProbeOnce(status, target, probe, signal);
      if (r.ok) return r;
      if (performance.now() + this.o.pollMs > until) {
        throw new TimeoutError(
          `a healthy proxy (${probe.url} through the proxy, inside the guest); last failure: ${withProbeHint(
            r.reason,
            { check: "healthCheck", viaHost: false, inGuest: true },
          )}`,
          remainingMs,
          deadlineName,
        );
      }
      await sleep(this.o.pollMs);
    }
  }

  /**
   * The egress check of a healthy proxy ({@link egressNow}): the
   * address its echo saw, or undefined; a failure, or an address other than
   * the one expected (egress.ts), is a warning on the resource.
   */
  async egressChecked(
    c: ProbeInputs,
    vm: { host: string; name: string },
    ip: string | undefined,
    urn: string | undefined,
    attempts: number,
  ): Promise<string | undefined> {
    const r = await this.egressNow(c, vm, ip, attempts);
    if (r === undefined) return undefined;
    if (!r.ok) {
      this.o.warn(urn, `egress check failed: ${r.reason}`);
      return undefined;
    }
    const url = c.egressCheck?.url ?? "";
    const mismatch = egressMismatch(r.address, egressExpectationOf(c), url);
    if (mismatch !== undefined) this.o.warn(urn, mismatch);
    return r.address;
  }

  /**
   * The proxy of a running VM probed now, as refresh and update both do:
   * its health (one request, no libvirt call), then, once healthy, the
   * egress check ({@link egressChecked}). Nothing for a VM that does not run.
   */
  async probeProxy(
    c: ProbeInputs,
    vm: { host: string; name: string; state: string },
    ip: string | undefined,
    urn: string | undefined,
    egressAttempts: number,
  ): Promise<{ health?: ProxyHealth; egressAddress?: string }> {
    if (vm.state !== "running") return {};
    const health = await this.probeNow(c, vm.host, ip);
    if (health?.ok === false) return { health };
    const egressAddress = await this.egressChecked(c, vm, ip, urn, egressAttempts);
    return {
      ...(health !== undefined ? { health } : {}),
      ...(egressAddress !== undefined ? { egressAddress } : {}),
    };
  }

  /**
   * The egress check once the proxy is healthy (create, update, refresh):
   * `egressCheck.url` fetched through the proxy, from here (or through the
   * host) without auth, inside the guest with auth, as the health check
   * goes. Up to `attempts` tries, `pollMs` apart; undefined without an
   * egress check or an address.
   */
  async egressNow(
    c: ProbeInputs,
    vm: Pick<VmStatus, "host" | "name">,
    ip: string | undefined,
    attempts = 1,
  ): Promise<EgressReading | undefined> {
    const probe = egressProbeOf(c);
    if (probe === undefined || ip === undefined) return undefined;
    let last: EgressReading = { ok: false, reason: "no probe ran" };
    for (let i = 0; i < attempts; i++) {
      if (i > 0) await sleep(this.o.pollMs);
      last = await this.egressOnce(c, vm, ip, probe);
      if (last.ok) return last;
    }
    return {
      ok: false,
      reason: withProbeHint(last.reason, {
        check: "egressCheck",
        viaHost: !probe.inGuest && this.connector(c, vm.host, ip) !== undefined,
        inGuest: probe.inGuest,
      }),
    };
  }

  private async egressOnce(
    c: ProbeInputs,
    vm: Pick<VmStatus, "host" | "name">,
    ip: string,
    probe: { url: string; inGuest: boolean },
  ): Promise<EgressReading> {
    let status: number;
    let body: string;
    const bounds = { deadlineMs: this.o.probeTimeoutMs, bodyBytes: ECHO_BODY_LIMIT };
    if (probe.inGuest) {
      const reply = await this.ops.probeInGuest(vm.host, vm.name, guestProbePort(c), probe.url, bounds);
      if (reply === undefined)
        return {
          ok: false,
          reason:
            "the guest agent does not answer (the egress check of a proxy with auth runs inside the guest)",
        };
      if ("error" in reply)
        return { ok: false, reason: `${probe.url} through the proxy, inside the guest: ${reply.error}` };
      ({ status, body } = reply);
    } else {
      const connect = this.connector(c, vm.host, ip);
      const target: ProbeTarget = {
        ip,
        proxyPort: c.proxyPort,
        squidName: "",
        ...(connect !== undefined ? { connect } : {}),
        ...(c.proxy?.tls !== undefined ? { tls: tlsPublic(c.proxy.tls) } : {}),
      };
      const r = await fetchThrough(target, probe.url, bounds);
      if (!r.ok) return { ok: false, reason: r.reason };
      ({ status, body } = r);
    }
    if (status < 200 || status > 299) {
      return { ok: false, reason: `${probe.url} through the proxy returned HTTP ${status}` };
    }
    const read = readEchoReply(body);
    return "address" in read
      ? { ok: true, address: read.address }
      : { ok: false, reason: `${probe.url}: ${read.problem}` };
  }

  /**
   * `reason`, a failure of {@link probeNow} on the proxy at `ip` on `host`,
   * with its likely causes and the field to change (failure-hints.ts): for
   * a warning; the outputs keep the reason alone.
   */
  explained(c: ProbeInputs, host: string, ip: string | undefined, reason: string): string {
    const viaHost = ip !== undefined && this.connector(c, host, ip) !== undefined;
    return withProbeHint(reason, { check: "healthCheck", viaHost });
  }

  /**
   * One probe with a short deadline (refresh, update): the proxy's health
   * now, no libvirt call (through the host: one SSH channel).
   */
  async probeNow(c: ProbeInputs, host: string, ip: string | undefined): Promise<ProxyHealth | undefined> {
    const target = ip === undefined ? undefined : probeTargetOf(c, ip, this.connector(c, host, ip));
    if (target === undefined) return undefined;
    let r = await probeOnce(target, this.o.probeTimeoutMs);
    const socksPort = c.proxy?.socks?.port;
    if (r.ok && socksPort !== undefined && ip !== undefined) {
      const socks = await this.socksOnce(c, { host, name: "" }, ip, socksPort, false);
      if (!socks.ok) r = socks;
    }
    const checkedAt = new Date().toISOString();
    if (r.ok) return { ok: true, checkedAt, ...(r.note !== undefined ? { reason: r.note } : {}) };
    return { ok: false, checkedAt, reason: r.reason };
  }
}
