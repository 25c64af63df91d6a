/**
 * The guest agent of a running domain, over libvirt's
 * virDomainQemuAgentCommand: run a program and collect what it printed, read
 * a file (or its tail). For readiness (cloud-init's outcome), for the
 * guest's own lines in a failed create's error, and for the health probe run
 * inside the guest.
 *
 * The expected errors become `undefined` (one function per use, as in
 * volumes.ts):
 * - the agent not answering (not started yet, not installed, guest busy):
 *   AGENT_UNRESPONSIVE, AGENT_UNSYNCED, OPERATION_TIMEOUT, and
 *   ARGUMENT_UNSUPPORTED/OPERATION_INVALID when the domain has no agent
 *   channel or is not running;
 * - a file that is not there (the agent's "No such file" comes back as
 *   libvirt's INTERNAL_ERROR, the agent's message inside).
 * Anything else throws as the libvirt error it is.
 *
 * Nothing here is traced beyond the procedure name (trace.ts never logs an
 * agent command or reply): commands may carry what the guest holds.
 */
import { durationText } from "../../errors";
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import { sleep } from "./retry";
import { hasCode } from "./volumes";

/** Errors that mean "no agent to talk to (yet)". */
const NOT_ANSWERING = [
  ErrorCode.AGENT_UNRESPONSIVE,
  ErrorCode.AGENT_UNSYNCED,
  ErrorCode.OPERATION_TIMEOUT,
  ErrorCode.ARGUMENT_UNSUPPORTED,
  ErrorCode.OPERATION_INVALID,
];

/** Seconds libvirt waits for one agent reply. */
const COMMAND_TIMEOUT_S = 10;
/** Largest read per guest-file-read (the agent's limit is 48 MiB; replies stay small). */
const READ_CHUNK = 64 * 1024;

/**
 * One agent command: its `return` value, or undefined when the agent does not
 * answer. `absentFile`: a guest-side "No such file" is undefined too.
 */
async function command<T>(
  lv: Libvirt,
  dom: Domain,
  execute: string,
  args?: Record<string, unknown>,
  absentFile = false,
): Promise<T | undefined> {
  const cmd = JSON.stringify(args === undefined ? { execute } : { execute, arguments: args });
  let reply: string | null;
  try {
    reply = await lv.domainQemuAgentCommand(dom, cmd, COMMAND_TIMEOUT_S);
  } catch (err) {
    if (hasCode(err, ...NOT_ANSWERING)) return undefined;
    if (absentFile && hasCode(err, ErrorCode.INTERNAL_ERROR) && /No such file/i.test(String(err))) {
      return undefined;
    }
    throw err;
  }
  if (reply === null) return undefined;
  return (JSON.parse(reply) as { return?: T }).return;
}

/** Whether the agent answers now. */
export async function agentAnswers(lv: Libvirt, dom: Domain): Promise<boolean> {
  return (await command(lv, dom, "guest-ping")) !== undefined;
}

/** What a program run in the guest did. */
export interface GuestRun {
  exitcode: number | undefined;
  stdout: Buffer;
  stderr: Buffer;
}

/**
 * Runs `path args...` in the guest (guest-exec with its output captured) and
 * waits up to `timeoutMs` for it to end, polling every `pollMs`. undefined
 * when the agent does not answer; throws when the program is still running
 * at the deadline.
 */
export async function runInGuest(
  lv: Libvirt,
  dom: Domain,
  path: string,
  args: readonly string[],
  options: { timeoutMs: number; pollMs?: number; input?: string; signal?: AbortSignal },
): Promise<GuestRun | undefined> {
  const started = await command<{ pid: number }>(lv, dom, "guest-exec", {
    path,
    arg: [...args],
    "capture-output": true,
    ...(options.input !== undefined ? { "input-data": Buffer.from(options.input).toString("base64") } : {}),
  });
  if (started === undefined) return undefined;
  const until = performance.now() + options.timeoutMs;
  for (;;) {
    const st = await command<{
      exited: boolean;
      exitcode?: number;
      "out-data"?: string;
      "err-data"?: string;
    }>(lv, dom, "guest-exec-status", { pid: started.pid });
    if (st === undefined) return undefined;
    if (st.exited) {
      return {
        exitcode: st.exitcode,
        stdout: Buffer.from(st["out-data"] ?? "", "base64"),
        stderr: Buffer.from(st["err-data"] ?? "", "base64"),
      };
    }
    if (performance.now() > until)
      throw new Error(`${path} was still running in the guest after ${durationText(options.timeoutMs)}`);
    options.signal?.throwIfAborted();
    await sleep(options.pollMs ?? 500);
  }
}

/**
 * The last `maxBytes` of a guest file (all of it when smaller), or
 * undefined when the agent does not answer or the file is not there.
 */
export async function readGuestFile(
  lv: Libvirt,
  dom: Domain,
  path: string,
  maxBytes: number,
): Promise<Buffer | undefined> {
  const handle = await command<number>(lv, dom, "guest-file-open", { path, mode: "r" }, true);
  if (handle === undefined) return undefined;
  try {
    // Seek to maxBytes before the end; a smaller file makes the agent fail the seek: read it from the start.
    const sought = await command<{ position: number }>(lv, dom, "guest-file-seek", {
      handle,
      offset: -maxBytes,
      whence: "end",
    }).catch(() => undefined);
    if (sought === undefined) await command(lv, dom, "guest-file-seek", { handle, offset: 0, whence: "set" });
    const chunks: Buffer[] = [];
    let total = 0;
    while (total < maxBytes) {
      const r = await command<{ count: number; "buf-b64": string; eof: boolean }>(
        lv,
        dom,
        "guest-file-read",
        {
          handle,
          count: Math.min(READ_CHUNK, maxBytes - total),
        },
      );
      if (r === undefined) return undefined;
      const b = Buffer.from(r["buf-b64"], "base64");
      chunks.push(b);
      total += b.length;
      if (r.eof || r.count === 0) break;
    }
    return Buffer.concat(chunks);
  } finally {
    await command(lv, dom, "guest-file-close", { handle }).catch(() => undefined);
  }
}
