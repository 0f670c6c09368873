package searcheval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/search"
)

const gapTools = `{"name": "media.view_image", "description": "Displays an image file (PNG, JPEG) to the user.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
{"name": "fs.edit_file", "description": "Edit a file: show the lines around a change and write it back.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
{"name": "money.convert", "description": "Convert an amount between currencies.", "parameters": {}}
{"name": "weather.now", "description": "Current weather conditions.", "parameters": {}}
`

const gapQueries = `{"id": "e1", "query": "please show me that picture", "relevant": ["media.view_image"], "category": "eval"}
{"id": "e2", "query": "convert currency", "relevant": ["money.convert"], "category": "eval"}
`

const gapUsage = `{"id": "u1", "query": "show me a picture", "relevant": ["media.view_image"], "category": "agent-a"}
{"id": "u2", "query": "show the picture of the cat", "relevant": ["media.view_image"], "category": "agent-b"}
{"id": "u3", "query": "can I see a picture", "relevant": ["media.view_image"], "category": "agent-c"}
{"id": "u4", "query": "show me a picture again", "relevant": ["media.view_image"], "category": "agent-a"}
`

// Replayed usage teaches the corpus's index the words agents used for a
// tool; the query whose tool got no evidence scores as it did.
func TestEvaluateWithUsage(t *testing.T) {
	dir := writeCorpus(t, gapTools, gapQueries)
	usage := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(usage, []byte(gapUsage), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.EvaluateWithUsage(search.DefaultConfig(), UsageOptions{File: usage})
	if err != nil {
		t.Fatal(err)
	}
	L := r.Learning
	if L == nil {
		t.Fatal("no learning report")
	}
	if L.UsageQueries != 4 || L.Principals != 3 || L.ToolsWithUsage != 1 {
		t.Errorf("replayed %d queries of %d agents for %d tools; want 4, 3, 1", L.UsageQueries, L.Principals, L.ToolsWithUsage)
	}
	// e1 finds fs.edit_file first without learning (it holds "show"), the
	// image viewer with it; e2 finds money.convert first either way.
	if !near(L.Before.RecallAt1, 0.5) || !near(L.After.RecallAt1, 1) {
		t.Errorf("R@1 %v before and %v after learning; want 0.5 and 1", L.Before.RecallAt1, L.After.RecallAt1)
	}
	if r.RecallAt1 != L.After.RecallAt1 {
		t.Errorf("the report's figures %v are not those after learning %v", r.RecallAt1, L.After.RecallAt1)
	}
	if L.NoUsage.Queries != 1 || L.NoUsage.Before != L.NoUsage.After || !near(L.NoUsage.After.RecallAt1, 1) {
		t.Errorf("queries without usage: %+v", L.NoUsage)
	}
	if len(L.Curve) != 3 || L.Curve[2].Metrics != L.After {
		t.Errorf("curve %+v; want 3 points ending with the figures after learning", L.Curve)
	}
	if L.LearnedTerms == 0 || L.LearnedTerms > search.MaxLearnedTerms || L.LearnedCount > search.MaxLearnedCount {
		t.Errorf("learned field of %d terms, highest count %d", L.LearnedTerms, L.LearnedCount)
	}
	if L.EncodedBytesAfter <= L.EncodedBytesBefore {
		t.Errorf("encoded %d bytes before and %d after learning", L.EncodedBytesBefore, L.EncodedBytesAfter)
	}
}

func TestUsageRefusals(t *testing.T) {
	dir := writeCorpus(t, gapTools, gapQueries)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(bad, []byte(`{"id": "u1", "query": "x", "relevant": ["nowhere.tool"], "category": "a"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EvaluateWithUsage(search.DefaultConfig(), UsageOptions{File: bad}); err == nil || !strings.Contains(err.Error(), `"nowhere.tool" is not in the corpus`) {
		t.Errorf("usage naming an unknown tool: %v", err)
	}
	if _, err := c.EvaluateWithUsage(search.DefaultConfig(), UsageOptions{File: filepath.Join(dir, "missing.jsonl")}); err == nil {
		t.Error("a missing usage file is no error")
	}
	for _, bad := range []string{"c", "0/3", "4/3", "1/1", "1/101", "not-a", "not-0/2", "1/x", "x/2", "/2", "1/"} {
		if _, err := ParsePart(bad); err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParsePart(%s) = %v", bad, err)
		}
	}
	for _, good := range []string{"", "a", "b", "1/2", "3/10", "not-3/10", "100/100"} {
		if _, err := ParsePart(good); err != nil {
			t.Errorf("ParsePart(%s): %v", good, err)
		}
	}
	if _, err := c.EvaluateFolds(search.DefaultConfig(), 1, UsageOptions{File: bad}); err == nil {
		t.Error("one fold is no error")
	}
}

// The parts split a file in two by a hash of the IDs: every query is in
// exactly one, and the split does not depend on the file's order.
func TestParts(t *testing.T) {
	a, b := 0, 0
	for i := range 1000 {
		id := "q" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('0'+i%10)) + string(rune(i))
		if PartA.holds(id) == PartB.holds(id) || !PartAll.holds(id) {
			t.Fatalf("query %q is in both parts or neither", id)
		}
		if PartA.holds(id) {
			a++
		} else {
			b++
		}
	}
	if a < 400 || b < 400 {
		t.Errorf("parts of %d and %d queries", a, b)
	}
	// Folds: a and b are the folds of two; each query is in one fold of
	// ten, and in every "not" part but its fold's.
	sizes := map[int]int{}
	for i := range 1000 {
		id := "q" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('0'+i%10)) + string(rune(i))
		if Fold(1, 2).holds(id) != PartA.holds(id) || Fold(2, 2).holds(id) != PartB.holds(id) {
			t.Fatalf("query %q: folds of two are not the halves", id)
		}
		in := 0
		for k := 1; k <= 10; k++ {
			if Fold(k, 10).holds(id) {
				in++
				sizes[k]++
			}
			if Fold(k, 10).holds(id) == Others(k, 10).holds(id) {
				t.Fatalf("query %q is in fold %d and in the others, or in neither", id, k)
			}
		}
		if in != 1 {
			t.Fatalf("query %q is in %d folds of 10", id, in)
		}
	}
	for k := 1; k <= 10; k++ {
		if sizes[k] < 60 {
			t.Errorf("fold %d of 10 holds %d of 1,000 queries", k, sizes[k])
		}
	}
}

// Cross-validation: each fold is evaluated after the others were replayed,
// and the figures are pooled over every query once. A query for the image
// viewer in other words than its definition's is found through what the
// other folds' agents taught; the currency query's tool is never taught
// (no other query names it), so it counts among the untaught.
func TestEvaluateFolds(t *testing.T) {
	queries := `{"id": "p1", "query": "show me a picture", "relevant": ["media.view_image"], "category": "agent-a"}
{"id": "p2", "query": "show the picture of the cat", "relevant": ["media.view_image"], "category": "agent-b"}
{"id": "p3", "query": "can I see a picture", "relevant": ["media.view_image"], "category": "agent-c"}
{"id": "p4", "query": "show me a picture again", "relevant": ["media.view_image"], "category": "agent-a"}
{"id": "p5", "query": "show that picture please", "relevant": ["media.view_image"], "category": "agent-d"}
{"id": "p6", "query": "a picture to show", "relevant": ["media.view_image"], "category": "agent-e"}
{"id": "m1", "query": "convert currency", "relevant": ["money.convert"], "category": "agent-f"}
`
	dir := writeCorpus(t, gapTools, queries)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.EvaluateFolds(search.DefaultConfig(), 2, UsageOptions{File: filepath.Join(dir, "queries.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Folds != 2 || r.Queries != 7 || r.Taught.Queries+r.NoUsage.Queries != 7 || r.NoUsage.Queries < 1 {
		t.Fatalf("report %+v: want 7 queries in 2 folds, the currency query among the untaught", r)
	}
	if r.After.RecallAt1 <= r.Before.RecallAt1 || r.Taught.After.RecallAt1 <= r.Taught.Before.RecallAt1 {
		t.Errorf("R@1 %v before and %v after learning (taught queries: %v, %v); want a rise", r.Before.RecallAt1, r.After.RecallAt1, r.Taught.Before.RecallAt1, r.Taught.After.RecallAt1)
	}
	if !near(r.NoUsage.After.RecallAt1, 1) {
		t.Errorf("the untaught currency query: %+v", r.NoUsage)
	}
	if len(c.Queries) != 7 {
		t.Errorf("the corpus holds %d queries after the folds; want its 7", len(c.Queries))
	}
}

// With another corpus's tools in the catalog, that corpus's queries can be
// replayed as usage and this one's evaluated: the tools that got evidence
// are the other corpus's, so every evaluated query is one without usage.
func TestUsageOfAnotherCorpus(t *testing.T) {
	viewer := writeCorpus(t, `{"name": "media.view_image", "description": "Displays an image file (PNG, JPEG) to the user.", "parameters": {}}
`, gapUsage)
	rest := writeCorpus(t, `{"name": "fs.edit_file", "description": "Edit a file: show the lines around a change and write it back.", "parameters": {}}
{"name": "money.convert", "description": "Convert an amount between currencies.", "parameters": {}}
`, `{"id": "e1", "query": "edit the lines of a file", "relevant": ["fs.edit_file"], "category": "eval"}
{"id": "e2", "query": "convert currency", "relevant": ["money.convert"], "category": "eval"}
`)
	usage := filepath.Join(viewer, "queries.jsonl")
	alone, err := Load(rest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alone.EvaluateWithUsage(search.DefaultConfig(), UsageOptions{File: usage}); err == nil || !strings.Contains(err.Error(), `"media.view_image" is not in the corpus`) {
		t.Fatalf("usage of a corpus whose tools are not in the catalog: %v", err)
	}
	c, err := Load(rest, viewer)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools) != 3 || len(c.Queries) != 2 {
		t.Fatalf("catalog of %d tools and %d queries; want 3 and 2 (the first corpus's)", len(c.Tools), len(c.Queries))
	}
	r, err := c.EvaluateWithUsage(search.DefaultConfig(), UsageOptions{File: usage})
	if err != nil {
		t.Fatal(err)
	}
	L := r.Learning
	if L.UsageQueries != 4 || L.ToolsWithUsage != 1 || L.NoUsage.Queries != 2 {
		t.Errorf("replayed %d queries for %d tools, %d evaluated queries without usage; want 4, 1, 2", L.UsageQueries, L.ToolsWithUsage, L.NoUsage.Queries)
	}
	if !near(L.Before.RecallAt1, 1) || L.NoUsage.After != L.Before {
		t.Errorf("figures before %+v, after on queries without usage %+v", L.Before, L.NoUsage.After)
	}
	if _, err := Load(rest, rest); err == nil || !strings.Contains(err.Error(), `"fs.edit_file" listed twice`) {
		t.Errorf("two corpora sharing a tool name: %v", err)
	}
}
