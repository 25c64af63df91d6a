package main

import (
	"github.com/pulumi-kvm-proxy/pulumi-kvm-proxy/sdk/go/kvmproxy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		// `pulumi config set --secret password` (12 characters or more); the host
		// `lab` and the image `debian-12` are keys of kvmproxy:hosts and kvmproxy:images.
		cfg := config.New(ctx, "")
		edge, err := kvmproxy.NewKvmProxy(ctx, "edge", &kvmproxy.KvmProxyArgs{
			Host:  pulumi.String("lab"),
			Image: pulumi.String("debian-12"),
			Proxy: &kvmproxy.ProxyArgs{
				Auth: &kvmproxy.ProxyAuthArgs{
					Username: pulumi.String("crawler"),
					Password: cfg.RequireSecret("password"),
				},
			},
		})
		if err != nil {
			return err
		}
		ctx.Export("url", edge.ProxyUrl)                               // no credentials
		ctx.Export("urlWithCredentials", edge.ProxyUrlWithCredentials) // a secret
		return nil
	})
}
