package searcheval

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func writeCorpus(t *testing.T, tools, queries string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"tools.jsonl": tools, "queries.jsonl": queries} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The tiny corpus ranks as follows (checked by the test, then scored by
// hand):
//
//	q1 "convert currency" ranks money.convert first          → relevant at 1
//	q2 "weather forecast" ranks weather.forecast first, but
//	   relevant is [weather.forecast, weather.now]: now is 2nd → both found
//	q3 "zzz unknown" matches nothing                        → nothing found
const tinyTools = `{"name": "money.convert", "description": "Convert an amount between currencies.", "parameters": {"type": "object", "properties": {"amount": {"type": "number", "description": "Amount to convert."}}}}
{"name": "weather.forecast", "description": "Weather forecast for the next days.", "parameters": {"type": "object", "properties": {}}}
{"name": "weather.now", "description": "Current weather conditions.", "parameters": {}}
{"name": "files/read file", "description": "Read a file.", "parameters": null, "name_for_human": "File Reader"}
`

const tinyQueries = `{"id": "q1", "query": "convert currency", "relevant": ["money.convert"], "category": "a"}
{"id": "q2", "query": "weather forecast", "relevant": ["weather.forecast", "weather.now"], "category": "b"}
{"id": "q3", "query": "zzz unknown", "relevant": ["files/read file"], "category": "b"}
`

func TestRunTinyCorpus(t *testing.T) {
	dir := writeCorpus(t, tinyTools, tinyQueries)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := search.Build(search.DefaultConfig(), c.Tools)
	if err != nil {
		t.Fatal(err)
	}
	wantRanking := map[string][]string{
		"convert currency": {"money.convert"},
		"weather forecast": {"weather.forecast", "weather.now"},
		"zzz unknown":      nil,
	}
	for q, want := range wantRanking {
		res, _ := ix.Search(search.Query{Text: q})
		var got []string
		for _, h := range res.Hits {
			got = append(got, c.corpusName[h.Tool.String()])
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%q ranks %v; the hand-computed figures below assume %v", q, got, want)
		}
	}

	r, err := Run(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Tools != 4 || r.Queries != 3 || r.Lenient {
		t.Fatalf("tools %d, queries %d, lenient %v; want 4, 3, false", r.Tools, r.Queries, r.Lenient)
	}
	// q1: recall 1 at every k, RR 1, nDCG 1.
	// q2: both relevant in ranks 1 and 2: recall@1 1/2, @5 and @10 1, RR 1,
	//     DCG = 1 + 1/log2(3) = IDCG, so nDCG 1.
	// q3: nothing: 0 everywhere.
	checks := map[string][2]float64{
		"recall_at_1":  {r.RecallAt1, (1 + 0.5 + 0) / 3},
		"recall_at_5":  {r.RecallAt5, 2.0 / 3},
		"recall_at_10": {r.RecallAt10, 2.0 / 3},
		"mrr_at_10":    {r.MRRAt10, 2.0 / 3},
		"ndcg_at_10":   {r.NDCGAt10, 2.0 / 3},
	}
	for name, c := range checks {
		if !near(c[0], c[1]) {
			t.Errorf("%s = %v; want %v", name, c[0], c[1])
		}
	}
	if r.QueryP50US <= 0 || r.QueryP99US < r.QueryP50US || r.BuildMS < 0 || r.EncodedBytes == 0 {
		t.Errorf("implausible timings or size: %+v", r)
	}
}

// Lenient scoring: two variants of one original tool collapse into one
// place in the ranking.
func TestRunLenient(t *testing.T) {
	tools := `{"name": "calc_tip", "description": "Compute the tip of a restaurant bill.", "parameters": {}, "original_name": "calc_tip"}
{"name": "calc_tip__v2", "description": "Compute the tip of a restaurant bill, split between people.", "parameters": {}, "original_name": "calc_tip"}
{"name": "split_bill", "description": "Split a restaurant bill between people.", "parameters": {}, "original_name": "split_bill"}
`
	// The query ranks calc_tip__v2 (strict miss), then calc_tip or split_bill.
	queries := `{"id": "q", "query": "tip of a restaurant bill split between people", "relevant": ["calc_tip"], "relevant_original": ["calc_tip"], "category": "x"}
`
	c, err := Load(writeCorpus(t, tools, queries))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := search.Build(search.DefaultConfig(), c.Tools)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := ix.Search(search.Query{Text: c.Queries[0].Text})
	if first := c.corpusName[res.Hits[0].Tool.String()]; first != "calc_tip__v2" {
		t.Fatalf("first hit %s; the test expects calc_tip__v2", first)
	}
	r, err := c.Evaluate(search.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Lenient || r.Strict == nil {
		t.Fatalf("lenient %v, strict %v; want lenient scoring", r.Lenient, r.Strict)
	}
	if r.RecallAt1 != 1 || r.MRRAt10 != 1 {
		t.Errorf("lenient recall@1 %v, MRR %v; want 1, 1", r.RecallAt1, r.MRRAt10)
	}
	if r.Strict.RecallAt1 != 0 || r.Strict.MRRAt10 >= 1 {
		t.Errorf("strict recall@1 %v, MRR %v; want 0 and below 1", r.Strict.RecallAt1, r.Strict.MRRAt10)
	}
}

func TestLoadMapsNames(t *testing.T) {
	c, err := Load(writeCorpus(t, tinyTools, tinyQueries))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Tools {
		if err := d.ToolName().Validate(); err != nil {
			t.Errorf("tool %q: %v", d.Name, err)
		}
	}
	read := c.Tools[3]
	if read.Method != "files_read_file" || read.OriginalName != "files/read file" || read.Title != "File Reader" {
		t.Errorf("files/read file mapped to %+v", read)
	}
	if got := search.Tokenize(read.OriginalName); strings.Join(got, " ") != "file read file" {
		t.Errorf("original name tokens %v", got)
	}
}

func TestUniqueMethod(t *testing.T) {
	taken := map[string]bool{}
	long := strings.Repeat("x", 80)
	seen := map[string]bool{}
	for _, name := range []string{"a.b", "a_b", "a b", long, long + "y", "", "ünï"} {
		m := uniqueMethod("eval", name, taken)
		n := messages.ToolName{Namespace: "eval", Method: m}
		if err := n.Validate(); err != nil {
			t.Errorf("uniqueMethod(%q) = %q: %v", name, m, err)
		}
		if seen[m] {
			t.Errorf("uniqueMethod(%q) = %q again", name, m)
		}
		seen[m] = true
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, tools, queries, want string }{
		{"bad json", "{", "", "tools.jsonl line 1"},
		{"no name", `{"description": "x"}`, "", "no \"name\""},
		{"duplicate", `{"name": "a"}` + "\n" + `{"name": "a"}`, "", "twice"},
		{"unknown relevant", `{"name": "a"}`, `{"id": "q", "query": "x", "relevant": ["b"]}`, `"b" is not in tools.jsonl`},
		{"no relevant", `{"name": "a"}`, `{"id": "q", "query": "x", "relevant": []}`, "no relevant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeCorpus(t, tt.tools, tt.queries))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error %v; want one mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := Run(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Run on a missing directory succeeded")
	}
}
