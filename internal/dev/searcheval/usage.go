package searcheval

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Part selects queries of a file by a hash of their IDs: "a" or "b" for
// one half, "k/n" for the k-th of n folds and "not-k/n" for the others,
// or "" for all of them. The parts are stable, so that usage can be
// replayed from one part of a corpus and the rest evaluated.
type Part string

// Parts of a query file.
const (
	PartAll Part = ""
	PartA   Part = "a"
	PartB   Part = "b"
)

// maxFolds bounds n in a part "k/n".
const maxFolds = 100

// ParsePart reads a part as a command line gives it.
func ParsePart(s string) (Part, error) {
	p := Part(s)
	if _, _, _, err := p.fold(); err != nil {
		return "", err
	}
	return p, nil
}

// Fold is the part "k/n": the k-th of n folds.
func Fold(k, n int) Part { return Part(fmt.Sprintf("%d/%d", k, n)) }

// Others is the part "not-k/n": every fold but the k-th of n.
func Others(k, n int) Part { return Part(fmt.Sprintf("not-%d/%d", k, n)) }

// fold reads the part as the k-th of n folds (a and b are 1/2 and 2/2,
// all is 1/1), or all but it.
func (p Part) fold() (k, n int, not bool, err error) {
	switch p {
	case PartAll:
		return 1, 1, false, nil
	case PartA:
		return 1, 2, false, nil
	case PartB:
		return 2, 2, false, nil
	}
	s, not := strings.CutPrefix(string(p), "not-")
	ks, ns, ok := strings.Cut(s, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil || n < 2 || n > maxFolds || k < 1 || k > n {
		return 0, 0, false, fmt.Errorf("part %q is none of a, b, k/n and not-k/n (1 <= k <= n, 2 <= n <= %d)", string(p), maxFolds)
	}
	return k, n, not, nil
}

func (p Part) holds(id string) bool {
	k, n, not, err := p.fold()
	if err != nil {
		return false
	}
	return (int(idHash(id)%uint32(n)) == k-1) != not
}

func idHash(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()
}

// Select keeps the corpus's queries of one part.
func (c *Corpus) Select(p Part) {
	c.Queries = slices.DeleteFunc(c.Queries, func(q Query) bool { return !p.holds(q.ID) })
}

// UsageOptions configures Replay.
type UsageOptions struct {
	// File holds the queries replayed as usage, in the corpora's
	// queries.jsonl format; their relevant tools must be in the corpus.
	File string
	// Part selects the half of File replayed.
	Part Part
	// Page is the page size of the replayed searches. Defaults to 10, the
	// page size of tools.discover.
	Page int
	// Learn weighs the evidence. Defaults to search.DefaultLearnConfig().
	Learn search.LearnConfig
	// Checkpoints are the shares of the replay after which the corpus's
	// queries are evaluated: the learning curve. Defaults to 0.1, 0.5, 1.
	Checkpoints []float64
}

// LearningReport holds the figures of a run with usage replayed.
type LearningReport struct {
	// UsageQueries is the number of queries replayed, each as one turn.
	UsageQueries int `json:"usage_queries"`
	// Principals is the number of agents that made them: one per category.
	Principals int `json:"principals"`
	// FoundOnPage is the share of replayed calls whose tool the turn's
	// query put on its page; the others were found by a second search
	// naming the tool, as an agent that searched again would.
	FoundOnPage float64 `json:"found_on_page"`
	// ToolsWithUsage is the number of tools that evidence was recorded for.
	ToolsWithUsage int `json:"tools_with_usage"`
	// Before holds the figures without learning, After with the whole
	// replay learned.
	Before Metrics `json:"before"`
	After  Metrics `json:"after"`
	// Curve holds the figures after each checkpoint of the replay.
	Curve []CurvePoint `json:"curve"`
	// NoUsage holds the figures on the queries none of whose relevant
	// tools (any tool sharing their original name, under lenient
	// scoring) got evidence, before and after learning.
	NoUsage NoUsageReport `json:"no_usage"`
	// LearnedTerms and LearnedCount are the largest learned field: its
	// number of terms, and its highest count.
	LearnedTerms int `json:"learned_terms_max"`
	LearnedCount int `json:"learned_count_max"`
	// EncodedBytesBefore and EncodedBytesAfter are the encoded index's
	// size without and with what was learned.
	EncodedBytesBefore int `json:"encoded_bytes_before"`
	EncodedBytesAfter  int `json:"encoded_bytes_after"`
}

// CurvePoint is the figures after a share of the replay.
type CurvePoint struct {
	Share float64 `json:"share"`
	Metrics
}

// NoUsageReport holds the figures on queries whose tools got no evidence.
type NoUsageReport struct {
	Queries int     `json:"queries"`
	Before  Metrics `json:"before"`
	After   Metrics `json:"after"`
}

// EvaluateWithUsage measures the corpus's queries with cfg, then replays
// the usage file as turns of agents that searched and then called the
// relevant tools, folding the evidence into the index's learned field as
// the indexer does, and measures again at each checkpoint.
//
// Each usage query is a turn of the agent named by its category, in an
// order fixed by a hash of the queries' IDs (files list them by category;
// agents' turns come mixed): the
// agent searches the query (a page of opts.Page tools) and calls each
// relevant tool; a relevant tool the page misses is found by a second
// search naming it, so its evidence is the query's terms and the name's
// (search.EvidenceTerms). The turns are a minute apart, at most a day in
// all.
func (c *Corpus) EvaluateWithUsage(cfg search.Config, opts UsageOptions) (Report, error) {
	r, _, err := c.replay(cfg, opts)
	return r, err
}

// replay is EvaluateWithUsage, which also returns the index it learned.
func (c *Corpus) replay(cfg search.Config, opts UsageOptions) (Report, *search.Index, error) {
	if opts.Page == 0 {
		opts.Page = 10
	}
	if len(opts.Checkpoints) == 0 {
		opts.Checkpoints = []float64{0.1, 0.5, 1}
	}
	usage, err := c.usageTurns(opts.File, opts.Part)
	if err != nil {
		return Report{}, nil, err
	}
	ix, err := search.Build(cfg, c.Tools)
	if err != nil {
		return Report{}, nil, err
	}
	report, err := c.evaluate(ix, 0)
	if err != nil {
		return Report{}, nil, err
	}
	rep := &LearningReport{UsageQueries: len(usage), EncodedBytesBefore: report.EncodedBytes}
	rep.Before = report.metrics()

	u := &usageReplay{
		ix: ix, opts: opts, canonical: c.canonicalNames(),
		records: map[string]map[string]*search.UsageRecord{}, principals: map[string]bool{},
	}
	step := min(time.Minute, 24*time.Hour/time.Duration(len(usage)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := 0
	for i, q := range usage {
		now = now.Add(step)
		if err := u.turn(q, now); err != nil {
			return Report{}, nil, err
		}
		for next < len(opts.Checkpoints) && float64(i+1) >= opts.Checkpoints[next]*float64(len(usage)) {
			r, err := c.evaluate(ix, 0)
			if err != nil {
				return Report{}, nil, err
			}
			rep.Curve = append(rep.Curve, CurvePoint{Share: opts.Checkpoints[next], Metrics: r.metrics()})
			next++
		}
	}
	final, err := c.evaluate(ix, 0)
	if err != nil {
		return Report{}, nil, err
	}
	rep.After = final.metrics()
	rep.Principals = len(u.principals)
	rep.ToolsWithUsage = len(u.records)
	rep.FoundOnPage = float64(u.onPage) / float64(max(u.calls, 1))
	rep.EncodedBytesAfter = final.EncodedBytes
	rep.LearnedTerms, rep.LearnedCount = u.largestLearned()
	if rep.NoUsage, err = c.noUsage(cfg, ix, u.records); err != nil {
		return Report{}, nil, err
	}
	final.Learning = rep
	return final, ix, nil
}

// usageTurns are the queries of a usage file's part, in the order their
// turns are replayed.
func (c *Corpus) usageTurns(file string, part Part) ([]Query, error) {
	usage, err := c.loadUsage(file, part)
	if err != nil {
		return nil, err
	}
	// Files list their queries by category; agents' turns come mixed.
	slices.SortStableFunc(usage, func(a, b Query) int { return cmp.Compare(idHash(a.ID), idHash(b.ID)) })
	if len(usage) == 0 {
		return nil, errors.New("usage: no query to replay")
	}
	return usage, nil
}

// usageReplay is a replay in progress: the index it teaches, the evidence
// recorded so far, and its counts.
type usageReplay struct {
	ix        *search.Index
	opts      UsageOptions
	canonical map[string]string
	// records holds the evidence by tool, then by principal.
	records    map[string]map[string]*search.UsageRecord
	principals map[string]bool
	// calls counts the calls replayed, onPage those whose tool the turn's
	// own search found.
	calls, onPage int
}

// turn replays one usage query: its agent searches it, then calls each of
// its relevant tools, whose evidence is learned at once.
func (u *usageReplay) turn(q Query, now time.Time) error {
	principal := q.Category
	u.principals[principal] = true
	res, err := u.ix.Search(search.Query{Text: q.Text, PageSize: u.opts.Page})
	if err != nil {
		return fmt.Errorf("usage query %q: %w", q.ID, err)
	}
	first := search.TurnSearch{Terms: search.UsageTerms(q.Text), Tools: hitNames(res.Hits)}
	for _, rel := range q.Relevant {
		tool := u.canonical[rel]
		searches, err := u.find(first, tool)
		if err != nil {
			return err
		}
		if err := u.record(tool, principal, searches, now); err != nil {
			return err
		}
	}
	return nil
}

// find is the searches of a turn that led to a call of tool: the turn's
// own, and, when its page missed the tool, a second one naming it.
func (u *usageReplay) find(first search.TurnSearch, tool string) ([]search.TurnSearch, error) {
	searches := []search.TurnSearch{first}
	u.calls++
	if slices.Contains(first.Tools, tool) {
		u.onPage++
		return searches, nil
	}
	again, err := u.ix.Search(search.Query{Text: tool, PageSize: u.opts.Page})
	if err != nil {
		return nil, err
	}
	return append(searches, search.TurnSearch{Terms: search.UsageTerms(tool), Tools: hitNames(again.Hits)}), nil
}

// record adds a call's evidence to the principal's record of the tool,
// and folds the tool's records into its learned field.
func (u *usageReplay) record(tool, principal string, searches []search.TurnSearch, now time.Time) error {
	terms := search.EvidenceTerms(searches, tool)
	byPrincipal := u.records[tool]
	if byPrincipal == nil {
		byPrincipal = map[string]*search.UsageRecord{}
		u.records[tool] = byPrincipal
	}
	r := byPrincipal[principal]
	if r == nil {
		r = &search.UsageRecord{}
		byPrincipal[principal] = r
	}
	r.Add(terms, 1, now, u.opts.Learn)
	return learn(u.ix, tool, byPrincipal, u.opts.Learn)
}

// largestLearned is the size of the largest learned field: its number of
// terms, and its highest count.
func (u *usageReplay) largestLearned() (terms, count int) {
	for tool := range u.records {
		name, _ := messages.ParseToolName(tool)
		learned := u.ix.Learned(name)
		terms = max(terms, len(learned))
		for _, t := range learned {
			count = max(count, int(t.Count))
		}
	}
	return terms, count
}

// noUsage measures, without learning (a new index of cfg) and with ix's,
// the queries none of whose relevant tools, or tools counted as the same,
// got evidence.
func (c *Corpus) noUsage(cfg search.Config, ix *search.Index, records map[string]map[string]*search.UsageRecord) (NoUsageReport, error) {
	used := map[string]bool{}
	for tool := range records {
		used[c.group[tool]] = true
	}
	var untouched []Query
	for _, q := range c.Queries {
		if !slices.ContainsFunc(c.groupsOf(q.Relevant), func(g string) bool { return used[g] }) {
			untouched = append(untouched, q)
		}
	}
	out := NoUsageReport{Queries: len(untouched)}
	if len(untouched) == 0 {
		return out, nil
	}
	sub := *c
	sub.Queries = untouched
	before, err := search.Build(cfg, c.Tools)
	if err != nil {
		return out, err
	}
	b, err := sub.evaluate(before, 0)
	if err != nil {
		return out, err
	}
	a, err := sub.evaluate(ix, 0)
	if err != nil {
		return out, err
	}
	out.Before, out.After = b.metrics(), a.metrics()
	return out, nil
}

// learn folds a tool's records, in the order of their principals, into
// its learned field.
func learn(ix *search.Index, tool string, byPrincipal map[string]*search.UsageRecord, c search.LearnConfig) error {
	var list []search.UsageRecord
	for _, p := range slices.Sorted(maps.Keys(byPrincipal)) {
		list = append(list, *byPrincipal[p])
	}
	name, err := messages.ParseToolName(tool)
	if err != nil {
		return err
	}
	learned := search.Fold(list, c)
	_, err = ix.SetLearnedBy(name, learned.Terms, learned.Teachers)
	return err
}

func hitNames(hits []search.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.String()
	}
	return out
}

// canonicalNames maps corpus names to canonical tool names.
func (c *Corpus) canonicalNames() map[string]string {
	out := make(map[string]string, len(c.corpusName))
	for canonical, name := range c.corpusName {
		out[name] = canonical
	}
	return out
}

// loadUsage reads a usage file's queries of one part, checking that their
// tools are the corpus's.
func (c *Corpus) loadUsage(file string, part Part) ([]Query, error) {
	if file == "" {
		return nil, errors.New("usage: no file")
	}
	canonical := c.canonicalNames()
	var out []Query
	err := readLines(filepath.Clean(file), func(data []byte) error {
		q, err := parseQuery(data)
		if err != nil {
			return err
		}
		for _, r := range q.Relevant {
			if _, ok := canonical[r]; !ok {
				return fmt.Errorf("query %q: relevant tool %q is not in the corpus's tools.jsonl", q.ID, r)
			}
		}
		if part.holds(q.ID) {
			out = append(out, q)
		}
		return nil
	})
	return out, err
}

// FoldsReport holds the figures of a cross-validation: each of n folds of
// the corpus's queries evaluated after the other folds of the usage file
// were replayed, pooled over the folds (each query counts once).
type FoldsReport struct {
	Folds   int `json:"folds"`
	Queries int `json:"queries"`
	// ToolsWithUsage is the mean, over the folds, of the tools that
	// evidence was recorded for.
	ToolsWithUsage float64 `json:"tools_with_usage_mean"`
	Before         Metrics `json:"before"`
	After          Metrics `json:"after"`
	// Taught holds the figures on the queries some of whose relevant
	// tools got evidence, NoUsage those on the others.
	Taught  NoUsageReport `json:"taught"`
	NoUsage NoUsageReport `json:"no_usage"`
}

// EvaluateFolds splits the corpus's queries into n folds by a hash of
// their IDs and, for each, replays the usage file's queries outside that
// fold (opts.Part is ignored) and evaluates those in it. With the usage
// file the corpus's own queries.jsonl, no query evaluated was replayed,
// and the share replayed, (n-1)/n, nears that of a corpus's whole dev half
// replayed before a held-out half is evaluated.
func (c *Corpus) EvaluateFolds(cfg search.Config, n int, opts UsageOptions) (FoldsReport, error) {
	if n < 2 || n > maxFolds {
		return FoldsReport{}, fmt.Errorf("folds %d out of range 2..%d", n, maxFolds)
	}
	out := FoldsReport{Folds: n}
	var before, after, taughtBefore, taughtAfter, plainBefore, plainAfter weighted
	for k := 1; k <= n; k++ {
		fold := *c
		fold.Queries = slices.Clone(c.Queries)
		fold.Select(Fold(k, n))
		if len(fold.Queries) == 0 {
			continue
		}
		opts.Part = Others(k, n)
		r, err := fold.EvaluateWithUsage(cfg, opts)
		if err != nil {
			return FoldsReport{}, fmt.Errorf("fold %d of %d: %w", k, n, err)
		}
		l := r.Learning
		q, nu := len(fold.Queries), l.NoUsage.Queries
		out.Queries += q
		out.ToolsWithUsage += float64(l.ToolsWithUsage) / float64(n)
		before.add(l.Before, q)
		after.add(l.After, q)
		plainBefore.add(l.NoUsage.Before, nu)
		plainAfter.add(l.NoUsage.After, nu)
		// The taught queries' sums are the fold's less its untaught ones'.
		taughtBefore.add(l.Before, q)
		taughtBefore.add(l.NoUsage.Before, -nu)
		taughtAfter.add(l.After, q)
		taughtAfter.add(l.NoUsage.After, -nu)
	}
	out.Before, out.After = before.mean(), after.mean()
	out.NoUsage = NoUsageReport{Queries: plainBefore.n, Before: plainBefore.mean(), After: plainAfter.mean()}
	out.Taught = NoUsageReport{Queries: taughtBefore.n, Before: taughtBefore.mean(), After: taughtAfter.mean()}
	return out, nil
}

// weighted sums figures over queries, for their mean.
type weighted struct {
	sum Metrics
	n   int
}

func (w *weighted) add(m Metrics, queries int) {
	q := float64(queries)
	w.sum.RecallAt1 += m.RecallAt1 * q
	w.sum.RecallAt5 += m.RecallAt5 * q
	w.sum.RecallAt10 += m.RecallAt10 * q
	w.sum.MRRAt10 += m.MRRAt10 * q
	w.sum.NDCGAt10 += m.NDCGAt10 * q
	w.n += queries
}

func (w *weighted) mean() Metrics {
	if w.n == 0 {
		return Metrics{}
	}
	q := float64(w.n)
	return Metrics{RecallAt1: w.sum.RecallAt1 / q, RecallAt5: w.sum.RecallAt5 / q, RecallAt10: w.sum.RecallAt10 / q, MRRAt10: w.sum.MRRAt10 / q, NDCGAt10: w.sum.NDCGAt10 / q}
}
