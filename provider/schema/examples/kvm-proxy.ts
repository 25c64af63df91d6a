import * as kvmproxy from "@kvmproxy/sdk";
import * as pulumi from "@pulumi/pulumi";

// `pulumi config set --secret password` (12 characters or more); the host
// `lab` and the image `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
const config = new pulumi.Config();
const edge = new kvmproxy.KvmProxy("edge", {
  host: "lab",
  image: "debian-12",
  proxy: { auth: { username: "crawler", password: config.requireSecret("password") } },
});

export const url = edge.proxyUrl; // no credentials
export const urlWithCredentials = edge.proxyUrlWithCredentials; // a secret
