// Command indexer keeps the discovery index in the index bucket for
// coordinators to load. Run two or more: one writes, the others stand by
// and take over when its lease runs out.
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

	"github.com/toolbus/toolbus/internal/indexer"
	"github.com/toolbus/toolbus/internal/resources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "indexer:", err)
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
	id := flag.String("id", "", "indexer ID in the lease and manifests (default: host name and a random suffix)")
	leaseTTL := flag.Duration("lease-ttl", 10*time.Second, "how long standbys wait without seeing the writer renew its lease before one takes over")
	writeInterval := flag.Duration("write-interval", 250*time.Millisecond, "shortest time between two writes of the index")
	grace := flag.Duration("grace", time.Minute, "how long a superseded index version stays readable")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()

	log := newLogger(*verbose)
	opts := []nats.Option{nats.Name("toolbus-indexer"), nats.MaxReconnects(-1)}
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
	ix, err := indexer.New(indexer.Config{
		Conn:          nc,
		Prefix:        *prefix,
		ID:            *id,
		LeaseTTL:      *leaseTTL,
		WriteInterval: *writeInterval,
		GracePeriod:   *grace,
		Resources:     resources.Config{Replicas: *replicas},
		Logger:        log,
	})
	if err != nil {
		return err
	}
	if err := ix.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return ix.Stop(stopCtx)
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
