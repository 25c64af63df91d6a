// Command kvmproxy-schema binds a Pulumi package schema with pkg/v3's own
// binder (codegen/schema.BindSpec: the metaschema, then every reference and
// type), the reader the engine and the SDK generators use, and prints its
// diagnostics; and generates the package's SDKs offline with pkg/v3's code
// generators. Exit 0 on success, 1 when the schema does not bind or a
// generator fails, 2 on a usage error.
//
//	kvmproxy-schema bind provider/schema/schema.json
//	kvmproxy-schema gen-sdk nodejs|python|go provider/schema/schema.json OUTDIR
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver"
	"github.com/hashicorp/hcl/v2"
	gogen "github.com/pulumi/pulumi/pkg/v3/codegen/go"
	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/python"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

const tool = "kvmproxy-schema"

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kvmproxy-schema bind SCHEMA.json | gen-sdk nodejs|python|go SCHEMA.json OUTDIR")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	switch {
	case os.Args[1] == "bind" && len(os.Args) == 3:
		pkg := bind(os.Args[2])
		fmt.Printf("ok: %s: %d resources, %d types\n", pkg.Name, len(pkg.Resources), len(pkg.Types))
	case os.Args[1] == "gen-sdk" && len(os.Args) == 5:
		pkg := bind(os.Args[3])
		files, err := generate(os.Args[2], pkg)
		if err != nil {
			fmt.Printf("error: %s SDK: %v\n", os.Args[2], err)
			os.Exit(1)
		}
		for name, text := range files {
			out := filepath.Join(os.Args[4], name)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if err := os.WriteFile(out, text, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		fmt.Printf("ok: %s SDK: %d files\n", os.Args[2], len(files))
	default:
		usage()
	}
}

// bind reads and binds the schema, printing its diagnostics; exits 1 when it does not bind.
func bind(file string) *schema.Package {
	text, err := os.ReadFile(file)
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
	return pkg
}

func generate(lang string, pkg *schema.Package) (map[string][]byte, error) {
	switch lang {
	case "nodejs":
		return nodejs.GeneratePackage(tool, pkg, nil, nil, false, noPackages{})
	case "python":
		return python.GeneratePackage(tool, pkg, nil, noPackages{})
	case "go":
		return gogen.GeneratePackage(tool, pkg, nil)
	}
	return nil, fmt.Errorf("no generator for %q (nodejs, python, go)", lang)
}

func severity(s hcl.DiagnosticSeverity) string {
	if s == hcl.DiagError {
		return "error"
	}
	return "warning"
}

// noPackages is the loader of a schema that references no other package: kvmproxy's types are its own or pulumi.json's builtins.
type noPackages struct{}

func (noPackages) LoadPackageReference(pkg string, _ *semver.Version) (schema.PackageReference, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", pkg)
}

func (noPackages) LoadPackageReferenceV2(_ context.Context, d *schema.PackageDescriptor) (schema.PackageReference, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", d.Name)
}

func (noPackages) LoadPackage(pkg string, _ *semver.Version) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", pkg)
}

func (noPackages) LoadPackageV2(_ context.Context, d *schema.PackageDescriptor) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema references package %q: it should reference none", d.Name)
}
