// A fleet of proxies placed over a pool of libvirt hosts by capacity, and
// rotated in batches: the library's ProxyFleet component.
//
//   pulumi config set --path 'kvm:hosts.lab-a.capacity.proxies' 6
//   pulumi config set --path 'fleet:hosts[0]' lab-a
//   pulumi config set fleet:size 12
//   pulumi config set fleet:maxAge 7d     # optional: rotate members older than this, 2 per up
//   pulumi config set --secret fleet:memberSecret "$(openssl rand -base64 32)"
//                                         # optional: user "crawler", a password of its own per member
import * as pulumi from "@pulumi/pulumi";
import { type KvmProxyArgs, ProxyFleet } from "pulumi-kvm-proxy";

const config = new pulumi.Config("fleet");
const maxAge = config.get("maxAge");
const memberSecret = config.getSecret("memberSecret");
const proxy = config.getObject<Partial<KvmProxyArgs>>("proxy") ?? {};
const fleet = new ProxyFleet("crawl", {
  hosts: config.getObject<string[]>("hosts") ?? ["lab-a", "lab-b"],
  size: config.getNumber("size") ?? 4,
  proxy: {
    image: config.get("image") ?? "debian-12",
    ...proxy,
    ...(memberSecret !== undefined ? { proxy: { ...proxy.proxy, auth: { username: "crawler" } } } : {}),
  },
  ...(maxAge !== undefined ? { rotation: { maxAge, batch: config.getNumber("batch") ?? 2 } } : {}),
  ...(memberSecret !== undefined ? { memberPasswords: { secret: memberSecret } } : {}),
});

export const ids = fleet.ids;
export const urls = fleet.urls;
export const hosts = fleet.hosts;
// Secret: each member's URL with its own password.
export const urlsWithCredentials = fleet.urlsWithCredentials;
