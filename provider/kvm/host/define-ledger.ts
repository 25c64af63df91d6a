/**
 * Defines in doubt. libvirtd drops nothing it has received: a
 * virDomainDefineXML whose reply missed its deadline may still land later,
 * after a rollback that looked too early and found nothing (the leak the
 * reliability cuts found). The ledger remembers such defines per host and
 * name, and anything that would conclude "no domain" (a create's lookup, a
 * delete) first waits for the domain to appear or for a grace period to pass.
 */
import { durationText, ProviderError, TimeoutError } from "../../errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import { lookupDomain } from "./domains";
import { classifyError, type RetryEnv, sleep } from "./retry";

/**
 * A define ran past its deadline and had not landed within the grace: the
 * domain may still appear. Transient, so the caller keeps the VM on record
 * (a failed rollback records it in the state) and the next run deletes it.
 */
export class DefineInDoubtError extends ProviderError {
  constructor(host: string, name: string, graceMs: number) {
    super(
      "transient",
      `the define of domain ${name} on host ${host} timed out and had not landed ${durationText(graceMs)} later; ` +
        "libvirtd may still define it, so it is not known to be gone",
    );
  }
}

/** Options of {@link DefineLedger}. */
export interface DefineLedgerOptions {
  /** How long a define that ran past its RPC deadline may still land, counted from the deadline (default 60 s). */
  graceMs?: number;
  /** Pause between lookups while waiting for such a define (default 1 s). */
  pollMs?: number;
  env?: RetryEnv;
}

/** Defines whose reply never came within the deadline, by host and name, with the time the deadline passed. */
export class DefineLedger {
  readonly graceMs: number;
  private readonly pollMs: number;
  private readonly env: RetryEnv;
  private readonly inDoubt = new Map<string, number>();

  constructor(options: DefineLedgerOptions = {}) {
    this.graceMs = options.graceMs ?? 60_000;
    this.pollMs = options.pollMs ?? 1_000;
    this.env = options.env ?? {};
  }

  /** virDomainDefineXML, remembering a define whose deadline passed: its outcome is unknown. */
  async define(lv: Libvirt, hostKey: string, name: string, xml: string): Promise<Domain> {
    const key = doubtKey(hostKey, name);
    try {
      const dom = await lv.domainDefineXml(xml);
      this.inDoubt.delete(key);
      return dom;
    } catch (err) {
      // Only a deadline leaves the call running in libvirtd; an error reply means it did not define.
      if (err instanceof TimeoutError) this.inDoubt.set(key, this.now());
      throw err;
    }
  }

  /**
   * When a define of `name` is in doubt, polls for the domain until it
   * appears (returned) or the grace since its deadline passes ("expired";
   * the doubt is dropped either way). Undefined when nothing was in doubt.
   */
  async settle(lv: Libvirt, hostKey: string, name: string): Promise<Domain | "expired" | undefined> {
    const key = doubtKey(hostKey, name);
    const since = this.inDoubt.get(key);
    if (since === undefined) return undefined;
    const wait = this.env.sleep ?? sleep;
    for (;;) {
      try {
        const dom = await lookupDomain(lv, name);
        if (dom !== undefined) {
          this.inDoubt.delete(key);
          return dom;
        }
      } catch (err) {
        // A lookup that cannot reach libvirtd proves nothing: keep waiting within the grace.
        if (classifyError(err) !== "transient") throw err;
      }
      if (this.now() - since >= this.graceMs) {
        this.inDoubt.delete(key);
        return "expired";
      }
      await wait(this.pollMs);
    }
  }

  private now(): number {
    return (this.env.now ?? (() => performance.now()))();
  }
}

function doubtKey(hostKey: string, name: string): string {
  return `${hostKey}\0${name}`;
}
