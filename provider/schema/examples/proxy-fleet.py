import pulumi
import pulumi_kvmproxy as kvmproxy

# `pulumi config set --secret memberSecret` (16 characters or more): each
# member's password is derived from it, so one leaked password opens one
# member only. `hv-1`, `hv-2` and `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
config = pulumi.Config()
fleet = kvmproxy.ProxyFleet(
    "crawlers",
    size=3,
    hosts=["hv-1", "hv-2"],
    proxy=kvmproxy.FleetProxyArgs(
        image="debian-12",
        proxy=kvmproxy.FleetProxyConfigArgs(auth=kvmproxy.FleetProxyAuthArgs(username="crawler")),
    ),
    member_passwords=kvmproxy.MemberPasswordsArgs(secret=config.require_secret("memberSecret")),
)

pulumi.export("urls", fleet.urls)  # no credentials
pulumi.export("urlsWithCredentials", fleet.urls_with_credentials)  # secrets
