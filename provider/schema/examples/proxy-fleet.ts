import * as kvmproxy from "@kvmproxy/sdk";
import * as pulumi from "@pulumi/pulumi";

// `pulumi config set --secret memberSecret` (16 characters or more): each
// member's password is derived from it, so one leaked password opens one
// member only. `hv-1`, `hv-2` and `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
const config = new pulumi.Config();
const fleet = new kvmproxy.ProxyFleet("crawlers", {
  size: 3,
  hosts: ["hv-1", "hv-2"],
  proxy: { image: "debian-12", proxy: { auth: { username: "crawler" } } },
  memberPasswords: { secret: config.requireSecret("memberSecret") },
});

export const urls = fleet.urls; // no credentials
export const urlsWithCredentials = fleet.urlsWithCredentials; // secrets
