package search

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/pkg/messages"
)

// tool makes a definition; params maps parameter names to descriptions.
func tool(ns, method, description string, params map[string]string, tags ...string) messages.ToolDefinition {
	props := map[string]any{}
	for name, desc := range params {
		props[name] = map[string]any{"type": "string", "description": desc}
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	return messages.ToolDefinition{
		Name:        ns + "-" + method,
		Namespace:   ns,
		Method:      method,
		Description: description,
		InputSchema: schema,
		Metadata:    messages.ToolMetadata{Tags: tags},
	}
}

func testCatalog() []messages.ToolDefinition {
	return []messages.ToolDefinition{
		tool("github", "create_issue", "Open a new issue in a repository.", map[string]string{"repo": "Repository as owner/name.", "title": "Issue title."}, messages.TagNetwork),
		tool("github", "list_issues", "List open issues of a repository, filtered by label.", map[string]string{"repo": "Repository.", "label": "Label to filter by."}, messages.TagReadOnly, messages.TagNetwork),
		tool("github", "search", "Search code across repositories.", map[string]string{"query": "Search terms."}, messages.TagReadOnly),
		tool("weather", "getForecast", "Get the weather forecast for a city for the next days.", map[string]string{"city": "City name.", "days": "Number of days."}, messages.TagReadOnly),
		tool("weather", "current_conditions", "Current temperature, humidity and wind in a city.", map[string]string{"city": "City name."}, messages.TagReadOnly),
		tool("files", "read_file", "Read a file from the workspace and return its content.", map[string]string{"path": "Path of the file."}, messages.TagReadOnly, messages.TagFileSystem),
		tool("files", "delete_file", "Delete a file from the workspace.", map[string]string{"path": "Path of the file to delete."}, messages.TagDestructive, messages.TagFileSystem),
		tool("files", "search", "Search file contents in the workspace for a pattern.", map[string]string{"pattern": "Regular expression."}, messages.TagReadOnly, messages.TagFileSystem),
	}
}

func mustBuild(t testing.TB, defs []messages.ToolDefinition) *Index {
	t.Helper()
	ix, err := Build(Config{}, defs)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func names(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.String()
	}
	return out
}

func search(t testing.TB, ix *Index, q Query) Result {
	t.Helper()
	res, err := ix.Search(q)
	if err != nil {
		t.Fatalf("Search(%+v): %v", q, err)
	}
	return res
}

func TestSearchRanksRelevantToolFirst(t *testing.T) {
	ix := mustBuild(t, testCatalog())
	tests := []struct {
		query string
		want  string
	}{
		{"what will the weather be like in Paris tomorrow", "weather-getForecast"},
		{"how humid is it in Oslo right now", "weather-current_conditions"},
		{"open a bug report on the repo", "github-create_issue"},
		{"show me the issues labelled bug", "github-list_issues"},
		{"remove the temporary file", "files-delete_file"},
		{"find files containing TODO matching a regular expression", "files-search"},
		{"reading files", "files-read_file"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res := search(t, ix, Query{Text: tt.query})
			if len(res.Hits) == 0 || res.Hits[0].Tool.String() != tt.want {
				t.Errorf("first hit of %q: got %v; want %s", tt.query, names(res.Hits), tt.want)
			}
		})
	}
}

func TestSearchExactName(t *testing.T) {
	ix := mustBuild(t, testCatalog())
	tests := []struct {
		query string
		want  []string
	}{
		{"github-create_issue", []string{"github-create_issue"}},
		{"GitHub-Create_Issue", []string{"github-create_issue"}},
		{"github:create_issue", []string{"github-create_issue"}},
		{"github/create_issue", []string{"github-create_issue"}},
		{"github.create_issue", []string{"github-create_issue"}},
		{" create_issue ", []string{"github-create_issue"}},
		{"getforecast", []string{"weather-getForecast"}},
		// A method that two namespaces share names both, by canonical name.
		{"search", []string{"files-search", "github-search"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res := search(t, ix, Query{Text: tt.query})
			if len(res.Hits) < len(tt.want) {
				t.Fatalf("got %v; want %v first", names(res.Hits), tt.want)
			}
			for i, want := range tt.want {
				if h := res.Hits[i]; h.Tool.String() != want || !h.Exact {
					t.Errorf("hit %d of %q = %+v; want exact %s", i, tt.query, h, want)
				}
			}
			for _, h := range res.Hits[len(tt.want):] {
				if h.Exact {
					t.Errorf("hit %s of %q is marked exact", h.Tool, tt.query)
				}
			}
		})
	}
}

func TestSearchExactOriginalName(t *testing.T) {
	def := tool("mcp_fs", "read_text_file", "Reads a text file.", nil)
	def.OriginalName = "fs.readTextFile"
	other := tool("mcp_fs", "read_text", "Read text from a text file, a text file, text.", nil)
	ix := mustBuild(t, []messages.ToolDefinition{def, other})
	res := search(t, ix, Query{Text: "FS.ReadTextFile"})
	if len(res.Hits) == 0 || res.Hits[0].Tool.String() != "mcp_fs-read_text_file" || !res.Hits[0].Exact {
		t.Fatalf("got %+v; want mcp_fs-read_text_file first", res.Hits)
	}
}

func TestSearchFilters(t *testing.T) {
	ix := mustBuild(t, testCatalog())
	tests := []struct {
		name string
		q    Query
		want []string
	}{
		{"namespace", Query{Text: "search", Namespaces: []string{"github"}}, []string{"github-search"}},
		{"unknown namespace", Query{Text: "search", Namespaces: []string{"nope"}}, nil},
		{"tags any of", Query{Text: "file", Tags: []string{messages.TagDestructive, "no_such_tag"}}, []string{"files-delete_file"}},
		{"allow", Query{Text: "file workspace", Allow: func(n messages.ToolName) bool { return n.Method == "read_file" }}, []string{"files-read_file"}},
		{"exact name filtered out", Query{Text: "files-search", Namespaces: []string{"github"}}, []string{"github-search"}},
		{"blank lists by name", Query{Namespaces: []string{"weather"}}, []string{"weather-current_conditions", "weather-getForecast"}},
		{"only stop words", Query{Text: "the of and"}, nil},
		{"unknown words", Query{Text: "zyzzyva quux"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := names(search(t, ix, tt.q).Hits)
			if !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestSearchAllowCalledOnlyForContenders(t *testing.T) {
	defs := cachedCatalog(1000)
	ix := mustBuild(t, defs)
	calls := 0
	res := search(t, ix, Query{Text: "list user files", PageSize: 5, Allow: func(messages.ToolName) bool { calls++; return true }})
	if len(res.Hits) != 5 {
		t.Fatalf("got %d hits; want 5", len(res.Hits))
	}
	// The probes, then the page and the one more that says whether
	// another page follows, in rank order.
	if want := admissionProbes + 6; calls > want {
		t.Errorf("Allow was called %d times for a page of 5 in 1000 tools, which it all admits; want at most %d", calls, want)
	}
}

// AllowCanonical is given each contender's canonical name, as the index
// holds it, after Allow; what either refuses is not found.
func TestSearchAllowCanonical(t *testing.T) {
	defs := cachedCatalog(1000)
	ix := mustBuild(t, defs)
	q := Query{Text: "list user files", PageSize: 5}
	unfiltered := search(t, ix, q)
	if len(unfiltered.Hits) != 5 {
		t.Fatalf("got %d hits; want 5", len(unfiltered.Hits))
	}
	first, second := unfiltered.Hits[0].Tool, unfiltered.Hits[1].Tool
	allowed, asked := 0, 0
	q.Allow = func(n messages.ToolName) bool {
		allowed++
		return n != first
	}
	q.AllowCanonical = func(n messages.ToolName, canonical string) bool {
		asked++
		if canonical != n.String() {
			t.Errorf("AllowCanonical(%v, %q): the canonical name is %q", n, canonical, n.String())
		}
		if n == first {
			t.Errorf("AllowCanonical asked about %v, which Allow refused", n)
		}
		return n != second
	}
	res := search(t, ix, q)
	if len(res.Hits) != 5 || asked == 0 || allowed < asked {
		t.Fatalf("got %d hits, Allow asked %d times, AllowCanonical %d; want 5 hits, and AllowCanonical asked after Allow", len(res.Hits), allowed, asked)
	}
	for _, h := range res.Hits {
		if h.Tool == first || h.Tool == second {
			t.Errorf("found %v, which a filter refused", h.Tool)
		}
	}
	if res.Hits[0].Tool != unfiltered.Hits[2].Tool {
		t.Errorf("first hit %v; want %v, the best that both filters admit", res.Hits[0].Tool, unfiltered.Hits[2].Tool)
	}
}

func TestSearchPagination(t *testing.T) {
	ix := mustBuild(t, cachedCatalog(1000))
	all := search(t, ix, Query{Text: "create user report", PageSize: 30})
	if len(all.Hits) != 30 || !all.More {
		t.Fatalf("got %d hits, more %v; want 30 and more", len(all.Hits), all.More)
	}
	var paged []Hit
	for page := 0; page < 3; page++ {
		res := search(t, ix, Query{Text: "create user report", Page: page, PageSize: 10})
		if !res.More {
			t.Errorf("page %d says no more hits follow", page)
		}
		paged = append(paged, res.Hits...)
	}
	if !slices.Equal(paged, all.Hits) {
		t.Errorf("three pages of 10 differ from one page of 30:\n%v\n%v", names(paged), names(all.Hits))
	}
	for i := 1; i < len(all.Hits); i++ {
		a, b := all.Hits[i-1], all.Hits[i]
		if a.Score < b.Score || (a.Score == b.Score && a.Tool.String() > b.Tool.String()) {
			t.Errorf("hits %d and %d out of order: %+v, %+v", i-1, i, a, b)
		}
	}
	last := search(t, ix, Query{Text: "create user report", Page: 1000})
	if len(last.Hits) != 0 || last.More {
		t.Errorf("page past the end: got %d hits, more %v", len(last.Hits), last.More)
	}
}

func TestSearchTiesBreakByName(t *testing.T) {
	var defs []messages.ToolDefinition
	for _, m := range []string{"delta", "alpha", "charlie", "bravo"} {
		defs = append(defs, tool("same", m, "Convert a currency amount.", nil))
	}
	ix := mustBuild(t, defs)
	res := search(t, ix, Query{Text: "currency conversion"})
	want := []string{"same-alpha", "same-bravo", "same-charlie", "same-delta"}
	if got := names(res.Hits); !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if res.Hits[0].Score != res.Hits[3].Score || res.Hits[0].Score <= 0 {
		t.Errorf("scores %v and %v should be equal and positive", res.Hits[0].Score, res.Hits[3].Score)
	}
}

func TestSearchCJK(t *testing.T) {
	defs := []messages.ToolDefinition{
		tool("tianqi", "forecast", "查询城市未来几天的天气预报", map[string]string{"city": "城市名称"}),
		tool("ditu", "route", "规划两个地点之间的驾车路线", map[string]string{"from": "出发地点", "to": "目的地"}),
		tool("fanyi", "translate", "把文本翻译成另一种语言", map[string]string{"text": "要翻译的文本"}),
		tool("jp", "train", "東京から大阪までの電車の時刻表を調べる", nil),
		tool("en", "weather", "Weather forecast for a city.", nil),
	}
	ix := mustBuild(t, defs)
	tests := []struct{ query, want string }{
		{"明天北京天气怎么样", "tianqi-forecast"},
		{"天气", "tianqi-forecast"},
		{"从机场到酒店的路线", "ditu-route"},
		{"翻译这段话", "fanyi-translate"},
		{"大阪行きの電車", "jp-train"},
		{"weather 预报", "tianqi-forecast"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res := search(t, ix, Query{Text: tt.query})
			if len(res.Hits) == 0 || res.Hits[0].Tool.String() != tt.want {
				t.Errorf("got %v; want %s first", names(res.Hits), tt.want)
			}
		})
	}
}

func TestSearchRejectsBadPages(t *testing.T) {
	ix := mustBuild(t, testCatalog())
	for _, q := range []Query{{Page: -1}, {PageSize: -1}, {PageSize: MaxPageSize + 1}, {Page: 1 << 30}} {
		if _, err := ix.Search(q); err == nil {
			t.Errorf("Search(page %d, size %d) succeeded", q.Page, q.PageSize)
		}
	}
}

func TestUpsertReplacesAndRemoveDeletes(t *testing.T) {
	ix := mustBuild(t, testCatalog())
	if got := ix.Len(); got != 8 {
		t.Fatalf("Len = %d; want 8", got)
	}
	changed := tool("weather", "getForecast", "Tide tables for a harbour.", nil, "marine")
	if err := ix.Upsert(changed); err != nil {
		t.Fatal(err)
	}
	if got := ix.Len(); got != 8 {
		t.Errorf("Len after replacing = %d; want 8", got)
	}
	if hits := search(t, ix, Query{Text: "next days in a city"}).Hits; slices.ContainsFunc(hits, func(h Hit) bool { return h.Tool.Method == "getForecast" }) {
		t.Errorf("old description and parameters still match: %v", names(hits))
	}
	if hits := search(t, ix, Query{Text: "tide", Tags: []string{"marine"}}).Hits; len(hits) != 1 || hits[0].Tool.Method != "getForecast" {
		t.Errorf("new description does not match: %v", names(hits))
	}
	if n := ix.Remove(changed.ToolName(), messages.ToolName{Namespace: "no", Method: "such"}); n != 1 {
		t.Errorf("Remove = %d; want 1", n)
	}
	if ix.Contains(changed.ToolName()) || ix.Len() != 7 {
		t.Errorf("removed tool still indexed")
	}
	if hits := search(t, ix, Query{Text: "getForecast"}).Hits; len(hits) > 0 {
		t.Errorf("removed tool found: %v", names(hits))
	}
}

func TestUpsertRejectsBadNames(t *testing.T) {
	ix := mustBuild(t, nil)
	bad := []messages.ToolDefinition{
		{Namespace: "has-dash", Method: "m"},
		{Namespace: "ns", Method: "has space"},
		{Namespace: "ns", Method: "m", Name: "ns-other"},
		{Namespace: "ns", Method: strings.Repeat("m", 70)},
	}
	for _, def := range bad {
		if err := ix.Upsert(def); !errors.Is(err, messages.ErrInvalidName) && err == nil {
			t.Errorf("Upsert(%q, %q) succeeded", def.Namespace, def.Method)
		}
	}
	if ix.Len() != 0 {
		t.Errorf("Len = %d after rejected upserts", ix.Len())
	}
	dup := testCatalog()
	dup = append(dup, dup[0])
	if _, err := Build(Config{}, dup); err == nil || !strings.Contains(err.Error(), "github-create_issue") {
		t.Errorf("Build with a duplicate: err = %v", err)
	}
}

// TestIncrementalMatchesRebuild applies random upserts and removals and
// checks that the index answers as one built from scratch from the result.
func TestIncrementalMatchesRebuild(t *testing.T) {
	defs := synthetic.Catalog(300)
	r := rand.New(rand.NewPCG(1, 2))
	ix := mustBuild(t, defs[:150])
	current := map[string]messages.ToolDefinition{}
	for _, d := range defs[:150] {
		current[d.Name] = d
	}
	for step := 0; step < 600; step++ {
		d := defs[r.IntN(len(defs))]
		switch r.IntN(3) {
		case 0:
			ix.Remove(d.ToolName())
			delete(current, d.Name)
		case 1:
			d.Description = defs[r.IntN(len(defs))].Description
			d.Metadata.Tags = []string{fmt.Sprintf("t%d", r.IntN(4))}
			fallthrough
		default:
			if err := ix.Upsert(d); err != nil {
				t.Fatal(err)
			}
			current[d.Name] = d
		}
	}
	var final []messages.ToolDefinition
	for _, d := range current {
		final = append(final, d)
	}
	fresh := mustBuild(t, final)
	decoded, err := Decode(ix.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != fresh.Len() || decoded.Len() != fresh.Len() {
		t.Fatalf("Len: incremental %d, decoded %d, rebuilt %d", ix.Len(), decoded.Len(), fresh.Len())
	}
	for _, q := range synthetic.Queries(defs, 100) {
		for _, query := range []Query{{Text: q, PageSize: 20}, {Text: q, Tags: []string{"t1", "t2"}}} {
			want := search(t, fresh, query)
			for name, got := range map[string]Result{"incremental": search(t, ix, query), "decoded": search(t, decoded, query)} {
				if !sameResult(got, want) {
					t.Fatalf("%s index answers %q with\n%+v\nrebuilt index with\n%+v", name, q, got, want)
				}
			}
		}
	}
}

// sameResult compares results exactly, scores included: a score depends
// only on the indexed tools, never on the order they came in.
func sameResult(a, b Result) bool {
	if a.More != b.More || len(a.Hits) != len(b.Hits) {
		return false
	}
	for i := range a.Hits {
		if a.Hits[i] != b.Hits[i] {
			return false
		}
	}
	return true
}

func TestConcurrentSearchAndUpsert(t *testing.T) {
	defs := synthetic.Catalog(500)
	ix := mustBuild(t, defs)
	queries := synthetic.Queries(defs, 50)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if _, err := ix.Search(Query{Text: queries[(i+w)%len(queries)]}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			d := defs[i%len(defs)]
			if i%3 == 0 {
				ix.Remove(d.ToolName())
				continue
			}
			d.Description += " updated"
			if err := ix.Upsert(d); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		ok     bool
	}{
		{"default", func(*Config) {}, true},
		{"zero k1", func(c *Config) { c.K1 = 0 }, false},
		{"infinite k1", func(c *Config) { c.K1 = math.Inf(1) }, false},
		{"negative delta", func(c *Config) { c.Delta = -1 }, false},
		{"b above 1", func(c *Config) { c.Fields[FieldDescription].B = 1.5 }, false},
		{"negative weight", func(c *Config) { c.Fields[FieldName].Weight = -1 }, false},
		{"all weights zero", func(c *Config) {
			for f := range c.Fields {
				c.Fields[f].Weight = 0
			}
		}, false},
		{"one field only", func(c *Config) {
			for f := range c.Fields {
				c.Fields[f].Weight = 0
			}
			c.Fields[FieldHint].Weight = 1
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if (err == nil) != tt.ok {
				t.Errorf("Validate() = %v; want ok %v", err, tt.ok)
			}
			if _, err := New(c); (err == nil) != tt.ok {
				t.Errorf("New() = %v; want ok %v", err, tt.ok)
			}
		})
	}
}

func TestLengthCode(t *testing.T) {
	prev := uint8(0)
	for n := uint32(0); n < 70000; n++ {
		c := lengthCode(n)
		if c < prev {
			t.Fatalf("lengthCode(%d) = %d after %d: not monotonic", n, c, prev)
		}
		prev = c
		if n < 128 && codeLength(c) != n {
			t.Fatalf("codeLength(lengthCode(%d)) = %d", n, codeLength(c))
		}
		if n >= 128 && n < 32000 {
			if l := codeLength(c); float64(l) < 0.95*float64(n) || float64(l) > 1.05*float64(n) {
				t.Fatalf("codeLength(lengthCode(%d)) = %d: more than 5%% off", n, l)
			}
		}
	}
}

// bruteForce ranks every tool by scoring it alone, without pruning.
func bruteForce(ix *Index, q Query) []Hit {
	s := &searcher{ix: ix, tokens: Tokenize(q.Text)}
	s.lookupTerms()
	f := s.filter(&q)
	var hits []Hit
	for slot := range ix.docs {
		if !ix.docs[slot].live || !f.admits(ix, uint32(slot)) {
			continue
		}
		held := false
		for _, qt := range s.terms {
			if _, ok := slices.BinarySearchFunc(ix.terms[qt.id].postings, uint32(slot), func(p posting, d uint32) int { return int(p.doc) - int(d) }); ok {
				held = true
			}
		}
		if held {
			hits = append(hits, Hit{Tool: ix.docs[slot].name, Score: float64(s.scoreOf(uint32(slot)))})
		}
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Tool.String(), b.Tool.String())
	})
	return hits
}

func TestRankMatchesBruteForce(t *testing.T) {
	defs := synthetic.Catalog(2000)
	ix := mustBuild(t, defs)
	// Churn leaves stale (larger) term bounds behind, which must stay safe.
	for i := 0; i < 300; i++ {
		d := defs[i*5]
		d.Description = defs[i*3+1].Description
		if err := ix.Upsert(d); err != nil {
			t.Fatal(err)
		}
	}
	queries := append(synthetic.Queries(defs, 150), "list user", "get", "the user of a file in a report with a table")
	// Callers' filters: one that refuses a tool in a hundred (its answers
	// are deferred, and a page now and then holds more refusals than the
	// ranking's slack), one in three (asked of each tool from its first
	// refusal on), and nine in ten.
	share := func(n messages.ToolName) uint32 {
		h := fnv.New32a()
		h.Write([]byte(n.String()))
		return h.Sum32() % 100
	}
	fewRefused := func(n messages.ToolName) bool { return share(n) != 0 }
	someRefused := func(n messages.ToolName, _ string) bool { return share(n) >= 33 }
	mostRefused := func(n messages.ToolName) bool { return share(n) < 10 }
	for _, text := range queries {
		for _, q := range []Query{
			{Text: text, PageSize: 1},
			{Text: text},
			{Text: text, PageSize: 100, Page: 1},
			{Text: text, Tags: []string{messages.TagReadOnly}, PageSize: 7},
			{Text: text, Allow: fewRefused},
			{Text: text, Allow: fewRefused, PageSize: 1},
			{Text: text, AllowCanonical: someRefused, PageSize: 3},
			{Text: text, Allow: mostRefused, Page: 1, PageSize: 2},
			{Text: text, Allow: fewRefused, AllowCanonical: someRefused, PageSize: 20},
		} {
			all := bruteForce(ix, q)
			start := min(q.Page*max(q.PageSize, 1), len(all))
			size := q.PageSize
			if size == 0 {
				size = DefaultPageSize
			}
			want := all[start:min(start+size, len(all))]
			got := search(t, ix, q)
			if !slices.Equal(got.Hits, want) && !(len(want) == 0 && len(got.Hits) == 0) {
				t.Fatalf("%q page %d size %d:\ngot  %v\nwant %v", text, q.Page, size, got.Hits, want)
			}
			if got.More != (len(all) > start+size) {
				t.Fatalf("%q: More = %v with %d hits in all", text, got.More, len(all))
			}
		}
	}
}

func TestSearchCJKSingleCharacter(t *testing.T) {
	ix := mustBuild(t, []messages.ToolDefinition{
		tool("shudian", "search", "在网上书店搜索图书", nil),
		tool("yinyue", "play", "播放音乐", nil),
	})
	res := search(t, ix, Query{Text: "书"})
	if len(res.Hits) == 0 || res.Hits[0].Tool.String() != "shudian-search" {
		t.Errorf("got %v; want shudian-search first", names(res.Hits))
	}
}

func TestSearchLongQueryKeepsRarestTerms(t *testing.T) {
	defs := cachedCatalog(1000)
	ix := mustBuild(t, defs)
	// Far more than maxQueryTerms common words, and two rare ones.
	words := synthetic.CommonWords()
	target := tool("rare", "zebra_finder", "Find zebras.", nil)
	if err := ix.Upsert(target); err != nil {
		t.Fatal(err)
	}
	res := search(t, ix, Query{Text: strings.Join(words, " ") + " zebra finder"})
	if len(res.Hits) == 0 || res.Hits[0].Tool.String() != "rare-zebra_finder" {
		t.Errorf("got %v; want the tool of the query's rarest terms first", names(res.Hits[:min(3, len(res.Hits))]))
	}
}

// A caller that admits the tools it is asked about first and refuses the
// best-ranked ones has the ranking done again, asking it of each tool:
// the page is still the one a ranking that asked of each tool makes.
func TestSearchRanksAgainWhenTheBestToolsAreRefused(t *testing.T) {
	defs := synthetic.Catalog(2000)
	ix := mustBuild(t, defs)
	ranAgain := 0
	for _, text := range synthetic.Queries(defs, 100) {
		best := search(t, ix, Query{Text: text, PageSize: 12})
		refused := map[messages.ToolName]bool{}
		for _, h := range best.Hits {
			refused[h.Tool] = true
		}
		var answers []bool
		q := Query{Text: text, PageSize: 5, Allow: func(n messages.ToolName) bool {
			answers = append(answers, !refused[n])
			return !refused[n]
		}}
		want := bruteForce(ix, q)
		got := search(t, ix, q)
		if !slices.Equal(got.Hits, want[:min(5, len(want))]) {
			t.Fatalf("%q:\ngot  %v\nwant %v", text, got.Hits, want[:min(5, len(want))])
		}
		// The probes all admitted, then more answers than the tools the
		// ranking kept: it ranked again.
		probes := answers[:min(admissionProbes, len(answers))]
		if !slices.Contains(probes, false) && len(answers) > admissionProbes+5+1+admissionSlack {
			ranAgain++
		}
	}
	if ranAgain == 0 {
		t.Error("no query's ranking was done again; the test does not cover it")
	}
}
