// Proxies feeding another resource: a crawler's JSON config file listing the
// proxies, written by a tiny local dynamic resource. The file changes when a
// proxy is replaced, and goes away on destroy.
const pulumi = require("@pulumi/pulumi");
const { KvmProxy } = require("pulumi-kvm-proxy");

// A local file with the given text. Its provider is serialized into the
// state, so it requires what it needs inside each method and captures nothing.
const fileProvider = {
  create: (inputs) => {
    require("node:fs").writeFileSync(inputs.path, inputs.content);
    return Promise.resolve({ id: inputs.path, outs: inputs });
  },
  diff: (_id, olds, news) => {
    const replaces = olds.path !== news.path ? ["path"] : [];
    return Promise.resolve({ changes: replaces.length > 0 || olds.content !== news.content, replaces });
  },
  update: (_id, _olds, news) => {
    require("node:fs").writeFileSync(news.path, news.content);
    return Promise.resolve({ outs: news });
  },
  delete: (id) => {
    require("node:fs").rmSync(id, { force: true });
    return Promise.resolve();
  },
};

class LocalFile extends pulumi.dynamic.Resource {
  constructor(name, args, opts) {
    super(fileProvider, name, { ...args }, opts, undefined, "LocalFile");
  }
}

const config = new pulumi.Config("compose");
const host = config.get("host") ?? "lab";
const image = config.get("image") ?? "debian-12";
const extra = config.getObject("proxy") ?? {};
const path = config.get("crawlerConfig") ?? "crawler-proxies.json";

const proxies = ["crawl-a", "crawl-b"].map((name) => new KvmProxy(name, { host, image, ...extra }));

const content = pulumi
  .all(proxies.map((p) => pulumi.all([p.id, p.proxyUrl])))
  .apply(
    (list) =>
      `${JSON.stringify({ proxies: list.map(([id, url]) => ({ id, url: url ?? null })) }, null, 2)}\n`,
  );

const file = new LocalFile("crawler-config", { path, content });

exports.crawlerConfig = file.id;
exports.proxyIds = proxies.map((p) => p.id);
