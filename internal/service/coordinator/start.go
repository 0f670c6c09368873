package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/search"
	"github.com/toolbus/toolbus/pkg/worker"
)

// setupRetry is the policy of making the streams and buckets at start. A
// cluster that has just formed, or whose other coordinator is making the
// same streams at the same moment, answers late (a timeout, no leader
// yet), and places no replica while it does not yet count a peer online
// (10005, "no suitable peers for placement"): those are tried again for
// up to a minute before the coordinator gives up with the last error.
var setupRetry = transport.RetryPolicy{
	Attempt: 10 * time.Second, Initial: 250 * time.Millisecond, Max: 2 * time.Second, Within: time.Minute,
	Retryable: func(err error) bool { return transport.Transient(err) || transport.PlacementPending(err) },
}

// setUp makes what (streams or buckets) under setupRetry. Each of the
// start's makings is retried, not only the first: a cluster that has just
// formed may count a peer offline again a moment after it placed the first
// streams.
func setUp(ctx context.Context, log *slog.Logger, what string, create func(context.Context) error) error {
	return transport.Retry(ctx, setupRetry, func(ctx context.Context) error {
		err := create(ctx)
		if err != nil && setupRetry.Retryable(err) {
			log.Warn(what+" not ready yet; trying again", "error", err)
		}
		return err
	})
}

// startSteps are the steps of Start, in order. The state they share lives
// here, between the steps that make it and those that use it.
func (c *Coordinator) startSteps() []startStep {
	var (
		catalogKV, turnsKV, approvalsKV jetstream.KeyValue
		eventsStream                    jetstream.Stream
		workspace                       *exposure.Workspace
		workspaceFP, policyFP           string
		view                            *catalog.View
		index                           *discovery.Index
		sweep                           *sweeper
	)
	return []startStep{
		{"", func(ctx context.Context) (func(context.Context) error, error) {
			return nil, setUp(ctx, c.log, "streams and buckets", func(ctx context.Context) error {
				return resources.Ensure(ctx, c.js, c.names, c.cfg.Resources)
			})
		}},
		{"", func(ctx context.Context) (_ func(context.Context) error, err error) {
			if catalogKV, err = c.js.KeyValue(ctx, c.names.CatalogBucket()); err != nil {
				return nil, fmt.Errorf("catalog: %w", err)
			}
			if turnsKV, err = c.js.KeyValue(ctx, c.names.TurnsBucket()); err != nil {
				return nil, fmt.Errorf("turns: %w", err)
			}
			if approvalsKV, err = c.js.KeyValue(ctx, c.names.ApprovalsBucket()); err != nil {
				return nil, fmt.Errorf("approvals: %w", err)
			}
			if eventsStream, err = c.js.Stream(ctx, c.names.EventsStream()); err != nil {
				return nil, fmt.Errorf("events stream: %w", err)
			}
			return nil, nil
		}},
		{"", func(context.Context) (_ func(context.Context) error, err error) {
			if workspace, workspaceFP, err = loadWorkspace(c.cfg.WorkspaceDir); err != nil {
				return nil, err
			}
			if c.cfg.PolicyFile != "" {
				p, fp, err := loadPolicy(c.cfg.PolicyFile)
				if err != nil {
					return nil, err
				}
				c.policy.Store(p)
				policyFP = fp
			}
			return nil, nil
		}},
		{"", func(context.Context) (func(context.Context) error, error) {
			runCtx, cancel := context.WithCancel(context.Background())
			view = catalog.NewView(catalogKV, c.log)
			if err := view.Start(runCtx); err != nil {
				cancel()
				return nil, err
			}
			return func(context.Context) error { cancel(); return nil }, nil
		}},
		{"discovery", func(ctx context.Context) (_ func(context.Context) error, err error) {
			var indexKV jetstream.KeyValue
			if err := setUp(ctx, c.log, "the index bucket", func(ctx context.Context) (err error) {
				indexKV, err = resources.EnsureIndexBucket(ctx, c.js, c.names, c.cfg.Resources)
				return err
			}); err != nil {
				return nil, err
			}
			if index, err = discovery.New(discovery.Config{Catalog: view, Bucket: indexKV, Logger: c.log}); err != nil {
				return nil, err
			}
			if err := index.Start(context.WithoutCancel(ctx)); err != nil {
				return nil, err
			}
			return index.Stop, nil
		}},
		{"usage", c.startLearning},
		{"", func(context.Context) (func(context.Context) error, error) {
			stream := &callStream{nc: c.nc, names: c.names, stream: eventsStream, log: c.log}
			sweep = c.buildRooms(view, index, exposure.NewResolver(workspace), catalogKV, turnsKV, approvalsKV, stream)
			return c.follower.feed.close, nil
		}},
		{"", c.serveAPI},
		{"duties", func(ctx context.Context) (_ func(context.Context) error, err error) {
			if c.duties, err = startDuties(ctx, catalogKV, c.cfg); err != nil {
				return nil, err
			}
			sweep.duty = c.duties.settledSweep
			return c.duties.stop, nil
		}},
		{"", func(context.Context) (func(context.Context) error, error) {
			if err := sweep.start(); err != nil {
				return nil, err
			}
			return func(context.Context) error { return sweep.stop() }, nil
		}},
		{"", c.startStaleToolSweep},
		{"", c.startAuditCopier},
		{"", func(context.Context) (func(context.Context) error, error) {
			// Started means answering: the server has the subscriptions.
			return nil, c.nc.FlushTimeout(requestTimeout)
		}},
		{"built-in tools", c.serveBuiltinTools},
		{"", func(context.Context) (func(context.Context) error, error) {
			return watchFiles(c.cfg, c.view, &c.policy, c.log, workspaceFP, policyFP), nil
		}},
	}
}

// watchFiles starts reloading the workspace and the policy when their
// files change (workspaceFP and policyFP are what was loaded), and the
// policy's lint; it returns what stops them.
func watchFiles(cfg Config, view *toolView, pol *atomic.Pointer[policy.Policy], log *slog.Logger, workspaceFP, policyFP string) func(context.Context) error {
	var stops []func()
	if cfg.WorkspaceDir != "" {
		stops = append(stops, workspaceWatcher(cfg.WorkspaceDir, view.resolver, cfg.WorkspaceReloadInterval, log).start(workspaceFP))
	}
	reloaded := func() {}
	if cfg.PolicyFile != "" || pol.Load() != nil {
		lint := newPolicyLint(pol, view.catalog, cfg.WorkspaceReloadInterval, log)
		stops = append(stops, lint.start())
		reloaded = lint.policyReloaded
	}
	if cfg.PolicyFile != "" {
		stops = append(stops, policyWatcher(cfg.PolicyFile, pol, cfg.WorkspaceReloadInterval, log, reloaded).start(policyFP))
	}
	return func(context.Context) error {
		for _, stop := range stops {
			stop()
		}
		return nil
	}
}

// buildRooms makes the rooms that do the coordinator's work, and returns
// the sweeper for Start to start.
func (c *Coordinator) buildRooms(view *catalog.View, index *discovery.Index, resolver *exposure.Resolver, catalogKV, turnsKV, approvalsKV jetstream.KeyValue, stream *callStream) *sweeper {
	schemas := newSchemaCache()
	auditLog := &auditor{names: c.names, js: c.js, cache: schemas.redactions, unavailableWait: c.cfg.UnavailableWait, log: c.log}
	audit := auditLog.record
	c.guard = &guard{ids: c.cfg.Identities, audit: auditLog.recordForbidden, prefix: c.names.Prefix()}
	turns := &turns{store: bucket{turnsKV, c.cfg.UnavailableWait}, calls: retryingTurnCalls{c.ledger.Turns(), c.cfg.UnavailableWait}}
	queue := &callQueue{names: c.names, writes: c.ledger, turns: turns, reads: c.ledger, nc: c.nc, publish: c.nc.PublishMsg, maxWait: c.cfg.MaxWait, unavailableWait: c.cfg.UnavailableWait, log: c.log}
	queue.ensureConsumer = func(ctx context.Context, ns string) error {
		if err := resources.CreateNamespaceConsumer(ctx, c.js, c.names, resources.DefaultNamespaceConsumer(ns)); err != nil {
			return err
		}
		// The namespace's results store is the coordinator's to create:
		// a user that may create a stream chooses the subjects it stores,
		// so a worker that could create its own could make it store the
		// replies and results meant for others, and read them. A worker
		// of an older configuration still creates its store itself.
		if _, err := resources.EnsureResultsBucket(ctx, c.js, c.names, ns); err != nil {
			c.log.Warn("the namespace's results store is not created; its workers will try", "namespace", ns, "error", err)
		}
		return nil
	}
	c.view = &toolView{catalog: view, resolver: resolver, policy: &c.policy, turns: turns, index: index, usage: c.learning.recorder}
	c.approvals = &approvals{
		store:  bucket{approvalsKV, c.cfg.UnavailableWait},
		ledger: retryingLedger{c.ledger, c.cfg.UnavailableWait},
		turns:  turns,
		policy: &c.policy,
		tool: func(name string) *messages.ToolDefinition {
			if t, ok := view.Lookup(name); ok {
				return &t.Definition
			}
			return nil
		},
		enqueue: func(ctx context.Context, call *messages.CallRequest) error {
			_, err := queue.sendWait(ctx, call)
			return err
		},
		audit:    audit,
		grantTTL: c.cfg.GrantTTL,
		settled:  c.cfg.SweepInterval,
		tracer:   c.tracer,
		log:      c.log,
	}
	c.submitter = &submitPipeline{
		limits: submitLimits{
			maxArgumentsBytes:   c.cfg.MaxArgumentsBytes,
			defaultTimeout:      c.cfg.DefaultTimeout,
			maxWait:             c.cfg.MaxWait,
			approvalTTL:         c.cfg.ApprovalTTL,
			failWhenUnavailable: c.cfg.FailWhenUnavailable,
			unavailableWait:     c.cfg.UnavailableWait,
		},
		tools:     view,
		turns:     turns,
		admission: c.view.admission,
		schemas:   schemas,
		policy:    &c.policy,
		grants:    c.approvals,
		approvals: c.approvals,
		audit:     audit,
		queue:     queue,
		tracer:    c.tracer,
		usage:     c.learning.recorder,
	}
	c.switches = &toolSwitches{catalog: view, store: catalog.NewStore(catalogKV)}
	c.calls = &calls{ledger: c.ledger, wait: c.cfg.UnavailableWait, turns: turns, approvals: c.approvals, nc: c.nc, js: c.js, names: c.names, kept: c.cfg.Resources.WithDefaults().EventsMaxAge, log: c.log}
	c.batches = &batches{nc: c.nc, names: c.names, ledger: c.ledger, calls: c.calls, submitter: c.submitter, waits: c.waits, handlers: c.handlers, maxWait: c.cfg.MaxWait, log: c.log}
	c.follower = &follower{nc: c.nc, names: c.names, ledger: c.ledger, calls: c.calls, waits: c.waits, maxWait: c.cfg.MaxWait, feed: newEventFeed(stream.stream, c.names, c.cfg.EventFeedThreshold, c.log)}
	c.logReads = &logReads{nc: c.nc, js: c.js, names: c.names, ledger: c.ledger, view: c.view, depths: c.depths, statsScans: c.statsScans, unavailableWait: c.cfg.UnavailableWait}
	return &sweeper{stream: stream, ledger: c.ledger, approvals: c.approvals, catalog: view, depths: c.depths, interval: c.cfg.SweepInterval, grace: c.cfg.SweepGrace, unavailableWait: c.cfg.UnavailableWait, log: c.log, index: newSettledIndex(stream.stream, c.names, c.cfg.SweepInterval)}
}

// startLearning makes the usage bucket and, unless the configuration
// says not to, starts recording usage evidence.
func (c *Coordinator) startLearning(ctx context.Context) (func(context.Context) error, error) {
	var kv jetstream.KeyValue
	if err := setUp(ctx, c.log, "the usage bucket", func(ctx context.Context) (err error) {
		kv, err = resources.EnsureUsageBucket(ctx, c.js, c.names, c.cfg.Resources)
		return err
	}); err != nil {
		return nil, err
	}
	c.learning = &learning{store: usage.NewStore(kv, c.js, search.LearnConfig{}), retention: c.cfg.UsageRetention, turnWindow: c.cfg.UsageTurnWindow, log: c.log}
	if c.cfg.NoLearning {
		return nil, nil
	}
	rec, err := usage.NewRecorder(usage.RecorderConfig{
		Bucket: kv,
		JS:     c.js,
		Outcome: func(ctx context.Context, call *messages.CallRequest) (*messages.CallResult, error) {
			return c.ledger.AwaitResult(ctx, messages.TurnBucket(call.Turn), call.Namespace, call.CallID)
		},
		TurnWindow: c.cfg.UsageTurnWindow,
		Retention:  c.cfg.UsageRetention,
		Logger:     c.log,
	})
	if err != nil {
		return nil, err
	}
	if err := rec.Start(ctx); err != nil {
		return nil, err
	}
	c.learning.recorder = rec
	return rec.Stop, nil
}

// serveAPI adds the micro service and its endpoints. Its stop stops
// answering and waits for the requests being handled until ctx ends.
func (c *Coordinator) serveAPI(context.Context) (func(context.Context) error, error) {
	svc, err := micro.AddService(c.nc, micro.Config{
		Name:        messages.ServiceName,
		Version:     Version,
		Description: "Toolbus coordinator: tool catalog, calls and turns",
	})
	if err != nil {
		return nil, err
	}
	stop := func(ctx context.Context) error {
		err := svc.Stop()
		done := make(chan struct{})
		go func() { c.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return err
	}
	group := svc.AddGroup(c.names.APIGroup())
	for endpoint, handler := range c.endpoints() {
		name := strings.ReplaceAll(endpoint, ".", "_")
		if err := group.AddEndpoint(name, c.serve(endpoint, handler), micro.WithEndpointSubject(endpoint)); err != nil {
			return nil, errors.Join(fmt.Errorf("endpoint %s: %w", endpoint, err), stop(context.Background()))
		}
	}
	// The workers' requests for their namespace's consumer, one subject
	// per namespace, which the server can confine to that namespace's users.
	consumers := svc.AddGroup(c.names.Prefix() + "." + endpointConsumers)
	if err := consumers.AddEndpoint(endpointConsumers, c.serve(endpointConsumers, c.consumer), micro.WithEndpointSubject("*")); err != nil {
		return nil, errors.Join(fmt.Errorf("endpoint %s: %w", endpointConsumers, err), stop(context.Background()))
	}
	return stop, nil
}

// serveBuiltinTools serves the tools Toolbus offers to models itself,
// unless the Config leaves them out.
func (c *Coordinator) serveBuiltinTools(ctx context.Context) (func(context.Context) error, error) {
	if c.cfg.NoBuiltinTools {
		return nil, nil
	}
	w, err := worker.New(worker.Config{Conn: c.nc, Prefix: c.cfg.Prefix, Logger: c.log.With("tools", "builtin"), TracerProvider: c.cfg.TracerProvider})
	if err != nil {
		return nil, err
	}
	if err := w.Serve(worker.Namespace{Name: BuiltinNamespace, Tools: builtinTools(c.view.discover), Slots: 64}); err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w.Stop, nil
}

// startAuditCopier starts copying the decisions of queued calls into the
// audit stream (auditCopier), unless the configuration leaves it to other
// coordinators.
func (c *Coordinator) startAuditCopier(context.Context) (func(context.Context) error, error) {
	if c.cfg.AuditCopyInterval < 0 {
		return nil, nil
	}
	inbox := transport.NewInbox(c.nc)
	a := &auditCopier{
		names: c.names, js: c.js, interval: c.cfg.AuditCopyInterval, log: c.log,
		audit: transport.NewStream(c.nc, inbox, c.names.Audit().Stream()),
		duty:  c.duties.auditCopy,
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.run(runCtx)
	}()
	return func(context.Context) error {
		cancel()
		<-done
		inbox.Close()
		return nil
	}, nil
}
