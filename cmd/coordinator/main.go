// Command coordinator runs the Toolbus API service. Run as many as load
// needs: they share requests in one queue group and keep no state.
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

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/telemetry"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func run() error {
	conn := natsflags.Register(flag.CommandLine)
	replicas := flag.Int("replicas", 0, "replicas of streams and buckets (3 or 5 in a cluster); by default the installation's, or 1 for a new one. A value other than the installation's is refused without --reconfigure")
	reconfigure := flag.Bool("reconfigure", false, "change the installation's replication to --replicas (an operator's action: run one coordinator with it, once)")
	defaultTimeout := flag.Duration("default-timeout", 10*time.Minute, "deadline of calls when neither caller nor tool sets one")
	workspace := flag.String("workspace", os.Getenv("TOOLBUS_WORKSPACE"), "exposure workspace directory (bundles/*.yaml, agents/*.yaml), reloaded on change")
	policyFile := flag.String("policy", os.Getenv("TOOLBUS_POLICY"), "policy file (YAML), reloaded on change")
	failUnavailable := flag.Bool("fail-unavailable", false, "fail calls of namespaces without a live worker instead of queueing them")
	approvalTTL := flag.Duration("approval-ttl", 24*time.Hour, "how long an approval waits for a decision")
	identitiesFile := flag.String("identities", os.Getenv("TOOLBUS_IDENTITIES"), "identities file (YAML): which agents each NATS user may act as, and which users are operators; without it the agent a request names is trusted")
	maxWaitsPerUser := flag.Int("max-waits-per-user", coordinator.DefaultMaxWaitsPerUser, "with --identities: the long waits (submits with wait, calls.get and calls.events with wait_ms) one user may hold in this coordinator at once; more are refused with too_many_requests")
	eventFeed := flag.Int("event-feed-threshold", coordinator.DefaultEventFeedThreshold, "past this many calls.events requests waiting at once, read the events stream once for all of them instead of walking it for each; a negative value never does")
	staleToolTTL := flag.Duration("stale-tool-ttl", coordinator.DefaultStaleToolTTL, "remove the tools of a namespace that has had no live worker this long; 0 keeps them")
	noLearning := flag.Bool("no-learning", false, "record no usage evidence (what agents searched for and then called), whatever the installation's learning switch says")
	usageRetention := flag.Duration("usage-retention", usage.DefaultRetention, "how long an agent's usage evidence for a tool is kept after it last changed")
	dutyLeaseTTL := flag.Duration("duty-lease-ttl", coordinator.DefaultDutyLeaseTTL, "how long a coordinator that died keeps the duties one coordinator at a time does (the audit copy, the sweep of settled calls) before another takes them over; at least 1s")
	metricsListen := flag.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (host:port); see docs/operations.md")
	flag.Parse()
	if *usageRetention <= 0 {
		return fmt.Errorf("--usage-retention %v: want a positive duration (switch learning off with --no-learning or toolbus learning off)", *usageRetention)
	}
	if *staleToolTTL == 0 {
		*staleToolTTL = -1 // the Config's way of saying off
	}

	log := conn.Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: "toolbus-coordinator", Listen: *metricsListen, Logger: log})
	if err != nil {
		return err
	}
	defer tel.Close()
	var identities *coordinator.Identities
	if *identitiesFile != "" {
		if identities, err = coordinator.LoadIdentities(*identitiesFile); err != nil {
			return err
		}
	}
	nc, err := conn.Connect("toolbus-coordinator")
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := coordinator.New(coordinator.Config{
		Conn:                nc,
		Prefix:              conn.Prefix,
		DefaultTimeout:      *defaultTimeout,
		WorkspaceDir:        *workspace,
		PolicyFile:          *policyFile,
		FailWhenUnavailable: *failUnavailable,
		ApprovalTTL:         *approvalTTL,
		StaleToolTTL:        *staleToolTTL,
		Identities:          identities,
		MaxWaitsPerUser:     *maxWaitsPerUser,
		EventFeedThreshold:  *eventFeed,
		NoLearning:          *noLearning,
		UsageRetention:      *usageRetention,
		DutyLeaseTTL:        *dutyLeaseTTL,
		Resources:           resources.Config{Replicas: *replicas, Reconfigure: *reconfigure},
		Logger:              log,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		if errors.Is(err, resources.ErrReplicasMismatch) {
			log.Error("refusing to start: the installation has another replication", "err", err)
		}
		return err
	}
	names, err := messages.NewNames(conn.Prefix)
	if err != nil {
		return err
	}
	ready := telemetry.CoordinatorResources(names)
	ready.Conn = nc
	tel.SetReady(ready.Check)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return c.Stop(stopCtx)
}
