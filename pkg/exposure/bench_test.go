package exposure

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The benchmark workspace: 100 namespaces × 100 methods = 10,000 tools and
// 50 bundles × 4 rules = 200 rules, mixing namespace globs with excludes,
// method globs, exact names and a namespace glob.
const (
	benchNamespaces = 100
	benchMethods    = 100
	benchBundles    = 50
)

var benchVerbs = []string{"get", "list", "create", "update", "delete", "search", "describe", "run", "watch", "export"}

func benchCatalog(version uint64) *Catalog {
	defs := make([]messages.ToolDefinition, 0, benchNamespaces*benchMethods)
	for n := 0; n < benchNamespaces; n++ {
		for m := 0; m < benchMethods; m++ {
			ns, method := fmt.Sprintf("ns%02d", n), fmt.Sprintf("%s%d", benchVerbs[m/10], m%10)
			defs = append(defs, messages.ToolDefinition{Name: ns + "-" + method, Namespace: ns, Method: method})
		}
	}
	return NewCatalog(version, defs)
}

func benchWorkspace(tb testing.TB) *Workspace {
	bundles := make([]Bundle, benchBundles)
	for k := range bundles {
		bundles[k] = Bundle{ID: fmt.Sprintf("b%02d", k), Priority: k % 3, Match: []Rule{
			{Name: fmt.Sprintf("ns%02d:*", 2*k), Exclude: []string{fmt.Sprintf("ns%02d:delete*", 2*k)}},
			{Name: fmt.Sprintf("ns%02d:get*", 2*k+1), Tier: TierOnDemand},
			{Name: fmt.Sprintf("ns%02d/create3", 2*k+1), Tier: TierCritical},
			{Name: fmt.Sprintf("*:search%d", k%10), AlwaysInclude: k%10 == 0, Approval: &Approval{Mode: ApprovalPrompt}},
		}}
	}
	return mustWorkspace(tb, bundles)
}

var benchIterations = map[string]Iteration{
	"no-intake": {},
	"intake": {
		Intake:     &Intake{Bundles: []string{"b03", "b17"}, Tools: []string{"ns01:get1", "ns40-list2", "ns98.run0"}},
		Discovered: []string{"ns05-get3", "ns07:watch1", "ns11:export9", "ns13-delete0", "ns99-run5"},
		Activated:  []string{"ns21:get2"},
	},
	"clarification": {Clarification: true},
}

// TestBenchmarkWorkspaceShape keeps the benchmark honest about what it measures.
func TestBenchmarkWorkspaceShape(t *testing.T) {
	a := benchWorkspace(t).Admit("", benchCatalog(1))
	if n := benchCatalog(1).Len(); n != 10000 {
		t.Fatalf("catalog has %d tools", n)
	}
	if n := len(a.Tools()); n < 5000 {
		t.Fatalf("only %d tools admitted", n)
	}
	full := a.Visible(benchIterations["no-intake"])
	narrow := a.Visible(benchIterations["intake"])
	if len(full.Tools) < 4000 || len(narrow.Tools) >= len(full.Tools) || len(narrow.Dropped) != 0 {
		t.Fatalf("visible: %d without intake, %d with intake (dropped %v)", len(full.Tools), len(narrow.Tools), narrow.Dropped)
	}
	if !slices.IsSortedFunc(full.Tools, func(a, b *Tool) int { return cmpString(a.Name, b.Name) }) {
		t.Fatal("visible tools are not sorted")
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BenchmarkResolveCached measures one model iteration when the admission is
// cached: the per-iteration cost the coordinator pays on every model call.
func BenchmarkResolveCached(b *testing.B) {
	r := NewResolver(benchWorkspace(b))
	cat := benchCatalog(1)
	for _, name := range []string{"no-intake", "intake", "clarification"} {
		it := benchIterations[name]
		b.Run(name, func(b *testing.B) {
			r.Resolve("agent", cat, it)
			measure(b, func() { r.Resolve("agent", cat, it) })
		})
	}
}

// BenchmarkResolveUncached measures an iteration right after the catalog
// changed: the admission is recomputed from 200 rules over 10,000 tools.
func BenchmarkResolveUncached(b *testing.B) {
	ws := benchWorkspace(b)
	cat := benchCatalog(1)
	it := benchIterations["intake"]
	measure(b, func() { ws.Admit("agent", cat).Visible(it) })
}

// BenchmarkNewCatalog measures indexing a 10,000-tool catalog snapshot.
func BenchmarkNewCatalog(b *testing.B) {
	defs := benchCatalog(1).Definitions()
	b.ReportAllocs()
	for b.Loop() {
		NewCatalog(1, defs)
	}
}

// measure runs op b.N times and reports the median and 99th percentile of
// its durations beside ns/op.
func measure(b *testing.B, op func()) {
	b.ReportAllocs()
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		op()
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durations[min(len(durations)-1, len(durations)*99/100)].Nanoseconds()), "p99-ns")
}
