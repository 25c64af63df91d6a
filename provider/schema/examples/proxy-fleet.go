package main

import (
	"github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go/kvmproxy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		// `pulumi config set --secret memberSecret` (16 characters or more): each
		// member's password is derived from it, so one leaked password opens one
		// member only. `hv-1`, `hv-2` and `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
		cfg := config.New(ctx, "")
		fleet, err := kvmproxy.NewProxyFleet(ctx, "crawlers", &kvmproxy.ProxyFleetArgs{
			Size:  pulumi.Int(3),
			Hosts: pulumi.Array{pulumi.String("hv-1"), pulumi.String("hv-2")},
			Proxy: &kvmproxy.FleetProxyArgs{
				Image: pulumi.String("debian-12"),
				Proxy: &kvmproxy.FleetProxyConfigArgs{
					Auth: &kvmproxy.FleetProxyAuthArgs{Username: pulumi.String("crawler")},
				},
			},
			MemberPasswords: &kvmproxy.MemberPasswordsArgs{Secret: cfg.RequireSecret("memberSecret")},
		})
		if err != nil {
			return err
		}
		ctx.Export("urls", fleet.Urls)                               // no credentials
		ctx.Export("urlsWithCredentials", fleet.UrlsWithCredentials) // secrets
		return nil
	})
}
