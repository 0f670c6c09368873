package discovery_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// bundle is a server with the Toolbus resources, the catalog and the index
// bucket, and a catalog view that follows the catalog.
type bundle struct {
	url    string
	js     jetstream.JetStream
	store  *catalog.Store
	view   *catalog.View
	bucket jetstream.KeyValue
}

func setup(t testing.TB) *bundle {
	t.Helper()
	srv := testenv.Server(t)
	f := testenv.Catalog(t, srv.URL())
	return &bundle{url: srv.URL(), js: f.JS, store: f.Store, view: f.View, bucket: f.Index}
}

// put writes tools to the catalog and waits until the view has them.
func (b *bundle) put(t testing.TB, defs ...messages.ToolDefinition) {
	t.Helper()
	for i := range defs {
		if err := b.store.PutTool(testenv.Context(t), &defs[i]); err != nil {
			t.Fatal(err)
		}
	}
	b.await(t, "the new definitions", func() bool {
		for _, d := range defs {
			if got, ok := b.view.Lookup(d.Name); !ok || got.Definition.Description != d.Description {
				return false
			}
		}
		return true
	})
}

func (b *bundle) disable(t testing.TB, ns, method string) {
	t.Helper()
	if err := b.store.SetDisabled(testenv.Context(t), ns, method, true, messages.DisabledState{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	name := messages.ToolName{Namespace: ns, Method: method}
	if method == "" {
		name.Method = "any"
	}
	b.await(t, "the switch", func() bool { off, _ := b.view.Disabled(name); return off })
}

func (b *bundle) remove(t testing.TB, name messages.ToolName) {
	t.Helper()
	if err := b.store.DeleteTool(testenv.Context(t), name); err != nil {
		t.Fatal(err)
	}
	b.await(t, "the deletion", func() bool { _, ok := b.view.Lookup(name.String()); return !ok })
}

// await waits, change by change of the view, until check holds.
func (b *bundle) await(t testing.TB, what string, check func() bool) {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		changed := b.view.Changed()
		if check() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the catalog view never showed %s", what)
		}
	}
}

// storeVersion writes data as version of the index, chunk by chunk, and
// moves the manifest to it, as the indexer does.
func (b *bundle) storeVersion(t testing.TB, version uint64, data []byte, fingerprint string) discovery.Manifest {
	t.Helper()
	ctx := testenv.Context(t)
	chunks := discovery.Split(data, discovery.DefaultChunkSize)
	for n, c := range chunks {
		if _, err := b.bucket.Put(ctx, discovery.ChunkKey(version, n), c); err != nil {
			t.Fatal(err)
		}
	}
	m := discovery.Manifest{
		Version:     version,
		Format:      discovery.SnapshotFormat,
		Chunks:      len(chunks),
		ChunkSize:   discovery.DefaultChunkSize,
		Size:        int64(len(data)),
		Digest:      discovery.Digest(data),
		Fingerprint: fingerprint,
		WrittenAt:   time.Now().UTC(),
		Writer:      "test",
	}
	b.putManifest(t, m)
	return m
}

func (b *bundle) putManifest(t testing.TB, m discovery.Manifest) {
	t.Helper()
	value, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.bucket.Put(testenv.Context(t), discovery.ManifestKey, value); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) discovery(t testing.TB, mutate func(*discovery.Config)) *discovery.Index {
	t.Helper()
	cfg := discovery.Config{Catalog: b.view, Bucket: b.bucket, IncludeUnavailable: true, Logger: testenv.Logger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	x, err := discovery.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Stop(context.Background()) })
	return x
}

// awaitIndex waits, change by change of the index, until check holds.
func awaitIndex(t testing.TB, x *discovery.Index, what string, check func() bool) {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		changed := x.Changed()
		if check() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the discovery index never showed %s (status %+v)", what, x.Status())
		}
	}
}

type searcher interface {
	Search(search.Query) (search.Result, error)
}

// top returns the canonical names of the first hits of query.
func top(t testing.TB, s searcher, query string, n int) []string {
	t.Helper()
	res, err := s.Search(search.Query{Text: query, PageSize: n})
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, h := range res.Hits {
		out = append(out, h.Tool.String())
	}
	return out
}

func tool(ns, method, description string) messages.ToolDefinition {
	return messages.ToolDefinition{
		Name:        ns + "-" + method,
		Namespace:   ns,
		Method:      method,
		Description: description,
		InputSchema: messages.JSON(`{"type":"object"}`),
		Source:      messages.ToolSource{Kind: messages.SourceGo},
	}
}
