// Command pulumi-language-nodejs is a minimal Node.js language host for the
// Pulumi CLI, written for this project's offline test toolset.
//
// Why it exists: the Go module proxy reachable here does not serve the
// official host (module github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3),
// so we cannot build it. The engine only needs a few RPCs from a language
// host to run a program (`pulumi preview/up/destroy/refresh`):
//
//   - GetPluginInfo: our version.
//   - GetRequiredPackages: resource plugins named by top-level node_modules
//     packages whose package.json says {"pulumi": {"resource": true}}.
//   - Run: start `node <@pulumi/pulumi/cmd/run> --monitor ... <entry point>`
//     in the program folder with the stack config in PULUMI_CONFIG.
//   - Handshake, Cancel, About.
//
// What every host here shares (serving, handshake, config, running the
// program) is in tools/pulumi/internal/langhost.
//
// Everything else (pulumi new/install/convert/package, policy packs, plugins
// written in Node.js, synchronous invokes, debugger attach, the bun runtime)
// answers Unimplemented. See docs/contributing/pulumi-cli.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"pulumi-kvm-proxy/tools/pulumi/internal/langhost"
)

func main() {
	runtime := flag.String("runtime", "nodejs", "only nodejs is supported")
	host := &languageHost{Host: langhost.Host{Name: "pulumi-language-nodejs"}}
	langhost.Serve(&host.Host, host, func() error {
		if *runtime != "nodejs" {
			return fmt.Errorf("unsupported runtime %q (this minimal host runs node only)", *runtime)
		}
		return nil
	})
}

type languageHost struct {
	langhost.Host
}

func (h *languageHost) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return langhost.AboutTool("node", "", "--version")
}

// packageJSON holds the package.json fields that name a Pulumi resource plugin.
type packageJSON struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Pulumi  struct {
		Resource bool   `json:"resource"`
		Name     string `json:"name"`
		Version  string `json:"version"`
		Server   string `json:"server"`
	} `json:"pulumi"`
}

// GetRequiredPackages reports the resource plugins of the top-level packages
// (and scoped packages) under <program>/node_modules. Dynamic providers need
// none: their plugin, pulumi-resource-pulumi-nodejs, is bundled with the CLI.
func (h *languageHost) GetRequiredPackages(
	_ context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	root := filepath.Join(req.GetInfo().GetProgramDirectory(), "node_modules")
	var dirs []string
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."):
		case strings.HasPrefix(name, "@"):
			scoped, _ := os.ReadDir(filepath.Join(root, name))
			for _, s := range scoped {
				dirs = append(dirs, filepath.Join(root, name, s.Name()))
			}
		default:
			dirs = append(dirs, filepath.Join(root, name))
		}
	}

	var packages []*pulumirpc.PackageDependency
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil {
			continue
		}
		var info packageJSON
		if json.Unmarshal(data, &info) != nil || !info.Pulumi.Resource {
			continue
		}
		name := info.Pulumi.Name
		if name == "" {
			name = strings.TrimPrefix(strings.TrimPrefix(info.Name, "@pulumi/"), "@")
		}
		ver := info.Pulumi.Version
		if ver == "" {
			ver = info.Version
		}
		if name == "" || ver == "" {
			continue
		}
		if !strings.HasPrefix(ver, "v") {
			ver = "v" + ver
		}
		packages = append(packages, &pulumirpc.PackageDependency{
			Name:    name,
			Kind:    "resource",
			Version: ver,
			Server:  info.Pulumi.Server,
		})
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: packages}, nil
}

// resolveModule asks node where `mod` resolves from dir (the program folder),
// so the program's own @pulumi/pulumi is used.
func resolveModule(nodeBin, dir, mod string) (string, error) {
	cmd := exec.Command(nodeBin, "-e", "console.log(require.resolve(process.argv[1]))", mod)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("could not resolve %s from %s (is @pulumi/pulumi installed there?): %s",
				mod, dir, strings.TrimSpace(string(exitErr.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// runOptions are the Pulumi.yaml `runtime.options` this host understands.
type runOptions struct {
	typescript bool
	tsconfig   string
	nodeargs   []string
}

func parseRunOptions(m map[string]any) (runOptions, error) {
	opts := runOptions{typescript: true}
	if v, ok := m["typescript"]; ok {
		b, ok := v.(bool)
		if !ok {
			return opts, errors.New("runtime option typescript must be a boolean")
		}
		opts.typescript = b
	}
	if v, ok := m["tsconfig"]; ok {
		s, ok := v.(string)
		if !ok {
			return opts, errors.New("runtime option tsconfig must be a string")
		}
		opts.tsconfig = s
	}
	if v, ok := m["nodeargs"]; ok {
		s, ok := v.(string)
		if !ok {
			return opts, errors.New("runtime option nodeargs must be a string")
		}
		// Plain whitespace splitting: quoted arguments are not supported.
		opts.nodeargs = strings.Fields(s)
	}
	return opts, nil
}

func (h *languageHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	fail := langhost.Failed
	if req.GetAttachDebugger() {
		return fail(errors.New("this minimal language host cannot attach a debugger"))
	}
	programDir, entryPoint := langhost.Folders(req)

	opts, err := parseRunOptions(req.GetInfo().GetOptions().AsMap())
	if err != nil {
		return fail(err)
	}

	nodeBin, err := exec.LookPath("node")
	if err != nil {
		return fail(fmt.Errorf("could not find node on the PATH: %w", err))
	}
	runModule := os.Getenv("PULUMI_LANGUAGE_NODEJS_RUN_PATH")
	if runModule == "" {
		runModule = "@pulumi/pulumi/cmd/run"
	}
	runScript, err := resolveModule(nodeBin, programDir, runModule)
	if err != nil {
		return fail(err)
	}

	// Config keys go to the SDK in the "<namespace>:config:<name>" form, which
	// every @pulumi/pulumi version reads.
	cfgEnv, err := langhost.ConfigEnv(req, func(k string) (string, error) {
		key, err := config.ParseKey(k)
		if err != nil {
			return "", err
		}
		return key.Namespace() + ":config:" + key.Name(), nil
	})
	if err != nil {
		return fail(err)
	}

	args := append([]string{}, opts.nodeargs...)
	args = append(args, runScript)
	flagIf := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	// The SDK talks to the engine's resource monitor directly (the official
	// host puts a forwarding proxy in between, needed only for synchronous
	// invokes, which this host does not offer).
	flagIf("monitor", req.GetMonitorAddress())
	flagIf("engine", h.Engine())
	flagIf("organization", req.GetOrganization())
	flagIf("project", req.GetProject())
	flagIf("root-directory", req.GetInfo().GetRootDirectory())
	flagIf("stack", req.GetStack())
	flagIf("pwd", programDir)
	if req.GetDryRun() {
		args = append(args, "--dry-run")
	}
	flagIf("parallel", strconv.Itoa(int(req.GetParallel())))
	flagIf("tracing", h.Tracing)
	args = append(args, entryPoint)
	args = append(args, req.GetArgs()...)

	env := append(os.Environ(), cfgEnv...)
	if opts.typescript {
		env = append(env, "PULUMI_NODEJS_TYPESCRIPT=true")
	}
	if opts.tsconfig != "" {
		env = append(env, "PULUMI_NODEJS_TSCONFIG_PATH="+opts.tsconfig)
	}
	return h.RunProgram(ctx, "Node.js", programDir, env, nodeBin, args...)
}
