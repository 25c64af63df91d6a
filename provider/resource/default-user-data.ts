/**
 * The default user-data, used when a KvmProxy gives none: an empty
 * cloud-config (squid is set up by the provider's vendor-data script, see
 * kvm/proxy/setup.ts, whatever the user-data is), and the default of earlier
 * versions, which installed squid itself, kept so a proxy built with it is
 * not rebuilt by an upgrade (diff.ts).
 */
export function defaultUserData(): string {
  return "#cloud-config\n# pulumi-kvm-proxy: no user-data given; squid is set up by the provider's vendor-data\n";
}

/** The default user-data of versions before the typed proxy block (0.1.0), for `proxyPort`. */
export function legacyDefaultUserData(proxyPort: number): string {
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
    ...(proxyPort === 3128 ? [] : [`      http_port ${proxyPort}`]),
    "      http_access allow localnet",
    "runcmd:",
    "  - [systemctl, enable, --now, squid]",
    "  - [systemctl, restart, squid]",
    "",
  ];
  return lines.join("\n");
}
