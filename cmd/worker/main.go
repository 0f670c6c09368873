// Command worker executes Toolbus calls for the namespaces it serves. Run
// as many as load needs; each namespace's calls are shared among its workers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/natsflags"
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
	conn := natsflags.Register(flag.CommandLine)
	id := flag.String("id", "", "worker ID (default: host name and a random suffix)")
	demoNS := flag.Bool("demo", false, "serve the demo namespace")
	configFile := flag.String("config", "", "YAML file listing the namespaces to serve and their sources (MCP servers, OpenAPI services, demo tools)")
	slots := flag.Int("slots", 16, "calls of each namespace this worker runs at once, unless the config file says")
	maxAttempts := flag.Int("max-attempts", 3, "deliveries of a call before it fails, unless the config file says")
	ackWait := flag.Duration("ack-wait", 30*time.Second, "how long a call may go without a heartbeat before another worker gets it")
	heartbeat := flag.Duration("heartbeat", 5*time.Second, "liveness heartbeat interval")
	drain := flag.Duration("drain", 30*time.Second, "on shutdown, how long running calls may finish before they are handed back")
	flag.Parse()

	log := conn.Logger()
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
	nc, err := conn.Connect("toolbus-worker")
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.New(worker.Config{Conn: nc, Prefix: conn.Prefix, ID: *id, AckWait: *ackWait, HeartbeatInterval: *heartbeat, Logger: log})
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
