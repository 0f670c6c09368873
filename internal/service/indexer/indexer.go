package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/instance"
	"github.com/toolbus/toolbus/internal/wire/lease"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Config configures an indexer.
type Config struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Prefix of subjects and resources. Defaults to "toolbus".
	Prefix string
	// ID names the indexer in the lease and in the manifests it writes.
	// Defaults to the host name and a random suffix.
	ID string
	// LeaseTTL is how long a standby waits without seeing the writer renew
	// its lease before taking over. Defaults to 10s.
	LeaseTTL time.Duration
	// WriteInterval is the shortest time between two writes of the index
	// while catalog changes keep coming. Defaults to 250ms.
	WriteInterval time.Duration
	// GracePeriod is how long the chunks of a version stay readable after a
	// newer version replaced it, for readers still loading it. Defaults to 1m.
	GracePeriod time.Duration
	// ChunkSize is the size of the values a version is cut into. Defaults to
	// discovery.DefaultChunkSize; it must leave room for headers below the
	// server's maximum payload.
	ChunkSize int
	// Search holds the index parameters. Defaults to search.DefaultConfig().
	Search search.Config
	// LearnInterval is the shortest time between two folds of new usage
	// evidence into the index's learned fields, each of which may lead to
	// a new version. Defaults to 5m.
	LearnInterval time.Duration
	// Learn weighs usage evidence. Defaults to search.DefaultLearnConfig().
	Learn search.LearnConfig
	// Resources sizes the streams and buckets the indexer creates if they are missing.
	Resources resources.Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = messages.DefaultPrefix
	}
	if c.ID == "" {
		c.ID = instance.ID("indexer")
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.WriteInterval == 0 {
		c.WriteInterval = 250 * time.Millisecond
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = time.Minute
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = discovery.DefaultChunkSize
	}
	if c.LearnInterval == 0 {
		c.LearnInterval = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// chunkHeadroom is what a chunk must leave of the maximum payload for the
// subject and headers of its message.
const chunkHeadroom = 4 << 10

// minLeaseTTL keeps the renewal period above a server round trip or two.
const minLeaseTTL = 300 * time.Millisecond

func (c Config) validate() error {
	if err := messages.ValidateID("indexer ID", c.ID); err != nil {
		return err
	}
	if c.LeaseTTL < minLeaseTTL {
		return fmt.Errorf("lease TTL %v is below %v", c.LeaseTTL, minLeaseTTL)
	}
	if c.WriteInterval < 0 || c.GracePeriod < 0 || c.LearnInterval < 0 {
		return errors.New("write interval, grace period and learn interval must not be negative")
	}
	if limit := int(c.Conn.MaxPayload()) - chunkHeadroom; c.ChunkSize <= 0 || (c.Conn.MaxPayload() > 0 && c.ChunkSize > limit) {
		return fmt.Errorf("chunk size %d is out of range 1..%d (the server's maximum payload less %d)", c.ChunkSize, limit, chunkHeadroom)
	}
	return c.Search.Validate()
}

// Indexer follows the catalog and keeps the discovery index in the index
// bucket. Any number may run: the one holding the lease writes, the others
// keep their index current so that they are ready to take over.
type Indexer struct {
	cfg   Config
	log   *slog.Logger
	js    jetstream.JetStream
	names messages.Names

	kv      jetstream.KeyValue
	view    *catalog.View
	tracker *discovery.Tracker
	lease   *lease.Lease
	writer  *writer
	// usage follows the usage bucket, once it exists (the coordinator
	// creates it): the evidence folded into the learned fields. Once
	// the first reading is learned, a goroutine of its own takes the
	// watch's entries as they come, so that evidence stored while the
	// index is written waits for no write; usageMu guards usage from then
	// on, and usageChanged tells the loop that something is to be learned.
	usageMu      sync.Mutex
	usage        *usage.Follower
	usageWatches []jetstream.KeyWatcher
	usageChanged chan struct{}

	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// followUsage starts following the usage bucket if it exists, and learns
// what it holds; it reports whether it follows it.
func (ix *Indexer) followUsage(ctx, runCtx context.Context) bool {
	kv, err := ix.js.KeyValue(ctx, ix.names.UsageBucket())
	if err != nil {
		ix.log.Debug("indexer: no usage bucket yet; nothing learned from use", "error", err)
		return false
	}
	// The learning switch and the tools' evidence, not the turns'
	// records: those change with every search of a turn, and each read of
	// a bucket with many keys costs the server a walk of them.
	var watches []jetstream.KeyWatcher
	for _, keys := range []string{usage.SettingsKey, usage.ToolsFilter} {
		w, err := followed{KeyValue: kv, nc: ix.cfg.Conn, names: ix.names}.Watch(runCtx, keys)
		if err != nil {
			for _, w := range watches {
				_ = w.Stop()
			}
			ix.log.Warn("indexer: usage bucket not followed; nothing learned from use", "error", err)
			return false
		}
		watches = append(watches, w)
	}
	for _, w := range watches {
		for e := range w.Updates() {
			if e == nil {
				break
			}
			ix.usageMu.Lock()
			ix.usage.Apply(e)
			ix.usageMu.Unlock()
		}
	}
	ix.usageWatches = watches
	ix.learn()
	for _, w := range watches {
		ix.bg.Go(func() { ix.takeUsage(w) })
	}
	return true
}

// takeUsage applies the evidence the watch brings until it ends, and
// tells the loop when some of it is to be learned.
func (ix *Indexer) takeUsage(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		ix.usageMu.Lock()
		changed := ix.usage.Apply(e)
		ix.usageMu.Unlock()
		if changed {
			select {
			case ix.usageChanged <- struct{}{}:
			default:
			}
		}
	}
}

// learn folds the evidence that changed into the learned fields, and
// reports whether the index changed.
func (ix *Indexer) learn() bool {
	ix.usageMu.Lock()
	changes := ix.usage.Changes()
	ix.usageMu.Unlock()
	changed := false
	for name, learned := range changes {
		ok, err := ix.tracker.SetLearned(name, learned)
		if err != nil {
			ix.log.Warn("indexer: learned terms not indexed", "tool", name, "error", err)
			continue
		}
		changed = changed || ok
	}
	return changed
}

// New returns an indexer; Start runs it.
func New(cfg Config) (*Indexer, error) {
	if cfg.Conn == nil {
		return nil, errors.New("indexer: Config.Conn is required")
	}
	cfg = cfg.withDefaults()
	if cfg.Search == (search.Config{}) {
		cfg.Search = search.DefaultConfig()
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	names, err := messages.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	return &Indexer{cfg: cfg, log: cfg.Logger.With("indexer", cfg.ID), js: js, names: names}, nil
}

// Start creates the JetStream resources that are missing (it changes no
// existing one: that is the coordinator's, and its NATS user may not),
// the index bucket included, indexes the catalog,
// and starts competing for the lease and writing the index while it holds
// it. It returns once the catalog is indexed.
func (ix *Indexer) Start(ctx context.Context) error {
	// Asked for a replication other than the installation's, the indexer
	// refuses to start (ErrReplicasMismatch) rather than serve it: only a
	// coordinator changes the replication.
	asked := ix.cfg.Resources
	asked.Reconfigure = false
	if _, err := resources.ResolveByCatalog(ctx, ix.js, ix.names, asked); err != nil {
		return fmt.Errorf("indexer: %w", err)
	}
	if err := resources.EnsureExisting(ctx, ix.js, ix.names, ix.cfg.Resources); err != nil {
		return fmt.Errorf("indexer: %w", err)
	}
	// The coordinator creates and updates the index bucket; the indexer
	// binds to it, and creates it only where no coordinator did (its user
	// may not create a stream: whoever does chooses the subjects it keeps).
	kv, err := ix.js.KeyValue(ctx, ix.names.IndexBucket())
	if err != nil {
		kv, err = resources.EnsureIndexBucket(ctx, ix.js, ix.names, ix.cfg.Resources)
	}
	if err != nil {
		return fmt.Errorf("indexer: %w", err)
	}
	kv = followed{KeyValue: kv, nc: ix.cfg.Conn, names: ix.names}
	ix.kv = kv
	catalogKV, err := ix.js.KeyValue(ctx, ix.names.CatalogBucket())
	if err != nil {
		return fmt.Errorf("indexer: catalog: %w", err)
	}
	catalogKV = indexedCatalog{followed{KeyValue: catalogKV, nc: ix.cfg.Conn, names: ix.names}}
	runCtx, cancel := context.WithCancel(context.Background())
	ix.view = catalog.NewView(catalogKV, ix.log)
	if err := ix.view.Start(runCtx); err != nil {
		cancel()
		return fmt.Errorf("indexer: %w", err)
	}
	if ix.tracker, err = discovery.NewTracker(ix.view, ix.cfg.Search, ix.log); err != nil {
		cancel()
		return fmt.Errorf("indexer: %w", err)
	}
	if _, err := ix.tracker.Sync(); err != nil {
		cancel()
		return fmt.Errorf("indexer: %w", err)
	}
	ix.usage = usage.NewFollower(ix.cfg.Learn)
	ix.usageChanged = make(chan struct{}, 1)
	// The evidence stored so far is learned before the first write, so
	// that a restart writes what the last version holds, not a version
	// without it first.
	ix.followUsage(ctx, runCtx)
	ix.lease = lease.New(kv, discovery.LeaseKey, "index", ix.cfg.ID, ix.cfg.LeaseTTL, ix.log)
	leaseWatch, err := ix.lease.Watch(runCtx)
	if err != nil {
		cancel()
		return fmt.Errorf("indexer: watch the lease: %w", err)
	}
	ix.writer = &writer{
		kv:         kv,
		id:         ix.cfg.ID,
		chunkSize:  ix.cfg.ChunkSize,
		grace:      ix.cfg.GracePeriod,
		orphanWait: max(ix.cfg.GracePeriod, ix.cfg.LeaseTTL),
		valid:      ix.lease.Valid,
		log:        ix.log,
		firstSeen:  map[uint64]time.Time{},
	}
	ix.cancel = cancel
	ix.bg.Add(2)
	go func() {
		defer ix.bg.Done()
		ix.lease.Run(runCtx, leaseWatch)
	}()
	go ix.run(runCtx)
	ix.log.Info("indexer started", "id", ix.cfg.ID, "tools", ix.tracker.Len(), "bucket", ix.names.IndexBucket())
	return nil
}

// Stop stops indexing and, if this indexer holds the lease, releases it so
// that a standby takes over at once.
func (ix *Indexer) Stop(ctx context.Context) error {
	if ix.cancel == nil {
		return nil
	}
	ix.cancel()
	ix.bg.Wait()
	ix.lease.Release(ctx)
	return nil
}

// sweepInterval is how often the active indexer looks for chunks to delete:
// often enough that a superseded version goes within 1.5 grace periods.
func sweepInterval(grace time.Duration) time.Duration {
	return min(max(grace/2, 50*time.Millisecond), 30*time.Second)
}

// usageRetryInterval is how often an indexer that found no usage bucket
// looks for it again.
const usageRetryInterval = 5 * time.Second

// maxRetryDelay bounds the wait before writing again after a failed write,
// unless WriteInterval is longer.
const maxRetryDelay = 5 * time.Second

// writeRetries is the policy of the index's writes after one failed: the
// next is tried WriteInterval after it, then after pauses doubling up to
// maxRetryDelay, whole (one indexer writes, so no crowd retries in step),
// until one is stored.
func (ix *Indexer) writeRetries() transport.RetryPolicy {
	every := ix.cfg.WriteInterval
	return transport.RetryPolicy{Initial: every, Max: max(maxRetryDelay, every), NoJitter: true, Retryable: func(error) bool { return true }}
}

func (ix *Indexer) run(ctx context.Context) {
	defer ix.bg.Done()
	var (
		dirty     = true // the stored index may differ from the tracker's
		lastWrite time.Time
		retry     = ix.writeRetries().Start()
		timer     *time.Timer
		timerC    <-chan time.Time
		sweep     = time.NewTicker(sweepInterval(ix.cfg.GracePeriod))
		// Usage evidence that changed is learned at most every
		// LearnInterval; the bucket is looked for again every retry
		// until a coordinator made it.
		learnTimer *time.Timer
		learnC     <-chan time.Time
		lastLearn  = time.Now()
		usageRetry = time.NewTicker(usageRetryInterval)
	)
	defer sweep.Stop()
	defer usageRetry.Stop()
	defer func() {
		for _, w := range ix.usageWatches {
			_ = w.Stop()
		}
	}()
	// arm schedules a write WriteInterval after the last one, or at once.
	arm := func(after time.Duration) {
		if timerC != nil || !ix.lease.Valid() {
			return
		}
		timer = time.NewTimer(max(0, time.Until(lastWrite.Add(after))))
		timerC = timer.C
	}
	for {
		// Sync after taking the channel: a change that lands meanwhile
		// closes it, whichever case ends this select.
		changed := ix.view.Changed()
		if ok, err := ix.tracker.Sync(); err != nil {
			ix.log.Warn("indexer: catalog change not applied", "error", err)
		} else if ok {
			dirty = true
			arm(ix.cfg.WriteInterval)
		}
		select {
		case <-changed:
		case <-ix.lease.Changes():
			if ix.lease.Valid() {
				dirty = true
				arm(0)
			}
		case <-timerC:
			timerC = nil
			if !dirty || !ix.lease.Valid() {
				continue
			}
			lastWrite = time.Now()
			if err := ix.writer.write(ctx, ix.tracker); err != nil {
				if ctx.Err() != nil {
					return
				}
				pause, _ := retry.Failed(err)
				ix.log.Warn("indexer: index not written; retrying", "error", err, "in", pause)
				arm(pause)
				continue
			}
			dirty = false
			retry.Reset()
		case <-ix.usageChanged:
			if learnC == nil {
				learnTimer = time.NewTimer(max(0, time.Until(lastLearn.Add(ix.cfg.LearnInterval))))
				learnC = learnTimer.C
			}
		case <-learnC:
			learnC = nil
			lastLearn = time.Now()
			if ix.learn() {
				dirty = true
				arm(ix.cfg.WriteInterval)
			}
		case <-usageRetry.C:
			if ix.usageWatches == nil && ix.followUsage(ctx, ctx) {
				dirty = true
				arm(ix.cfg.WriteInterval)
			}
		case <-sweep.C:
			if ix.lease.Valid() {
				if err := ix.writer.sweep(ctx); err != nil && ctx.Err() == nil {
					ix.log.Warn("indexer: old index versions not deleted", "error", err)
				}
			}
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			if learnTimer != nil {
				learnTimer.Stop()
			}
			return
		}
	}
}
