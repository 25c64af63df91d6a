// A test program driven entirely by stack config:
//   pair:proxies  {resourceName: KvmProxyArgs}
//   pair:adopt    {resourceName: providerId}  (KvmProxy.get, read-only)
const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("pair");
const proxies = {};
for (const [name, args] of Object.entries(config.getObject("proxies") ?? {})) {
  proxies[name] = new KvmProxy(name, args);
}
const adopted = {};
for (const [name, id] of Object.entries(config.getObject("adopt") ?? {})) {
  adopted[name] = KvmProxy.get(name, id);
}

exports.ids = Object.fromEntries(Object.entries(proxies).map(([n, p]) => [n, p.id]));
exports.names = Object.fromEntries(Object.entries(proxies).map(([n, p]) => [n, p.domainName]));
exports.adopted = Object.fromEntries(
  Object.entries(adopted).map(([n, p]) => [
    n,
    pulumi
      .all([p.id, p.domainName, p.image, p.memoryMiB, p.tags, p.state])
      .apply(([id, domainName, image, memoryMiB, tags, state]) => ({
        id,
        domainName,
        image,
        memoryMiB,
        tags,
        state,
      })),
  ]),
);
