package discovery_test

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/search"
)

// BenchmarkLoad measures what a coordinator pays at start to use a stored
// index of 10,000 tools from the embedded server: reading its chunks
// (fetch), decoding them (decode), both (load), and, for comparison,
// building the same index from the definitions, as a coordinator without
// an indexer does. It reports the stored size.
func BenchmarkLoad(b *testing.B) {
	const tools = 10_000
	bb := setup(b)
	defs := synthetic.Catalog(tools)
	ix, err := search.Build(search.Config{}, defs)
	if err != nil {
		b.Fatal(err)
	}
	s := &discovery.Snapshot{Index: ix, Revisions: make(map[string]uint64, tools)}
	for i, d := range defs {
		s.Revisions[d.Name] = uint64(i + 1)
	}
	data := s.Encode()
	m := bb.storeVersion(b, 1, data, "")
	ctx := testenv.Context(b)
	size := func(b *testing.B) {
		b.ReportMetric(float64(len(data))/(1<<20), "MiB")
		b.ReportMetric(float64(m.Chunks), "chunks")
	}

	b.Run(fmt.Sprintf("tools=%d/fetch", tools), func(b *testing.B) {
		for b.Loop() {
			if _, err := discovery.Fetch(ctx, bb.bucket, m); err != nil {
				b.Fatal(err)
			}
		}
		size(b)
	})
	b.Run(fmt.Sprintf("tools=%d/decode", tools), func(b *testing.B) {
		for b.Loop() {
			if _, err := discovery.DecodeSnapshot(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("tools=%d/load", tools), func(b *testing.B) {
		for b.Loop() {
			if _, err := discovery.Load(ctx, bb.bucket, m); err != nil {
				b.Fatal(err)
			}
		}
		size(b)
	})
	b.Run(fmt.Sprintf("tools=%d/build", tools), func(b *testing.B) {
		for b.Loop() {
			if _, err := search.Build(search.Config{}, defs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
