// A fleet of proxies spread round-robin over several libvirt hosts, as one
// ComponentResource. Exports every proxy's ID and URL.
import * as pulumi from "@pulumi/pulumi";
import { KvmProxy, type KvmProxyArgs } from "pulumi-kvm-proxy";

export interface ProxyFleetArgs {
  /** Keys of kvm:hosts to spread over. */
  hosts: string[];
  /** How many proxies in all. */
  size: number;
  /** Arguments shared by every proxy (image, memoryMiB, ...). */
  proxy: Omit<KvmProxyArgs, "host">;
}

export class ProxyFleet extends pulumi.ComponentResource {
  readonly proxies: KvmProxy[];
  readonly ids: pulumi.Output<string[]>;
  readonly urls: pulumi.Output<(string | undefined)[]>;

  constructor(name: string, args: ProxyFleetArgs, opts?: pulumi.ComponentResourceOptions) {
    super("kvmproxy:index:ProxyFleet", name, {}, opts);
    if (args.hosts.length === 0) throw new Error("ProxyFleet needs at least one host");
    this.proxies = [];
    for (let i = 0; i < args.size; i++) {
      const host = args.hosts[i % args.hosts.length] as string;
      this.proxies.push(
        new KvmProxy(
          `${name}-${i}`,
          { ...args.proxy, host, tags: { fleet: name, member: String(i) } },
          { parent: this },
        ),
      );
    }
    this.ids = pulumi.all(this.proxies.map((p) => p.id));
    this.urls = pulumi.all(this.proxies.map((p) => p.proxyUrl));
    this.registerOutputs({ ids: this.ids, urls: this.urls });
  }
}

const config = new pulumi.Config("fleet");
const fleet = new ProxyFleet("crawl", {
  hosts: config.getObject<string[]>("hosts") ?? ["lab-a", "lab-b"],
  size: config.getNumber("size") ?? 4,
  proxy: {
    image: config.get("image") ?? "debian-12",
    ...(config.getObject<Partial<KvmProxyArgs>>("proxy") ?? {}),
  },
});

export const ids = fleet.ids;
export const urls = fleet.urls;
