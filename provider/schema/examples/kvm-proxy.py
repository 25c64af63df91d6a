import pulumi
import pulumi_kvmproxy as kvmproxy

# `pulumi config set --secret password` (12 characters or more); the host
# `lab` and the image `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
config = pulumi.Config()
edge = kvmproxy.KvmProxy(
    "edge",
    host="lab",
    image="debian-12",
    proxy=kvmproxy.ProxyArgs(
        auth=kvmproxy.ProxyAuthArgs(username="crawler", password=config.require_secret("password")),
    ),
)

pulumi.export("url", edge.proxy_url)  # no credentials
pulumi.export("urlWithCredentials", edge.proxy_url_with_credentials)  # a secret
