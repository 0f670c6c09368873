package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

func TestMain(m *testing.M) { leaks.Main(m, testenv.CleanupBinaries) }

// runToJSON runs toolbus-bench to the end and decodes the JSON line it
// prints last into out.
func runToJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	p := testenv.Start(t, testenv.Binary(t, "./cmd/toolbus-bench"), args...)
	if err := p.Wait(testenv.Context(t)); err != nil {
		t.Fatalf("toolbus-bench %s: %v\n%s", strings.Join(args, " "), err, p.Output())
	}
	lines := strings.Split(strings.TrimSpace(p.Output()), "\n")
	last := lines[len(lines)-1]
	if err := json.Unmarshal([]byte(last), out); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
}

// The bench measures both paths on a Toolbus under the prefix it is given.
func TestBenchReports(t *testing.T) {
	t.Parallel()
	var r benchReport
	runToJSON(t, &r, "--calls", "20", "--rounds", "1", "--concurrency", "4", "--slots", "4", "--prefix", "tbbench", "--settle", "300ms")
	if r.Calls != 20 || r.ToolbusSeqP50US <= 0 || r.BaselineSeqP50US <= 0 || r.ToolbusC64CallsPerS <= 0 {
		t.Fatalf("report %+v", r)
	}
	// Counted: the queued event and the result on the path, and apart the
	// audit stream's batches of the allowed calls' records, fewer than a
	// message a call.
	if r.Path != "realistic" || r.ToolbusJetStreamWrite != 2 || r.ToolbusAuditWrites <= 0 || r.ToolbusAuditWrites >= 1 || r.ToolbusMsgsPerCall <= 0 || r.BaselineMsgsPerCall <= 0 {
		t.Fatalf("by default the realistic path, with its two writes per call and batches of audit records: %+v", r)
	}
	var bare benchReport
	runToJSON(t, &bare, "--bare", "--calls", "20", "--rounds", "1", "--concurrency", "4", "--slots", "4", "--prefix", "tbbare", "--settle", "300ms")
	if bare.Path != "bare" || bare.ToolbusJetStreamWrite != 2 || bare.ToolbusAuditWrites != 0 || bare.ToolbusC64CallsPerS <= 0 {
		t.Fatalf("--bare: %+v", bare)
	}
}

// Under a deployment's authentication, each process connects as its role
// and the agent acts as its user's one agent; the run says it used auth.
func TestBenchRunsUnderTheDeployedUsers(t *testing.T) {
	t.Parallel()
	deploy, err := filepath.Abs(filepath.Join("..", "..", "deploy", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	var r benchReport
	runToJSON(t, &r, "--calls", "20", "--rounds", "1", "--concurrency", "4", "--slots", "4", "--settle", "300ms",
		"--auth", filepath.Join(deploy, "users.conf"), "--identities", filepath.Join(deploy, "identities.yaml"))
	if !r.Auth || r.Calls != 20 || r.ToolbusSeqP50US <= 0 || r.BaselineSeqP50US <= 0 || r.ToolbusC64CallsPerS <= 0 {
		t.Fatalf("report %+v", r)
	}
}

// The soak follows results under the prefix it is given: every call it
// submitted has its result observed, none lost, none twice.
func TestSoakFollowsTheConfiguredPrefix(t *testing.T) {
	t.Parallel()
	var r soakReport
	runToJSON(t, &r, "--soak", "--prefix", "tbsoak", "--calls", "24", "--concurrency", "8", "--workers", "2", "--kill-every", "500ms", "--ack-wait", "500ms")
	if r.Submitted != 24 || r.Results != 24 || r.Lost != 0 || r.Duplicated != 0 {
		t.Fatalf("report %+v, want 24 calls submitted and answered once each", r)
	}
	if r.ResultsObserved != r.Submitted {
		t.Fatalf("the observer saw %d results of %d calls", r.ResultsObserved, r.Submitted)
	}
}

func TestSearchEvalReports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := `{"name": "money.convert", "description": "Convert an amount between currencies.", "parameters": {"type": "object"}}
{"name": "weather.now", "description": "Current weather conditions.", "parameters": {}}
`
	queries := `{"id": "q1", "query": "convert currency", "relevant": ["money.convert"]}
`
	for name, body := range map[string]string{"tools.jsonl": tools, "queries.jsonl": queries} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var r struct {
		Tools     int     `json:"tools"`
		Queries   int     `json:"queries"`
		RecallAt1 float64 `json:"recall_at_1"`
	}
	runToJSON(t, &r, "search-eval", "--corpus", dir)
	if r.Tools != 2 || r.Queries != 1 || r.RecallAt1 != 1 {
		t.Fatalf("report %+v", r)
	}
	var learned struct {
		Learning *struct {
			UsageQueries int `json:"usage_queries"`
			Before       struct {
				RecallAt1 float64 `json:"recall_at_1"`
			} `json:"before"`
		} `json:"learning"`
	}
	runToJSON(t, &learned, "search-eval", "--corpus", dir, "--usage", filepath.Join(dir, "queries.jsonl"))
	if learned.Learning == nil || learned.Learning.UsageQueries != 1 || learned.Learning.Before.RecallAt1 != 1 {
		t.Fatalf("report with usage %+v", learned.Learning)
	}

	// Cross-validation: each fold evaluated after the others replayed.
	foldsDir := t.TempDir()
	var foldQueries strings.Builder
	for i := range 6 {
		fmt.Fprintf(&foldQueries, `{"id": "p%d", "query": "show me picture %d", "relevant": ["media.view_image"], "category": "a%d"}`+"\n", i, i, i%3)
	}
	for name, body := range map[string]string{
		"tools.jsonl":   `{"name": "media.view_image", "description": "Displays an image file.", "parameters": {}}` + "\n" + `{"name": "fs.edit_file", "description": "Show a file's lines and edit them.", "parameters": {}}` + "\n",
		"queries.jsonl": foldQueries.String(),
	} {
		if err := os.WriteFile(filepath.Join(foldsDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var folds struct {
		Folds   int `json:"folds"`
		Queries int `json:"queries"`
		Before  struct {
			RecallAt1 float64 `json:"recall_at_1"`
		} `json:"before"`
		After struct {
			RecallAt1 float64 `json:"recall_at_1"`
		} `json:"after"`
	}
	runToJSON(t, &folds, "search-eval", "--corpus", foldsDir, "--usage", filepath.Join(foldsDir, "queries.jsonl"), "--folds", "2")
	if folds.Folds != 2 || folds.Queries != 6 || folds.After.RecallAt1 <= folds.Before.RecallAt1 {
		t.Fatalf("report of two folds %+v; want 6 queries, R@1 rising with what the other fold taught", folds)
	}

	// Another corpus's tools join the catalog; its queries are replayed.
	other := t.TempDir()
	for name, body := range map[string]string{
		"tools.jsonl":   `{"name": "media.view_image", "description": "Displays an image file.", "parameters": {}}` + "\n",
		"queries.jsonl": `{"id": "u1", "query": "show me a picture", "relevant": ["media.view_image"], "category": "a"}` + "\n",
	} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var both struct {
		Tools    int `json:"tools"`
		Queries  int `json:"queries"`
		Learning *struct {
			ToolsWithUsage int `json:"tools_with_usage"`
		} `json:"learning"`
	}
	runToJSON(t, &both, "search-eval", "--corpus", dir, "--add-tools", other, "--usage", filepath.Join(other, "queries.jsonl"))
	if both.Tools != 3 || both.Queries != 1 || both.Learning == nil || both.Learning.ToolsWithUsage != 1 {
		t.Fatalf("report with another corpus's tools and usage: %+v %+v", both, both.Learning)
	}
}

// A mode's flags take no positional arguments, and search-eval needs a corpus.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bench"}, {"--calls", "x"}, {"search-eval"}, {"search-eval", "--corpus", "a", "b"},
		{"search-eval", "--corpus", "a", "--eval-part", "c"}, {"search-eval", "--corpus", "a", "--usage-part", "a"},
		{"search-eval", "--corpus", "a", "--usage", "f", "--usage-page", "0"},
		{"search-eval", "--corpus", "a", "--folds", "10"}, {"search-eval", "--corpus", "a", "--usage", "f", "--folds", "1"},
		{"search-eval", "--corpus", "a", "--usage", "f", "--folds", "2", "--eval-part", "a"}} {
		if err := run(testenv.Context(t), args); err != exitError(2) {
			t.Errorf("toolbus-bench %s: %v, want exit status 2", strings.Join(args, " "), err)
		}
	}
}
