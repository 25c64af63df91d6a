/**
 * What a domain's serial console prints, kept while a provision waits on
 * the guest: the last bytes, for the error when the guest never becomes
 * ready and no guest agent can tell why (virDomainOpenConsole, a read
 * stream: libvirt sends what the console prints from the moment it is
 * opened, nothing of before).
 *
 * The expected errors become `undefined` (as in volumes.ts): the domain has
 * no console or does not run (OPERATION_INVALID, NO_SUPPORT,
 * ARGUMENT_UNSUPPORTED), or another client holds it (OPERATION_FAILED:
 * "Active console session exists"; it is never taken from them).
 */
import { ErrorCode } from "../../libvirt/error-codes";
import type { Libvirt } from "../../libvirt/libvirt";
import type { Domain } from "../../libvirt/types";
import { hasCode } from "./volumes";

const NO_CONSOLE = [
  ErrorCode.OPERATION_INVALID,
  ErrorCode.NO_SUPPORT,
  ErrorCode.ARGUMENT_UNSUPPORTED,
  ErrorCode.OPERATION_FAILED,
];

/** Bytes of console output kept by default. */
export const CONSOLE_TAIL_BYTES = 64 * 1024;

/** The console of one domain while it is open. */
export class ConsoleTail {
  private chunks: Buffer[] = [];
  private size = 0;

  private constructor(
    private readonly maxBytes: number,
    private close: () => Promise<void>,
  ) {}

  /** Opens the domain's console; undefined when it cannot be had (see the header). */
  static async open(
    lv: Libvirt,
    dom: Domain,
    maxBytes = CONSOLE_TAIL_BYTES,
  ): Promise<ConsoleTail | undefined> {
    const tail = new ConsoleTail(maxBytes, () => Promise.resolve());
    try {
      const stream = await lv.domainOpenConsole(dom, (chunk) => tail.push(chunk));
      tail.close = () => stream.close();
      return tail;
    } catch (err) {
      if (hasCode(err, ...NO_CONSOLE)) return undefined;
      throw err;
    }
  }

  private push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= this.maxBytes && this.chunks.length > 1) {
      this.size -= (this.chunks.shift() as Buffer).length;
    }
  }

  /** What the console printed while open (at most about maxBytes, the latest), as text. */
  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.maxBytes)).toString("utf8");
  }

  /** Stops reading (never throws). */
  async stop(): Promise<void> {
    await this.close().catch(() => undefined);
  }
}
