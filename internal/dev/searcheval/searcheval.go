// Package searcheval measures how well discovery finds the right tool: it
// loads a tool-retrieval corpus, indexes its tools with pkg/search, runs
// its queries and scores the rankings.
//
// A corpus directory holds two JSON Lines files. tools.jsonl has one tool a
// line: {"name", "description", "parameters" (a JSON Schema), and optionally
// "original_name", "title" or "name_for_human", "namespace"}. queries.jsonl
// has one query a line: {"id", "query", "relevant": [tool names],
// "relevant_original", "category"}.
//
// When tools carry original_name, scoring is lenient: tools that share an
// original name count as one tool, and repeats of it in a ranking collapse
// to their first occurrence.
package searcheval

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Report holds the figures of one run.
type Report struct {
	Tools   int `json:"tools"`
	Queries int `json:"queries"`
	// Recall at k is the share of a query's relevant tools found in the
	// first k hits, averaged over queries.
	RecallAt1  float64 `json:"recall_at_1"`
	RecallAt5  float64 `json:"recall_at_5"`
	RecallAt10 float64 `json:"recall_at_10"`
	// MRRAt10 is the mean reciprocal rank of the first relevant hit, 0 when
	// none is in the first 10.
	MRRAt10 float64 `json:"mrr_at_10"`
	// NDCGAt10 is the normalised discounted cumulative gain with binary gains.
	NDCGAt10 float64 `json:"ndcg_at_10"`
	// BuildMS is the time to build the index, in milliseconds.
	BuildMS float64 `json:"build_ms"`
	// QueryP50US and QueryP99US are percentiles of the time one search
	// takes, in microseconds, run one at a time.
	QueryP50US float64 `json:"query_p50_us"`
	QueryP99US float64 `json:"query_p99_us"`
	// Lenient is true when the figures above use lenient scoring.
	Lenient bool `json:"lenient"`
	// Strict holds the figures without lenient scoring, when Lenient is true.
	Strict *Metrics `json:"strict,omitempty"`
	// EncodedBytes is the size of the encoded index.
	EncodedBytes int `json:"encoded_bytes"`
	// Learning holds the figures of learning from replayed usage, when
	// usage was replayed (EvaluateWithUsage); the figures above are then
	// those after the whole replay.
	Learning *LearningReport `json:"learning,omitempty"`
}

// metrics returns the report's main figures.
func (r Report) metrics() Metrics {
	return Metrics{RecallAt1: r.RecallAt1, RecallAt5: r.RecallAt5, RecallAt10: r.RecallAt10, MRRAt10: r.MRRAt10, NDCGAt10: r.NDCGAt10}
}

// Metrics are ranking-quality figures averaged over queries.
type Metrics struct {
	RecallAt1  float64 `json:"recall_at_1"`
	RecallAt5  float64 `json:"recall_at_5"`
	RecallAt10 float64 `json:"recall_at_10"`
	MRRAt10    float64 `json:"mrr_at_10"`
	NDCGAt10   float64 `json:"ndcg_at_10"`
}

// Run evaluates the default search configuration on the corpus in dir.
func Run(dir string) (Report, error) {
	c, err := Load(dir)
	if err != nil {
		return Report{}, err
	}
	return c.Evaluate(search.DefaultConfig())
}

// Corpus is a loaded corpus, mapped to tool definitions.
type Corpus struct {
	Tools   []messages.ToolDefinition
	Queries []Query
	// group maps a tool's canonical name to the corpus name it counts as:
	// its original name under lenient scoring, else its own name.
	group map[string]string
	// corpusName maps a canonical name back to the tool's corpus name.
	corpusName map[string]string
	// groupOfCorpusName maps a corpus name to its group.
	groupOfCorpusName map[string]string
	lenient           bool
}

// Query is one corpus query.
type Query struct {
	ID       string
	Text     string
	Category string
	// Relevant holds the corpus names of the relevant tools.
	Relevant []string
}

type corpusTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Parameters   json.RawMessage `json:"parameters"`
	OriginalName string          `json:"original_name"`
	Title        string          `json:"title"`
	NameForHuman string          `json:"name_for_human"`
	Namespace    string          `json:"namespace"`
}

type corpusQuery struct {
	ID               string   `json:"id"`
	Query            string   `json:"query"`
	Relevant         []string `json:"relevant"`
	RelevantOriginal []string `json:"relevant_original"`
	Category         string   `json:"category"`
}

// defaultNamespace holds the tools that name none.
const defaultNamespace = "eval"

// Load reads the corpus in dir and maps its tools to valid tool
// definitions. The tools of the corpora in also join the catalog (a
// catalog that holds several corpora's tools, whose queries.jsonl can be
// replayed as usage); only dir's queries are evaluated. A tool name that
// two corpora share is refused.
func Load(dir string, also ...string) (*Corpus, error) {
	c := &Corpus{group: make(map[string]string), corpusName: make(map[string]string)}
	byCorpusName := make(map[string]string) // corpus name → canonical name
	taken := make(map[string]bool)
	for _, d := range append([]string{dir}, also...) {
		if err := c.readTools(filepath.Join(d, "tools.jsonl"), byCorpusName, taken); err != nil {
			return nil, err
		}
	}
	c.groupOfCorpusName = make(map[string]string, len(c.corpusName))
	for canonical, corpusName := range c.corpusName {
		if !c.lenient {
			c.group[canonical] = corpusName
		}
		c.groupOfCorpusName[corpusName] = c.group[canonical]
	}
	err := readLines(filepath.Join(dir, "queries.jsonl"), func(data []byte) error {
		q, err := parseQuery(data)
		if err != nil {
			return err
		}
		for _, r := range q.Relevant {
			if _, ok := byCorpusName[r]; !ok {
				return fmt.Errorf("query %q: relevant tool %q is not in tools.jsonl", q.ID, r)
			}
		}
		c.Queries = append(c.Queries, q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// readTools adds the tools of a tools.jsonl file to the corpus.
func (c *Corpus) readTools(path string, byCorpusName map[string]string, taken map[string]bool) error {
	return readLines(path, func(data []byte) error {
		var t corpusTool
		if err := json.Unmarshal(data, &t); err != nil {
			return err
		}
		if t.Name == "" {
			return errors.New(`tool has no "name"`)
		}
		if _, dup := byCorpusName[t.Name]; dup {
			return fmt.Errorf("tool %q listed twice", t.Name)
		}
		ns := sanitize(t.Namespace, messages.MaxNamespaceLength, false)
		if ns == "" {
			ns = defaultNamespace
		}
		name := messages.ToolName{Namespace: ns, Method: uniqueMethod(ns, t.Name, taken)}
		original := t.Name
		if t.OriginalName != "" {
			original = t.OriginalName
			c.lenient = true
		}
		def := messages.ToolDefinition{
			Name:        name.String(),
			Namespace:   name.Namespace,
			Method:      name.Method,
			Title:       cmpOr(t.Title, t.NameForHuman),
			Description: t.Description,
			InputSchema: messages.JSON(t.Parameters),
			Source:      messages.ToolSource{Kind: messages.SourceBuiltin},
		}
		if original != name.Method {
			def.OriginalName = original
		}
		if string(t.Parameters) == "null" {
			def.InputSchema = nil
		}
		c.Tools = append(c.Tools, def)
		byCorpusName[t.Name] = name.String()
		c.corpusName[name.String()] = t.Name
		c.group[name.String()] = original
		return nil
	})
}

// parseQuery reads one line of a queries.jsonl file.
func parseQuery(data []byte) (Query, error) {
	var q corpusQuery
	if err := json.Unmarshal(data, &q); err != nil {
		return Query{}, err
	}
	if q.ID == "" {
		return Query{}, errors.New(`query has no "id"`)
	}
	if len(q.Relevant) == 0 {
		return Query{}, fmt.Errorf("query %q lists no relevant tool", q.ID)
	}
	return Query{ID: q.ID, Text: q.Query, Category: q.Category, Relevant: q.Relevant}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func readLines(path string, fn func(data []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read corpus: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for line := 1; sc.Scan(); line++ {
		data := sc.Bytes()
		if len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		if err := fn(data); err != nil {
			return fmt.Errorf("read corpus: %s line %d: %w", path, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read corpus: %s: %w", path, err)
	}
	return nil
}

// sanitize keeps letters, digits and '_' of s (and '-' when dash is true),
// replacing runs of anything else with one '_', and cuts it to limit bytes.
func sanitize(s string, limit int, dash bool) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		ok := r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || dash && r == '-')
		if !ok {
			if !under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = true
			continue
		}
		b.WriteRune(r)
		under = r == '_'
	}
	out := strings.TrimRight(b.String(), "_")
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// uniqueMethod returns a method for corpusName that is valid in ns and not
// yet taken.
func uniqueMethod(ns, corpusName string, taken map[string]bool) string {
	room := messages.MaxToolNameLength - len(ns) - 1
	base := sanitize(corpusName, room, true)
	if base == "" {
		base = "tool"
	}
	method := base
	for n := 2; taken[ns+"-"+method]; n++ {
		suffix := "_" + strconv.Itoa(n)
		method = base[:min(len(base), room-len(suffix))] + suffix
	}
	taken[ns+"-"+method] = true
	return method
}

// lenientDepth is how many hits a query asks for under lenient scoring,
// which collapses repeats: more than 10 to fill 10 distinct places.
const lenientDepth = 50

// Evaluate indexes the corpus with cfg, runs every query and scores it.
func (c *Corpus) Evaluate(cfg search.Config) (Report, error) {
	start := time.Now()
	ix, err := search.Build(cfg, c.Tools)
	if err != nil {
		return Report{}, err
	}
	return c.evaluate(ix, time.Since(start))
}

// evaluate runs every query on ix, which took build to build, and scores it.
func (c *Corpus) evaluate(ix *search.Index, build time.Duration) (Report, error) {
	var lenient, strict sums
	depth := 10
	if c.lenient {
		depth = lenientDepth
	}
	durations := make([]time.Duration, 0, len(c.Queries))
	ranked := make([]string, 0, depth)
	for _, q := range c.Queries {
		t0 := time.Now()
		res, err := ix.Search(search.Query{Text: q.Text, PageSize: depth})
		durations = append(durations, time.Since(t0))
		if err != nil {
			return Report{}, fmt.Errorf("query %q: %w", q.ID, err)
		}
		ranked = ranked[:0]
		for _, h := range res.Hits {
			ranked = append(ranked, h.Tool.String())
		}
		strict.add(score(q.Relevant, c.corpusNames(ranked)))
		if c.lenient {
			lenient.add(score(c.groupsOf(q.Relevant), c.groups(ranked)))
		}
	}

	r := Report{
		Tools:        len(c.Tools),
		Queries:      len(c.Queries),
		BuildMS:      float64(build.Microseconds()) / 1000,
		QueryP50US:   percentile(durations, 0.50),
		QueryP99US:   percentile(durations, 0.99),
		Lenient:      c.lenient,
		EncodedBytes: len(ix.Encode()),
	}
	main := strict.mean()
	if c.lenient {
		main = lenient.mean()
		s := strict.mean()
		r.Strict = &s
	}
	r.RecallAt1, r.RecallAt5, r.RecallAt10 = main.RecallAt1, main.RecallAt5, main.RecallAt10
	r.MRRAt10, r.NDCGAt10 = main.MRRAt10, main.NDCGAt10
	return r, nil
}

func (c *Corpus) corpusNames(canonical []string) []string {
	out := make([]string, len(canonical))
	for i, n := range canonical {
		out[i] = c.corpusName[n]
	}
	return out
}

// groups maps a ranking to lenient groups, keeping each group's first place.
func (c *Corpus) groups(canonical []string) []string {
	out := make([]string, 0, len(canonical))
	for _, n := range canonical {
		g := c.group[n]
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

func (c *Corpus) groupsOf(corpusNames []string) []string {
	var out []string
	for _, n := range corpusNames {
		if g := c.groupOfCorpusName[n]; !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// score computes the metrics of one ranking against the relevant names.
func score(relevant, ranked []string) Metrics {
	var m Metrics
	found := 0
	dcg := 0.0
	for i := 0; i < len(ranked) && i < 10; i++ {
		if !slices.Contains(relevant, ranked[i]) {
			continue
		}
		found++
		if m.MRRAt10 == 0 {
			m.MRRAt10 = 1 / float64(i+1)
		}
		dcg += 1 / math.Log2(float64(i+2))
		if i < 1 {
			m.RecallAt1++
		}
		if i < 5 {
			m.RecallAt5++
		}
		m.RecallAt10++
	}
	n := float64(len(relevant))
	m.RecallAt1 /= n
	m.RecallAt5 /= n
	m.RecallAt10 /= n
	ideal := 0.0
	for i := 0; i < len(relevant) && i < 10; i++ {
		ideal += 1 / math.Log2(float64(i+2))
	}
	m.NDCGAt10 = dcg / ideal
	return m
}

type sums struct {
	total Metrics
	n     int
}

func (s *sums) add(m Metrics) {
	s.total.RecallAt1 += m.RecallAt1
	s.total.RecallAt5 += m.RecallAt5
	s.total.RecallAt10 += m.RecallAt10
	s.total.MRRAt10 += m.MRRAt10
	s.total.NDCGAt10 += m.NDCGAt10
	s.n++
}

func (s *sums) mean() Metrics {
	if s.n == 0 {
		return Metrics{}
	}
	n := float64(s.n)
	return Metrics{
		RecallAt1:  s.total.RecallAt1 / n,
		RecallAt5:  s.total.RecallAt5 / n,
		RecallAt10: s.total.RecallAt10 / n,
		MRRAt10:    s.total.MRRAt10 / n,
		NDCGAt10:   s.total.NDCGAt10 / n,
	}
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sorted := slices.Clone(d)
	slices.Sort(sorted)
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Nanoseconds()) / 1000
}
