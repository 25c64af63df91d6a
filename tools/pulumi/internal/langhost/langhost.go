// Package langhost holds what this project's minimal Pulumi language hosts
// share: serving the LanguageRuntime service on the port the engine reads
// from stdout, the handshake, Cancel, the stack configuration a program gets
// in its environment, and running the program as a child process that an
// engine Cancel or a dropped Run interrupts. Each host (Node.js, Python, Go)
// adds only how its program is started. See docs/contributing/pulumi-cli.md.
package langhost

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// ExitCodeAlreadyReported is the exit code with which the Node.js and Python
// SDKs say "the user already saw an actionable message": the engine should
// stop without adding its own.
const ExitCodeAlreadyReported = 32

// Host is embedded by each language host. It answers GetPluginInfo,
// Handshake and Cancel, and GetRequiredPackages with no packages (the
// programs here name their plugins in Pulumi.yaml).
type Host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	Name    string // e.g. pulumi-language-python, for messages
	Tracing string

	mu            sync.Mutex
	engineAddress string

	cancelCtx  context.Context // done once Cancel was called
	cancelRuns context.CancelFunc
}

// Engine is the engine's gRPC address, from the command line or the handshake.
func (h *Host) Engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *Host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

func (h *Host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.mu.Lock()
	h.engineAddress = req.GetEngineAddress()
	h.mu.Unlock()
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *Host) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.cancelRuns()
	return &emptypb.Empty{}, nil
}

func (h *Host) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

// AboutTool is an About reply for the tool `name` found on the PATH, its
// version the first line `versionArgs` print, less `prefix`.
func AboutTool(name, prefix string, versionArgs ...string) (*pulumirpc.AboutResponse, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("could not find %s on the PATH: %w", name, err)
	}
	resp := &pulumirpc.AboutResponse{Executable: bin}
	if out, err := exec.Command(bin, versionArgs...).Output(); err == nil {
		resp.Version = strings.TrimPrefix(strings.TrimSpace(string(out)), prefix)
	}
	return resp, nil
}

// Folders is the program folder (the project folder when the program names
// none) and the entry point ("." when none is named).
func Folders(req *pulumirpc.RunRequest) (programDir, entryPoint string) {
	programDir = req.GetInfo().GetProgramDirectory()
	if programDir == "" {
		programDir = req.GetPwd()
	}
	entryPoint = req.GetInfo().GetEntryPoint()
	if entryPoint == "" {
		entryPoint = "."
	}
	return programDir, filepath.Clean(entryPoint)
}

// ConfigEnv is the stack configuration as the SDKs read it from the
// environment: PULUMI_CONFIG (a JSON object of key to value, keys as keyOf
// writes them) and PULUMI_CONFIG_SECRET_KEYS (a JSON array).
func ConfigEnv(req *pulumirpc.RunRequest, keyOf func(string) (string, error)) ([]string, error) {
	cfg := make(map[string]string, len(req.GetConfig()))
	for k, v := range req.GetConfig() {
		key, err := keyOf(k)
		if err != nil {
			return nil, err
		}
		cfg[key] = v
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretKeysJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, err
	}
	return []string{
		"PULUMI_CONFIG=" + string(cfgJSON),
		"PULUMI_CONFIG_SECRET_KEYS=" + string(secretKeysJSON),
	}, nil
}

// Failed is a Run reply that carries err as the program's error.
func Failed(err error) (*pulumirpc.RunResponse, error) {
	return &pulumirpc.RunResponse{Error: err.Error()}, nil
}

// RunProgram runs bin with args in dir with env until it exits, the engine
// calls Cancel, or the Run RPC goes away: interrupt first, kill after a grace
// period. Exit code 32 is a bail (the program already reported). what names
// the language in messages.
func (h *Host) RunProgram(
	ctx context.Context, what, dir string, env []string, bin string, args ...string,
) (*pulumirpc.RunResponse, error) {
	runCtx, cancel := context.WithCancel(h.cancelCtx)
	defer cancel()
	stopWatch := context.AfterFunc(ctx, cancel)
	defer stopWatch()

	cmd := exec.CommandContext(runCtx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	// Hand the child pipes (wrapped writers make exec copy through a pipe)
	// rather than our own stdout/stderr: node may switch its stdio file
	// descriptors to non-blocking mode, which would then affect this process.
	cmd.Stdout = struct{ io.Writer }{os.Stdout}
	cmd.Stderr = struct{ io.Writer }{os.Stderr}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second

	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			switch code := exitErr.ExitCode(); code {
			case ExitCodeAlreadyReported:
				return &pulumirpc.RunResponse{Bail: true}, nil
			case 0:
				return Failed(fmt.Errorf("program exited unexpectedly: %w", err))
			default:
				return Failed(fmt.Errorf("Program exited with non-zero exit code: %d", code))
			}
		}
		return Failed(fmt.Errorf("could not run the %s program: %w", what, err))
	}
	return &pulumirpc.RunResponse{}, nil
}

// Serve parses the command line the engine gives a language host (flags,
// then the engine's address), serves srv (which embeds h) and prints the
// port as the first line of stdout. check, when not nil, validates the
// parsed flags. It returns when the engine goes away or on SIGINT.
func Serve(h *Host, srv pulumirpc.LanguageRuntimeServer, check func() error) {
	tracing := flag.String("tracing", "", "tracing endpoint, forwarded to the program's runtime")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, h.Name+": "+format+"\n", args...)
		os.Exit(1)
	}
	if check != nil {
		if err := check(); err != nil {
			fail("%v", err)
		}
	}
	h.Tracing = *tracing
	// The engine passes its own gRPC address as the only positional argument.
	h.engineAddress = flag.Arg(0)
	h.cancelCtx, h.cancelRuns = context.WithCancel(context.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stopServing := make(chan bool)
	go func() {
		<-ctx.Done()
		close(stopServing)
	}()
	if h.engineAddress != "" {
		// Exit when the engine goes away instead of lingering as an orphan.
		if err := rpcutil.Healthcheck(ctx, h.engineAddress, 5*time.Minute, stop); err != nil {
			fail("health check: %v", err)
		}
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: stopServing,
		Init: func(s *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(s, srv)
			return nil
		},
	})
	if err != nil {
		fail("could not start the gRPC server: %v", err)
	}
	// The engine reads the port from our first line of stdout.
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fail("gRPC server stopped: %v", err)
	}
}
