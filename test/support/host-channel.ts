/**
 * A probe's way through the host as an SSH channel carries it, for tests
 * that need no host: a plain stream (no socket methods) whose far end is a
 * TCP connection to 127.0.0.1:`port`, each closing the other. `onOpen`
 * counts the channels opened.
 */
import net from "node:net";
import type { Duplex } from "node:stream";
import { duplexPair } from "../unit/libvirt/fake-daemon";

export const hostChannel =
  (port: number, onOpen: () => void = () => {}) =>
  async (): Promise<Duplex> => {
    onOpen();
    const [near, far] = duplexPair();
    const tcp = net.connect(port, "127.0.0.1");
    far.pipe(tcp);
    tcp.pipe(far);
    tcp.on("error", () => far.destroy());
    tcp.once("close", () => far.destroy());
    far.once("close", () => tcp.destroy());
    return near;
  };
