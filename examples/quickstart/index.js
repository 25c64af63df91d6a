// Two squid proxies on one libvirt host, with Basic authentication. The host
// and image are keys of the stack config kvm:hosts and kvm:images (see the
// provider configuration reference, docs/reference/provider-config.md); the
// password is a secret of this stack.
//
//   pulumi config set --path kvm:hosts.lab.uri ssh://root@lab.example.com
//   pulumi config set --path kvm:hosts.lab.knownHostsPath ~/.ssh/known_hosts
//   pulumi config set --secret kvm:sshPrivateKey -- "$(cat ~/.ssh/id_ed25519)"
//   pulumi config set --path kvm:images.debian-12.url https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2
//   pulumi config set --secret quickstart:password "$(openssl rand -base64 18)"
//   pulumi up
const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("quickstart");
const host = config.get("host") ?? "lab";
const image = config.get("image") ?? "debian-12";
// Who may use the proxies: default the private ranges; give your crawlers' ranges.
const allowedClients = config.getObject("allowedClients");
const password = config.requireSecret("password");
// Extra KvmProxy arguments for both proxies (e.g. {"memoryMiB": 1024}).
const extra = config.getObject("proxy") ?? {};

const proxies = ["edge-1", "edge-2"].map(
  (name) =>
    new KvmProxy(name, {
      host,
      image,
      ...extra,
      proxy: { auth: { username: "crawler", password }, ...(allowedClients ? { allowedClients } : {}) },
    }),
);

exports.ids = proxies.map((p) => p.id);
exports.proxyUrls = proxies.map((p) => p.proxyUrl);
// Secret: the URLs with the credentials, for a crawler's configuration.
exports.proxyUrlsWithCredentials = pulumi.secret(proxies.map((p) => p.proxyUrlWithCredentials));
