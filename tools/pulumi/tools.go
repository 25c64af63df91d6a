//go:build tools

// Package tools pins the Pulumi CLI main package so that go.mod/go.sum
// record every module it needs. It is never compiled (build tag "tools").
package tools

import (
	_ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
)
