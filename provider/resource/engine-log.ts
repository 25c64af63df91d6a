/**
 * The provider's channel to the user's Pulumi display: status lines in the
 * resource's progress column and info/warning diagnostics attached to it.
 *
 * The dynamic provider process has no engine client of its own (`pulumi.log`
 * falls back to the console there, and the engine shows that output as
 * diagnostics on the Stack row). Pulumi providers report through the engine's
 * `Log` RPC instead: `LogRequest{severity, message, urn, ephemeral}` to the
 * engine address the engine passes as the process's last argument. An
 * ephemeral INFO message is a status: it shows in the row's info column while
 * the step runs and is left out of the final "Diagnostics:" section.
 *
 * - Statuses are throttled per URN (the non-interactive display prints one
 *   line per message): at most one per `minIntervalMs` unless forced; the
 *   latest one held back is sent when the interval has passed, so the last
 *   state is always shown.
 * - Every message goes through `redact`, then becomes one line of at most
 *   `maxLength` characters. Never pass a secret that `redact` cannot strip.
 * - Only URNs starting with `urn:pulumi:` are sent (an unknown URN would add
 *   a row); anything else goes without one (the Stack row).
 * - Nothing throws into the caller. A failed call is dropped, with at most
 *   one line on stderr per channel; after 3 failures in a row the
 *   engine is taken as gone and everything is dropped.
 * - Calls go out one at a time in the order made, so order holds per URN.
 *
 * The gRPC client is loaded lazily from the `@pulumi/pulumi` this package
 * resolves (its generated `proto/engine_grpc_pb` stubs and the `@grpc/grpc-js`
 * they use), so no gRPC dependency of our own is needed. Resource-layer I/O:
 * nothing pure imports this.
 */
import { createRequire } from "node:module";
import { messageOf } from "../errors";
import { later } from "../timers";

export interface EngineLog {
  /**
   * An ephemeral status line for the resource (progress column). Throttled
   * per URN: at most one every `minIntervalMs` unless `force`; the latest
   * pending one is sent when the interval passes.
   */
  status(urn: string | undefined, message: string, options?: { force?: boolean }): void;
  /** A diagnostic for the resource (or the stack when `urn` is not a Pulumi URN). */
  info(urn: string | undefined, message: string): void;
  /** A warning diagnostic, counted and shown as a warning by the CLI. */
  warn(urn: string | undefined, message: string): void;
  /** Sends the statuses held back now, then waits until everything queued is sent (or failed); never rejects. */
  flush(): Promise<void>;
  /** Stops accepting messages, drops held-back statuses, closes the connection once the queue is sent. */
  close(): void;
}

/** Time, injectable for tests. */
export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface EngineLogOptions {
  /** Applied to every message before anything else (default: identity). A throw drops the message. */
  redact?: (text: string) => string;
  /** Minimum milliseconds between two statuses of one URN (default 500). */
  minIntervalMs?: number;
  /** Longest message sent, in characters (default 300). */
  maxLength?: number;
  /** Deadline of one Log call in milliseconds (default 5000). */
  callTimeoutMs?: number;
  /** Where the fallback and the one failure line go (default: process.stderr). */
  stderr?: (line: string) => void;
  timers?: Timers;
}

const URN_PREFIX = "urn:pulumi:";
const MAX_QUEUE = 1_000;
const MAX_FAILURES = 3;

/**
 * The engine address of a provider process: its last argument when it looks
 * like `host:port` (the engine puts its flags before it).
 */
export function engineAddressFromArgv(argv: readonly string[] = process.argv): string | undefined {
  const last = argv[argv.length - 1];
  return last !== undefined && /^(?:[\w.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/.test(last) ? last : undefined;
}

/**
 * The channel of this provider process: to the engine whose address is the
 * last argument, or (no address: a test, a script) a fallback that writes
 * info and warnings to stderr and drops statuses.
 */
export function engineLogFromArgv(
  argv: readonly string[] = process.argv,
  options: EngineLogOptions = {},
): EngineLog {
  const address = engineAddressFromArgv(argv);
  return address === undefined ? new Channel(undefined, options) : engineLogTo(address, options);
}

/** A channel to the engine's Log RPC at `address` (`host:port`, plaintext gRPC). */
export function engineLogTo(address: string, options: EngineLogOptions = {}): EngineLog {
  return new Channel(address, options);
}

// ---------------------------------------------------------------------------

/** One LogRequest. */
interface Entry {
  severity: "info" | "warning";
  message: string;
  urn: string;
  ephemeral: boolean;
}

/** What we use of the generated stubs and @grpc/grpc-js (typed here: they are not our dependency). */
interface LogRequestMessage {
  setSeverity(v: number): void;
  setMessage(v: string): void;
  setUrn(v: string): void;
  setEphemeral(v: boolean): void;
}
interface EngineClient {
  log(req: LogRequestMessage, options: { deadline: number }, cb: (err: Error | null) => void): void;
  close(): void;
}
interface EngineModules {
  client: EngineClient;
  LogRequest: new () => LogRequestMessage;
  severity: { INFO: number; WARNING: number };
}

/** The engine stubs and gRPC of the `@pulumi/pulumi` this package resolves, and a client to `address`. */
function connect(address: string): EngineModules {
  const pulumiRequire = createRequire(require.resolve("@pulumi/pulumi"));
  // The same @grpc/grpc-js instance as the stubs: credentials are checked with instanceof.
  const grpc = pulumiRequire("@grpc/grpc-js") as { credentials: { createInsecure(): unknown } };
  const stubs = pulumiRequire("./proto/engine_grpc_pb") as {
    EngineClient: new (address: string, credentials: unknown) => EngineClient;
  };
  const pb = pulumiRequire("./proto/engine_pb") as {
    LogRequest: new () => LogRequestMessage;
    LogSeverity: { INFO: number; WARNING: number };
  };
  return {
    client: new stubs.EngineClient(address, grpc.credentials.createInsecure()),
    LogRequest: pb.LogRequest,
    severity: pb.LogSeverity,
  };
}

interface StatusState {
  lastSent: number;
  pending?: string;
  timer?: unknown;
}

const realTimers: Timers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = later(fn, ms);
    t.unref();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

class Channel implements EngineLog {
  private readonly redact: (text: string) => string;
  private readonly minIntervalMs: number;
  private readonly maxLength: number;
  private readonly callTimeoutMs: number;
  private readonly stderr: (line: string) => void;
  private readonly timers: Timers;

  /** undefined: not loaded yet; null: the fallback (stderr, no statuses). */
  private engine: EngineModules | null | undefined;
  private readonly statuses = new Map<string, StatusState>();
  private readonly queue: Entry[] = [];
  private sending = false;
  private idle: (() => void)[] = [];
  private failures = 0;
  private closed = false;
  private complained = false;

  constructor(
    private readonly address: string | undefined,
    options: EngineLogOptions,
  ) {
    this.redact = options.redact ?? ((t) => t);
    this.minIntervalMs = options.minIntervalMs ?? 500;
    this.maxLength = Math.max(options.maxLength ?? 300, 8);
    this.callTimeoutMs = options.callTimeoutMs ?? 5_000;
    this.stderr = options.stderr ?? ((line) => process.stderr.write(`${line}\n`));
    this.timers = options.timers ?? realTimers;
    if (address === undefined) this.engine = null;
  }

  status(urn: string | undefined, message: string, options?: { force?: boolean }): void {
    this.guard(() => {
      if (this.closed || this.engine === null) return;
      const text = this.clean(message);
      if (text === undefined) return;
      const key = urnOf(urn);
      const s = this.statuses.get(key) ?? { lastSent: Number.NEGATIVE_INFINITY };
      this.statuses.set(key, s);
      const now = this.timers.now();
      const wait = s.lastSent + this.minIntervalMs - now;
      if (options?.force === true || wait <= 0) {
        this.cancelTimer(s);
        delete s.pending;
        this.sendStatus(key, s, text);
        return;
      }
      s.pending = text;
      s.timer ??= this.timers.setTimeout(() => this.guard(() => this.sendPending(key)), wait);
    });
  }

  info(urn: string | undefined, message: string): void {
    this.diagnostic("info", urn, message);
  }

  warn(urn: string | undefined, message: string): void {
    this.diagnostic("warning", urn, message);
  }

  flush(): Promise<void> {
    try {
      for (const key of [...this.statuses.keys()]) this.sendPending(key);
      if (!this.sending && this.queue.length === 0) return Promise.resolve();
      return new Promise((resolve) => this.idle.push(resolve));
    } catch {
      return Promise.resolve();
    }
  }

  close(): void {
    this.guard(() => {
      this.closed = true;
      for (const s of this.statuses.values()) this.cancelTimer(s);
      this.statuses.clear();
      if (!this.sending) this.disconnect();
    });
  }

  private diagnostic(severity: Entry["severity"], urn: string | undefined, message: string): void {
    this.guard(() => {
      if (this.closed) return;
      const text = this.clean(message);
      if (text === undefined) return;
      const key = urnOf(urn);
      // A status held back for this URN was said before: it goes first.
      this.sendPending(key);
      this.enqueue({ severity, message: text, urn: key, ephemeral: false });
    });
  }

  private sendPending(key: string): void {
    const s = this.statuses.get(key);
    if (s === undefined) return;
    this.cancelTimer(s);
    const text = s.pending;
    delete s.pending;
    if (text !== undefined && !this.closed) this.sendStatus(key, s, text);
  }

  private sendStatus(key: string, s: StatusState, text: string): void {
    s.lastSent = this.timers.now();
    this.enqueue({ severity: "info", message: text, urn: key, ephemeral: true });
  }

  private cancelTimer(s: StatusState): void {
    if (s.timer === undefined) return;
    this.timers.clearTimeout(s.timer);
    delete s.timer;
  }

  /** The message as sent: redacted, one line, at most maxLength; undefined when it must not go out. */
  private clean(message: string): string | undefined {
    let text: string;
    try {
      text = this.redact(String(message));
    } catch {
      this.complain("a log message was dropped: redacting it failed");
      return undefined;
    }
    const line = oneLine(text, this.maxLength);
    return line === "" ? undefined : line;
  }

  private enqueue(entry: Entry): void {
    if (this.engine === null) {
      // The fallback: no engine, so statuses are dropped and diagnostics go to stderr.
      if (!entry.ephemeral) this.stderr(`${entry.severity}: ${entry.message}`);
      return;
    }
    if (this.queue.length >= MAX_QUEUE) {
      this.complain("the Pulumi engine is not keeping up; log messages were dropped");
      return;
    }
    this.queue.push(entry);
    if (!this.sending) void this.drain();
  }

  /** Sends the queue one call at a time (order), then wakes flush() and closes if asked. */
  private async drain(): Promise<void> {
    this.sending = true;
    try {
      for (let entry = this.queue.shift(); entry !== undefined; entry = this.queue.shift()) {
        try {
          await this.send(entry);
          this.failures = 0;
        } catch (err) {
          this.failures += 1;
          this.complain(`a log message to the Pulumi engine failed and was dropped: ${messageOf(err)}`);
          if (this.failures >= MAX_FAILURES) {
            // The engine is gone: stop trying (a hanging call would hold every later one).
            this.queue.length = 0;
            this.disconnect();
            this.engine = null;
            this.closed = true;
          }
        }
      }
    } finally {
      this.sending = false;
      if (this.closed) this.disconnect();
      const waiting = this.idle;
      this.idle = [];
      for (const resolve of waiting) resolve();
    }
  }

  private send(entry: Entry): Promise<void> {
    if (this.engine === undefined) {
      try {
        this.engine = connect(this.address as string);
      } catch (err) {
        this.engine = null;
        this.complain(`no client to the Pulumi engine (${messageOf(err)}); warnings go to stderr`);
        // This entry and the ones after it go to the fallback.
        for (const e of [entry, ...this.queue.splice(0)]) this.enqueue(e);
        return Promise.resolve();
      }
    }
    const engine = this.engine;
    if (engine === null) return Promise.resolve();
    const req = new engine.LogRequest();
    req.setSeverity(entry.severity === "warning" ? engine.severity.WARNING : engine.severity.INFO);
    req.setMessage(entry.message);
    if (entry.urn !== "") req.setUrn(entry.urn);
    req.setEphemeral(entry.ephemeral);
    return new Promise((resolve, reject) => {
      engine.client.log(req, { deadline: Date.now() + this.callTimeoutMs }, (err) =>
        err ? reject(err) : resolve(),
      );
    });
  }

  private disconnect(): void {
    const engine = this.engine;
    if (engine === undefined || engine === null) return;
    this.engine = null;
    try {
      engine.client.close();
    } catch {
      // closing is best effort
    }
  }

  /** At most one line on stderr per channel (the runtime has one); redacted like a message. */
  private complain(line: string): void {
    if (this.complained) return;
    this.complained = true;
    try {
      this.stderr(`warning: pulumi-kvm-proxy: ${oneLine(this.redact(line), 300)}`);
    } catch {
      // nowhere left to report to
    }
  }

  private guard(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.complain(`engine log: ${messageOf(err)}`);
    }
  }
}

/** The URN to send: a Pulumi URN, else none ("" = the Stack row). */
function urnOf(urn: string | undefined): string {
  return typeof urn === "string" && urn.startsWith(URN_PREFIX) ? urn : "";
}

/**
 * One line of at most `max` characters: escape sequences and control
 * characters become spaces, Pulumi's colour markup (`<{%…%}>`) is defused.
 */
export function oneLine(text: string, max: number): string {
  const flat = text
    // biome-ignore lint/suspicious/noControlCharactersInRegex: removing terminal escapes is the point
    .replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, " ")
    // biome-ignore lint/suspicious/noControlCharactersInRegex: removing control characters is the point
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, " ")
    .replace(/<\{%/g, "<{ %")
    .replace(/ {2,}/g, " ")
    .trim();
  if (flat.length <= max) return flat;
  const chars = [...flat];
  return chars.length <= max ? flat : `${chars.slice(0, max - 1).join("")}…`;
}
