package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Config configures a coordinator's discovery index.
type Config struct {
	// Catalog is the coordinator's view of the catalog, already started. Required.
	Catalog *catalog.View
	// Bucket is the index bucket the indexer writes. Nil builds the index
	// from the catalog alone.
	Bucket Bucket
	// Search holds the parameters of an index built from the catalog; a
	// version loaded from the bucket keeps the parameters it was written
	// with. Defaults to search.DefaultConfig().
	Search search.Config
	// IncludeUnavailable makes Search return tools of namespaces that no
	// live worker serves. By default it leaves them out, as tools.list does.
	IncludeUnavailable bool
	// LoadTimeout bounds the loading of one stored version. Defaults to 30s.
	LoadTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.LoadTimeout == 0 {
		c.LoadTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Status says which index a discovery Index answers from.
type Status struct {
	// Version is the stored version that the index answers like: the last
	// one loaded, or a later one whose fingerprint matched the index in use
	// so that loading it was skipped. 0 while the index was only ever built
	// from the catalog.
	Version uint64
	// Loads counts the versions loaded from the bucket.
	Loads int
	// FetchTime and DecodeTime are what loading the last loaded version
	// took: reading its chunks, and decoding them.
	FetchTime  time.Duration
	DecodeTime time.Duration
	// Bytes is the size of the last loaded version.
	Bytes int64
	// Tools is the number of tools indexed, disabled ones never among them.
	Tools int
	// Err is why the last attempt to load a version failed, nil when it did not.
	Err error
}

// LoadTime is the whole time the last loaded version took to load.
func (s Status) LoadTime() time.Duration { return s.FetchTime + s.DecodeTime }

// Index is a coordinator's discovery index: a search index of the enabled
// tools of the catalog. At start it loads the latest version the indexer
// stored, or builds one from the catalog when there is none or it cannot be
// read; then it applies each catalog change to its index as soon as the
// view has it, and swaps in each newer stored version, brought up to date
// with the view, without holding up searches.
type Index struct {
	cfg  Config
	view *catalog.View
	log  *slog.Logger

	current atomic.Pointer[search.Index]
	tracker *Tracker // owned by the run goroutine once started

	mu      sync.Mutex
	status  Status
	changed chan struct{}

	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// New returns a discovery index; Start fills it.
func New(cfg Config) (*Index, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("discovery: Config.Catalog is required")
	}
	cfg = cfg.withDefaults()
	tracker, err := NewTracker(cfg.Catalog, cfg.Search, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	return &Index{cfg: cfg, view: cfg.Catalog, log: cfg.Logger, tracker: tracker, changed: make(chan struct{})}, nil
}

type loaded struct {
	manifest      Manifest
	snapshot      *Snapshot
	fetch, decode time.Duration
	err           error
}

// Start loads or builds the index and keeps it current until Stop. It
// returns once the index answers; a stored version that cannot be read is
// not an error: the index is built from the catalog instead, and
// Status().Err says why.
func (x *Index) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	var (
		manifests jetstream.KeyWatcher
		first     *Manifest
		err       error
	)
	fail := func(err error) error {
		if manifests != nil {
			_ = manifests.Stop()
		}
		cancel()
		return fmt.Errorf("discovery: %w", err)
	}
	if x.cfg.Bucket != nil {
		if manifests, err = x.cfg.Bucket.Watch(runCtx, ManifestKey); err != nil {
			return fail(fmt.Errorf("watch the index manifest: %w", err))
		}
		if first, err = currentManifest(ctx, manifests, x.readManifest); err != nil {
			return fail(err)
		}
	}
	if first == nil || !x.adopt(x.loadWithin(ctx, *first)) {
		if _, err := x.tracker.Sync(); err != nil {
			return fail(err)
		}
	}
	x.publish()
	x.cancel = cancel
	x.bg.Add(1)
	go x.run(runCtx, manifests)
	return nil
}

// Stop stops following the catalog and the bucket. Searches keep answering
// from the last index.
func (x *Index) Stop(ctx context.Context) error {
	if x.cancel != nil {
		x.cancel()
	}
	done := make(chan struct{})
	go func() { x.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Search returns a page of the enabled tools that best match q. Besides
// q's own filters it leaves out tools that the catalog view already knows
// to be disabled, even before the index dropped them, and, unless
// Config.IncludeUnavailable, tools of namespaces no live worker serves.
func (x *Index) Search(q search.Query) (search.Result, error) {
	return x.SearchTools(q, nil)
}

// SearchTools is Search with one more filter, which is given each
// candidate as the catalog view holds it (nil when the view does not hold
// it yet), with its canonical name: the view is read once per candidate.
// q.Allow and q.AllowCanonical, when set, are asked first.
func (x *Index) SearchTools(q search.Query, allow func(key string, t *catalog.Tool) bool) (search.Result, error) {
	ix := x.current.Load()
	if ix == nil {
		return search.Result{}, errors.New("discovery: search before Start")
	}
	find := x.view.Finder(x.cfg.IncludeUnavailable)
	allowCanonical := q.AllowCanonical
	q.AllowCanonical = func(n messages.ToolName, key string) bool {
		if allowCanonical != nil && !allowCanonical(n, key) {
			return false
		}
		t, ok := find(n, key)
		return ok && (allow == nil || allow(key, t))
	}
	return ix.Search(q)
}

// Status says which version the index answers like and what loading it took.
func (x *Index) Status() Status {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status
}

// Changed returns a channel that is closed at the next change of the index
// or of its Status: a catalog change applied, a stored version swapped in
// or taken as is, a load that failed.
func (x *Index) Changed() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.changed
}

func (x *Index) run(ctx context.Context, manifests jetstream.KeyWatcher) {
	defer x.bg.Done()
	var updates <-chan jetstream.KeyValueEntry
	if manifests != nil {
		defer manifests.Stop()
		updates = manifests.Updates()
	}
	results := make(chan loaded, 1)
	loading := false
	var pending *Manifest // the newest manifest seen while a load ran
	startLoad := func(m Manifest) {
		loading = true
		go func() { results <- x.loadWithin(ctx, m) }()
	}
	// consider loads m unless the index in use already answers like it.
	consider := func(m Manifest) {
		if m.Version <= x.Status().Version {
			return
		}
		if m.Fingerprint == x.tracker.Fingerprint() {
			x.update(func(s *Status) { s.Version = m.Version })
			return
		}
		if loading {
			pending = &m
			return
		}
		startLoad(m)
	}
	for {
		// Sync after taking the channel: a change that lands meanwhile
		// closes it, whichever case ends this select.
		changed := x.view.Changed()
		x.sync()
		select {
		case <-changed:
		case e, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if m, ok := x.readManifest(e); ok {
				consider(m)
			}
		case res := <-results:
			loading = false
			x.adopt(res)
			if pending != nil {
				m := *pending
				pending = nil
				consider(m)
			}
		case <-ctx.Done():
			if loading {
				<-results
			}
			return
		}
	}
}

func (x *Index) readManifest(e jetstream.KeyValueEntry) (Manifest, bool) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return Manifest{}, false
	}
	m, err := DecodeManifest(e.Value())
	if err != nil {
		x.log.Warn("discovery: unreadable index manifest ignored", "revision", e.Revision(), "error", err)
		x.update(func(s *Status) { s.Err = err })
		return Manifest{}, false
	}
	return m, true
}

// currentManifest reads what a new manifest watcher sends first: the
// current manifest, if there is one, then nil.
func currentManifest(ctx context.Context, w jetstream.KeyWatcher, read func(jetstream.KeyValueEntry) (Manifest, bool)) (*Manifest, error) {
	var current *Manifest
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("manifest watch closed before the current value arrived")
			}
			if e == nil {
				return current, nil
			}
			if m, ok := read(e); ok {
				current = &m
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// loadWithin loads a version within Config.LoadTimeout.
func (x *Index) loadWithin(ctx context.Context, m Manifest) loaded {
	ctx, cancel := context.WithTimeout(ctx, x.cfg.LoadTimeout)
	defer cancel()
	return x.load(ctx, m)
}

func (x *Index) load(ctx context.Context, m Manifest) loaded {
	res := loaded{manifest: m}
	start := time.Now()
	data, err := Fetch(ctx, x.cfg.Bucket, m)
	res.fetch = time.Since(start)
	if err != nil {
		res.err = err
		return res
	}
	start = time.Now()
	res.snapshot, res.err = DecodeSnapshot(data)
	res.decode = time.Since(start)
	return res
}

// adopt swaps in a loaded version, brought up to date with the view, unless
// the index already answers like it or a later version, and reports
// whether it did.
func (x *Index) adopt(res loaded) bool {
	if res.err == nil && res.manifest.Version <= x.Status().Version {
		return false
	}
	if res.err == nil {
		res.err = x.tracker.Adopt(res.snapshot)
	}
	x.recordLoad(res)
	if res.err != nil {
		return false
	}
	x.publish()
	return true
}

func (x *Index) recordLoad(res loaded) {
	if res.err != nil {
		x.log.Warn("discovery: stored index version not loaded; the index is kept up to date from the catalog", "version", res.manifest.Version, "error", res.err)
		x.update(func(s *Status) { s.Err = res.err })
		return
	}
	x.update(func(s *Status) {
		s.Version = res.manifest.Version
		s.Loads++
		s.FetchTime, s.DecodeTime = res.fetch, res.decode
		s.Bytes = res.manifest.Size
		s.Err = nil
	})
}

func (x *Index) sync() {
	changed, err := x.tracker.Sync()
	if err != nil {
		x.log.Warn("discovery: catalog change not applied", "error", err)
	}
	if changed {
		x.publish()
	}
}

// publish makes the tracker's index the one searches use.
func (x *Index) publish() {
	x.current.Store(x.tracker.Index())
	x.update(func(s *Status) { s.Tools = x.tracker.Len() })
}

// update changes the status and tells whoever waits on Changed.
func (x *Index) update(change func(*Status)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	change(&x.status)
	close(x.changed)
	x.changed = make(chan struct{})
}
