// Command pulumi-language-go is a minimal Go language host for the Pulumi
// CLI, written for this project's offline test toolset (the official host is
// a module the module proxy here does not serve). Run builds the program's
// main package with `go build` (the module's own go.mod decides the SDK and
// any replaces) and runs the binary with the settings the Go SDK reads from
// PULUMI_* environment variables. Prebuilt binaries (`runtime.options.binary`)
// and everything but running a program are not offered. See docs/contributing/pulumi-cli.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"pulumi-kvm-proxy/tools/pulumi/internal/langhost"
)

func main() {
	host := &languageHost{Host: langhost.Host{Name: "pulumi-language-go"}}
	langhost.Serve(&host.Host, host, nil)
}

type languageHost struct {
	langhost.Host
}

func (h *languageHost) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return langhost.AboutTool("go", "", "env", "GOVERSION")
}

func (h *languageHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	fail := langhost.Failed
	if req.GetAttachDebugger() {
		return fail(errors.New("this minimal language host cannot attach a debugger"))
	}
	if _, ok := req.GetInfo().GetOptions().AsMap()["binary"]; ok {
		return fail(errors.New("this minimal language host does not run prebuilt binaries (runtime.options.binary)"))
	}
	programDir, entryPoint := langhost.Folders(req)
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fail(fmt.Errorf("could not find go on the PATH: %w", err))
	}

	out, err := os.MkdirTemp("", "pulumi-go-program-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(out)
	program := filepath.Join(out, "program")
	build := exec.CommandContext(ctx, goBin, "build", "-o", program, "./"+entryPoint)
	build.Dir = programDir
	if output, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("go build of the program failed: %w\n%s", err, output))
	}

	// The Go SDK reads config keys as the engine writes them ("ns:name").
	cfgEnv, err := langhost.ConfigEnv(req, func(k string) (string, error) { return k, nil })
	if err != nil {
		return fail(err)
	}
	env := append(os.Environ(), cfgEnv...)
	set := func(name, value string) {
		if value != "" {
			env = append(env, name+"="+value)
		}
	}
	set("PULUMI_MONITOR", req.GetMonitorAddress())
	set("PULUMI_ENGINE", h.Engine())
	set("PULUMI_ORGANIZATION", req.GetOrganization())
	set("PULUMI_PROJECT", req.GetProject())
	set("PULUMI_ROOT_DIRECTORY", req.GetInfo().GetRootDirectory())
	set("PULUMI_STACK", req.GetStack())
	set("PULUMI_DRY_RUN", strconv.FormatBool(req.GetDryRun()))
	set("PULUMI_PARALLEL", strconv.Itoa(int(req.GetParallel())))
	set("PULUMI_TRACING", h.Tracing)
	return h.RunProgram(ctx, "Go", programDir, env, program, req.GetArgs()...)
}
