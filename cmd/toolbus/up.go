package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// runUp runs an installation made by toolbus setup on this host: its
// nats-server nodes, the coordinators, a worker of its namespaces, the
// indexer, the console and the MCP front, each a process of its own
// logging to DIR/log/<name>.log. A process that stops is started again
// (after 1 s, doubling up to 30 s while it keeps failing); SIGINT or
// SIGTERM stops them all, the services before the servers.
func runUp(ctx context.Context, g globals, args []string) error {
	opts, err := parseUp(args)
	if opts == nil {
		return err
	}
	in, err := openInstallation(opts.dir)
	if err != nil {
		return err
	}
	server, err := exec.LookPath(opts.natsServer)
	if err != nil {
		return usageError(fmt.Sprintf("up: %v: install the official nats-server (from this module: go install github.com/nats-io/nats-server/v2), or give --nats-server PROGRAM", err))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	workerArgs, err := opts.workerArgs(in)
	if err != nil {
		return err
	}
	st := in.State()
	urls := in.URLs()
	sup := &supervisor{logDir: filepath.Join(in.Dir(), "log")}
	if err := os.MkdirAll(sup.logDir, 0o700); err != nil {
		return err
	}
	defer sup.stop()

	for i, n := range st.Nodes {
		sup.start("nats-"+n.Name, server, "-c", in.NodeConfig(i))
	}
	if err := waitForServers(ctx, in); err != nil {
		return err
	}
	o := in.OIDC()
	if o != nil {
		sup.start("authn", self, "authn", "--dir", in.Dir())
	}
	coordinator, err := program(self, "coordinator")
	if err != nil {
		return err
	}
	coordArgs := opts.coordinatorArgs(in, urls)
	for i := range opts.coordinators {
		sup.start(fmt.Sprintf("coordinator-%d", i+1), coordinator, coordArgs...)
		if i == 0 {
			// The first one makes the streams: the others, the worker and
			// the indexer need them.
			if err := waitForCoordinator(ctx, in); err != nil {
				return err
			}
		}
	}
	worker, err := program(self, "worker")
	if err != nil {
		return err
	}
	sup.start("worker", worker, append([]string{"--server", urls}, workerArgs...)...)
	indexer, err := program(self, "indexer")
	if err != nil {
		return err
	}
	sup.start("indexer", indexer, "--server", urls, "--creds", in.CredsFile(setup.UserIndexer))
	consoleArgs, mcpArgs := opts.frontArgs(in, urls, o)
	sup.start("console", self, consoleArgs...)
	sup.start("mcp", self, mcpArgs...)
	for _, probe := range []string{"http://" + opts.consoleListen + "/login", "http://" + opts.mcpListen + "/healthz"} {
		if err := waitHTTP(ctx, probe); err != nil {
			return err
		}
	}
	fmt.Printf("toolbus up: ready: NATS %s; console http://%s/ (tokens in %s); MCP http://%s/mcp (tokens in %s); logs in %s\n",
		urls, opts.consoleListen, in.ConsoleTokens(), opts.mcpListen, in.MCPTokens(), sup.logDir)
	<-ctx.Done()
	fmt.Println("toolbus up: stopping")
	return nil
}

// upOptions are toolbus up's flags.
type upOptions struct {
	dir           string
	workerConfig  string
	workspace     string
	policy        string
	coordinators  int
	consoleListen string
	mcpListen     string
	natsServer    string
	mcpResource   string
	consoleURL    string
}

// parseUp reads toolbus up's command line; after --help, which the flags
// answered, there are neither options nor an error.
func parseUp(args []string) (*upOptions, error) {
	fs := newFlags("up")
	dir := dirFlag(fs)
	o := &upOptions{}
	fs.StringVar(&o.workerConfig, "worker-config", "", "the worker's configuration (docs/workers.md), each namespace served with its own credentials; without it, the demo tools in namespace demo, which the installation must have")
	fs.StringVar(&o.workspace, "workspace", "", "the coordinators' exposure workspace directory")
	fs.StringVar(&o.policy, "policy", "", "the coordinators' policy file")
	fs.IntVar(&o.coordinators, "coordinators", 2, "how many coordinators to run")
	fs.StringVar(&o.consoleListen, "console-listen", envOr("TOOLBUS_CONSOLE_LISTEN", "127.0.0.1:8090"), "address of the console's HTTP listener; its tokens are DIR/console-tokens.yaml ($TOOLBUS_CONSOLE_LISTEN)")
	fs.StringVar(&o.mcpListen, "mcp-listen", envOr("TOOLBUS_MCP_LISTEN", "127.0.0.1:8080"), "address of the MCP front's HTTP listener; its tokens are DIR/mcp-tokens.yaml ($TOOLBUS_MCP_LISTEN)")
	fs.StringVar(&o.natsServer, "nats-server", "nats-server", "the nats-server program, looked up in PATH")
	fs.StringVar(&o.mcpResource, "mcp-resource", "", "with an identity provider: the MCP front's URL as clients reach it, its OAuth resource (default http://MCP-LISTEN/mcp)")
	fs.StringVar(&o.consoleURL, "console-url", "", "with an identity provider and its console client: the console's URL as browsers reach it (default http://CONSOLE-LISTEN)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, flagsFailed(err)
	}
	if len(pos) > 0 {
		return nil, usageError(fmt.Sprintf("toolbus up takes no arguments (got %q)", pos))
	}
	if o.coordinators < 1 {
		return nil, usageError("toolbus up: --coordinators must be at least 1")
	}
	o.dir = *dir
	return o, nil
}

// program is the path of one of Toolbus's programs: the one beside self,
// else the one in PATH.
func program(self, name string) (string, error) {
	beside := filepath.Join(filepath.Dir(self), name)
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", usageError(fmt.Sprintf("up: %s is neither beside %s nor in PATH: install it with go install ./cmd/%s", name, self, name))
	}
	return path, nil
}

// workerArgs serve each namespace with its own credentials: those of
// --worker-config, else the demo tools of namespace demo.
func (opts *upOptions) workerArgs(in *setup.Installation) ([]string, error) {
	args := []string{"--creds-dir", in.CredsDir()}
	switch {
	case opts.workerConfig != "":
		abs, err := filepath.Abs(opts.workerConfig)
		if err != nil {
			return nil, err
		}
		return append(args, "--config", abs), nil
	case contains(in.Namespaces(), "demo"):
		return append(args, "--demo"), nil
	}
	return nil, usageError("up: give the worker's configuration, --worker-config FILE (the installation has no namespace demo for the demo tools)")
}

// coordinatorArgs are every coordinator's: streams replicated on every
// node of a cluster.
func (opts *upOptions) coordinatorArgs(in *setup.Installation, urls string) []string {
	args := []string{"--server", urls, "--creds", in.CredsFile(setup.UserCoordinator)}
	if nodes := len(in.State().Nodes); nodes > 1 {
		args = append(args, "--replicas", strconv.Itoa(nodes))
	}
	if opts.workspace != "" {
		args = append(args, "--workspace", opts.workspace)
	}
	if opts.policy != "" {
		args = append(args, "--policy", opts.policy)
	}
	return args
}

// frontArgs are the console's and the MCP front's: with the installation's
// identity provider o, the front takes its tokens, and the console logs
// operators in with it when the provider has a console client and makes
// operators.
func (opts *upOptions) frontArgs(in *setup.Installation, urls string, o *setup.OIDC) (console, mcp []string) {
	console = []string{"--server", urls, "--creds", in.CredsFile(setup.UserAdmin), "console", "--listen", opts.consoleListen, "--tokens", in.ConsoleTokens()}
	mcp = []string{"--server", urls, "--creds", in.CredsFile(setup.UserMCP), "mcp", "--listen", opts.mcpListen, "--tokens", in.MCPTokens()}
	if o == nil {
		return console, mcp
	}
	mcp = append(mcp, "--oidc-issuer", o.Issuer, "--oidc-agents-claim", o.AgentsClaim)
	if opts.mcpResource != "" {
		mcp = append(mcp, "--resource", opts.mcpResource)
	}
	switch {
	case o.ConsoleClientID == "":
	case o.OperatorsClaim == "":
		fmt.Fprintf(os.Stderr, "toolbus up: the console logs in with tokens only: the identity provider makes no operators (toolbus setup --oidc-operators-claim)\n")
	default:
		console = append(console, "--oidc-issuer", o.Issuer, "--oidc-client-id", o.ConsoleClientID, "--oidc-operators-claim", o.OperatorsClaim)
		if o.OperatorsValue != "" {
			console = append(console, "--oidc-operators-value", o.OperatorsValue)
		}
		if opts.consoleURL != "" {
			console = append(console, "--oidc-redirect-url", strings.TrimSuffix(opts.consoleURL, "/")+"/login/oidc/callback")
		}
	}
	return console, mcp
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// waitForServers waits until every node takes connections, for at most a minute.
func waitForServers(ctx context.Context, in *setup.Installation) error {
	deadline := time.Now().Add(time.Minute)
	for _, n := range in.State().Nodes {
		for {
			nc, err := nats.Connect("nats://"+n.Client, nats.UserCredentials(in.CredsFile(setup.UserSystem)), nats.Timeout(time.Second))
			if err == nil {
				nc.Close()
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("up: node %s (%s) does not take connections: %w (see its log)", n.Name, n.Client, err)
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// waitForCoordinator waits until a coordinator answers toolbus.api.info to
// the installation's operator, for at most a minute.
func waitForCoordinator(ctx context.Context, in *setup.Installation) error {
	nc, err := nats.Connect(in.URLs(), nats.UserCredentials(in.CredsFile(setup.UserAdmin)), nats.CustomInboxPrefix("_INBOX_"+setup.UserAdmin), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	defer nc.Close()
	subject := in.State().Prefix + ".api.info"
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := nc.Request(subject, nil, 2*time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("up: no coordinator answers %s: %w (see log/coordinator-1.log)", subject, err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// waitHTTP waits until url answers, for at most a minute.
func waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("up: %s does not answer: %w (see the logs)", url, err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// errQuit ends a supervised process's loop.
var errQuit = fmt.Errorf("stopped")

// supervisor runs processes and starts each again when it stops, until
// stop.
type supervisor struct {
	logDir string
	mu     sync.Mutex
	procs  []*supervised
}

type supervised struct {
	name string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the loop has ended
	quit chan struct{}
}

// restartPolicy is how a supervised process is started again: after 1 s,
// doubling up to 30 s while it keeps stopping within a minute (the pauses
// start again from 1 s after a run that lasted longer). The processes are
// this host's own: no crowd restarts in step, so the pauses are whole.
var restartPolicy = transport.RetryPolicy{Initial: time.Second, Max: 30 * time.Second, NoJitter: true, Retryable: func(error) bool { return true }}

// start runs the program under name until stop, starting it again when it
// stops.
func (s *supervisor) start(name, program string, args ...string) {
	p := &supervised{name: name, done: make(chan struct{}), quit: make(chan struct{})}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	go func() {
		defer close(p.done)
		// On Linux a child is stopped when the thread that started it ends
		// (ownProcessGroup): this goroutine keeps its thread while the
		// child runs.
		runtime.LockOSThread()
		restarts := restartPolicy.Start()
		for {
			logf, err := os.OpenFile(filepath.Join(s.logDir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				fmt.Fprintf(os.Stderr, "toolbus up: %s: %v\n", name, err)
				return
			}
			cmd := exec.Command(program, args...)
			cmd.Stdout, cmd.Stderr = logf, logf
			ownProcessGroup(cmd)
			began := time.Now()
			p.mu.Lock()
			select {
			case <-p.quit:
				err = errQuit
			default:
				if err = cmd.Start(); err == nil {
					p.cmd = cmd
				}
			}
			p.mu.Unlock()
			if err == errQuit {
				logf.Close()
				return
			}
			if err == nil {
				err = cmd.Wait()
			}
			logf.Close()
			select {
			case <-p.quit:
				return
			default:
			}
			if time.Since(began) > time.Minute {
				restarts.Reset()
			}
			pause, _ := restarts.Failed(err)
			how := "exited"
			if err != nil {
				how = err.Error()
			}
			fmt.Fprintf(os.Stderr, "toolbus up: %s stopped (%s); starting it again in %v (log: %s)\n", name, how, pause, filepath.Join(s.logDir, name+".log"))
			select {
			case <-p.quit:
				return
			case <-time.After(pause):
			}
		}
	}()
}

// stop stops every process, the latest started first (the services before
// the servers), each with SIGTERM and, 45 s later, SIGKILL.
func (s *supervisor) stop() {
	s.mu.Lock()
	procs := s.procs
	s.mu.Unlock()
	// The services stop together, then the servers.
	var services, servers []*supervised
	for _, p := range procs {
		if strings.HasPrefix(p.name, "nats-") {
			servers = append(servers, p)
		} else {
			services = append(services, p)
		}
	}
	for _, group := range [][]*supervised{services, servers} {
		for _, p := range group {
			p.mu.Lock()
			close(p.quit)
			if p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
			p.mu.Unlock()
		}
		for _, p := range group {
			select {
			case <-p.done:
			case <-time.After(45 * time.Second):
				p.mu.Lock()
				if p.cmd != nil && p.cmd.Process != nil {
					_ = p.cmd.Process.Kill()
				}
				p.mu.Unlock()
				<-p.done
			}
		}
	}
}
