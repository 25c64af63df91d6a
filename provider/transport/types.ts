import type { Duplex } from "node:stream";

/**
 * A transport opens one byte stream to a libvirt daemon's RPC socket.
 *
 * The libvirt client owns the stream once it is returned: it reads and writes
 * raw protocol packets and destroys the stream when the connection closes.
 * Transports raise ProviderError subclasses classified transient or permanent.
 */
export interface Transport {
  /** A short description for logs and error messages, e.g. "ssh://root@host:22". Never holds secrets. */
  readonly description: string;
  open(): Promise<Duplex>;
  /**
   * A TCP connection from the far end to `host:port` (SSH's direct-tcpip
   * channel, over the connection libvirt already uses): how a probe reaches
   * a guest on a network only its host routes to. Absent on transports
   * whose far end is this machine (a unix socket).
   */
  openTcp?(host: string, port: number): Promise<Duplex>;
  /** Releases anything shared beyond one stream (for SSH, the underlying connection). */
  close(): Promise<void>;
}

/**
 * What a transport's stream may offer beyond bytes. `awaitReply` is called by
 * the RPC layer right before it sends the last bytes of something whose reply
 * it then waits for with nothing else to send (an upload's end packet); it
 * calls the returned function once that reply is in. A transport whose
 * acknowledgements or small segments can be held back meanwhile (Nagle,
 * delayed ACKs) flushes them at once until then (ssh-quick-ack.ts).
 */
export interface ReplyHint {
  awaitReply(): () => void;
}

const NOTHING = (): void => {};

/** Calls the stream's `awaitReply` when it has one; otherwise a no-op. */
export function awaitReply(stream: Duplex): () => void {
  const hint = (stream as Duplex & Partial<ReplyHint>).awaitReply;
  return typeof hint === "function" ? hint.call(stream) : NOTHING;
}
