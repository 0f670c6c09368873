// Command worker executes Toolbus calls for the namespaces it serves. Run
// as many as load needs; each namespace's calls are shared among its workers.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/workerconfig"
	"github.com/toolbus/toolbus/pkg/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	server := flag.String("server", envOr("TOOLBUS_URL", nats.DefaultURL), "NATS server URL")
	creds := flag.String("creds", os.Getenv("TOOLBUS_CREDS"), "NATS credentials file")
	user := flag.String("user", os.Getenv("TOOLBUS_USER"), "NATS user")
	password := flag.String("password", os.Getenv("TOOLBUS_PASSWORD"), "NATS password")
	prefix := flag.String("prefix", "toolbus", "subject prefix")
	id := flag.String("id", "", "worker ID (default: host name and a random suffix)")
	demoNS := flag.Bool("demo", false, "serve the demo namespace")
	configFile := flag.String("config", "", "YAML file listing the namespaces to serve and their sources (MCP servers, OpenAPI services, demo tools)")
	slots := flag.Int("slots", 16, "calls of each namespace this worker runs at once, unless the config file says")
	maxAttempts := flag.Int("max-attempts", 3, "deliveries of a call before it fails, unless the config file says")
	ackWait := flag.Duration("ack-wait", 30*time.Second, "how long a call may go without a heartbeat before another worker gets it")
	heartbeat := flag.Duration("heartbeat", 5*time.Second, "liveness heartbeat interval")
	drain := flag.Duration("drain", 30*time.Second, "on shutdown, how long running calls may finish before they are handed back")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// The file is read before connecting, so that its mistakes show at once.
	var configured []worker.Namespace
	if *configFile != "" {
		cfg, err := workerconfig.Load(*configFile)
		if err != nil {
			return err
		}
		if configured, err = cfg.WorkerNamespaces(log); err != nil {
			return err
		}
	}
	opts := []nats.Option{nats.Name("toolbus-worker"), nats.MaxReconnects(-1)}
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	if *user != "" {
		opts = append(opts, nats.UserInfo(*user, *password))
	}
	nc, err := nats.Connect(*server, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *server, err)
	}
	defer nc.Close()
	w, err := worker.New(worker.Config{Conn: nc, Prefix: *prefix, ID: *id, AckWait: *ackWait, HeartbeatInterval: *heartbeat, Logger: log})
	if err != nil {
		return err
	}
	served := 0
	if *demoNS {
		if err := w.Serve(worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: *slots, MaxAttempts: *maxAttempts}); err != nil {
			return err
		}
		served++
	}
	for _, ns := range configured {
		if ns.Slots == 0 {
			ns.Slots = *slots
		}
		if ns.MaxAttempts == 0 {
			ns.MaxAttempts = *maxAttempts
		}
		if err := w.Serve(ns); err != nil {
			return fmt.Errorf("%s: %w", *configFile, err)
		}
		served++
	}
	if served == 0 {
		return fmt.Errorf("nothing to serve: pass --config FILE or --demo")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "worker %s ready\n", w.ID())
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return w.Stop(stopCtx)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
