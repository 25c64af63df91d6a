// Command pulumi-language-python is a minimal Python language host for the
// Pulumi CLI, written for this project's offline test toolset: the official
// host is a Go module the module proxy here does not serve. It runs a program
// with the SDK's own pulumi-language-python-exec script (from the sdk/v3
// module, copied beside this binary by scripts/pulumi-cli), which sets up the
// runtime and runs the program's __main__.py.
//
// Pulumi.yaml `runtime.options.virtualenv` names the virtual environment
// (relative to the project folder) whose python runs the program; without
// it, python3 from the PATH. Other options (toolchain, typechecker), plugin
// discovery from installed packages, and everything but running a program
// answer Unimplemented or are ignored. See docs/contributing/pulumi-cli.md.
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
	host := &languageHost{Host: langhost.Host{Name: "pulumi-language-python"}}
	langhost.Serve(&host.Host, host, nil)
}

type languageHost struct {
	langhost.Host
}

// python is the interpreter for a program: the virtual environment's when
// the project names one, else python3 from the PATH; and the environment
// entries that make the virtual environment active.
func python(req *pulumirpc.RunRequest) (bin string, env []string, err error) {
	venv, _ := req.GetInfo().GetOptions().AsMap()["virtualenv"].(string)
	if venv == "" {
		bin, err = exec.LookPath("python3")
		if err != nil {
			return "", nil, fmt.Errorf("could not find python3 on the PATH: %w", err)
		}
		return bin, nil, nil
	}
	if !filepath.IsAbs(venv) {
		venv = filepath.Join(req.GetInfo().GetRootDirectory(), venv)
	}
	bin = filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(bin); err != nil {
		return "", nil, fmt.Errorf("the virtualenv %s has no bin/python: %w", venv, err)
	}
	return bin, []string{
		"VIRTUAL_ENV=" + venv,
		"PATH=" + filepath.Join(venv, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
	}, nil
}

func (h *languageHost) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return langhost.AboutTool("python3", "Python ", "--version")
}

func (h *languageHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	fail := langhost.Failed
	if req.GetAttachDebugger() {
		return fail(errors.New("this minimal language host cannot attach a debugger"))
	}
	programDir, entryPoint := langhost.Folders(req)

	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	execScript := filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")
	if _, err := os.Stat(execScript); err != nil {
		return fail(fmt.Errorf("the SDK's run script is not beside this host: %w", err))
	}
	bin, venvEnv, err := python(req)
	if err != nil {
		return fail(err)
	}
	// The Python SDK reads config keys as the engine writes them ("ns:name").
	cfgEnv, err := langhost.ConfigEnv(req, func(k string) (string, error) { return k, nil })
	if err != nil {
		return fail(err)
	}

	args := []string{"-u", execScript}
	flagIf := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	flagIf("monitor", req.GetMonitorAddress())
	flagIf("engine", h.Engine())
	flagIf("organization", req.GetOrganization())
	flagIf("project", req.GetProject())
	flagIf("root_directory", req.GetInfo().GetRootDirectory())
	flagIf("stack", req.GetStack())
	flagIf("pwd", programDir)
	flagIf("dry_run", strconv.FormatBool(req.GetDryRun()))
	flagIf("parallel", strconv.Itoa(int(req.GetParallel())))
	flagIf("tracing", h.Tracing)
	args = append(args, entryPoint)
	args = append(args, req.GetArgs()...)

	env := append(os.Environ(), venvEnv...)
	env = append(env, cfgEnv...)
	env = append(env, "PYTHONUNBUFFERED=true")
	return h.RunProgram(ctx, "Python", programDir, env, bin, args...)
}
