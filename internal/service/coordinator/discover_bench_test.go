package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// BenchmarkDiscover measures tools.discover on a catalog of 10,000 tools
// (and the built-in discovery tool)
// of which 3,000 learned from use (each from three agents' evidence: at
// most 24 terms, one of them found in no definition), as a coordinator
// serves it once an indexer started after the evidence was stored wrote
// the learned fields: in process
// (the coordinator's own work: admission, search, entries) and through
// NATS with the SDK (a request's round trip on the embedded server), and
// with a turn (the page saved with the turn, and the search recorded as
// usage). It reports the median and 99th percentile, the process's CPU
// time per search, and the stored index's size without and with what was
// learned.
func BenchmarkDiscover(b *testing.B) {
	const tools, learned = 10_000, 3_000
	srv := testenv.Server(b)
	url := srv.URL()
	fixture := testenv.Catalog(b, url)
	c := testenv.Coordinator(b, url)
	// Registering 10,000 tools takes longer than a test's context.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	defs := synthetic.Catalog(tools)
	namespaces := map[string]bool{}
	putAll(b, 8, len(defs), func(i int) error { return fixture.Store.PutTool(ctx, &defs[i]) })
	for i := range defs {
		namespaces[defs[i].Namespace] = true
	}
	for ns := range namespaces {
		hb := &messages.WorkerHeartbeat{WorkerID: "bench", Namespace: ns, Slots: 1, Time: time.Now().UTC(), IntervalMS: time.Hour.Milliseconds()}
		if err := fixture.Store.Heartbeat(ctx, hb); err != nil {
			b.Fatal(err)
		}
	}
	manifests, err := fixture.Index.Watch(ctx, discovery.ManifestKey)
	if err != nil {
		b.Fatal(err)
	}
	defer manifests.Stop()
	// An indexer writes the index of the catalog, and stops; another,
	// started once the evidence is stored, learns all of it before its
	// first write, as an indexer does at its start.
	startIndexer := func() *indexer.Indexer {
		ix, err := indexer.New(indexer.Config{Conn: testenv.Connect(b, url), WriteInterval: 20 * time.Millisecond, Logger: testenv.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		if err := ix.Start(ctx); err != nil {
			b.Fatal(err)
		}
		return ix
	}
	ix := startIndexer()
	plain := awaitStored(b, manifests, func(m discovery.Manifest) bool { return m.Tools > tools })
	if err := ix.Stop(ctx); err != nil {
		b.Fatal(err)
	}

	// Three agents' evidence for each of 3,000 tools, written as the
	// coordinator writes it.
	kv, err := fixture.JS.KeyValue(ctx, messages.MustNames("").UsageBucket())
	if err != nil {
		b.Fatal(err)
	}
	queries := synthetic.Queries(defs, 2*learned)
	now := time.Now().UTC()
	for i := range learned {
		def := &defs[(i*7)%tools]
		for a := range 3 {
			var rec search.UsageRecord
			// The word no definition holds comes in both turns: the
			// heaviest, it is among the terms the record keeps.
			rec.Add(append(search.UsageTerms(queries[(2*i+a)%len(queries)]), gapWord(i)), 1, now, search.LearnConfig{})
			rec.Add(append(search.UsageTerms(queries[(2*i+a+1)%len(queries)]), gapWord(i)), 1, now, search.LearnConfig{})
			data, err := json.Marshal(&rec)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kv.Put(ctx, usage.EvidenceKey(def.ToolName(), fmt.Sprint("agent", a)), data); err != nil {
				b.Fatal(err)
			}
		}
	}
	ix = startIndexer()
	defer func() { _ = ix.Stop(context.Background()) }()
	taught := awaitStored(b, manifests, func(m discovery.Manifest) bool {
		return m.Tools > tools && m.Version > plain.Version && m.Size > plain.Size
	})
	last := defs[((learned-1)*7)%tools].Name
	// awaitLearned waits until c answers with the learned fields.
	awaitLearned := func(c *coordinator.Coordinator) {
		taughtAt := time.Now()
		for {
			r, err := c.Discover(ctx, &messages.DiscoverRequest{Query: gapWord(learned - 1)})
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Hits) > 0 && r.Hits[0].Name == last {
				return
			}
			if time.Since(taughtAt) > time.Minute {
				m, _, _ := discovery.ReadManifest(ctx, fixture.Index)
				other, _ := c.Discover(ctx, &messages.DiscoverRequest{Query: queries[0]})
				b.Fatalf("a minute after the learned fields were stored, %s finds %+v; want %s first (index %+v, stored %+v; %q finds %d tools)",
					gapWord(learned-1), r.Hits, last, c.DiscoveryStatus(), m, queries[0], len(other.Hits))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitLearned(c)
	b.Logf("stored index: %d bytes without learned fields, %d with %d tools' (+%.1f%%, %d bytes a tool that learned)",
		plain.Size, taught.Size, learned, 100*float64(taught.Size-plain.Size)/float64(plain.Size), (taught.Size-plain.Size)/learned)

	sdk := testenv.Client(b, url, client.Options{Agent: "bench"})
	// The transport's own share of the SDK's figures: a request holding
	// the query, answered at once with a page's JSON, on the same server,
	// by a responder that does nothing else.
	echoConn := testenv.Connect(b, url)
	page, _ := json.Marshal(must(c.Discover(ctx, &messages.DiscoverRequest{Query: queries[0], Agent: "bench"})))
	echo, err := echoConn.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(page) })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = echo.Unsubscribe() }()
	requester := testenv.Connect(b, url)
	// A second coordinator, started after the others' modes so that the
	// SDK's requests all reach the first, holds a policy of twenty rules
	// that hide no tool of the catalog: each tool a search admits is
	// checked against all of them.
	var withPolicy *coordinator.Coordinator
	policyCoordinator := func() *coordinator.Coordinator {
		if withPolicy == nil {
			rules := "default: allow\nrules:\n  - preset: deny_privileged\n  - preset: ask_destructive\n"
			for i := range 18 {
				rules += fmt.Sprintf("  - {id: deny-other-%d, tool: \"other%d:*\", effect: deny, reason: not this catalog}\n", i, i)
			}
			file := filepath.Join(b.TempDir(), "policy.yaml")
			if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
				b.Fatal(err)
			}
			withPolicy = testenv.Coordinator(b, url, func(cfg *coordinator.Config) { cfg.PolicyFile = file })
			awaitLearned(withPolicy)
		}
		return withPolicy
	}
	for _, mode := range []string{"in-process", "sdk", "in-process-turn", "nats-echo", "in-process-policy"} {
		b.Run(fmt.Sprintf("tools=%d/learned=%d/%s", tools, learned, mode), func(b *testing.B) {
			discover := c.Discover
			if mode == "in-process-policy" {
				discover = policyCoordinator().Discover
			}
			durations := make([]time.Duration, 0, b.N)
			i := 0
			cpu := coordinator.ProcessCPU()
			for b.Loop() {
				req := &messages.DiscoverRequest{Query: queries[i%len(queries)], Agent: "bench"}
				if mode == "in-process-turn" {
					req.Turn = fmt.Sprint("bench-turn-", i)
				}
				i++
				t0 := time.Now()
				var err error
				switch mode {
				case "sdk":
					_, err = sdk.Discover(ctx, *req)
				case "nats-echo":
					_, err = requester.RequestWithContext(ctx, "bench.echo", []byte(req.Query))
				default:
					_, err = discover(ctx, req)
				}
				durations = append(durations, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
			}
			// The process's CPU time, the embedded server's included:
			// unlike wall time, other load on the machine leaves it as is.
			b.ReportMetric(float64((coordinator.ProcessCPU()-cpu).Microseconds())/float64(len(durations)), "cpu-µs/op")
			slices.Sort(durations)
			b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(plain.Size), "plain-index-bytes")
			b.ReportMetric(float64(taught.Size), "index-bytes")
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// gapWord is a word of letters that no definition holds, one for each i.
func gapWord(i int) string {
	w := []byte("zq")
	for ; ; i /= 26 {
		w = append(w, byte('a'+i%26))
		if i < 26 {
			return string(w)
		}
	}
}

func awaitStored(b *testing.B, w jetstream.KeyWatcher, match func(discovery.Manifest) bool) discovery.Manifest {
	b.Helper()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				b.Fatal("the manifest's watch ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			m, err := discovery.DecodeManifest(e.Value())
			if err != nil {
				b.Fatal(err)
			}
			if match(m) {
				return m
			}
		case <-time.After(2 * time.Minute):
			b.Fatal("no index version stored")
		}
	}
}
