/**
 * The connection defaults of a libvirt host, in one place: the host config
 * applies them when a URI leaves them out, the transports when a caller
 * does. Constants only.
 */
export const LIBVIRT_DEFAULTS = {
  /** SSH port of an ssh:// host without one. */
  sshPort: 22,
  /** SSH user of an ssh:// host without one. */
  sshUser: "root",
  /** libvirtd's socket on the host (the remote end of an ssh:// host, or a local unix socket). */
  socketPath: "/var/run/libvirt/libvirt-sock",
  /** The libvirt driver URI sent in CONNECT_OPEN (and handed to virt-ssh-helper). */
  driverUri: "qemu:///system",
} as const;

/** SSH connection timing, the same for either SSH client (ssh2, OpenSSH): connect deadline and keepalive. */
export const SSH_TIMING = {
  connectTimeoutMs: 20_000,
  keepalive: { intervalMs: 15_000, countMax: 3 },
} as const;
