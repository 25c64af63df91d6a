/**
 * A guest's first boot seen through its agent: wait until cloud-init has
 * finished (its result file is there), fail naming the modules that failed,
 * and read the guest's own last lines for an error message.
 *
 * Without an agent that answers there is nothing to read: the wait goes on
 * until the caller's deadline (the agent comes up late on stock images: the
 * provider's vendor script installs it in cloud-init's final stage, before
 * the result is written), and the lines are simply absent.
 */
import { ProviderError } from "../../errors";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import {
  failureText,
  lastLines,
  OUTPUT_LOG,
  parseResult,
  RESULT_FILE,
  redactGuestLines,
  runningStage,
  STATUS_FILE,
} from "../guest/cloud-init-result";
import { type ProgressListener, report } from "../progress";
import { agentAnswers, readGuestFile } from "./guest-agent";
import { sleep } from "./retry";

/** How much of the output log an error shows. */
const TAIL_BYTES = 16 * 1024;
const TAIL_LINES = 30;

/** cloud-init finished the first boot with errors: permanent (the same seed fails the same way). */
export class FirstBootError extends ProviderError {
  readonly failedModules: string[];
  constructor(message: string, failedModules: string[]) {
    super("permanent", message);
    this.name = "FirstBootError";
    this.failedModules = failedModules;
  }
}

/** Options of {@link waitFirstBoot}. */
export interface FirstBootOptions {
  signal: AbortSignal;
  pollMs?: number;
  onProgress?: ProgressListener;
  now?: () => number;
}

/**
 * Waits until cloud-init's final stage has finished in the guest; throws a
 * {@link FirstBootError} when it finished with errors, or the signal's
 * reason when the deadline comes first.
 */
export async function waitFirstBoot(lv: Libvirt, dom: Domain, o: FirstBootOptions): Promise<void> {
  const now = o.now ?? (() => performance.now());
  const since = now();
  let answered = false;
  for (;;) {
    o.signal.throwIfAborted();
    const result = await readGuestFile(lv, dom, RESULT_FILE, 256 * 1024);
    if (result !== undefined) {
      const parsed = parseResult(result.toString("utf8"));
      if (parsed !== undefined) {
        if (parsed.errors.length === 0) return;
        throw new FirstBootError(failureText(parsed, await outputTail(lv, dom)), parsed.failedModules);
      }
    }
    if (!answered) answered = await agentAnswers(lv, dom);
    const stage = answered ? await stageNow(lv, dom) : undefined;
    report(o.onProgress, {
      kind: "first-boot",
      elapsedMs: now() - since,
      ...(answered ? {} : { agent: false as const }),
      ...(stage !== undefined ? { stage } : {}),
    });
    await sleep(o.pollMs ?? 2_000, o.signal);
  }
}

async function stageNow(lv: Libvirt, dom: Domain): Promise<string | undefined> {
  const status = await readGuestFile(lv, dom, STATUS_FILE, 256 * 1024).catch(() => undefined);
  return status === undefined ? undefined : runningStage(status.toString("utf8"));
}

/** The last lines of cloud-init's output log, redacted; undefined when they cannot be read. */
export async function outputTail(
  lv: Libvirt,
  dom: Domain,
  secrets: readonly string[] = [],
): Promise<string[] | undefined> {
  try {
    const tail = await readGuestFile(lv, dom, OUTPUT_LOG, TAIL_BYTES);
    if (tail === undefined) return undefined;
    const text = tail.toString("utf8");
    // A tail cut mid-line starts with a partial line: drop it.
    const whole = tail.length >= TAIL_BYTES ? text.slice(text.indexOf("\n") + 1) : text;
    return lastLines(redactGuestLines(whole, secrets), TAIL_LINES);
  } catch {
    return undefined;
  }
}
