// Command indexer keeps the discovery index in the index bucket for
// coordinators to load. Run two or more: one writes, the others stand by
// and take over when its lease runs out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/telemetry"
	"github.com/toolbus/toolbus/pkg/messages"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "indexer:", err)
		os.Exit(1)
	}
}

func run() error {
	conn := natsflags.Register(flag.CommandLine)
	replicas := flag.Int("replicas", 0, "replicas of streams and buckets; by default the installation's, or 1 for a new one. A value other than the installation's is refused: only a coordinator changes it")
	id := flag.String("id", "", "indexer ID in the lease and manifests (default: host name and a random suffix)")
	leaseTTL := flag.Duration("lease-ttl", 10*time.Second, "how long standbys wait without seeing the writer renew its lease before one takes over")
	writeInterval := flag.Duration("write-interval", 250*time.Millisecond, "shortest time between two writes of the index")
	grace := flag.Duration("grace", time.Minute, "how long a superseded index version stays readable")
	learnInterval := flag.Duration("learn-interval", 5*time.Minute, "shortest time between two folds of new usage evidence into the index's learned fields")
	metricsListen := flag.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (host:port); see docs/operations.md")
	flag.Parse()

	log := conn.Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: "toolbus-indexer", Listen: *metricsListen, Logger: log})
	if err != nil {
		return err
	}
	defer tel.Close()
	nc, err := conn.Connect("toolbus-indexer")
	if err != nil {
		return err
	}
	defer nc.Close()
	ix, err := indexer.New(indexer.Config{
		Conn:          nc,
		Prefix:        conn.Prefix,
		ID:            *id,
		LeaseTTL:      *leaseTTL,
		WriteInterval: *writeInterval,
		GracePeriod:   *grace,
		LearnInterval: *learnInterval,
		Resources:     resources.Config{Replicas: *replicas},
		Logger:        log,
	})
	if err != nil {
		return err
	}
	if err := ix.Start(ctx); err != nil {
		if errors.Is(err, resources.ErrReplicasMismatch) {
			log.Error("refusing to start: the installation has another replication", "err", err)
		}
		return err
	}
	names, err := messages.NewNames(conn.Prefix)
	if err != nil {
		return err
	}
	// The indexer's user may not read the events stream's information:
	// the buckets it reads and writes are its readiness.
	tel.SetReady(telemetry.NATSReady{Conn: nc, Buckets: []string{names.CatalogBucket(), names.IndexBucket()}}.Check)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return ix.Stop(stopCtx)
}
