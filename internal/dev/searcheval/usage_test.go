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
	if _, err := ParsePart("c"); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("ParsePart(c) = %v", err)
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
