package indexer

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

var names = messages.MustNames("")

type bundle struct {
	kv    jetstream.KeyValue
	store *catalog.Store
	view  *catalog.View
	log   *slog.Logger
}

// setup starts a server with the catalog and index buckets. It does not
// use testenv, which would tie this package's tests to the coordinator,
// but testenv/embedded, as testenv does.
func setup(t *testing.T) *bundle {
	t.Helper()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{})
	if err != nil {
		t.Fatal(err)
	}
	catalogKV, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	view := catalog.NewView(catalogKV, log)
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &bundle{kv: kv, store: catalog.NewStore(catalogKV), view: view, log: log}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// startLease runs a lease until the returned function ends its run, as a
// crash would, without releasing it.
func (b *bundle) startLease(t *testing.T, holder string, ttl time.Duration) (*lease, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := b.kv.Watch(ctx, discovery.LeaseKey)
	if err != nil {
		t.Fatal(err)
	}
	l := newLease(b.kv, holder, holder+"-token", ttl, b.log)
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, w) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return l, stop
}

// awaitValid waits, event by event, until the lease's validity is want.
func awaitValid(t *testing.T, l *lease, want bool) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for l.Valid() != want {
		select {
		case <-l.events:
		case <-timeout:
			t.Fatalf("lease of %s never became valid=%v", l.record.Holder, want)
		}
	}
}

// TestLeaseTakeover: of two indexers one holds the lease; when it dies
// without releasing, the other takes over after a TTL without renewals,
// by which time the dead one's validity has run out.
func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	// Renewed every third of it: a busy machine's late wake-ups do not
	// make the holder miss one.
	const ttl = 2 * time.Second
	b := setup(t)
	first, stopFirst := b.startLease(t, "first", ttl)
	awaitValid(t, first, true)
	second, _ := b.startLease(t, "second", ttl)
	// The second sees the first renew for several periods and stays a standby.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		select {
		case <-second.events:
			t.Fatalf("the standby's lease changed while the holder renewed it: valid=%v", second.Valid())
		case <-time.After(ttl / 10):
		}
	}
	if !first.Valid() {
		t.Fatal("the holder's lease lapsed while it renewed it")
	}

	stopFirst()
	died := time.Now()
	awaitValid(t, second, true)
	took := time.Since(died)
	if first.Valid() {
		t.Fatal("both leases valid at once")
	}
	// The last renewal the standby saw was at most ttl/3 before the death,
	// and it checks every ttl/3: it takes over no sooner than 2/3 of the
	// TTL, and about a TTL later. The upper bound leaves a busy machine
	// seconds of slack; it fails a standby that waits for several TTLs.
	if took < ttl/2 || took > 5*ttl {
		t.Fatalf("standby took over %v after the holder died; TTL %v", took, ttl)
	}
}

// TestLeaseRelease: a holder that stops releases the lease, and the standby
// takes it at once rather than after a TTL.
func TestLeaseRelease(t *testing.T) {
	t.Parallel()
	// Long, so that taking the lease at once and after the TTL are far
	// apart however busy the machine.
	const ttl = time.Minute
	b := setup(t)
	first, stopFirst := b.startLease(t, "first", ttl)
	awaitValid(t, first, true)
	second, _ := b.startLease(t, "second", ttl)
	stopFirst()
	start := time.Now()
	first.release(context.Background())
	awaitValid(t, second, true)
	if took := time.Since(start); took > ttl/2 {
		t.Fatalf("standby took a released lease after %v", took)
	}
}

// TestWriter: a write stores a version only when the index changed; a
// chunk key already taken fails the write without moving the manifest,
// and the next attempt uses another version.
func TestWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	def := messages.ToolDefinition{Name: "files-read_file", Namespace: "files", Method: "read_file", Description: "Reads a file.", InputSchema: messages.JSON(`{"type":"object"}`)}
	if err := b.store.PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}
	tracker, err := discovery.NewTracker(b.view, search.Config{}, b.log)
	if err != nil {
		t.Fatal(err)
	}
	for tracker.Len() == 0 {
		changed := b.view.Changed()
		if _, err := tracker.Sync(); err != nil {
			t.Fatal(err)
		}
		if tracker.Len() == 0 {
			<-changed
		}
	}
	w := &writer{kv: b.kv, id: "w", chunkSize: 64, grace: time.Minute, orphanWait: time.Minute, valid: func() bool { return true }, log: b.log, firstSeen: map[uint64]time.Time{}}
	if err := w.write(ctx, tracker); err != nil {
		t.Fatal(err)
	}
	m, rev, err := discovery.ReadManifest(ctx, b.kv)
	if err != nil || m.Version != 1 || m.Chunks < 2 || m.Tools != 1 || m.Writer != "w" || m.Fingerprint != tracker.Fingerprint() {
		t.Fatalf("first version: %+v, %v", m, err)
	}
	if _, err := discovery.Load(ctx, b.kv, m); err != nil {
		t.Fatal(err)
	}
	if err := w.write(ctx, tracker); err != nil {
		t.Fatal(err)
	}
	if _, again, _ := discovery.ReadManifest(ctx, b.kv); again != rev {
		t.Fatal("an unchanged index was written again")
	}

	def.Description = "Opens a document."
	if err := b.store.PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}
	for tracker.Fingerprint() == m.Fingerprint {
		changed := b.view.Changed()
		if _, err := tracker.Sync(); err != nil {
			t.Fatal(err)
		}
		if tracker.Fingerprint() == m.Fingerprint {
			<-changed
		}
	}
	// Another writer's chunk under the next version's first key.
	if _, err := b.kv.Put(ctx, discovery.ChunkKey(2, 0), []byte("someone else's")); err != nil {
		t.Fatal(err)
	}
	if err := w.write(ctx, tracker); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("write over another writer's chunk: %v", err)
	}
	if _, again, _ := discovery.ReadManifest(ctx, b.kv); again != rev {
		t.Fatal("a failed write moved the manifest")
	}
	if err := w.write(ctx, tracker); err != nil {
		t.Fatal(err)
	}
	if m, _, err := discovery.ReadManifest(ctx, b.kv); err != nil || m.Version != 3 {
		t.Fatalf("after the failed write: %+v, %v", m, err)
	}

	// A writer whose lease lapsed leaves the manifest alone.
	def.Description = "Reads a file again."
	if err := b.store.PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}
	before := tracker.Fingerprint()
	for tracker.Fingerprint() == before {
		changed := b.view.Changed()
		if _, err := tracker.Sync(); err != nil {
			t.Fatal(err)
		}
		if tracker.Fingerprint() == before {
			<-changed
		}
	}
	w.valid = func() bool { return false }
	if err := w.write(ctx, tracker); !errors.Is(err, errLeaseLapsed) {
		t.Fatalf("write without the lease: %v", err)
	}
	if m, _, _ := discovery.ReadManifest(ctx, b.kv); m.Version != 3 {
		t.Fatalf("a write without the lease moved the manifest to %d", m.Version)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.ClientURL())
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"bad ID", Config{Conn: nc, ID: "a b"}},
		{"short lease", Config{Conn: nc, LeaseTTL: time.Millisecond}},
		{"chunk above the payload", Config{Conn: nc, ChunkSize: 2 << 20}},
		{"negative grace", Config{Conn: nc, GracePeriod: -time.Second}},
		{"no connection", Config{}},
	} {
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New accepted the config", c.name)
		}
	}
	if _, err := New(Config{Conn: nc}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
