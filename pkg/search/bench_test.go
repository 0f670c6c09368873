package search

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/pkg/messages"
)

var benchSizes = []int{1000, 10000, 100000}

var indexCache sync.Map // size → *Index

func benchIndex(b *testing.B, n int) *Index {
	if v, ok := indexCache.Load(n); ok {
		return v.(*Index)
	}
	ix, err := Build(Config{}, cachedCatalog(n))
	if err != nil {
		b.Fatal(err)
	}
	indexCache.Store(n, ix)
	return ix
}

// reportLatencies reports the median and 99th percentile of one operation.
func reportLatencies(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1000, "p99-µs")
}

func BenchmarkSearch(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			ix := benchIndex(b, n)
			queries := synthetic.Queries(cachedCatalog(n), 1000)
			durations := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := ix.Search(Query{Text: queries[i%len(queries)]}); err != nil {
					b.Fatal(err)
				}
				durations = append(durations, time.Since(t0))
			}
			b.StopTimer()
			reportLatencies(b, durations)
		})
	}
}

// BenchmarkSearchFiltered searches with an allow-set that admits every
// other tool, as an agent's policy would, and with one that admits every
// tool, as the coordinator's check of each tool's namespace and policy
// does for most agents; it reports how often the allow-set was asked.
func BenchmarkSearchFiltered(b *testing.B) {
	n := 10000
	ix := benchIndex(b, n)
	defs := cachedCatalog(n)
	queries := synthetic.Queries(defs, 1000)
	for _, every := range []int{2, 1} {
		allowed := make(map[messages.ToolName]bool)
		for i := 0; i < len(defs); i += every {
			allowed[defs[i].ToolName()] = true
		}
		b.Run(fmt.Sprintf("admitted=1/%d", every), func(b *testing.B) {
			asked := 0
			allow := func(n messages.ToolName) bool {
				asked++
				return allowed[n]
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				q := Query{Text: queries[i%len(queries)], Allow: allow, Tags: []string{messages.TagReadOnly}}
				if _, err := ix.Search(q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(asked)/float64(b.N), "allow-calls/op")
		})
	}
}

// BenchmarkSearchDuringUpserts measures searches while another goroutine
// upserts tools without pause.
func BenchmarkSearchDuringUpserts(b *testing.B) {
	n := 10000
	defs := cachedCatalog(n)
	ix, err := Build(Config{}, defs)
	if err != nil {
		b.Fatal(err)
	}
	queries := synthetic.Queries(defs, 1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			def := defs[i%len(defs)]
			def.Description += " revised"
			if err := ix.Upsert(def); err != nil {
				panic(err)
			}
		}
	})
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := ix.Search(Query{Text: queries[i%len(queries)]}); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(t0))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	reportLatencies(b, durations)
}

// reportCPU reports the process's CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((processCPU()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			defs := cachedCatalog(n)
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := Build(Config{}, defs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkUpsert replaces one tool of a full index with a changed version.
func BenchmarkUpsert(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			defs := cachedCatalog(n)
			ix, err := Build(Config{}, defs)
			if err != nil {
				b.Fatal(err)
			}
			durations := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				def := defs[(i*7919)%len(defs)]
				if i%2 == 0 {
					def.Description += " deprecated soon"
				}
				t0 := time.Now()
				if err := ix.Upsert(def); err != nil {
					b.Fatal(err)
				}
				durations = append(durations, time.Since(t0))
			}
			b.StopTimer()
			reportLatencies(b, durations)
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			ix := benchIndex(b, n)
			var size int
			for i := 0; i < b.N; i++ {
				size = len(ix.Encode())
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			data := benchIndex(b, n).Encode()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := Decode(data); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu)
		})
	}
}

// learnedBenchIndex is the index of 10,000 synthetic tools, 3,000 of which
// learned as the coordinator's BenchmarkDiscover teaches them: three
// agents' records each, two turns a record, each turn a query's terms and
// one word that no definition holds.
func learnedBenchIndex(b *testing.B) (*Index, []string) {
	const tools, learned = 10_000, 3_000
	defs := cachedCatalog(tools)
	ix, err := Build(Config{}, defs)
	if err != nil {
		b.Fatal(err)
	}
	queries := synthetic.Queries(defs, 2*learned)
	now := time.Now().UTC()
	for i := range learned {
		def := &defs[(i*7)%tools]
		records := make([]UsageRecord, 3)
		gap := fmt.Sprintf("zq%d", i)
		for a := range records {
			records[a].Add(append(UsageTerms(queries[(2*i+a)%len(queries)]), gap), 1, now, LearnConfig{})
			records[a].Add(append(UsageTerms(queries[(2*i+a+1)%len(queries)]), gap), 1, now, LearnConfig{})
		}
		learned := Fold(records, LearnConfig{})
		if _, err := ix.SetLearnedBy(def.ToolName(), learned.Terms, learned.Teachers); err != nil {
			b.Fatal(err)
		}
	}
	return ix, queries
}

// BenchmarkSearchLearned searches 10,000 tools, 3,000 with learned
// fields, with and without them, each search asking an allow function
// that looks the tool up in a map, as a catalog would.
func BenchmarkSearchLearned(b *testing.B) {
	defs := cachedCatalog(10_000)
	known := make(map[string]bool, len(defs))
	for i := range defs {
		known[defs[i].Name] = true
	}
	allow := func(n messages.ToolName) bool { return known[n.String()] }
	learnedIx, queries := learnedBenchIndex(b)
	for _, c := range []struct {
		name string
		ix   *Index
	}{{"learned=0", benchIndex(b, 10_000)}, {"learned=3000", learnedIx}} {
		b.Run(c.name, func(b *testing.B) {
			durations := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			i := 0
			cpu := processCPU()
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.ix.Search(Query{Text: queries[i%len(queries)], Allow: allow}); err != nil {
					b.Fatal(err)
				}
				durations = append(durations, time.Since(t0))
				i++
			}
			// Unlike wall time, other load on the machine leaves it as is.
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(len(durations)), "cpu-µs/op")
			reportLatencies(b, durations)
		})
	}
}
