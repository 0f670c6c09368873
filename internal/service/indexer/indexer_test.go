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
