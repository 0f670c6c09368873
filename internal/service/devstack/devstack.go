// Package devstack runs the whole of Toolbus in one process: an embedded
// NATS server with JetStream, a coordinator, a worker serving the demo
// tools (and the namespaces of a worker configuration file, when given), an
// indexer and, when asked, the MCP front and the admin console. It uses the same code paths as a distributed deployment.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/internal/service/workerconfig"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/telemetry"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Config configures the stack.
type Config struct {
	// DataDir holds JetStream's files. Required.
	DataDir string
	// Port of the NATS server; 0 picks a free one.
	Port int
	// Host of the NATS server. Defaults to 127.0.0.1.
	Host string
	// Prefix of subjects and resources. Defaults to "toolbus".
	Prefix string
	// WorkspaceDir and PolicyFile configure exposure and policy; see coordinator.Config.
	WorkspaceDir string
	PolicyFile   string
	// DemoSlots is how many demo calls run at once. Defaults to 64.
	DemoSlots int
	// WorkerConfig is a worker configuration file (see docs/workers.md)
	// whose namespaces the stack's worker serves beside the demo tools. A
	// file that names the demo namespace replaces the built-in one.
	WorkerConfig string
	// MCPListen is the address of the MCP front (docs/mcp.md), serving
	// MCPAgent on loopback without tokens; "" starts no front. It must be
	// a loopback address.
	MCPListen string
	// MCPAgent is the agent the MCP front serves. Defaults to "dev".
	MCPAgent string
	// ConsoleListen is the address of the admin console (docs/operations.md);
	// "" starts none. Without ConsoleTokens it must be a loopback address,
	// and the console serves loopback clients without a login.
	ConsoleListen string
	// ConsoleTokens are the console's login tokens; see admin.Config.Tokens.
	ConsoleTokens map[string]admin.Operator
	// ConsoleTraceURL is the tracing UI's URL template; see admin.Config.TraceURL.
	ConsoleTraceURL string
	Logger          *slog.Logger
}

// Stack is a running all-in-one Toolbus.
type Stack struct {
	Server      *natsserver.Server
	Coordinator *coordinator.Coordinator
	Worker      *worker.Worker
	Indexer     *indexer.Indexer
	// DemoTools reports whether the worker serves the built-in demo
	// namespace: a worker configuration that names it replaces it.
	DemoTools bool
	// MCPURL is the MCP front's endpoint, when one was started.
	MCPURL  string
	mcpHTTP *http.Server
	// ConsoleURL is the admin console's address, when one was started.
	ConsoleURL  string
	consoleHTTP *http.Server
	conns       []*nats.Conn
	// ready is what Ready checks: the coordinator's streams and buckets,
	// and the consumers of the worker's namespaces.
	ready []telemetry.NATSReady
}

// URL is the NATS URL that clients connect to.
// devLearnInterval is how often toolbus dev's indexer folds new usage
// evidence into its index.
const devLearnInterval = 10 * time.Second

func (s *Stack) URL() string { return s.Server.URL() }

// Start starts the stack.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DemoSlots == 0 {
		cfg.DemoSlots = 64
	}
	// The file is read first, so that its mistakes show before anything starts.
	var configured []worker.Namespace
	if cfg.WorkerConfig != "" {
		file, err := workerconfig.Load(cfg.WorkerConfig)
		if err != nil {
			return nil, err
		}
		if configured, err = file.WorkerNamespaces(cfg.Logger.With("component", "worker")); err != nil {
			return nil, err
		}
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: cfg.DataDir, Host: cfg.Host, Port: cfg.Port})
	if err != nil {
		return nil, err
	}
	s := &Stack{Server: srv}
	defer func() {
		if err != nil {
			s.Stop(context.Background())
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		nc, err := nats.Connect(srv.URL(), nats.Name(name), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", name, err)
		}
		s.conns = append(s.conns, nc)
		return nc, nil
	}
	coordConn, err := connect("toolbus-coordinator")
	if err != nil {
		return nil, err
	}
	s.Coordinator, err = coordinator.New(coordinator.Config{
		Conn:         coordConn,
		Prefix:       cfg.Prefix,
		WorkspaceDir: cfg.WorkspaceDir,
		PolicyFile:   cfg.PolicyFile,
		Logger:       cfg.Logger.With("component", "coordinator"),
	})
	if err != nil {
		return nil, err
	}
	if err := s.Coordinator.Start(ctx); err != nil {
		s.Coordinator = nil
		return nil, err
	}
	workerConn, err := connect("toolbus-worker")
	if err != nil {
		return nil, err
	}
	s.Worker, err = worker.New(worker.Config{Conn: workerConn, Prefix: cfg.Prefix, Logger: cfg.Logger.With("component", "worker")})
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(configured, func(ns worker.Namespace) bool { return ns.Name == demo.Name }) {
		if err := s.Worker.Serve(worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: cfg.DemoSlots}); err != nil {
			return nil, err
		}
		s.DemoTools = true
	}
	for _, ns := range configured {
		if err := s.Worker.Serve(ns); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, cfg.WorkerConfig)
		}
	}
	if err := s.Worker.Start(ctx); err != nil {
		s.Worker = nil
		return nil, err
	}
	if err := s.readiness(cfg.Prefix, coordConn, workerConn, configured); err != nil {
		return nil, err
	}
	indexerConn, err := connect("toolbus-indexer")
	if err != nil {
		return nil, err
	}
	// One machine's small catalog: what use teaches shows within seconds.
	s.Indexer, err = indexer.New(indexer.Config{Conn: indexerConn, Prefix: cfg.Prefix, LearnInterval: devLearnInterval, Logger: cfg.Logger.With("component", "indexer")})
	if err != nil {
		return nil, err
	}
	if err := s.Indexer.Start(ctx); err != nil {
		s.Indexer = nil
		return nil, err
	}
	if cfg.MCPListen != "" {
		if err := s.startMCP(cfg, connect); err != nil {
			return nil, err
		}
	}
	if cfg.ConsoleListen != "" {
		if err := s.startConsole(cfg, connect); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startMCP starts the MCP front on cfg.MCPListen, a client of the stack
// like any other.
func (s *Stack) startMCP(cfg Config, connect func(string) (*nats.Conn, error)) error {
	if !mcpfront.Loopback(cfg.MCPListen) {
		return fmt.Errorf("the MCP front of the dev stack serves loopback only; %s is not", cfg.MCPListen)
	}
	if cfg.MCPAgent == "" {
		cfg.MCPAgent = "dev"
	}
	nc, err := connect("toolbus-mcp")
	if err != nil {
		return err
	}
	c, err := client.New(nc, client.Options{Prefix: cfg.Prefix})
	if err != nil {
		return err
	}
	front, err := mcpfront.New(mcpfront.Config{Client: c, Agent: cfg.MCPAgent, Logger: cfg.Logger.With("component", "mcp")})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.MCPListen)
	if err != nil {
		return fmt.Errorf("MCP front: %w", err)
	}
	s.mcpHTTP = &http.Server{Handler: front.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.MCPURL = "http://" + ln.Addr().String() + "/mcp"
	go func() { _ = s.mcpHTTP.Serve(ln) }()
	return nil
}

// startConsole starts the admin console on cfg.ConsoleListen, a client of
// the stack with the operator's rights that the stack's single account
// gives every connection.
func (s *Stack) startConsole(cfg Config, connect func(string) (*nats.Conn, error)) error {
	if len(cfg.ConsoleTokens) == 0 && !mcpfront.Loopback(cfg.ConsoleListen) {
		return fmt.Errorf("the admin console of the dev stack serves loopback only without tokens; %s is not", cfg.ConsoleListen)
	}
	nc, err := connect("toolbus-console")
	if err != nil {
		return err
	}
	// No agent: the console lists the whole catalog, not an agent's view.
	c, err := client.New(nc, client.Options{Prefix: cfg.Prefix})
	if err != nil {
		return err
	}
	console, err := admin.New(admin.Config{
		Client:                c,
		Prefix:                cfg.Prefix,
		Tokens:                cfg.ConsoleTokens,
		LoopbackWithoutTokens: len(cfg.ConsoleTokens) == 0,
		TraceURL:              cfg.ConsoleTraceURL,
		Logger:                cfg.Logger.With("component", "console"),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.ConsoleListen)
	if err != nil {
		return fmt.Errorf("admin console: %w", err)
	}
	s.consoleHTTP = &http.Server{Handler: console.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.ConsoleURL = "http://" + ln.Addr().String() + "/"
	go func() { _ = s.consoleHTTP.Serve(ln) }()
	return nil
}

func (s *Stack) readiness(prefix string, coordConn, workerConn *nats.Conn, configured []worker.Namespace) error {
	if prefix == "" {
		prefix = messages.DefaultPrefix
	}
	names, err := messages.NewNames(prefix)
	if err != nil {
		return err
	}
	served := []string{demo.Name}
	for _, ns := range configured {
		if ns.Name != demo.Name {
			served = append(served, ns.Name)
		}
	}
	coordinatorReady := telemetry.CoordinatorResources(names)
	coordinatorReady.Conn = coordConn
	workerReady, err := telemetry.WorkerResources(names, served)
	if err != nil {
		return err
	}
	workerReady.Conn = workerConn
	s.ready = []telemetry.NATSReady{coordinatorReady, workerReady}
	return nil
}

// Ready reports whether the stack can serve calls: its connections are
// up, and the streams, buckets and consumers it uses answer.
func (s *Stack) Ready(ctx context.Context) error {
	for _, r := range s.ready {
		if err := r.Check(ctx); err != nil {
			return err
		}
	}
	return nil
}

// StopBound bounds how long Stop takes, past the drain, to stop what
// remains once the running calls have finished or been handed back: the
// coordinator, the indexer, the connections and the NATS server.
const StopBound = 5 * time.Second

// Stop stops everything. Running calls may finish until ctx ends (the
// drain), and so may the MCP front's requests; then the calls still
// running are handed back, to run again at the next start, the front's
// connections are cut, and the rest stops within StopBound of its own.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	if s.consoleHTTP != nil {
		// Its event streams last as long as their calls; they are cut.
		errs = append(errs, s.consoleHTTP.Close())
	}
	var front sync.WaitGroup
	if s.mcpHTTP != nil {
		front.Add(1)
		go func() {
			defer front.Done()
			if err := s.mcpHTTP.Shutdown(ctx); err != nil {
				// The drain is over: the requests still open are cut.
				_ = s.mcpHTTP.Close()
			}
		}()
	}
	if s.Worker != nil {
		errs = append(errs, s.Worker.Stop(ctx))
	}
	front.Wait()
	rest, cancel := context.WithTimeout(context.WithoutCancel(ctx), StopBound)
	defer cancel()
	if s.Indexer != nil {
		errs = append(errs, s.Indexer.Stop(rest))
	}
	if s.Coordinator != nil {
		errs = append(errs, s.Coordinator.Stop(rest))
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	if s.Server != nil {
		s.Server.Stop()
	}
	return errors.Join(errs...)
}
