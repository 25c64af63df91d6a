/**
 * The default user-data: a cloud-config that installs squid and lets the
 * private networks use it on `proxyPort`. Used when a KvmProxy gives no
 * userData. Debian/Ubuntu's squid.conf includes `/etc/squid/conf.d/*.conf`
 * before its final `http_access deny all`, and defines the `localnet` ACL.
 */
export function defaultUserData(proxyPort: number): string {
  const lines = [
    "#cloud-config",
    "# pulumi-kvm-proxy default: squid for the private networks (localnet)",
    "package_update: true",
    "packages:",
    "  - squid",
    "write_files:",
    "  - path: /etc/squid/conf.d/pulumi-kvm-proxy.conf",
    "    permissions: '0644'",
    "    content: |",
    // squid.conf already listens on 3128; a second http_port line for the same port would fail to bind.
    ...(proxyPort === 3128 ? [] : [`      http_port ${proxyPort}`]),
    "      http_access allow localnet",
    "runcmd:",
    "  - [systemctl, enable, --now, squid]",
    "  - [systemctl, restart, squid]",
    "",
  ];
  return lines.join("\n");
}
