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
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/support/reuse"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
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
	// MaxWaitsPerUser bounds the long waits one authenticated user holds
	// open at once: submits with wait, and calls.get and calls.events with
	// wait_ms. One more is refused with too_many_requests, so that one
	// agent cannot take the places (MaxConcurrentRequests) every agent's
	// requests need. It applies with Identities only, which name the user.
	// Defaults to DefaultMaxWaitsPerUser.
	MaxWaitsPerUser int
	// EventFeedThreshold is how many calls.events requests may wait at
	// once before the coordinator reads the events stream once for all of
	// them, instead of each wait walking it (docs/operations.md, "Limits
	// and sizing"). Defaults to DefaultEventFeedThreshold; a negative
	// value never does.
	EventFeedThreshold int
	// SweepInterval is how often the coordinator looks for queued calls
	// whose deadline passed without a worker, and for approvals that
	// expired. Defaults to 5s.
	SweepInterval time.Duration
	// AuditCopyInterval is how often the coordinator takes the decisions
	// of calls queued since it last looked, to copy them from their queued
	// events into the audit stream (docs/security.md, "The audit log").
	// Defaults to DefaultAuditCopyInterval; a negative value leaves the
	// copying to other coordinators.
	AuditCopyInterval time.Duration
	// DutyLeaseTTL is how long a coordinator that died keeps the duties
	// one coordinator at a time does (the audit copy and the sweep of
	// settled calls), before another takes them over: within 4/3 of it. A
	// coordinator that stops hands them over at once. Defaults to
	// DefaultDutyLeaseTTL (10s); at least 1s.
	DutyLeaseTTL time.Duration
	// SweepGrace is how long past its deadline a queued call may stay before
	// the sweeper ends it; workers end the calls they hold themselves.
	// Defaults to 30s.
	SweepGrace time.Duration
	// StaleToolTTL is how long a namespace may have no live worker before
	// its tools are removed from the catalog (checked every SweepInterval).
	// Defaults to DefaultStaleToolTTL (24h); a negative value turns the
	// sweep off.
	StaleToolTTL time.Duration
	// UnavailableWait bounds how long a request waits for JetStream while
	// a stream or bucket it needs does not answer (in a cluster, while its
	// replicas elect a leader): the request's reads and writes are retried
	// with backoff within its own deadline and at most this long, and only
	// then refused with unavailable. Defaults to DefaultUnavailableWait
	// (10s); it must be shorter than the streams' duplicate window (2m),
	// within which a retried write is stored once.
	UnavailableWait time.Duration
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
	// Identities, when set, authenticates agents: every request must come
	// through an import that shares the requester's identity
	// (Nats-Request-Info), and may name only the agents its NATS user may
	// act as; approvals.decide and tools.enable/disable need an operator.
	// Nil trusts the agent a request of the coordinator's own account
	// names, as development does. With or without it, a user whose signed
	// JWT carries Toolbus claims acts as they say (claims.go); without it,
	// a request of any other user from another account is refused.
	Identities *Identities
	// NoLearning makes this coordinator record no usage evidence, whatever
	// the installation's learning switch (learning.disable) says. By
	// default it records, in the usage bucket, what agents searched for in
	// each turn and which of the tools found they then called, which
	// discovery learns from (docs/operations.md).
	NoLearning bool
	// UsageRetention is how long an agent's evidence for a tool is kept
	// after it last changed. Defaults to usage.DefaultRetention (30 days).
	UsageRetention time.Duration
	// UsageTurnWindow is how long a turn's searches are kept after its
	// last one: a call later than that is no evidence. Defaults to
	// usage.DefaultTurnWindow (1h).
	UsageTurnWindow time.Duration
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
	if c.MaxWaitsPerUser == 0 {
		c.MaxWaitsPerUser = DefaultMaxWaitsPerUser
	}
	if c.AuditCopyInterval == 0 {
		c.AuditCopyInterval = DefaultAuditCopyInterval
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.DutyLeaseTTL == 0 {
		c.DutyLeaseTTL = DefaultDutyLeaseTTL
	}
	if c.SweepGrace == 0 {
		c.SweepGrace = 30 * time.Second
	}
	if c.StaleToolTTL == 0 {
		c.StaleToolTTL = DefaultStaleToolTTL
	}
	if c.UnavailableWait == 0 {
		c.UnavailableWait = DefaultUnavailableWait
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
	if c.UsageRetention == 0 {
		c.UsageRetention = usage.DefaultRetention
	}
	if c.UsageTurnWindow == 0 {
		c.UsageTurnWindow = usage.DefaultTurnWindow
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrInvalidConfig is what New returns, wrapped with the field at fault,
// for a Config it cannot run with.
var ErrInvalidConfig = errors.New("invalid coordinator configuration")

// validate checks a Config that has its defaults.
func (c Config) validate() error {
	if c.Conn == nil {
		return fmt.Errorf("%w: Conn is required", ErrInvalidConfig)
	}
	if _, err := messages.NewNames(c.Prefix); err != nil {
		return fmt.Errorf("%w: Prefix: %w", ErrInvalidConfig, err)
	}
	for _, f := range [...]struct {
		name  string
		value int
	}{
		{"MaxArgumentsBytes", c.MaxArgumentsBytes},
		{"MaxRequestBytes", c.MaxRequestBytes},
		{"MaxConcurrentRequests", c.MaxConcurrentRequests},
		{"MaxWaitsPerUser", c.MaxWaitsPerUser},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is %d; it must be positive", ErrInvalidConfig, f.name, f.value)
		}
	}
	for _, f := range [...]struct {
		name  string
		value time.Duration
	}{
		{"DefaultTimeout", c.DefaultTimeout},
		{"MaxWait", c.MaxWait},
		{"SweepInterval", c.SweepInterval},
		{"SweepGrace", c.SweepGrace},
		{"UnavailableWait", c.UnavailableWait},
		{"WorkspaceReloadInterval", c.WorkspaceReloadInterval},
		{"ApprovalTTL", c.ApprovalTTL},
		{"GrantTTL", c.GrantTTL},
		{"UsageRetention", c.UsageRetention},
		{"UsageTurnWindow", c.UsageTurnWindow},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is %v; it must be positive", ErrInvalidConfig, f.name, f.value)
		}
	}
	if c.DutyLeaseTTL != 0 && c.DutyLeaseTTL < time.Second {
		return fmt.Errorf("%w: DutyLeaseTTL is %v; it must be at least 1s, above a few of the server's round trips", ErrInvalidConfig, c.DutyLeaseTTL)
	}
	// A write retried after the events stream forgot its message ID would
	// be stored twice.
	if window := min(c.Resources.WithDefaults().DuplicateWindow, 2*time.Minute); c.UnavailableWait >= window {
		return fmt.Errorf("%w: UnavailableWait is %v; it must be shorter than the duplicate window of %v", ErrInvalidConfig, c.UnavailableWait, window)
	}
	return nil
}

// Coordinator serves the Toolbus API. Its work is done by rooms of their
// own, built by Start: the submit pipeline, the tool view (exposure and
// turns), approvals, tool switches, calls, the batch and the sweeper. The
// coordinator keeps their lifecycle and the API table.
type Coordinator struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	names  messages.Names
	ledger *ledger.Ledger
	tracer trace.Tracer
	// policy is the policy in force; nil allows every call.
	policy atomic.Pointer[policy.Policy]

	submitter *submitPipeline
	view      *toolView
	approvals *approvals
	switches  *toolSwitches
	calls     *calls
	batches   *batches
	follower  *follower
	logReads  *logReads
	// depths are the queue depths the sweeper sampled (stats.calls);
	// statsScans the scans of stats.calls under way.
	depths     *depthHistory
	statsScans *statsShare
	learning   *learning
	// duties names the work this coordinator does while it holds its
	// lease: the audit copy, the sweep of settled calls.
	duties *duties

	// The API's requests: at most MaxConcurrentRequests at once, each on
	// a goroutine of handlers.
	sem chan struct{}
	// guard ties requests to their authenticated callers (Config.Identities).
	guard *guard
	// waits counts each user's long waits (Config.MaxWaitsPerUser).
	waits    *waitLimit
	inflight sync.WaitGroup
	// inHand is the named submits and the held requests being handled,
	// which a copy need not be (requestsInHand).
	inHand   requestsInHand
	handlers *reuse.Pool

	// running is what Start started, to stop in reverse order.
	running stopStack
}

// New returns a coordinator; Start runs it.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
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
		sem:      make(chan struct{}, cfg.MaxConcurrentRequests),
		handlers: reuse.New(handlerIdle),
		tracer:   tracing.Tracer(cfg.TracerProvider),
		waits:    newWaitLimit(cfg.MaxWaitsPerUser),
		depths:   newDepthHistory(),

		statsScans: newStatsShare(),
	}
	c.policy.Store(cfg.Policy)
	return c, nil
}

// Start creates the JetStream resources if needed, loads the catalog and
// starts answering requests. If it fails, what it started is stopped.
func (c *Coordinator) Start(ctx context.Context) error {
	if err := c.start(ctx, c.startSteps()); err != nil {
		return err
	}
	c.log.Info("coordinator started", "service", messages.ServiceName, "version", Version, "api", c.names.APIGroup())
	switch {
	case c.cfg.Identities == nil && c.nc.Opts.UserJWT != nil:
		c.log.Info("agents are identified by their users' signed claims (toolbus agent add): a request from another account acts only as the agents its user's JWT names")
	case c.cfg.Identities == nil:
		c.log.Warn("identity is not authenticated: a request of this account acts as the agent it names, and one from another account is refused unless its user's signed JWT says which agents it acts as (toolbus agent add); configure identities (--identities) to tie password users to agents")
	}
	return nil
}

// start runs the steps in order. A step that starts something returns
// how to stop it; if a later step fails, those are run in reverse order.
func (c *Coordinator) start(ctx context.Context, steps []startStep) error {
	var started stopStack
	for _, step := range steps {
		stop, err := step.run(ctx)
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
			defer cancel()
			started.unwind(stopCtx, c.log)
			// The handlers' goroutines that served requests during the
			// start (its built-in tools' worker asks for its consumer) end
			// now; a later Start gets a pool of its own.
			c.handlers.Close()
			c.handlers = reuse.New(handlerIdle)
			if step.name != "" {
				return fmt.Errorf("coordinator: %s: %w", step.name, err)
			}
			return fmt.Errorf("coordinator: %w", err)
		}
		if stop != nil {
			started.push(step.name, stop)
		}
	}
	c.running = started
	return nil
}

// handlerIdle is how long a handler's goroutine waits for the next request
// before it ends.
const handlerIdle = 10 * time.Second

// Stop stops answering new requests and waits for those being handled
// until ctx ends, then stops the rest.
func (c *Coordinator) Stop(ctx context.Context) error {
	c.running.unwind(ctx, c.log)
	c.running = nil
	c.ledger.Close()
	c.handlers.Close()
	return nil
}

// startStep is one step of Start. run returns a stop function when the
// step leaves something running.
type startStep struct {
	name string
	run  func(ctx context.Context) (stop func(context.Context) error, err error)
}

// stopStack holds the stop functions of what was started, in order.
type stopStack []namedStop

type namedStop struct {
	name string
	stop func(context.Context) error
}

func (s *stopStack) push(name string, stop func(context.Context) error) {
	*s = append(*s, namedStop{name, stop})
}

// unwind runs the stop functions in reverse order, each once, and logs
// those that fail.
func (s *stopStack) unwind(ctx context.Context, log *slog.Logger) {
	for i := len(*s) - 1; i >= 0; i-- {
		if err := (*s)[i].stop(ctx); err != nil {
			log.Warn("stop failed", "part", (*s)[i].name, "error", err)
		}
	}
	*s = nil
}
