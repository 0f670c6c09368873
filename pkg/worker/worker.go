package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/support/reuse"
	"github.com/toolbus/toolbus/internal/support/schemacost"
	"github.com/toolbus/toolbus/internal/wire/instance"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Config configures a worker.
type Config struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix of subjects and resources. Defaults to "toolbus".
	Prefix string
	// ID names the worker in results and heartbeats. Defaults to the host
	// name and a random suffix.
	ID string
	// AckWait is how long a call may go without a heartbeat before
	// JetStream gives it to another worker. Defaults to 30s.
	AckWait time.Duration
	// HeartbeatInterval is how often the worker tells the catalog it is
	// alive. Defaults to 5s.
	HeartbeatInterval time.Duration
	// ProgressInterval is the shortest time between two progress events of
	// one call. Defaults to 100ms.
	ProgressInterval time.Duration
	// StartDelay is how long a call runs before its start is recorded in
	// the ledger (earlier if it reports progress or logs): calls that
	// finish sooner are not recorded as running at all. Defaults to 20ms.
	StartDelay time.Duration
	// FetchWait is how long one pull request waits for a call before it is
	// renewed. The server tells a waiting request it is alive every half of
	// FetchWait, at most every 5s; requests not heard from for two such
	// intervals are taken as lost and asked again. Defaults to 30s.
	FetchWait time.Duration
	// TracerProvider receives a span per call, a child of the submit's
	// span. Tools get its context. Defaults to the global provider.
	TracerProvider trace.TracerProvider
	// Resources sizes the streams and buckets the worker creates if they
	// are missing. A coordinator that starts later keeps its own sizes.
	Resources Resources
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Resources sizes the JetStream streams and buckets that a worker creates
// when it finds them missing. Zero fields take the defaults a coordinator
// uses.
type Resources struct {
	// Replicas of every stream and bucket: 1 for one server, 3 or 5 in a cluster. Defaults to 1.
	Replicas int
	// EventsMaxAge is how long call events, and so results, are kept. Defaults to 72h.
	EventsMaxAge time.Duration
	// DuplicateWindow is how long the events stream remembers message IDs
	// to drop duplicate submits. Defaults to 2m.
	DuplicateWindow time.Duration
	// MaxQueuedCalls and MaxCallBytes bounded the calls stream of protocol
	// version 2; ignored since version 3 (see resources.Config).
	MaxQueuedCalls int64
	MaxCallBytes   int32
}

func (r Resources) config() resources.Config {
	return resources.Config{
		Replicas:        r.Replicas,
		EventsMaxAge:    r.EventsMaxAge,
		DuplicateWindow: r.DuplicateWindow,
		MaxQueuedCalls:  r.MaxQueuedCalls,
		MaxCallBytes:    r.MaxCallBytes,
	}
}

// ErrInvalidConfig is returned by New and Serve for a configuration they
// cannot run with; the error names the field.
var ErrInvalidConfig = errors.New("worker: invalid configuration")

// ErrSchemaTooCostly is matched by the error of Serve when a tool's input
// schema could cost more to validate arguments against than the
// coordinator allows (its branches multiply under recursion); the
// coordinator would refuse every call to the tool. Such a tool of a Source
// is not served: the worker logs a warning naming it, with this error, and
// serves the source's other tools.
var ErrSchemaTooCostly = schemacost.ErrTooCostly

// configError names a field of Config or Namespace and what is wrong with it.
func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = messages.DefaultPrefix
	}
	if c.ID == "" {
		c.ID = instance.ID("worker")
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 100 * time.Millisecond
	}
	if c.StartDelay == 0 {
		c.StartDelay = 20 * time.Millisecond
	}
	if c.FetchWait == 0 {
		c.FetchWait = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a Config that has its defaults.
func (c Config) validate() error {
	if c.Conn == nil {
		return configError("Conn", "is required")
	}
	if _, err := messages.NewNames(c.Prefix); err != nil {
		return configError("Prefix", "%q: %v", c.Prefix, err)
	}
	if err := messages.ValidateID("worker ID", c.ID); err != nil {
		return configError("ID", "%q: %v", c.ID, err)
	}
	if c.AckWait < 3*time.Millisecond {
		return configError("AckWait", "%v is shorter than 3ms", c.AckWait)
	}
	// The server's idle heartbeats come at half of FetchWait at most, and
	// at least every millisecond.
	if c.FetchWait < 2*time.Millisecond {
		return configError("FetchWait", "%v is shorter than 2ms", c.FetchWait)
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"ProgressInterval", c.ProgressInterval},
		{"StartDelay", c.StartDelay},
		{"Resources.EventsMaxAge", c.Resources.EventsMaxAge},
		{"Resources.DuplicateWindow", c.Resources.DuplicateWindow},
	} {
		if d.value < 0 {
			return configError(d.field, "%v is negative", d.value)
		}
	}
	switch {
	case c.Resources.Replicas < 0:
		return configError("Resources.Replicas", "%d is negative", c.Resources.Replicas)
	case c.Resources.MaxQueuedCalls < 0:
		return configError("Resources.MaxQueuedCalls", "%d is negative", c.Resources.MaxQueuedCalls)
	case c.Resources.MaxCallBytes < 0:
		return configError("Resources.MaxCallBytes", "%d is negative", c.Resources.MaxCallBytes)
	}
	return nil
}

// Namespace is a set of tools a worker serves together.
type Namespace struct {
	Name  string
	Tools []Tool
	// Sources provide further tools, which may change while the worker runs.
	Sources []Source
	// Slots is how many calls of the namespace this worker runs at once. Defaults to 16.
	Slots int
	// MaxConcurrency is the namespace's limit of calls in progress across
	// all workers. Every worker of the namespace should set the same value;
	// the last one to start wins. Defaults to 1024.
	MaxConcurrency int
	// MaxAttempts is how many times a call is delivered before it fails
	// with max_attempts. Defaults to 3.
	MaxAttempts int
}

// Worker executes calls. Create it with New, add namespaces with Serve,
// then Start it.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	names  messages.Names
	js     jetstream.JetStream
	ledger *ledger.Ledger
	store  *catalog.Store
	tracer trace.Tracer
	// goroutines runs deliveries and the tools they call.
	goroutines *reuse.Pool

	// results writes the calls' results and settles their messages.
	results *results
	// leases are the calls in flight.
	leases *leases
	// stragglers hold the slots of tools that outlived their calls.
	stragglers *stragglers
	// heartbeats tell the catalog that the worker serves its namespaces.
	heartbeats *heartbeats

	mu         sync.Mutex
	namespaces []*namespace
	started    bool

	cancel    context.CancelFunc
	fetchCtx  context.Context
	stopFetch context.CancelFunc
	bg        sync.WaitGroup
	subs      []*nats.Subscription
	statusCh  chan nats.Status
	// noticeRecheck asks for the namespaces' cancel notices to be
	// confirmed again (see cancelNotices.distrust).
	noticeRecheck chan struct{}
}

type namespace struct {
	Namespace
	// tools by method, and the source that provides each ("" for Tools).
	tools  map[string]*Tool
	owner  map[string]string
	poller *poller
	// busy counts the namespace's calls in flight; leases guards it.
	busy int
	// notices are the namespace's cancel notices this worker heard.
	notices *cancelNotices
	// heartbeats serialises the namespace's heartbeat writes, so that an
	// older view of its sources never lands after a newer one.
	heartbeats sync.Mutex
}

// New returns a worker.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names := messages.MustNames(cfg.Prefix)
	js, err := jetstream.New(cfg.Conn, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w := &Worker{
		cfg:        cfg,
		log:        cfg.Logger.With("worker", cfg.ID),
		names:      names,
		js:         js,
		ledger:     ledger.New(cfg.Conn, js, names),
		stragglers: newStragglers(),
		tracer:     tracing.Tracer(cfg.TracerProvider),
		goroutines: reuse.New(10 * time.Second),

		noticeRecheck: make(chan struct{}, 1),
	}
	w.results = &results{
		workerID:   cfg.ID,
		ackWait:    cfg.AckWait,
		js:         js,
		names:      names,
		ledger:     w.ledger,
		log:        w.log,
		goroutines: w.goroutines,
		abandoned:  w.stragglers.abandoned,
	}
	w.leases = &leases{
		workerID:   cfg.ID,
		startDelay: cfg.StartDelay,
		ackWait:    cfg.AckWait,
		ledger:     w.ledger,
		log:        w.log,
		bg:         &w.bg,
		inflight:   map[string]*inflight{},
	}
	w.heartbeats = &heartbeats{workerID: cfg.ID, interval: cfg.HeartbeatInterval, leases: w.leases, log: w.log}
	return w, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Serve adds a namespace. It must be called before Start.
func (w *Worker) Serve(ns Namespace) error {
	if err := messages.ValidateNamespace(ns.Name); err != nil {
		return fmt.Errorf("%w: Namespace.Name: %w", ErrInvalidConfig, err)
	}
	if ns.Slots == 0 {
		ns.Slots = 16
	}
	if ns.MaxConcurrency == 0 {
		ns.MaxConcurrency = 1024
	}
	if ns.MaxAttempts == 0 {
		ns.MaxAttempts = 3
	}
	switch {
	case ns.Slots < 0:
		return configError("Namespace.Slots", "of %s: %d is negative", ns.Name, ns.Slots)
	case ns.MaxConcurrency < 0:
		return configError("Namespace.MaxConcurrency", "of %s: %d is negative", ns.Name, ns.MaxConcurrency)
	case ns.MaxAttempts < 0:
		return configError("Namespace.MaxAttempts", "of %s: %d is negative", ns.Name, ns.MaxAttempts)
	}
	n := &namespace{Namespace: ns, tools: map[string]*Tool{}, owner: map[string]string{}}
	for i := range ns.Tools {
		t := &ns.Tools[i]
		if err := prepareTool(ns.Name, t); err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				err = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
			return err
		}
		if _, dup := n.tools[t.Definition.Method]; dup {
			return configError("Namespace.Tools", "of %s: tool %s is defined twice", ns.Name, t.Definition.Name)
		}
		n.tools[t.Definition.Method] = t
		n.owner[t.Definition.Method] = ""
	}
	seen := map[string]bool{}
	for _, src := range ns.Sources {
		if src.Name() == "" || seen[src.Name()] {
			return configError("Namespace.Sources", "of %s: every source needs its own non-empty name", ns.Name)
		}
		seen[src.Name()] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("%w: Serve after Start: namespace %s", ErrInvalidConfig, ns.Name)
	}
	for _, other := range w.namespaces {
		if other.Name == ns.Name {
			return configError("Namespace.Name", "%s is served twice", ns.Name)
		}
	}
	w.namespaces = append(w.namespaces, n)
	return nil
}

func prepareTool(ns string, t *Tool) error {
	t.Definition.Namespace = ns
	name := t.Definition.ToolName()
	if err := name.Validate(); err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	t.Definition.Name = name.String()
	if t.Handler == nil {
		return configError("Handler", "of tool %s is nil", t.Definition.Name)
	}
	if t.misfit != nil {
		return fmt.Errorf("%w: tool %s: %w", ErrInvalidConfig, t.Definition.Name, t.misfit)
	}
	if t.Definition.Delivery == "" {
		t.Definition.Delivery = messages.DefaultDelivery(&t.Definition.Metadata)
	} else if !t.Definition.Delivery.Valid() {
		return configError("Delivery", "of tool %s: %q is neither %s nor %s", t.Definition.Name, t.Definition.Delivery, messages.DeliveryAtLeastOnce, messages.DeliveryAtMostOnce)
	}
	if len(t.Definition.InputSchema) == 0 {
		t.Definition.InputSchema = messages.JSON(`{"type":"object"}`)
	}
	// A schema the coordinator could not use would have every call
	// refused: it is refused here, where its author sees why.
	err := schemacost.CheckJSON(t.Definition.InputSchema)
	if err == nil {
		err = objectSchema(t.Definition.InputSchema)
	}
	if err != nil {
		return fmt.Errorf("%w: InputSchema of tool %s: %w", ErrInvalidConfig, t.Definition.Name, &unusableSchemaError{err})
	}
	return nil
}

// unusableSchemaError is a tool's input schema that no call could pass:
// it does not compile, costs too much to validate against, or does not
// let the arguments be an object. A source's tool with one is skipped.
type unusableSchemaError struct{ err error }

func (e *unusableSchemaError) Error() string { return e.err.Error() }
func (e *unusableSchemaError) Unwrap() error { return e.err }

// objectSchema checks that a schema's type, when it names one, lets the
// arguments be the JSON object every call sends.
func objectSchema(schema messages.JSON) error {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(schema, &s) != nil || s.Type == nil {
		return nil
	}
	switch typ := s.Type.(type) {
	case string:
		if typ == "object" {
			return nil
		}
	case []any:
		if slices.Contains(typ, any("object")) {
			return nil
		}
	}
	return fmt.Errorf("its type is %v, and a tool's arguments are a JSON object", s.Type)
}

// Start creates what the worker needs in JetStream and is missing, asks a
// coordinator for each namespace's consumer with the namespace's settings
// (messages.ConsumerRequest; where no coordinator listens it creates the
// consumer itself, if its NATS user may), registers its tools in the
// catalog and starts taking calls. It returns once the worker is taking
// calls.
func (w *Worker) Start(ctx context.Context) (err error) {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: already started")
	}
	w.started = true
	nss := w.namespaces
	w.mu.Unlock()
	if len(nss) == 0 {
		return errors.New("worker: no namespace to serve")
	}
	if err := resources.EnsureExisting(ctx, w.js, w.names, w.cfg.Resources.config()); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	kv, err := w.js.KeyValue(ctx, w.names.CatalogBucket())
	if err != nil {
		return fmt.Errorf("worker: catalog: %w", err)
	}
	store := catalog.NewStore(kv)
	runCtx, cancel := context.WithCancel(context.Background())
	var started []Source
	// A start that fails half-way undoes what it did, and the worker can
	// be started again.
	defer func() {
		if err != nil {
			w.undoStart(ctx, nss, started, cancel)
		}
	}()
	if started, err = w.startSources(ctx, runCtx, nss); err != nil {
		return err
	}
	w.cancel = cancel
	w.fetchCtx, w.stopFetch = context.WithCancel(runCtx)
	for _, ns := range nss {
		if err := w.ensureConsumer(ctx, ns); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if err := w.register(ctx, runCtx, store, nss); err != nil {
		return err
	}
	if err := w.startPollers(nss); err != nil {
		return err
	}
	// Nothing below fails.
	w.statusCh = w.cfg.Conn.StatusChanged(nats.CONNECTED)
	w.bg.Add(3)
	go func() {
		defer w.bg.Done()
		w.heartbeats.loop(runCtx, store, nss)
	}()
	go w.leases.loop(runCtx, nss)
	go w.reconnectLoop(runCtx)
	for _, ns := range nss {
		for _, src := range ns.Sources {
			if h, ok := src.(SourceHealth); ok {
				w.bg.Add(1)
				go w.followHealth(runCtx, store, ns, h)
			}
		}
	}
	w.log.Info("worker started", "namespaces", len(nss))
	return nil
}

// undoStart undoes what a start that failed half-way did, so that the
// worker can be started again.
func (w *Worker) undoStart(ctx context.Context, nss []*namespace, started []Source, cancel context.CancelFunc) {
	cancel()
	for _, sub := range w.subs {
		_ = sub.Unsubscribe()
	}
	w.subs = nil
	for _, ns := range nss {
		if ns.poller != nil {
			ns.poller.stop()
			ns.poller = nil
		}
	}
	stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	for _, src := range started {
		_ = src.Stop(stopCtx)
	}
	w.mu.Lock()
	w.started, w.cancel, w.store = false, nil, nil
	w.mu.Unlock()
}

// startSources starts the namespaces' sources and records their tools, and
// returns the sources started, also when one fails. Registration is all or
// nothing: every source starts before the first tool is written, so a
// source that fails to start leaves none of the others' tools in the
// catalog. Until w.store is set, setSourceTools (also when a source
// reports a change) only records the tools.
func (w *Worker) startSources(ctx, runCtx context.Context, nss []*namespace) (started []Source, err error) {
	for _, ns := range nss {
		for _, src := range ns.Sources {
			tools, err := src.Start(runCtx, w.sourceUpdater(runCtx, ns, src))
			if err != nil {
				return started, fmt.Errorf("worker: namespace %s: start source %s: %w", ns.Name, src.Name(), err)
			}
			started = append(started, src)
			if err := w.setSourceTools(ctx, ns, src.Name(), tools); err != nil {
				return started, fmt.Errorf("worker: %w", err)
			}
		}
	}
	return started, nil
}

// register writes the namespaces' tools to the catalog, listens to their
// cancel notices and sends their first heartbeats. From then on, a
// source's update goes straight to the catalog.
func (w *Worker) register(ctx, runCtx context.Context, store *catalog.Store, nss []*namespace) error {
	registered := make([][]*Tool, len(nss))
	w.mu.Lock()
	w.store = store
	for i, ns := range nss {
		for _, t := range ns.tools {
			registered[i] = append(registered[i], t)
		}
	}
	w.mu.Unlock()
	for i, ns := range nss {
		for _, t := range registered[i] {
			if err := store.PutTool(ctx, &t.Definition); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
		}
		filter, _ := w.names.Filters().Cancel(ns.Name)
		durable, _ := w.names.Consumers().Durable(ns.Name)
		consumerInfo := func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
			c, err := w.js.Consumer(ctx, w.names.EventsStream(), durable)
			if err != nil {
				return nil, err
			}
			return c.CachedInfo(), nil
		}
		notices, err := subscribeNotices(w.cfg.Conn, filter, consumerInfo, w.leases.cancelCall, w.noticeRecheck, w.log.With("namespace", ns.Name))
		if err != nil {
			return fmt.Errorf("worker: subscribe to cancellations: %w", err)
		}
		ns.notices = notices
		w.subs = append(w.subs, notices.sub)
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			notices.run(runCtx)
		}()
		// The catalog bucket may be electing a leader (a coordinator
		// just changed its replicas, a server restarts): a first
		// heartbeat that finds no answer is written again.
		if err := transport.Retry(ctx, firstHeartbeatRetry, func(ctx context.Context) error {
			return w.heartbeats.send(ctx, store, ns)
		}); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		// Confirmed before the first pull: the calls queued from now on
		// need no read before they run (see cancelNotices).
		notices.confirm(ctx)
	}
	return nil
}

// firstHeartbeatRetry bounds the writes of a namespace's first heartbeat
// at start: a bucket without a leader for a moment does not answer
// (an election takes a few seconds), and the heartbeat, which overwrites
// its key, is written again for up to a minute.
var firstHeartbeatRetry = transport.RetryPolicy{
	Attempt: 5 * time.Second, Initial: 250 * time.Millisecond, Max: 2 * time.Second, Within: time.Minute,
	Retryable: transport.Transient,
}

// startPollers starts taking the namespaces' calls.
func (w *Worker) startPollers(nss []*namespace) error {
	for _, ns := range nss {
		durable, _ := w.names.Consumers().Durable(ns.Name)
		p, err := newPoller(w.cfg.Conn, w.names.EventsStream(), durable, ns.Slots, w.cfg.FetchWait, holdAckWaits*w.cfg.AckWait, w.goroutines,
			func(m *transport.PullMsg, s *slot) { w.execute(ns, m, s) }, w.log.With("namespace", ns.Name))
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		ns.poller = p
		p.slots.namespace = ns.Name
		metrics.SlotsTotal(ns.Name, int64(ns.Slots))
		p.start(w.fetchCtx)
	}
	return nil
}

// Stop stops taking calls and waits for running calls to finish until ctx
// ends. Calls still running then are interrupted with ErrStopping: an
// at-least-once call is handed back to JetStream, which delivers it to
// another worker at once; an at-most-once call ends failed with
// outcome_unknown, since its tool may have acted.
// The worker's heartbeats are removed from the catalog.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.cancel == nil {
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	w.stopFetch()
	done := make(chan struct{})
	go func() {
		for _, ns := range w.namespaces {
			if ns.poller != nil {
				ns.poller.stop()
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		w.leases.cancelAll(ErrStopping)
		// Tools that ignore their context give up their slots now; their
		// goroutines are left behind.
		w.stragglers.abandon()
		<-done
	}
	for _, sub := range w.subs {
		_ = sub.Unsubscribe()
	}
	if w.statusCh != nil {
		w.cfg.Conn.RemoveStatusListener(w.statusCh)
	}
	w.cancel()
	w.bg.Wait()
	w.goroutines.Close()
	w.stopSources(ctx)
	w.ledger.Close()
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if kv, err := w.js.KeyValue(cleanupCtx, w.names.CatalogBucket()); err == nil {
		store := catalog.NewStore(kv)
		for _, ns := range w.namespaces {
			if err := store.RemoveWorker(cleanupCtx, ns.Name, w.cfg.ID); err != nil {
				w.log.Warn("remove heartbeat", "namespace", ns.Name, "error", err)
			}
		}
	}
	w.mu.Lock()
	w.cancel = nil
	w.mu.Unlock()
	w.log.Info("worker stopped")
	return nil
}

// sourceUpdater applies a source's new tool list to the namespace and the catalog.
func (w *Worker) sourceUpdater(ctx context.Context, ns *namespace, src Source) func([]Tool) {
	return func(tools []Tool) {
		uctx, cancel := context.WithTimeout(ctx, writeTimeout)
		defer cancel()
		// A source that comes back reports its tools: the heartbeat that
		// no longer names it down goes first, so that a reader who sees
		// the tools sees them available.
		w.mu.Lock()
		store := w.store
		w.mu.Unlock()
		if h, ok := src.(SourceHealth); ok && store != nil && h.Unavailable() == "" {
			if err := w.heartbeats.send(uctx, store, ns); err != nil && ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "namespace", ns.Name, "error", err)
			}
		}
		if err := w.setSourceTools(uctx, ns, src.Name(), tools); err != nil && ctx.Err() == nil {
			w.log.Error("tools of a source not updated", "namespace", ns.Name, "source", src.Name(), "error", err)
		}
	}
}

// stopSources stops every source at once, so that slow ones (a server
// process given time to exit) do not add up.
func (w *Worker) stopSources(ctx context.Context) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, ns := range w.namespaces {
		for _, src := range ns.Sources {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := src.Stop(stopCtx); err != nil {
					w.log.Warn("source did not stop cleanly", "namespace", ns.Name, "source", src.Name(), "error", err)
				}
			}()
		}
	}
	wg.Wait()
}

// reconnectLoop re-checks cancellations after the connection comes back:
// signals sent while it was down are lost, their ledger records are not.
// It also confirms the namespaces' cancel notices again then, and when a
// notice was lost.
func (w *Worker) reconnectLoop(ctx context.Context) {
	defer w.bg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.noticeRecheck:
			for _, ns := range w.namespaces {
				if ns.notices.trust.Load() == nil {
					ns.notices.confirm(ctx)
				}
			}
			// A notice was dropped: the calls in flight read whether they
			// were cancelled.
			w.leases.checkCancelled(ctx, w.leases.ids())
		case _, ok := <-w.statusCh:
			if !ok {
				return
			}
			for _, ns := range w.namespaces {
				ns.poller.requestsLost()
				ns.notices.confirm(ctx)
			}
			w.leases.checkCancelled(ctx, w.leases.ids())
		}
	}
}

// cancelError is the cause of a cancelled call's context; it matches ErrCancelled.
type cancelError struct{ reason string }

func (e *cancelError) Error() string        { return "call cancelled: " + e.reason }
func (e *cancelError) Is(target error) bool { return target == ErrCancelled }

func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}
