// A test program driven entirely by stack config:
//   pair:proxies  {resourceName: KvmProxyArgs}
//   pair:adopt    {resourceName: providerId}  (KvmProxy.get, read-only)
const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("pair");
const proxies = {};
// A proxy whose args hold `userDataFromSecret: true` gets the secret config
// value `pair:userData` as its userData, as a careful user would pass it; one
// with `userDataFromEnv` / `vendorDataFromEnv: "<VAR>"` gets a plain string
// from the environment, as a literal in a program would be (kept out of the
// stack config, which Pulumi records in the state's history). One with
// `proxyPasswordFromSecret: true` gets the secret config value
// `pair:proxyPassword` as its proxy.auth.password; one with
// `proxyPasswordFromEnv: "<VAR>"` gets `pulumi.secret(process.env.VAR)`, a
// secret the program makes itself (as from a password generator).
//   pair:exportUrlsWithCredentials  (default true) export them as stack outputs
//   pair:credentialsFile            write them to this file instead, as a
//                                   program feeding a crawler's config would
for (const [name, args] of Object.entries(config.getObject("proxies") ?? {})) {
  const {
    userDataFromSecret,
    userDataFromEnv,
    vendorDataFromEnv,
    proxyPasswordFromSecret,
    proxyPasswordFromEnv,
    ...rest
  } = args;
  if (userDataFromSecret) rest.userData = config.requireSecret("userData");
  const password = proxyPasswordFromSecret
    ? config.requireSecret("proxyPassword")
    : proxyPasswordFromEnv
      ? pulumi.secret(process.env[proxyPasswordFromEnv])
      : undefined;
  if (password !== undefined) {
    rest.proxy = { ...rest.proxy, auth: { ...rest.proxy?.auth, password } };
  }
  if (userDataFromEnv) rest.userData = process.env[userDataFromEnv];
  if (vendorDataFromEnv) rest.vendorData = process.env[vendorDataFromEnv];
  proxies[name] = new KvmProxy(name, rest);
}
const adopted = {};
for (const [name, id] of Object.entries(config.getObject("adopt") ?? {})) {
  adopted[name] = KvmProxy.get(name, id);
}

exports.ids = Object.fromEntries(Object.entries(proxies).map(([n, p]) => [n, p.id]));
exports.names = Object.fromEntries(Object.entries(proxies).map(([n, p]) => [n, p.domainName]));
const urlsWithCredentials = Object.fromEntries(
  Object.entries(proxies).map(([n, p]) => [n, p.proxyUrlWithCredentials]),
);
if (config.getBoolean("exportUrlsWithCredentials") !== false)
  exports.urlsWithCredentials = urlsWithCredentials;
const credentialsFile = config.get("credentialsFile");
if (credentialsFile !== undefined) {
  pulumi.all(urlsWithCredentials).apply((urls) => {
    require("node:fs").writeFileSync(credentialsFile, JSON.stringify(urls));
  });
}
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
