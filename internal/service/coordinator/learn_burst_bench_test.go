package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// BenchmarkLearnFromABurst measures how long a burst of usage evidence
// takes to reach discovery: an indexer that folds evidence at most every
// 50 ms runs while 3,000 records (three agents' for 1,000 of 2,000 tools)
// are stored as fast as eight writers can, then one more record teaches
// a last tool a word no definition holds. It reports the time from that
// record's write to the first search that finds the tool by the word
// (lag-ms), which every record before it was folded by, the burst's own
// duration (burst-ms), and the index versions written meanwhile.
func BenchmarkLearnFromABurst(b *testing.B) {
	const tools, learned, agents = 10_000, 3_000, 3
	srv := testenv.Server(b)
	url := srv.URL()
	fixture := testenv.Catalog(b, url)
	c := testenv.Coordinator(b, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	defs := synthetic.Catalog(tools)
	putAll(b, 8, len(defs), func(i int) error { return fixture.Store.PutTool(ctx, &defs[i]) })
	namespaces := map[string]bool{}
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
	ix, err := indexer.New(indexer.Config{Conn: testenv.Connect(b, url), WriteInterval: 20 * time.Millisecond, LearnInterval: 50 * time.Millisecond, Logger: testenv.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	if err := ix.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ix.Stop(context.Background()) }()
	plain := awaitStored(b, manifests, func(m discovery.Manifest) bool { return m.Tools > tools })
	kv, err := fixture.JS.KeyValue(ctx, messages.MustNames("").UsageBucket())
	if err != nil {
		b.Fatal(err)
	}
	queries := synthetic.Queries(defs, 2*learned)
	record := func(terms ...[]string) []byte {
		var rec search.UsageRecord
		for _, t := range terms {
			rec.Add(t, 1, time.Now().UTC(), search.LearnConfig{})
		}
		data, err := json.Marshal(&rec)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	round := 0
	for b.Loop() {
		round++
		start := time.Now()
		putAll(b, 8, learned*agents, func(i int) error {
			t, a := i/agents, i%agents
			def := &defs[(t*7)%tools]
			data := record(search.UsageTerms(queries[(2*t+a+round)%len(queries)]), search.UsageTerms(queries[(2*t+a+round+1)%len(queries)]))
			_, err := kv.Put(ctx, usage.EvidenceKey(def.ToolName(), fmt.Sprint("agent", a)), data)
			return err
		})
		burst := time.Since(start)
		// The last record teaches a tool no other record touched a word
		// of its own, in both of its turns.
		last := &defs[(tools-1-round)%tools]
		word := gapWord(10_000 + round)
		sent := time.Now()
		if _, err := kv.Put(ctx, usage.EvidenceKey(last.ToolName(), "agent-last"), record([]string{word}, []string{word})); err != nil {
			b.Fatal(err)
		}
		for {
			r, err := c.Discover(ctx, &messages.DiscoverRequest{Query: word})
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Hits) > 0 && r.Hits[0].Name == last.Name {
				break
			}
			if time.Since(sent) > 10*time.Minute {
				b.Fatalf("ten minutes after the last record was stored, %q finds %+v", word, r.Hits)
			}
			time.Sleep(10 * time.Millisecond)
		}
		lag := time.Since(sent)
		m, _, err := discovery.ReadManifest(ctx, fixture.Index)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(lag.Milliseconds()), "lag-ms")
		b.ReportMetric(float64(burst.Milliseconds()), "burst-ms")
		b.ReportMetric(float64(m.Version-plain.Version), "versions")
		plain = m
	}
}

// putAll calls put for 0..n-1 from workers goroutines, and fails b on
// the first error.
func putAll(b *testing.B, workers, n int, put func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := put(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}
