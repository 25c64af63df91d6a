// A program that makes its hypervisor itself: `Hypervisor`, a
// dynamic resource, stands for what makes the host in a real stack (a
// bare-metal order, a cloud VM with nested virtualisation) and returns how to
// reach it, its uri, host key and a secret private key, which are unknown
// until it is created. Its proxies take the host in full from its outputs.
// Stack config:
//   hosted:hypervisor  {uri, knownHosts?}, and the secret hosted:privateKey, or
//   hosted:privateKeyFile  a key file the program reads itself (pulumi.secret, no
//                      config secret: the engine knows nothing to mask), once the
//                      hypervisor exists
//   hosted:key         the host's key (its name in provider IDs)
//   hosted:hostExtra   more fields of the host in full (pool, network, ...)
//   hosted:fromConfig  a key of kvm:hosts to give instead (the form a stack moves from)
//   hosted:proxies     [names], each a KvmProxy with hosted:proxyArgs
//   hosted:fleetSize   a ProxyFleet "fleet" of that size with hosted:proxyArgs, its pool that one host
const { readFileSync } = require("node:fs");
const pulumi = require("@pulumi/pulumi");
const { KvmProxy, ProxyFleet } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("hosted");

const hypervisorProvider = {
  async create(inputs) {
    return { id: "hypervisor", outs: inputs };
  },
  async update(_id, _olds, news) {
    return { outs: news };
  },
};

class Hypervisor extends pulumi.dynamic.Resource {
  constructor(name, args, opts) {
    super(
      hypervisorProvider,
      name,
      { uri: undefined, knownHosts: undefined, privateKey: undefined, ...args },
      { ...opts, additionalSecretOutputs: ["privateKey"] },
    );
  }
}

const fromConfig = config.get("fromConfig");
let host = fromConfig;
if (fromConfig === undefined) {
  const keyFile = config.get("privateKeyFile");
  const hv = new Hypervisor("hypervisor", {
    ...config.requireObject("hypervisor"),
    ...(keyFile === undefined ? { privateKey: config.requireSecret("privateKey") } : {}),
  });
  const reach = config.requireObject("hypervisor");
  host = {
    key: config.require("key"),
    uri: hv.uri,
    ...(reach.knownHosts !== undefined ? { knownHosts: hv.knownHosts } : {}),
    privateKey:
      keyFile === undefined
        ? hv.privateKey
        : hv.uri.apply(() => pulumi.secret(readFileSync(keyFile, "utf8"))),
    ...(config.getObject("hostExtra") ?? {}),
  };
}
const proxyArgs = config.getObject("proxyArgs") ?? {};
const proxies = config.requireObject("proxies").map((n) => new KvmProxy(n, { host, ...proxyArgs }));

const fleetSize = config.getNumber("fleetSize");
const fleet =
  fleetSize === undefined
    ? undefined
    : new ProxyFleet("fleet", { size: fleetSize, hosts: [host], proxy: proxyArgs });

exports.ids = proxies.map((p) => p.id);
exports.hosts = proxies.map((p) => p.host);
exports.fleetIds = fleet?.ids;
exports.fleetHosts = fleet?.hosts;
