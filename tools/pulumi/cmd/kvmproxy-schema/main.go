// Command kvmproxy-schema binds a Pulumi package schema with pkg/v3's own
// binder (codegen/schema.BindSpec: the metaschema, then every reference and
// type), the reader the engine and the SDK generators use, and prints its
// diagnostics. Exit 0 when the schema binds without errors, 1 otherwise.
//
//	kvmproxy-schema bind provider/schema/schema.json
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/blang/semver"
	"github.com/hashicorp/hcl/v2"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "bind" {
		fmt.Fprintln(os.Stderr, "usage: kvmproxy-schema bind SCHEMA.json")
		os.Exit(2)
	}
	text, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(text, &spec); err != nil {
		fmt.Printf("error: not a package schema: %v\n", err)
		os.Exit(1)
	}
	pkg, diags, err := schema.BindSpec(spec, noPackages{}, schema.ValidationOptions{})
	for _, d := range diags {
		fmt.Printf("%s: %s: %s\n", severity(d.Severity), d.Summary, d.Detail)
	}
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	if diags.HasErrors() {
		os.Exit(1)
	}
	fmt.Printf("ok: %s: %d resources, %d types\n", pkg.Name, len(pkg.Resources), len(pkg.Types))
}

func severity(s hcl.DiagnosticSeverity) string {
	if s == hcl.DiagError {
		return "error"
	}
	return "warning"
}

// noPackages is the loader of a schema that references no other package: kvmproxy's types are its own or pulumi.json's builtins.
type noPackages struct{}

func (noPackages) LoadPackage(pkg string, _ *semver.Version) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", pkg)
}

func (noPackages) LoadPackageV2(_ context.Context, d *schema.PackageDescriptor) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", d.Name)
}
