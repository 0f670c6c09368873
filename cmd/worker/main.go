// Command worker executes Toolbus calls for the namespaces it serves. Run
// as many as load needs; each namespace's calls are shared among its workers.
//
// The namespaces and their sources (MCP servers, OpenAPI services, the demo
// tools) come from a YAML file given with --config; docs/workers.md
// describes it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/natsflags"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/workerconfig"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

const usageHead = `Usage: worker [flags] --config FILE | --demo

Serves the namespaces that FILE lists, with their sources: MCP servers
(stdio, SSE, streamable HTTP), OpenAPI 3.x and Swagger 2.0 services, and the
demo tools. The file's format — every key and its default, how MCP tools
and OpenAPI operations become tools, restarts and retries — is described
in docs/workers.md.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		// Every error names the worker once: the worker package's own
		// errors start with "worker:", and run prefixes the others.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// errUsage is returned for flags that do not parse; the flag package has
// said why.
var errUsage = errors.New("worker: bad usage")

// run serves until ctx ends. Its errors start with "worker:".
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	conn := natsflags.Register(fs)
	id := fs.String("id", "", "worker ID (default: host name and a random suffix)")
	demoNS := fs.Bool("demo", false, "serve the demo namespace")
	configFile := fs.String("config", "", "YAML file listing the namespaces to serve and their sources (MCP servers, OpenAPI services, demo tools); see docs/workers.md")
	slots := fs.Int("slots", 16, "calls of each namespace this worker runs at once, unless the config file says")
	maxAttempts := fs.Int("max-attempts", 3, "deliveries of a call before it fails, unless the config file says")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "how long a call may go without a heartbeat before another worker gets it")
	heartbeat := fs.Duration("heartbeat", 5*time.Second, "liveness heartbeat interval")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (host:port); see docs/operations.md")
	drain := fs.Duration("drain", 30*time.Second, "on shutdown, how long running calls may finish before they are handed back")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}

	log := conn.Logger()
	// The file is read before connecting, so that its mistakes show at once.
	var configured []worker.Namespace
	if *configFile != "" {
		cfg, err := workerconfig.Load(*configFile)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		if configured, err = cfg.WorkerNamespaces(log); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if !*demoNS && len(configured) == 0 {
		return errors.New("worker: nothing to serve: pass --config FILE or --demo")
	}
	names, err := messages.NewNames(conn.Prefix)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: "toolbus-worker", Listen: *metricsListen, Logger: log})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer tel.Close()
	nc, err := conn.Connect("toolbus-worker")
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer nc.Close()
	w, err := worker.New(worker.Config{Conn: nc, Prefix: conn.Prefix, ID: *id, AckWait: *ackWait, HeartbeatInterval: *heartbeat, Logger: log})
	if err != nil {
		return err
	}
	var served []string
	if *demoNS {
		served = append(served, demo.Name)
		if err := w.Serve(worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: *slots, MaxAttempts: *maxAttempts}); err != nil {
			return err
		}
	}
	for _, ns := range configured {
		if ns.Slots == 0 {
			ns.Slots = *slots
		}
		if ns.MaxAttempts == 0 {
			ns.MaxAttempts = *maxAttempts
		}
		if err := w.Serve(ns); err != nil {
			return fmt.Errorf("%w (in %s)", err, *configFile)
		}
		served = append(served, ns.Name)
	}
	ready, err := telemetry.WorkerResources(names, served)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	ready.Conn = nc
	if err := w.Start(ctx); err != nil {
		return err
	}
	tel.SetReady(ready.Check)
	fmt.Fprintf(stderr, "worker %s ready\n", w.ID())
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return w.Stop(stopCtx)
}
