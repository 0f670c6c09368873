package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/messages"
)

// BenchmarkHeartbeatsBesideAnIndexer measures what workers' heartbeats cost
// the process (the server and an indexer) at 10,000 tools: b.N heartbeats
// of 500 namespaces' workers, 200 a second as a fleet would send them,
// first with no indexer running (without-µs), then with one that has
// stored the index (with-µs); the metrics are the process CPU per
// heartbeat of each.
func BenchmarkHeartbeatsBesideAnIndexer(b *testing.B) {
	const tools = 10_000
	srv := testenv.Server(b)
	url := srv.URL()
	fixture := testenv.Catalog(b, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	defs := synthetic.Catalog(tools)
	putAll(b, 8, len(defs), func(i int) error { return fixture.Store.PutTool(ctx, &defs[i]) })
	var namespaces []string
	seen := map[string]bool{}
	for i := range defs {
		if ns := defs[i].Namespace; !seen[ns] {
			seen[ns] = true
			namespaces = append(namespaces, ns)
		}
	}
	beat := func(n int) time.Duration {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		start := coordinator.ProcessCPU()
		for i := range n {
			<-tick.C
			hb := &messages.WorkerHeartbeat{WorkerID: fmt.Sprintf("w%d", i%3), Namespace: namespaces[i%len(namespaces)], Slots: 1, Time: time.Now().UTC(), IntervalMS: 5000}
			if err := fixture.Store.Heartbeat(ctx, hb); err != nil {
				b.Fatal(err)
			}
		}
		return coordinator.ProcessCPU() - start
	}
	b.ResetTimer()
	without := beat(b.N)
	b.StopTimer()

	manifests, err := fixture.Index.Watch(ctx, discovery.ManifestKey)
	if err != nil {
		b.Fatal(err)
	}
	defer manifests.Stop()
	ix, err := indexer.New(indexer.Config{Conn: testenv.Connect(b, url), Logger: testenv.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	if err := ix.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ix.Stop(context.Background()) }()
	awaitStored(b, manifests, func(m discovery.Manifest) bool { return m.Tools == tools })
	b.StartTimer()
	with := beat(b.N)
	b.ReportMetric(float64(without.Microseconds())/float64(b.N), "without-µs")
	b.ReportMetric(float64(with.Microseconds())/float64(b.N), "with-µs")
	b.ReportMetric(0, "ns/op")
}
