// Two squid proxies on one libvirt host. The host and image are keys of the
// stack config kvm:hosts and kvm:images (see the README's config reference).
//
//   pulumi config set --path kvm:hosts.lab.uri ssh://root@lab.example.com
//   pulumi config set --path kvm:hosts.lab.knownHostsPath ~/.ssh/known_hosts
//   pulumi config set --secret kvm:sshPrivateKey -- "$(cat ~/.ssh/id_ed25519)"
//   pulumi config set --path kvm:images.debian-12.url https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2
//   pulumi up
const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("quickstart");
const host = config.get("host") ?? "lab";
const image = config.get("image") ?? "debian-12";
// Extra KvmProxy arguments for both proxies (e.g. {"memoryMiB": 1024}).
const extra = config.getObject("proxy") ?? {};

const proxies = ["edge-1", "edge-2"].map((name) => new KvmProxy(name, { host, image, ...extra }));

exports.ids = proxies.map((p) => p.id);
exports.proxyUrls = proxies.map((p) => p.proxyUrl);
