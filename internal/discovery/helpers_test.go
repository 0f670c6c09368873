package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/resources"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

var names = messages.MustNames("")

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
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	catalogKV, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{})
	if err != nil {
		t.Fatal(err)
	}
	viewCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view := catalog.NewView(catalogKV, testenv.Logger(t))
	if err := view.Start(viewCtx); err != nil {
		t.Fatal(err)
	}
	return &bundle{url: srv.URL(), js: js, store: catalog.NewStore(catalogKV), view: view, bucket: bucket}
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
	timeout := time.After(30 * time.Second)
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
	timeout := time.After(30 * time.Second)
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

// The synthetic catalog of the benchmark: tools made deterministically from
// word lists, common words drawn with a Zipf law and a long tail of rare
// made-up words, so that posting lists have the lengths of a real catalog.
var (
	verbs = strings.Fields(`get list create update delete search find fetch send upload download sync
		query run start stop cancel schedule export import convert translate summarize analyze validate
		check compute calculate resolve lookup archive restore publish subscribe approve reject merge`)
	nouns = strings.Fields(`user account file folder document invoice payment order customer product
		issue ticket comment message channel email calendar event meeting task project repository branch
		commit release deployment cluster node container image volume secret key certificate domain
		record table row column database report dashboard chart metric alert incident log trace span
		service endpoint webhook token session password profile team organization role permission policy
		budget expense transaction refund subscription plan price quote contract lead campaign survey
		form field workflow pipeline job queue worker backup snapshot region zone network route address
		location map weather forecast city country currency rate stock news article video song movie
		recipe flight hotel reservation trip package shipment warehouse inventory device sensor dataset`)
	adjectives = strings.Fields(`new old active archived public private shared recent pending failed
		daily weekly monthly current previous next first last primary default custom remote local`)
	fillers   = strings.Fields(`the a an of for to in on with by from and or that which this is are be given`)
	syllables = strings.Fields(`ka lo mi ne ru sa ti vo ze bra cle dri flo gra kri plo stra tre vy qua xen zor`)
)

type catalogGen struct {
	r            *rand.Rand
	common, rare *rand.Zipf
	tail         []string
}

func newCatalogGen(seed uint64) *catalogGen {
	r := rand.New(rand.NewPCG(seed, 1))
	g := &catalogGen{r: r}
	g.common = rand.NewZipf(r, 1.1, 1, uint64(len(nouns)+len(verbs)+len(adjectives)-1))
	for range 50000 {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		g.tail = append(g.tail, b.String())
	}
	g.rare = rand.NewZipf(r, 1.05, 1, uint64(len(g.tail)-1))
	return g
}

func (g *catalogGen) word() string {
	switch p := g.r.IntN(10); {
	case p < 3:
		return fillers[g.r.IntN(len(fillers))]
	case p < 9:
		i := int(g.common.Uint64())
		switch {
		case i < len(nouns):
			return nouns[i]
		case i < len(nouns)+len(verbs):
			return verbs[i-len(nouns)]
		default:
			return adjectives[i-len(nouns)-len(verbs)]
		}
	default:
		return g.tail[g.rare.Uint64()]
	}
}

func (g *catalogGen) sentence(lo, hi int) string {
	words := make([]string, lo+g.r.IntN(hi-lo+1))
	for i := range words {
		words[i] = g.word()
	}
	return strings.Join(words, " ") + "."
}

// syntheticCatalog returns n tools in about n/20 namespaces, each with a
// description of 8 to 40 words and 1 to 6 described parameters.
func syntheticCatalog(n int) []messages.ToolDefinition {
	g := newCatalogGen(uint64(n))
	namespaces := make([]string, max(1, n/20))
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("%s%d", g.tail[g.r.IntN(len(g.tail))], i)
	}
	seen := make(map[string]bool, n)
	defs := make([]messages.ToolDefinition, 0, n)
	for len(defs) < n {
		ns := namespaces[g.r.IntN(len(namespaces))]
		method := verbs[g.r.IntN(len(verbs))] + "_" + nouns[g.r.IntN(len(nouns))]
		if seen[ns+"-"+method] {
			method += fmt.Sprintf("_%d", len(defs))
		}
		seen[ns+"-"+method] = true
		props := map[string]any{}
		for range 1 + g.r.IntN(6) {
			props[nouns[g.r.IntN(len(nouns))]+"_"+adjectives[g.r.IntN(len(adjectives))]] = map[string]any{
				"type":        "string",
				"description": g.sentence(4, 14),
			}
		}
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
		def := tool(ns, method, g.sentence(8, 40))
		def.InputSchema = schema
		if g.r.IntN(3) == 0 {
			def.Metadata.Tags = []string{messages.TagReadOnly}
		}
		defs = append(defs, def)
	}
	return defs
}
