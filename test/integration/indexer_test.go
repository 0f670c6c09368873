package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestIndexFollowsTheCatalog runs an indexer and two discovery indexes, as
// two coordinators hold them: registered tools become discoverable through
// both, a disabled tool disappears from both, and new words of a changed
// description find their tool, in the coordinators at once and in the
// stored index after the indexer's next write.
func TestIndexFollowsTheCatalog(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	startIndexer(t, srv.URL(), func(c *indexer.Config) { c.ID = "solo" })
	bucket := indexBucket(t, srv.URL())
	manifests := watchManifests(t, bucket)
	notes := []worker.Tool{
		worker.Func("create_note", "Creates a note with a title and a body.", echoTool),
		worker.Func("find_notes", "Finds the notes that mention some words.", echoTool),
		worker.Func("archive_note", "Moves a note out of the way.", echoTool),
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "notes", Tools: notes})
	stored := awaitManifest(t, manifests, "a stored index of the notes tools", func(m discovery.Manifest) bool { return m.Tools == 3 })
	if stored.Writer != "solo" || stored.Chunks != 1 {
		t.Fatalf("manifest %+v", stored)
	}

	first := startDiscovery(t, srv.URL(), nil)
	second := startDiscovery(t, srv.URL(), nil)
	for _, x := range []*discovery.Index{first, second} {
		if st := x.Status(); st.Version != stored.Version || st.Loads != 1 || st.Err != nil || st.Tools != 3 {
			t.Fatalf("a discovery index that started after version %d was stored: %+v", stored.Version, st)
		}
		awaitSearch(t, x, "note title body", "notes-create_note")
	}

	// Disabled: gone from both at once, and from the next stored version.
	store := catalogStore(t, srv.URL())
	ctx := testenv.Context(t)
	if err := store.SetDisabled(ctx, "notes", "archive_note", true, messages.DisabledState{Reason: "retired"}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*discovery.Index{first, second} {
		awaitIndex(t, x, "archive_note to disappear", func() bool {
			return !slices.Contains(hitNames(t, x, "archive note", 10), "notes-archive_note")
		})
		if got := hitNames(t, x, "", 10); !slices.Equal(got, []string{"notes-create_note", "notes-find_notes"}) {
			t.Fatalf("every tool, with archive_note disabled: %v", got)
		}
	}
	disabled := awaitManifest(t, manifests, "a stored index without archive_note", func(m discovery.Manifest) bool { return m.Tools == 2 })
	if s := loadStored(t, bucket, disabled); s.Index.Contains(messages.ToolName{Namespace: "notes", Method: "archive_note"}) {
		t.Fatal("the stored index holds a disabled tool")
	}

	// A new description: its words find the tool at once in both.
	def := notes[1].Definition
	def.Description = "Searches the notebook vault for a phrase."
	if err := store.PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*discovery.Index{first, second} {
		awaitSearch(t, x, "notebook vault", "notes-find_notes")
	}
	changed := awaitManifest(t, manifests, "a stored index with the new description", func(m discovery.Manifest) bool {
		return m.Version > disabled.Version
	})
	res, err := loadStored(t, bucket, changed).Index.Search(search.Query{Text: "notebook vault"})
	if err != nil || len(res.Hits) == 0 || res.Hits[0].Tool.String() != "notes-find_notes" {
		t.Fatalf("the stored index finds %+v for the new words (%v)", res, err)
	}

	// Enabled again: back in both.
	if err := store.SetDisabled(ctx, "notes", "archive_note", false, messages.DisabledState{}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*discovery.Index{first, second} {
		awaitSearch(t, x, "archive note", "notes-archive_note")
	}
}

// TestIndexerStandbyTakesOver kills the indexer process that holds the
// lease: the standby process takes over and stores the next version, which
// a coordinator starting afterwards loads.
func TestIndexerStandbyTakesOver(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	bin := testenv.Binary(t, "./cmd/indexer")
	procs := map[string]*testenv.Process{}
	for _, id := range []string{"left", "right"} {
		procs[id] = testenv.Start(t, bin, "--server", srv.URL(), "--id", id, "--lease-ttl", "3s", "--write-interval", "50ms")
		procs[id].WaitLine(t, "indexer started")
	}
	bucket := indexBucket(t, srv.URL())
	manifests := watchManifests(t, bucket)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "alpha", Tools: []worker.Tool{
		worker.Func("word_count", "Counts the words of a text.", echoTool),
	}})
	before := awaitManifest(t, manifests, "a stored index of alpha", func(m discovery.Manifest) bool { return m.Tools == 1 })
	standby := map[string]string{"left": "right", "right": "left"}[before.Writer]
	if standby == "" {
		t.Fatalf("version written by %q", before.Writer)
	}
	procs[before.Writer].Kill()
	killed := time.Now()

	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "beta", Tools: []worker.Tool{
		worker.Func("translate", "Translates a text into another language.", echoTool),
	}})
	after := awaitManifest(t, manifests, "a version with beta stored by the standby", func(m discovery.Manifest) bool { return m.Tools == 2 })
	if after.Writer != standby || after.Version <= before.Version {
		t.Fatalf("after the kill of %s: manifest %+v", before.Writer, after)
	}
	t.Logf("%s killed; %s stored version %d %v later", before.Writer, standby, after.Version, time.Since(killed).Round(time.Millisecond))
	e, err := bucket.Get(testenv.Context(t), discovery.LeaseKey)
	if err != nil || !strings.Contains(string(e.Value()), `"holder":"`+standby+`"`) {
		t.Fatalf("lease %s (%v)", e.Value(), err)
	}

	fresh := startDiscovery(t, srv.URL(), nil)
	if st := fresh.Status(); st.Version != after.Version || st.Loads != 1 || st.Err != nil {
		t.Fatalf("a coordinator that started after version %d: %+v", after.Version, st)
	}
	awaitSearch(t, fresh, "translate language", "beta-translate")
	awaitSearch(t, fresh, "count words", "alpha-word_count")
}

// TestIndexLargerThanOneMessage stores an index of more than 1 MiB, the
// largest NATS message, and reads it back: several chunks, the digest of
// their concatenation in the manifest, and the same answers as an index
// built in the test from the same definitions.
func TestIndexLargerThanOneMessage(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	// Fewer versions of a large index while the tools stream in.
	startIndexer(t, srv.URL(), func(c *indexer.Config) { c.WriteInterval = 500 * time.Millisecond })
	bucket := indexBucket(t, srv.URL())
	manifests := watchManifests(t, bucket)
	defs := syntheticTools(1600, 250)
	store := catalogStore(t, srv.URL())
	ctx := testenv.Context(t)
	for i := range defs {
		if err := store.PutTool(ctx, &defs[i]); err != nil {
			t.Fatal(err)
		}
	}
	m := awaitManifest(t, manifests, "the stored synthetic catalog", func(m discovery.Manifest) bool { return m.Tools == len(defs) })
	if m.Size <= 1<<20 || m.Chunks < 2 || m.Chunks != int((m.Size+int64(m.ChunkSize)-1)/int64(m.ChunkSize)) {
		t.Fatalf("manifest %+v: want more than 1 MiB in several chunks", m)
	}
	t.Logf("%d tools stored in %d bytes, %d chunks", m.Tools, m.Size, m.Chunks)

	// The chunks, read one by one, are the version and nothing else.
	var keys []string
	lister, err := bucket.ListKeysFiltered(ctx, fmt.Sprintf("v.%d.>", m.Version))
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if len(keys) != m.Chunks {
		t.Fatalf("%d chunk keys for %d chunks: %v", len(keys), m.Chunks, keys)
	}
	h := sha256.New()
	for n := range m.Chunks {
		e, err := bucket.Get(ctx, discovery.ChunkKey(m.Version, n))
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Value()) > m.ChunkSize || len(e.Value()) >= 1<<20 {
			t.Fatalf("chunk %d holds %d bytes", n, len(e.Value()))
		}
		h.Write(e.Value())
	}
	if d := "sha256:" + hex.EncodeToString(h.Sum(nil)); d != m.Digest {
		t.Fatalf("digest of the chunks %s; manifest %s", d, m.Digest)
	}

	reference, err := search.Build(search.DefaultConfig(), defs)
	if err != nil {
		t.Fatal(err)
	}
	stored := loadStored(t, bucket, m)
	x := startDiscovery(t, srv.URL(), func(c *discovery.Config) { c.IncludeUnavailable = true })
	if st := x.Status(); st.Version != m.Version || st.Bytes != m.Size {
		t.Fatalf("discovery status %+v", st)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	queries := []string{"", defs[42].Name, "tool"}
	for range 30 {
		queries = append(queries, syntheticWord(rng.IntN(4000))+" "+syntheticWord(rng.IntN(4000))+" "+syntheticWord(rng.IntN(4000)))
	}
	for _, q := range queries {
		want, err := reference.Search(search.Query{Text: q, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		got, err := stored.Index.Search(search.Query{Text: q, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		viaDiscovery, err := x.Search(search.Query{Text: q, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Hits, want.Hits) || !slices.Equal(viaDiscovery.Hits, want.Hits) {
			t.Fatalf("query %q:\nbuilt  %v\nstored %v\nloaded %v", q, want.Hits, got.Hits, viaDiscovery.Hits)
		}
	}
}

// TestIndexOldVersionsCollected: the chunks of a superseded version stay
// readable for the grace period, then go; the current version's stay.
func TestIndexOldVersionsCollected(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	srv := testenv.Server(t)
	startIndexer(t, srv.URL(), func(c *indexer.Config) { c.GracePeriod = grace })
	bucket := indexBucket(t, srv.URL())
	ctx := testenv.Context(t)
	chunkEvents, err := bucket.Watch(ctx, discovery.ChunksFilter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = chunkEvents.Stop() })
	manifests := watchManifests(t, bucket)
	store := catalogStore(t, srv.URL())
	written := map[uint64]discovery.Manifest{}
	var current uint64
	for i := range 3 {
		def := syntheticTools(i+1, 10)[i]
		if err := store.PutTool(ctx, &def); err != nil {
			t.Fatal(err)
		}
		m := awaitManifest(t, manifests, fmt.Sprintf("version with %d tools", i+1), func(m discovery.Manifest) bool { return m.Tools == i+1 })
		written[m.Version], current = m, m.Version
		if prev, ok := written[m.Version-1]; ok {
			// Superseded a moment ago: still readable.
			if _, err := discovery.Load(ctx, bucket, prev); err != nil {
				t.Fatalf("version %d right after version %d replaced it: %v", prev.Version, m.Version, err)
			}
		}
	}
	if current < 3 {
		t.Fatalf("current version %d after three writes", current)
	}

	// Every version before the current one (the first, of the empty
	// catalog, too) is one chunk. Each is purged, no sooner than the grace
	// period after the version that replaced it was written.
	purged := map[uint64]bool{}
	for len(purged) < int(current-1) {
		e := receive(t, chunkEvents.Updates(), "the purge of old chunks")
		if e == nil || e.Operation() == jetstream.KeyValuePut {
			continue
		}
		v, n, ok := discovery.ParseChunkKey(e.Key())
		if !ok || v == current || n != 0 || purged[v] {
			t.Fatalf("%s of %s", e.Operation(), e.Key())
		}
		if next, ok := written[v+1]; ok {
			if after := e.Created().Sub(next.WrittenAt); after < grace-50*time.Millisecond {
				t.Fatalf("version %d purged %v after version %d replaced it; grace %v", v, after, v+1, grace)
			}
		}
		purged[v] = true
	}
	lister, err := bucket.ListKeysFiltered(ctx, discovery.ChunksFilter)
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		if v, _, _ := discovery.ParseChunkKey(k); v != current {
			t.Fatalf("chunk %s left after the grace period", k)
		}
	}
	if _, err := discovery.Load(ctx, bucket, written[current]); err != nil {
		t.Fatalf("current version: %v", err)
	}
	// The purges' markers expire too: the bucket ends up holding the
	// lease, the manifest and the current chunks only.
	status, err := bucket.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Name)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the purge markers to expire", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == uint64(2+written[current].Chunks)
	})
}

func echoTool(ctx context.Context, in struct {
	Text string `json:"text,omitempty"`
}) (string, error) {
	return in.Text, nil
}

func startIndexer(t *testing.T, url string, mutate func(*indexer.Config)) *indexer.Indexer {
	t.Helper()
	cfg := indexer.Config{Conn: testenv.Connect(t, url), WriteInterval: 20 * time.Millisecond, LeaseTTL: time.Second, Logger: testenv.Logger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	ix, err := indexer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Start(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Stop(context.Background()) })
	return ix
}

// indexBucket returns the index bucket, creating it if no indexer did yet.
func indexBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	return testenv.Catalog(t, url).Index
}

func catalogStore(t *testing.T, url string) *catalog.Store {
	t.Helper()
	return testenv.Catalog(t, url).Store
}

// startDiscovery starts a discovery index as a coordinator holds one: on
// its own connection and catalog view.
func startDiscovery(t *testing.T, url string, mutate func(*discovery.Config)) *discovery.Index {
	t.Helper()
	f := testenv.Catalog(t, url)
	ctx := testenv.Context(t)
	cfg := discovery.Config{Catalog: f.View, Bucket: f.Index, Logger: testenv.Logger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	x, err := discovery.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Stop(context.Background()) })
	return x
}

func watchManifests(t *testing.T, bucket jetstream.KeyValue) jetstream.KeyWatcher {
	t.Helper()
	w, err := bucket.Watch(testenv.Context(t), discovery.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// awaitManifest waits for a stored manifest that match accepts.
func awaitManifest(t *testing.T, w jetstream.KeyWatcher, what string, match func(discovery.Manifest) bool) discovery.Manifest {
	t.Helper()
	for {
		e := receive(t, w.Updates(), what)
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		m, err := discovery.DecodeManifest(e.Value())
		if err != nil {
			t.Fatalf("manifest revision %d: %v", e.Revision(), err)
		}
		if match(m) {
			return m
		}
	}
}

func loadStored(t *testing.T, bucket jetstream.KeyValue, m discovery.Manifest) *discovery.Snapshot {
	t.Helper()
	s, err := discovery.Load(testenv.Context(t), bucket, m)
	if err != nil {
		t.Fatalf("load version %d: %v", m.Version, err)
	}
	return s
}

func hitNames(t *testing.T, x *discovery.Index, query string, pageSize int) []string {
	t.Helper()
	res, err := x.Search(search.Query{Text: query, PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, h := range res.Hits {
		out = append(out, h.Tool.String())
	}
	return out
}

// awaitIndex waits, change by change of the index, until check holds.
func awaitIndex(t *testing.T, x *discovery.Index, what string, check func() bool) {
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
			t.Fatalf("the discovery index never showed %s", what)
		}
	}
}

// awaitSearch waits until tool is the first hit of query.
func awaitSearch(t *testing.T, x *discovery.Index, query, tool string) {
	t.Helper()
	awaitIndex(t, x, fmt.Sprintf("%s first for %q", tool, query), func() bool {
		hits := hitNames(t, x, query, 5)
		return len(hits) > 0 && hits[0] == tool
	})
}

// syntheticTools returns n tools whose descriptions hold words words each,
// drawn from a vocabulary of 4,000 made-up words.
func syntheticTools(n, words int) []messages.ToolDefinition {
	rng := rand.New(rand.NewPCG(1, 2))
	defs := make([]messages.ToolDefinition, n)
	for i := range defs {
		var b strings.Builder
		for w := range words {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(syntheticWord(rng.IntN(4000)))
		}
		ns := fmt.Sprintf("ns%02d", i%40)
		method := fmt.Sprintf("tool_%05d", i)
		defs[i] = messages.ToolDefinition{
			Name:        ns + "-" + method,
			Namespace:   ns,
			Method:      method,
			Description: b.String(),
			InputSchema: messages.JSON(`{"type":"object","properties":{"text":{"type":"string","description":"the text to work on"}}}`),
			Source:      messages.ToolSource{Kind: messages.SourceGo},
		}
	}
	return defs
}

// syntheticWord spells n in letters, as a word no stemmer shortens.
func syntheticWord(n int) string {
	const consonants, vowels = "bdfgklmnprstvz", "aeiou"
	var b strings.Builder
	for {
		b.WriteByte(consonants[n%len(consonants)])
		n /= len(consonants)
		b.WriteByte(vowels[n%len(vowels)])
		n /= len(vowels)
		if n == 0 {
			return b.String() + "x"
		}
	}
}

// TestIndexerFollowsOnlyWhatTheIndexIsBuiltFrom: the indexer's reads of the
// catalog name the tools' and the disabled switches' keys, never a filter
// that holds the workers' heartbeats or the coordinators' leases, which
// change every few seconds and would each make the server walk the keys
// under it. The index still follows every tool change and switch.
func TestIndexerFollowsOnlyWhatTheIndexIsBuiltFrom(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	ctx := testenv.Context(t)
	const inbox = "_INBOX_indexer_under_test"
	spy := testenv.Connect(t, srv.URL())
	catalogSubjects := "$KV." + names.CatalogBucket() + "."
	var mu sync.Mutex
	var filters []string
	for _, subject := range []string{"$JS.API.DIRECT.GET." + "KV_" + names.CatalogBucket(), "$JS.API.DIRECT.GET." + "KV_" + names.CatalogBucket() + ".>"} {
		if _, err := spy.Subscribe(subject, func(m *nats.Msg) {
			if !strings.HasPrefix(m.Reply, inbox) {
				return
			}
			var req struct {
				MultiLast     []string `json:"multi_last"`
				NextBySubject string   `json:"next_by_subj"`
			}
			_ = json.Unmarshal(m.Data, &req)
			mu.Lock()
			defer mu.Unlock()
			if req.NextBySubject != "" {
				filters = append(filters, req.NextBySubject)
			}
			filters = append(filters, req.MultiLast...)
			if rest, ok := strings.CutPrefix(m.Subject, "$JS.API.DIRECT.GET.KV_"+names.CatalogBucket()+"."); ok {
				filters = append(filters, rest)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	startIndexer(t, srv.URL(), func(c *indexer.Config) {
		c.Conn = testenv.Connect(t, srv.URL(), nats.CustomInboxPrefix(inbox))
	})
	bucket := indexBucket(t, srv.URL())
	manifests := watchManifests(t, bucket)
	store := catalogStore(t, srv.URL())
	def := messages.ToolDefinition{Name: "notes-find", Namespace: "notes", Method: "find", Description: "Finds notes.", InputSchema: messages.JSON(`{"type":"object"}`)}
	if err := store.PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}
	awaitManifest(t, manifests, "the tool indexed", func(m discovery.Manifest) bool { return m.Tools == 1 })
	// Heartbeats and a lease written before a switch and a new tool: the
	// index takes the latter without reading the former.
	for i := range 5 {
		if err := store.Heartbeat(ctx, &messages.WorkerHeartbeat{WorkerID: fmt.Sprintf("w%d", i), Namespace: "notes", Slots: 4, Time: time.Now(), IntervalMS: 5000}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := jetstream.New(spy)
	if err != nil {
		t.Fatal(err)
	}
	catalogKV, err := kv.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := catalogKV.Put(ctx, "coordinators.audit_copy", []byte(`{"holder":"c1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := store.SetDisabled(ctx, "notes", "find", true, messages.DisabledState{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	awaitManifest(t, manifests, "the disabled tool out of the index", func(m discovery.Manifest) bool { return m.Tools == 0 })
	if err := store.SetDisabled(ctx, "notes", "find", false, messages.DisabledState{}); err != nil {
		t.Fatal(err)
	}
	awaitManifest(t, manifests, "the tool back in the index", func(m discovery.Manifest) bool { return m.Tools == 1 })

	mu.Lock()
	defer mu.Unlock()
	read := false
	for _, f := range filters {
		key := strings.TrimPrefix(f, catalogSubjects)
		switch {
		case strings.HasPrefix(key, "tools."), strings.HasPrefix(key, "disabled."):
			read = true
		default:
			t.Errorf("the indexer read the catalog under %q", f)
		}
	}
	if !read {
		t.Errorf("no read of the catalog by the indexer was seen (%d filters): the check saw nothing", len(filters))
	}
}
