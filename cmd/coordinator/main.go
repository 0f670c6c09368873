// Command coordinator runs the Toolbus API service. Run as many as load
// needs: they share requests in one queue group and keep no state.
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

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/resources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func run() error {
	server := flag.String("server", envOr("TOOLBUS_URL", nats.DefaultURL), "NATS server URL")
	creds := flag.String("creds", os.Getenv("TOOLBUS_CREDS"), "NATS credentials file")
	user := flag.String("user", os.Getenv("TOOLBUS_USER"), "NATS user")
	password := flag.String("password", os.Getenv("TOOLBUS_PASSWORD"), "NATS password")
	prefix := flag.String("prefix", "toolbus", "subject prefix")
	replicas := flag.Int("replicas", 1, "replicas of streams and buckets (3 or 5 in a cluster)")
	defaultTimeout := flag.Duration("default-timeout", 10*time.Minute, "deadline of calls when neither caller nor tool sets one")
	workspace := flag.String("workspace", os.Getenv("TOOLBUS_WORKSPACE"), "exposure workspace directory (bundles/*.yaml, agents/*.yaml), reloaded on change")
	policyFile := flag.String("policy", os.Getenv("TOOLBUS_POLICY"), "policy file (YAML), reloaded on change")
	failUnavailable := flag.Bool("fail-unavailable", false, "fail calls of namespaces without a live worker instead of queueing them")
	approvalTTL := flag.Duration("approval-ttl", 24*time.Hour, "how long an approval waits for a decision")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()

	log := newLogger(*verbose)
	opts := []nats.Option{nats.Name("toolbus-coordinator"), nats.MaxReconnects(-1)}
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := coordinator.New(coordinator.Config{
		Conn:                nc,
		Prefix:              *prefix,
		DefaultTimeout:      *defaultTimeout,
		WorkspaceDir:        *workspace,
		PolicyFile:          *policyFile,
		FailWhenUnavailable: *failUnavailable,
		ApprovalTTL:         *approvalTTL,
		Resources:           resources.Config{Replicas: *replicas},
		Logger:              log,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return c.Stop(stopCtx)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
