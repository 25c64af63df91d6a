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
  /** Releases anything shared beyond one stream (for SSH, the underlying connection). */
  close(): Promise<void>;
}
