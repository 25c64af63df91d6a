import { describe, expect, it } from "vitest";
import { ProviderError, TimeoutError } from "../../../../provider/errors";
import {
  backoffDelay,
  classifyError,
  KvmOperationError,
  toOperationError,
  withRetry,
} from "../../../../provider/kvm/host/retry";
import { LibvirtError } from "../../../../provider/libvirt/errors";

function libvirtError(code: number, message: string, call = "virDomainCreate", domain = 10): LibvirtError {
  return new LibvirtError(
    { code, domain, message, level: 2, str1: null, str2: null, str3: null, int1: -1, int2: -1 },
    call,
  );
}

/** A fake clock: sleeping advances it, nothing waits. */
function fakeClock() {
  let t = 0;
  const sleeps: number[] = [];
  return {
    now: () => t,
    sleep: async (ms: number) => {
      sleeps.push(ms);
      t += ms;
    },
    sleeps,
  };
}

const ctx = { operation: "create", host: "edge", domain: "web-1" };

describe("classifyError", () => {
  it.each([
    ["a transient ProviderError", new ProviderError("transient", "x"), "transient"],
    ["a permanent ProviderError", new ProviderError("permanent", "x"), "permanent"],
    ["an unknown error", new Error("boom"), "permanent"],
    ["a non-error", "boom", "permanent"],
    ["NO_DOMAIN", libvirtError(42, "Domain not found"), "permanent"],
    ["AGENT_UNRESPONSIVE", libvirtError(86, "agent not connected"), "transient"],
    [
      "a pool refresh during an upload",
      libvirtError(1, "internal error: pool 'kvmp' has asynchronous jobs running.", "virStoragePoolRefresh"),
      "transient",
    ],
    ["another INTERNAL_ERROR", libvirtError(1, "internal error: qemu unexpectedly closed"), "permanent"],
    [
      "a volume still in use",
      libvirtError(55, "volume 'x' is still in use.", "virStorageVolDelete"),
      "transient",
    ],
    [
      "domain is not running",
      libvirtError(55, "Requested operation is not valid: domain is not running"),
      "permanent",
    ],
    ["a TimeoutError", new TimeoutError("reply", 10), "transient"],
  ])("%s is %s", (_what, err, kind) => {
    expect(classifyError(err)).toBe(kind);
  });
});

describe("backoffDelay", () => {
  it("grows exponentially up to the cap, scaled by jitter", () => {
    const policy = { initialDelayMs: 100, factor: 2, maxDelayMs: 1000 };
    const top = () => 0.999999;
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffDelay(a, policy, top))).toEqual([
      99, 199, 399, 799, 999, 999,
    ]);
    expect(backoffDelay(3, policy, () => 0)).toBe(0);
    expect(backoffDelay(3, policy, () => 0.5)).toBe(200);
  });
});

describe("withRetry", () => {
  it("retries transient failures and returns the first success", async () => {
    const clock = fakeClock();
    let calls = 0;
    const retried: number[] = [];
    const result = await withRetry(
      async (attempt) => {
        calls += 1;
        if (attempt < 3) throw new ProviderError("transient", `flaky ${attempt}`);
        return "ok";
      },
      { ...clock, random: () => 0.5, onRetry: (_e, attempt) => retried.push(attempt) },
    );
    expect(result).toBe("ok");
    expect(calls).toBe(3);
    expect(retried).toEqual([1, 2]);
    expect(clock.sleeps).toEqual([125, 250]);
  });

  it("does not retry a permanent failure, and wraps it with host, domain, call and code", async () => {
    const clock = fakeClock();
    let calls = 0;
    const err = await withRetry(
      async () => {
        calls += 1;
        throw libvirtError(27, "XML error: bad domain", "virDomainDefineXML");
      },
      { ...clock, context: ctx },
    ).catch((e: unknown) => e);
    expect(calls).toBe(1);
    expect(clock.sleeps).toEqual([]);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect(err).toMatchObject({
      kind: "permanent",
      operation: "create",
      host: "edge",
      domain: "web-1",
      call: "virDomainDefineXML",
      code: 27,
      codeName: "VIR_ERR_XML_ERROR",
      attempts: 1,
    });
    expect((err as Error).message).toBe(
      "create of domain web-1 on host edge failed: virDomainDefineXML failed: XML error: bad domain (VIR_ERR_XML_ERROR, code 27)",
    );
    expect((err as Error).cause).toBeInstanceOf(LibvirtError);
  });

  it("gives up after maxAttempts and keeps the failure transient", async () => {
    const clock = fakeClock();
    let calls = 0;
    const err = await withRetry(
      async () => {
        calls += 1;
        throw libvirtError(86, "Guest agent is not responding", "virDomainInterfaceAddresses");
      },
      { ...clock, maxAttempts: 4, random: () => 0, context: ctx },
    ).catch((e: unknown) => e);
    expect(calls).toBe(4);
    expect(err).toMatchObject({
      kind: "transient",
      attempts: 4,
      code: 86,
      call: "virDomainInterfaceAddresses",
    });
    expect((err as Error).message).toContain("failed after 4 attempts");
  });

  it("stops before a wait that would pass the deadline", async () => {
    const clock = fakeClock();
    let calls = 0;
    const err = await withRetry(
      async () => {
        calls += 1;
        throw new ProviderError("transient", "busy");
      },
      // Delays with jitter at the top: 999, 1999, 3999 ... the deadline of 3500 allows two waits.
      { ...clock, random: () => 0.999999, initialDelayMs: 1000, deadlineMs: 3500, maxAttempts: 100 },
    ).catch((e: unknown) => e);
    expect(calls).toBe(3);
    expect(clock.sleeps).toEqual([999, 1999]);
    expect(err).toMatchObject({ kind: "transient", message: "busy" });
  });

  it("stops when the signal aborts", async () => {
    const ac = new AbortController();
    let calls = 0;
    const err = await withRetry(
      async () => {
        calls += 1;
        ac.abort(new Error("cancelled"));
        throw new ProviderError("transient", "busy");
      },
      { signal: ac.signal, sleep: async () => {} },
    ).catch((e: unknown) => e);
    expect(calls).toBe(1);
    expect((err as Error).message).toBe("busy");
  });

  it("surfaces the abort's reason as the operation's error when the signal aborts during the wait between attempts", async () => {
    const ac = new AbortController();
    const reason = new ProviderError("permanent", "cancelled by the caller");
    let calls = 0;
    const err = await withRetry(
      async () => {
        calls += 1;
        throw new ProviderError("transient", "busy");
      },
      {
        context: ctx,
        signal: ac.signal,
        sleep: (_ms, signal) => {
          ac.abort(reason);
          return Promise.reject(signal?.reason);
        },
      },
    ).catch((e: unknown) => e);
    expect(calls).toBe(1);
    expect(err).toBeInstanceOf(KvmOperationError);
    expect(err).toMatchObject({ kind: "permanent" });
    expect((err as Error).message).toContain("cancelled by the caller");
  });
});

describe("toOperationError", () => {
  it("keeps an inner operation error and a TimeoutError as they are", () => {
    const inner = new KvmOperationError(ctx, new ProviderError("permanent", "x"));
    expect(toOperationError({ operation: "delete", host: "h" }, inner)).toBe(inner);
    const t = new TimeoutError("an IPv4 address", 10);
    expect(toOperationError(ctx, t)).toBe(t);
  });

  it("describes failures without a libvirt code by their message", () => {
    const e = toOperationError(
      { operation: "list", host: "edge" },
      new ProviderError("transient", "socket gone"),
    );
    expect(e.message).toBe("list on host edge failed: socket gone");
    expect(e.kind).toBe("transient");
  });
});
