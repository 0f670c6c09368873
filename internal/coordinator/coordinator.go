// Package coordinator is the API that agents talk to: a NATS micro service
// that checks and publishes calls, and answers for their state, results and
// turns. It keeps no state of its own — the catalog, the calls and their
// events all live in JetStream — so any number of replicas share the load
// in one queue group and any of them can stop at any time.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/resources"
	"github.com/toolbus/toolbus/internal/reuse"
	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Version is the coordinator service's SemVer version.
const Version = "0.1.0"

// Config configures a coordinator.
type Config struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix of subjects and resources. Defaults to "toolbus".
	Prefix string
	// MaxArgumentsBytes bounds a call's arguments. Defaults to 256 KiB.
	MaxArgumentsBytes int
	// MaxRequestBytes bounds any request. Defaults to 512 KiB.
	MaxRequestBytes int
	// DefaultTimeout is a call's deadline when neither the caller nor the
	// tool sets one. Defaults to 10m.
	DefaultTimeout time.Duration
	// MaxWait bounds how long a submit with wait holds its reply. Defaults to 5m.
	MaxWait time.Duration
	// MaxConcurrentRequests bounds the requests handled at once; more wait
	// for a free place. Defaults to 4096.
	MaxConcurrentRequests int
	// SweepInterval is how often the coordinator looks for queued calls
	// whose deadline passed without a worker. Defaults to 5s.
	SweepInterval time.Duration
	// SweepGrace is how long past its deadline a queued call may stay before
	// the sweeper ends it; workers end the calls they hold themselves.
	// Defaults to 30s.
	SweepGrace time.Duration
	// WorkspaceDir holds the exposure workspace: bundles/*.yaml and
	// agents/*.yaml. Without it every namespace is a bundle of its own.
	WorkspaceDir string
	// WorkspaceReloadInterval is how often the workspace files are checked
	// for changes. Defaults to 2s.
	WorkspaceReloadInterval time.Duration
	// Policy decides which calls are allowed, denied or need an approval.
	// Nil allows every call.
	Policy *policy.Policy
	// PolicyFile, when set, is read at start (an invalid file stops the
	// start) and reloaded when it changes, replacing Policy.
	PolicyFile string
	// FailWhenUnavailable makes calls of a namespace that no live worker
	// serves fail at once with tool_unavailable. By default they are
	// queued and run when a worker comes.
	FailWhenUnavailable bool
	// ApprovalTTL is how long an approval waits for a decision before the
	// call is denied. Defaults to 24h.
	ApprovalTTL time.Duration
	// GrantTTL is how long an approval remembered for an agent and tool
	// lasts. Defaults to 24h.
	GrantTTL time.Duration
	// NoBuiltinTools leaves out the tools Toolbus offers to models itself
	// (llm_tools-list, discovery as a tool). By default every coordinator
	// serves them, as a worker of namespace llm_tools.
	NoBuiltinTools bool
	// TracerProvider receives the coordinator's spans. Defaults to the global one.
	TracerProvider trace.TracerProvider
	// Resources sizes the streams and buckets the coordinator creates if they are missing.
	Resources resources.Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = messages.DefaultPrefix
	}
	if c.MaxArgumentsBytes == 0 {
		c.MaxArgumentsBytes = 256 << 10
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 512 << 10
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 10 * time.Minute
	}
	if c.MaxWait == 0 {
		c.MaxWait = 5 * time.Minute
	}
	if c.MaxConcurrentRequests == 0 {
		c.MaxConcurrentRequests = 4096
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.SweepGrace == 0 {
		c.SweepGrace = 30 * time.Second
	}
	if c.ApprovalTTL == 0 {
		c.ApprovalTTL = 24 * time.Hour
	}
	if c.GrantTTL == 0 {
		c.GrantTTL = 24 * time.Hour
	}
	if c.WorkspaceReloadInterval == 0 {
		c.WorkspaceReloadInterval = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Coordinator serves the Toolbus API.
type Coordinator struct {
	cfg       Config
	log       *slog.Logger
	nc        *nats.Conn
	js        jetstream.JetStream
	names     messages.Names
	ledger    *ledger.Ledger
	catalog   *catalog.View
	catalogKV jetstream.KeyValue
	turns     jetstream.KeyValue
	approvals jetstream.KeyValue
	calls     jetstream.Stream
	schemas   *schemaCache

	resolver *exposure.Resolver
	formats  formatCache
	expo     exposureCatalog
	policy   atomic.Pointer[policy.Policy]

	tracer   trace.Tracer
	index    *discovery.Index
	builtins *worker.Worker
	sem      chan struct{}
	inflight sync.WaitGroup
	handlers *reuse.Pool
	svc      micro.Service
	subs     []*nats.Subscription
	cancel   context.CancelFunc
	bg       sync.WaitGroup
}

// New returns a coordinator; Start runs it.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Conn == nil {
		return nil, errors.New("coordinator: Config.Conn is required")
	}
	cfg = cfg.withDefaults()
	names, err := messages.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	js, err := jetstream.New(cfg.Conn, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c := &Coordinator{
		cfg:      cfg,
		log:      cfg.Logger,
		nc:       cfg.Conn,
		js:       js,
		names:    names,
		ledger:   ledger.New(cfg.Conn, js, names),
		schemas:  newSchemaCache(),
		sem:      make(chan struct{}, cfg.MaxConcurrentRequests),
		handlers: reuse.New(10 * time.Second),
		tracer:   tracing.Tracer(cfg.TracerProvider),
	}
	c.policy.Store(cfg.Policy)
	return c, nil
}

// Start creates the JetStream resources if needed, loads the catalog and
// starts answering requests.
func (c *Coordinator) Start(ctx context.Context) error {
	if err := resources.Ensure(ctx, c.js, c.names, c.cfg.Resources); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	kv, err := c.js.KeyValue(ctx, c.names.CatalogBucket())
	if err != nil {
		return fmt.Errorf("coordinator: catalog: %w", err)
	}
	c.catalogKV = kv
	if c.turns, err = c.js.KeyValue(ctx, c.names.TurnsBucket()); err != nil {
		return fmt.Errorf("coordinator: turns: %w", err)
	}
	if c.approvals, err = c.js.KeyValue(ctx, c.names.ApprovalsBucket()); err != nil {
		return fmt.Errorf("coordinator: approvals: %w", err)
	}
	if c.calls, err = c.js.Stream(ctx, c.names.CallsStream()); err != nil {
		return fmt.Errorf("coordinator: calls stream: %w", err)
	}
	ws, fingerprint, err := c.loadWorkspace()
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	policyFingerprint := ""
	if c.cfg.PolicyFile != "" {
		p, fp, err := loadPolicy(c.cfg.PolicyFile)
		if err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		c.policy.Store(p)
		policyFingerprint = fp
	}
	c.resolver = exposure.NewResolver(ws)
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.catalog = catalog.NewView(kv, c.log)
	if err := c.catalog.Start(runCtx); err != nil {
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	indexKV, err := resources.EnsureIndexBucket(ctx, c.js, c.names, c.cfg.Resources)
	if err != nil {
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	c.index, err = discovery.New(discovery.Config{Catalog: c.catalog, Bucket: indexKV, Logger: c.log})
	if err != nil {
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	if err := c.index.Start(runCtx); err != nil {
		cancel()
		return fmt.Errorf("coordinator: discovery: %w", err)
	}
	svc, err := micro.AddService(c.nc, micro.Config{
		Name:        messages.ServiceName,
		Version:     Version,
		Description: "Toolbus coordinator: tool catalog, calls and turns",
	})
	if err != nil {
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	c.svc = svc
	group := svc.AddGroup(c.names.APIGroup())
	for endpoint, handler := range map[string]handlerFunc{
		messages.EndpointToolsList:       c.listTools,
		messages.EndpointCallsSubmit:     c.submit,
		messages.EndpointCallsGet:        c.getCall,
		messages.EndpointCallsCancel:     c.cancelCall,
		messages.EndpointTurnsGet:        c.getTurn,
		messages.EndpointToolsActivate:   c.activate,
		messages.EndpointApprovalsList:   c.listApprovals,
		messages.EndpointApprovalsDecide: c.decideApproval,
		messages.EndpointApprovalsAnswer: c.answerApproval,
		messages.EndpointToolsEnable:     c.enableTool,
		messages.EndpointToolsDisable:    c.disableTool,
		messages.EndpointToolsDiscover:   c.discover,
	} {
		name := strings.ReplaceAll(endpoint, ".", "_")
		if err := group.AddEndpoint(name, c.serve(endpoint, handler), micro.WithEndpointSubject(endpoint)); err != nil {
			_ = svc.Stop()
			cancel()
			return fmt.Errorf("coordinator: endpoint %s: %w", endpoint, err)
		}
	}
	if err := c.watchMaxDeliveries(runCtx); err != nil {
		_ = svc.Stop()
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	// Started means answering: the server has the subscriptions.
	if err := c.nc.FlushTimeout(requestTimeout); err != nil {
		_ = svc.Stop()
		cancel()
		return fmt.Errorf("coordinator: %w", err)
	}
	if !c.cfg.NoBuiltinTools {
		w, err := worker.New(worker.Config{Conn: c.nc, Prefix: c.cfg.Prefix, Logger: c.log.With("tools", "builtin"), TracerProvider: c.cfg.TracerProvider})
		if err == nil {
			err = w.Serve(worker.Namespace{Name: BuiltinNamespace, Tools: c.builtinTools(), Slots: 64})
		}
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			_ = svc.Stop()
			cancel()
			return fmt.Errorf("coordinator: built-in tools: %w", err)
		}
		c.builtins = w
	}
	c.bg.Add(1)
	go c.sweepLoop(runCtx)
	if c.cfg.WorkspaceDir != "" {
		c.bg.Add(1)
		go c.watchWorkspace(runCtx, fingerprint)
	}
	if c.cfg.PolicyFile != "" {
		c.bg.Add(1)
		go c.watchPolicy(runCtx, policyFingerprint)
	}
	c.log.Info("coordinator started", "service", messages.ServiceName, "version", Version, "api", c.names.APIGroup())
	return nil
}

// Stop stops answering new requests and waits for those being handled
// until ctx ends.
func (c *Coordinator) Stop(ctx context.Context) error {
	if c.svc != nil {
		_ = c.svc.Stop()
	}
	if c.builtins != nil {
		_ = c.builtins.Stop(ctx)
	}
	if c.index != nil {
		_ = c.index.Stop(ctx)
	}
	for _, sub := range c.subs {
		_ = sub.Unsubscribe()
	}
	done := make(chan struct{})
	go func() { c.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if c.cancel != nil {
		c.cancel()
	}
	c.bg.Wait()
	c.ledger.Close()
	return nil
}

// SetPolicy replaces the policy; nil allows every call.
func (c *Coordinator) SetPolicy(p *policy.Policy) { c.policy.Store(p) }
