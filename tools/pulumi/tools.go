//go:build tools

// Package tools pins the Pulumi CLI main package, and the Go SDK's
// packages our generated Go SDK imports (its compile test builds offline),
// so that go.mod/go.sum record every module they need. It is never compiled
// (build tag "tools").
package tools

import (
	_ "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
	_ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
	_ "github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	_ "github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)
