package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/devstack"
	"github.com/toolbus/toolbus/internal/wire/telemetry"
)

func runDev(ctx context.Context, g globals, args []string) error {
	fs := newFlags("dev")
	dataDir := fs.String("data", "./data", "directory for JetStream's files")
	port := fs.Int("port", 4222, "NATS port; 0 picks a free one")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	workspace := fs.String("workspace", "", "exposure workspace directory (bundles/*.yaml, agents/*.yaml)")
	policyFile := fs.String("policy", "", "policy file (YAML)")
	workerConfig := fs.String("worker-config", "", "worker configuration file (YAML, see docs/workers.md) whose namespaces the dev worker serves beside the demo tools")
	mcpPort := fs.Int("mcp-port", 8080, "port of the MCP front on 127.0.0.1, serving --agent (default dev) without tokens; 0 picks a free one (as it does when --port is 0), -1 starts none")
	consolePort := fs.Int("console-port", 8090, "port of the admin console on 127.0.0.1, served without a login to this machine's browsers unless $"+admin.TokensEnv+" holds tokens; 0 picks a free one (as it does when --port is 0), -1 starts none")
	traceURL := fs.String("trace-url", "", "the tracing UI's URL for a trace, with {trace_id} in it, linked from the console's call pages")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (host:port); see docs/operations.md")
	drain := fs.Duration("drain", 10*time.Second, "on Ctrl-C, how long running calls may finish before they are handed back (to run again at the next start); the rest then stops within 5s")
	verbose := fs.Bool("v", false, "log at debug level")
	if _, err := parseInterleaved(fs, args); err != nil {
		return flagsFailed(err)
	}
	mcpListen := ""
	if !flagSet(fs, "mcp-port") && *port == 0 {
		*mcpPort = 0
	}
	if *mcpPort >= 0 {
		mcpListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(*mcpPort))
	}
	consoleListen := ""
	if !flagSet(fs, "console-port") && *port == 0 {
		*consolePort = 0
	}
	if *consolePort >= 0 {
		consoleListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(*consolePort))
	}
	var consoleTokens map[string]admin.Operator
	if env := os.Getenv(admin.TokensEnv); env != "" && consoleListen != "" {
		var err error
		if consoleTokens, err = admin.ParseTokens(env); err != nil {
			return err
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: "toolbus-dev", Listen: *metricsListen, Logger: log})
	if err != nil {
		return err
	}
	defer tel.Close()
	stack, err := devstack.Start(ctx, devstack.Config{DataDir: *dataDir, Host: *host, Port: *port, Prefix: g.prefix, WorkspaceDir: *workspace, PolicyFile: *policyFile, WorkerConfig: *workerConfig, MCPListen: mcpListen, MCPAgent: g.agent, ConsoleListen: consoleListen, ConsoleTokens: consoleTokens, ConsoleTraceURL: *traceURL, Logger: log})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("start: %w (another process listens there, another toolbus dev perhaps: stop it, or choose other ports: --port 0 picks free ones for NATS, the MCP front and the console; --mcp-port and --console-port take a port of their own, or -1 for none)", err)
		}
		return fmt.Errorf("start: %w", err)
	}
	tel.SetReady(stack.Ready)
	url := stack.URL()
	fmt.Printf("Toolbus is running.\n")
	fmt.Printf("NATS URL: %s\n", url)
	if stack.MCPURL != "" {
		fmt.Printf("MCP endpoint: %s (no token needed on this machine; see docs/mcp.md)\n", stack.MCPURL)
	}
	if stack.ConsoleURL != "" {
		if len(consoleTokens) == 0 {
			fmt.Printf("Admin console: %s (no login on this machine: it serves loopback clients only; see docs/operations.md)\n", stack.ConsoleURL)
		} else {
			fmt.Printf("Admin console: %s (log in with a token of $%s)\n", stack.ConsoleURL, admin.TokensEnv)
		}
	}
	if addr := tel.Addr(); addr != "" {
		fmt.Printf("Metrics: http://%s/metrics (health: /healthz, /readyz)\n", addr)
	}
	fmt.Printf("Try, in another terminal:\n")
	fmt.Printf("  go run ./cmd/toolbus --server %s tools\n", url)
	if stack.DemoTools {
		fmt.Printf("  go run ./cmd/toolbus --server %s call demo-word_count '{\"text\":\"hello tool bus\"}'\n", url)
		fmt.Printf("  go run ./cmd/toolbus --server %s call --watch demo-sleep '{\"seconds\":5}'\n", url)
	}
	fmt.Printf("Press Ctrl-C to stop.\n")
	<-ctx.Done()
	// A second Ctrl-C ends the drain: the calls still running are handed
	// back at once.
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	stopCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	go func() {
		select {
		case <-again:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	fmt.Printf("stopping: running calls may finish for %v (--drain; Ctrl-C again hands them back now)\n", *drain)
	return stack.Stop(stopCtx)
}

// flagSet reports whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
