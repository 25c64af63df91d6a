/**
 * How a host is written where a port may follow it: in URLs (`ssh://`,
 * `http://`), `host:port` targets (OpenSSH's `-W`, messages) and traces. An
 * IPv6 literal goes in brackets, so its colons are not read as the port's;
 * names and IPv4 addresses stay as they are. Text only.
 */

/** `host` as a URL writes it: `[2001:db8::1]`, `192.0.2.1`, `hv-1.example`. */
export function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

/** `host:port`, with `host` as a URL writes it. */
export function hostPort(host: string, port: number): string {
  return `${urlHost(host)}:${port}`;
}
