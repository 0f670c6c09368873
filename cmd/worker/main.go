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
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/workerconfig"
	"github.com/toolbus/toolbus/internal/wire/instance"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/telemetry"
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
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := o.conn.Logger()
	// The file is read before connecting, so that its mistakes show at once.
	namespaces, err := o.namespaces(log)
	if err != nil {
		return err
	}
	names, err := messages.NewNames(o.conn.Prefix)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: "toolbus-worker", Listen: o.metricsListen, Logger: log})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer tel.Close()
	if o.id == "" {
		o.id = instance.ID("worker")
	}
	groups, err := o.connect(namespaces, log)
	if err != nil {
		return err
	}
	defer closeAll(groups)
	ready, err := readiness(names, groups)
	if err != nil {
		return err
	}
	if err := startAll(ctx, groups); err != nil {
		return err
	}
	tel.SetReady(ready)
	fmt.Fprintf(stderr, "worker %s ready\n", o.id)
	<-ctx.Done()
	return stopAll(groups, o.drain)
}

// options are the worker's flags.
type options struct {
	conn          *natsflags.Flags
	id            string
	demo          bool
	configFile    string
	slots         int
	maxAttempts   int
	ackWait       time.Duration
	heartbeat     time.Duration
	metricsListen string
	credsDir      string
	drain         time.Duration
}

// parseFlags reads the command line: --help is flag.ErrHelp, a flag that
// does not parse errUsage (the flag package has said why).
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	o := &options{conn: natsflags.Register(fs)}
	fs.StringVar(&o.id, "id", "", "worker ID (default: host name and a random suffix)")
	fs.BoolVar(&o.demo, "demo", false, "serve the demo namespace")
	fs.StringVar(&o.configFile, "config", "", "YAML file listing the namespaces to serve and their sources (MCP servers, OpenAPI services, demo tools); see docs/workers.md")
	fs.IntVar(&o.slots, "slots", 16, "calls of each namespace this worker runs at once, unless the config file says")
	fs.IntVar(&o.maxAttempts, "max-attempts", 3, "deliveries of a call before it fails, unless the config file says")
	fs.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "how long a call may go without a heartbeat before another worker gets it")
	fs.DurationVar(&o.heartbeat, "heartbeat", 5*time.Second, "liveness heartbeat interval")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (host:port); see docs/operations.md")
	fs.StringVar(&o.credsDir, "creds-dir", os.Getenv("TOOLBUS_CREDS_DIR"), "serve each namespace on a connection of its own, with the credentials worker_<namespace>.creds of this directory (toolbus setup writes them) ($TOOLBUS_CREDS_DIR)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "on shutdown, how long running calls may finish before they are handed back")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	return o, nil
}

// namespaces are the namespaces to serve: the demo's with --demo, and the
// config file's, whose slots and attempts default to the flags'.
func (o *options) namespaces(log *slog.Logger) ([]worker.Namespace, error) {
	var configured []worker.Namespace
	if o.configFile != "" {
		cfg, err := workerconfig.Load(o.configFile)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		if configured, err = cfg.WorkerNamespaces(log); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	if !o.demo && len(configured) == 0 {
		return nil, errors.New("worker: nothing to serve: pass --config FILE or --demo")
	}
	var namespaces []worker.Namespace
	if o.demo {
		namespaces = append(namespaces, worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: o.slots, MaxAttempts: o.maxAttempts})
	}
	for _, ns := range configured {
		if ns.Slots == 0 {
			ns.Slots = o.slots
		}
		if ns.MaxAttempts == 0 {
			ns.MaxAttempts = o.maxAttempts
		}
		namespaces = append(namespaces, ns)
	}
	return namespaces, nil
}

// connect connects the workers that serve the namespaces: one for them all
// without --creds-dir, else one per namespace with its own credentials.
// On an error, the connections it made are closed.
func (o *options) connect(namespaces []worker.Namespace, log *slog.Logger) (_ []*served, err error) {
	var groups []*served
	defer func() {
		if err != nil {
			closeAll(groups)
		}
	}()
	newWorker := func(nc *nats.Conn) (*worker.Worker, error) {
		return worker.New(worker.Config{Conn: nc, Prefix: o.conn.Prefix, ID: o.id, AckWait: o.ackWait, HeartbeatInterval: o.heartbeat, Logger: log})
	}
	if o.credsDir == "" {
		g, err := connectShared(o.conn, log, newWorker)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
		for _, ns := range namespaces {
			if err := g.serve(ns, o.configFile); err != nil {
				return nil, err
			}
		}
		return groups, nil
	}
	seen := map[string]bool{}
	for _, ns := range namespaces {
		if seen[ns.Name] {
			return nil, fmt.Errorf("worker: namespace %s is served twice (--demo and %s?)", ns.Name, o.configFile)
		}
		seen[ns.Name] = true
		g, err := connectNamespace(o.conn, o.credsDir, ns.Name, log, newWorker)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
		if err := g.serve(ns, o.configFile); err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// closeAll closes the workers' connections, the last made first.
func closeAll(groups []*served) {
	for i := len(groups) - 1; i >= 0; i-- {
		groups[i].nc.Close()
	}
}

// readiness is the check of /readyz: every connection's worker resources.
func readiness(names messages.Names, groups []*served) (func(context.Context) error, error) {
	var checks []func(context.Context) error
	for _, g := range groups {
		ready, err := telemetry.WorkerResources(names, g.names)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		ready.Conn = g.nc
		checks = append(checks, ready.Check)
	}
	return func(ctx context.Context) error {
		for _, check := range checks {
			if err := check(ctx); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// startAll starts the workers; when one fails, those started before it
// are stopped.
func startAll(ctx context.Context, groups []*served) error {
	for i, g := range groups {
		if err := g.start(ctx); err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			for _, started := range groups[:i] {
				_ = started.w.Stop(stopCtx)
			}
			cancel()
			return err
		}
	}
	return nil
}

// stopAll stops the workers together; each lets its running calls finish
// for up to drain before it hands them back.
func stopAll(groups []*served, drain time.Duration) error {
	stopCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() { errs[i] = g.w.Stop(stopCtx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// served is a worker and the namespaces it serves on one connection.
type served struct {
	w     *worker.Worker
	nc    *nats.Conn
	names []string
	// creds names the connection's credentials ("credentials FILE", "user
	// U"), and violation has the first permissions violation the server
	// reported on it.
	creds     string
	violation chan error
}

func (g *served) serve(ns worker.Namespace, configFile string) error {
	if err := g.w.Serve(ns); err != nil {
		if configFile != "" {
			return fmt.Errorf("%w (in %s)", err, configFile)
		}
		return err
	}
	g.names = append(g.names, ns.Name)
	return nil
}

// start starts the worker. A permission the server refuses while it starts
// (credentials of another namespace, or one user for several namespaces'
// accounts) ends the start at once, naming the namespaces and the
// credentials, rather than after the worker's requests time out.
func (g *served) start(ctx context.Context) error {
	if g.violation == nil {
		return g.w.Start(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case err := <-g.violation:
			cancel(err)
		case <-done:
		}
	}()
	err := g.w.Start(ctx)
	cause := context.Cause(ctx)
	switch {
	case err == nil || cause == nil || errors.Is(cause, context.Canceled):
		return err
	case len(g.names) == 1:
		return fmt.Errorf("worker: namespace %s: the %s are not namespace %s's: %v", g.names[0], g.creds, g.names[0], cause)
	}
	return fmt.Errorf("worker: the %s may not serve every namespace of the worker (%s): %v; serve each namespace with its own credentials (--creds-dir DIR, with worker_<namespace>.creds)", g.creds, strings.Join(g.names, ", "), cause)
}

// violations is an error handler that hands the first permissions
// violation the server reports to ch, and logs every one: a worker that
// hits one may not do what it must.
func violations(ch chan error, log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			log.Warn("NATS error", "error", err)
			return
		}
		log.Error("the server refused a permission the worker needs", "error", err)
		select {
		case ch <- err:
		default:
		}
	})
}

// connectShared connects the one worker of every namespace: its user may
// reach them all (toolbus dev, a configuration without accounts, one
// namespace).
func connectShared(conn *natsflags.Flags, log *slog.Logger, newWorker func(*nats.Conn) (*worker.Worker, error)) (*served, error) {
	violation := make(chan error, 1)
	nc, err := conn.Connect("toolbus-worker", violations(violation, log))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w, err := newWorker(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	who := "user " + conn.User
	if conn.Creds != "" {
		who = "credentials " + conn.Creds
	}
	return &served{w: w, nc: nc, creds: who, violation: violation}, nil
}

// connectNamespace connects namespace ns's worker with its own
// credentials, worker_<ns>.creds of dir. A file that is missing or cannot
// be read, or credentials the server refuses, fail with the namespace and
// the file named.
func connectNamespace(conn *natsflags.Flags, dir, ns string, log *slog.Logger, newWorker func(*nats.Conn) (*worker.Worker, error)) (*served, error) {
	creds := filepath.Join(dir, "worker_"+ns+".creds")
	if _, err := natsflags.ReadCreds(creds); err != nil {
		return nil, fmt.Errorf("worker: namespace %s: %w (toolbus namespace add %s writes them)", ns, err, ns)
	}
	violation := make(chan error, 1)
	flags := *conn
	flags.Creds, flags.User, flags.Password = creds, "", ""
	nc, err := flags.Connect("toolbus-worker-"+ns, violations(violation, log))
	if err != nil {
		return nil, fmt.Errorf("worker: namespace %s: the server refused the credentials %s (revoked, expired, or of another installation): %w", ns, creds, err)
	}
	w, err := newWorker(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &served{w: w, nc: nc, creds: "credentials " + creds, violation: violation}, nil
}
