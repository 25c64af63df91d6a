import net from "node:net";
import type { Duplex } from "node:stream";
import { ProviderError } from "../errors";
import { LIBVIRT_DEFAULTS } from "./defaults";
import type { Transport } from "./types";

export const DEFAULT_LIBVIRT_SOCKET = LIBVIRT_DEFAULTS.socketPath;

// The daemon is not there (yet): not started, restarting, socket not created.
const TRANSIENT_CODES = new Set(["ENOENT", "ECONNREFUSED", "EAGAIN", "ECONNRESET"]);

/** A byte stream to libvirtd's local unix socket. */
export class UnixSocketTransport implements Transport {
  readonly description: string;

  constructor(readonly path: string = DEFAULT_LIBVIRT_SOCKET) {
    this.description = `unix:${path}`;
  }

  open(): Promise<Duplex> {
    return new Promise<Duplex>((resolve, reject) => {
      const socket = net.createConnection({ path: this.path });
      const onError = (err: NodeJS.ErrnoException): void => {
        socket.destroy();
        const code = err.code ?? "";
        const kind = TRANSIENT_CODES.has(code) ? "transient" : "permanent";
        reject(
          new ProviderError(kind, `cannot connect to libvirtd socket ${this.path}: ${code || err.message}`, {
            cause: err,
          }),
        );
      };
      socket.once("error", onError);
      socket.once("connect", () => {
        socket.off("error", onError);
        resolve(socket);
      });
    });
  }

  /** Nothing is shared between streams. */
  async close(): Promise<void> {}
}
