package search

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// A query keeps, as evidence, its normalised terms only: no stop words,
// no words of asking, nothing holding a digit, each once, at most
// MaxUsageTerms.
func TestUsageTerms(t *testing.T) {
	got := UsageTerms("Could you please help me find the invoices of ACME-4471 for Alice, due 2026-03-01? I want the invoices!")
	want := []string{"find", "invoic", "acm", "alic", "due"}
	if !slices.Equal(got, want) {
		t.Errorf("UsageTerms = %v; want %v", got, want)
	}
	long := strings.Repeat("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo ", 3)
	if n := len(UsageTerms(long)); n != MaxUsageTerms {
		t.Errorf("a long query keeps %d terms; want %d", n, MaxUsageTerms)
	}
	if got := UsageTerms("the 42 of 7"); len(got) != 0 {
		t.Errorf("a query of stop words and numbers keeps %v", got)
	}
}

// A call is evidence for the searches of its turn up to the last one that
// found its tool, and for none when no search found it.
func TestEvidenceTerms(t *testing.T) {
	searches := []TurnSearch{
		{Terms: []string{"show", "pictur"}, Tools: []string{"fs-edit_file"}},
		{Terms: []string{"imag", "viewer"}, Tools: []string{"media-view_image", "fs-edit_file"}},
		{Terms: []string{"weather"}, Tools: []string{"weather-now"}},
	}
	if got, want := EvidenceTerms(searches, "media-view_image"), []string{"imag", "viewer", "show", "pictur"}; !slices.Equal(got, want) {
		t.Errorf("a tool found by a later search: %v; want %v", got, want)
	}
	if got, want := EvidenceTerms(searches, "fs-edit_file"), []string{"imag", "viewer", "show", "pictur"}; !slices.Equal(got, want) {
		t.Errorf("a tool found twice: %v; want %v", got, want)
	}
	if got, want := EvidenceTerms(searches, "weather-now"), []string{"weather", "imag", "viewer", "show", "pictur"}; !slices.Equal(got, want) {
		t.Errorf("the last search's tool: %v; want %v", got, want)
	}
	if got := EvidenceTerms(searches, "mail-send"); got != nil {
		t.Errorf("a tool no search found: %v; want none", got)
	}
	var many []TurnSearch
	for i := range 10 {
		many = append(many, TurnSearch{Terms: []string{fmt.Sprint("a", i), fmt.Sprint("b", i)}, Tools: []string{"x-y"}})
	}
	if got := EvidenceTerms(many, "x-y"); len(got) != MaxUsageTerms || got[0] != "a9" {
		t.Errorf("evidence of many searches: %v; want the latest %d terms", got, MaxUsageTerms)
	}
}

func TestUsageRecordAddFadesAndBounds(t *testing.T) {
	c := DefaultLearnConfig()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var r UsageRecord
	r.Add([]string{"weather", "berlin"}, 1, t0, c)
	for i := range 20 {
		r.Add([]string{"weather"}, 1, t0.Add(time.Duration(i)*time.Minute), c)
	}
	if w := r.Terms["weather"]; w != c.MaxTermWeight {
		t.Errorf("weather weighs %v after 21 turns; want the cap %v", w, c.MaxTermWeight)
	}
	r.Add([]string{"forecast"}, 0.5, t0.Add(c.HalfLife), c)
	if w := r.Terms["berlin"]; w < 0.45 || w > 0.55 {
		t.Errorf("berlin weighs %v a half-life later; want about 0.5", w)
	}
	if w := r.Terms["forecast"]; w != 0.5 {
		t.Errorf("weaker evidence weighs %v; want 0.5", w)
	}
	before := r
	before.Terms = maps.Clone(r.Terms)
	r.Add([]string{"cancelled"}, 0, t0.Add(2*c.HalfLife), c)
	if _, ok := r.Terms["cancelled"]; ok || r.At != before.At {
		t.Error("evidence of weight 0 changed the record")
	}
	var wide UsageRecord
	for i := range 3 * c.MaxRecordTerms {
		wide.Add([]string{fmt.Sprint("term", i)}, 1, t0, c)
	}
	wide.Add([]string{"term0"}, 1, t0, c)
	if len(wide.Terms) != c.MaxRecordTerms || wide.Terms["term0"] != 2 {
		t.Errorf("a record holds %d terms (term0 %v); want %d, the heaviest kept", len(wide.Terms), wide.Terms["term0"], c.MaxRecordTerms)
	}
	r.Add([]string{"Not Normal", ""}, 1, t0, c)
	if _, ok := r.Terms["Not Normal"]; ok {
		t.Error("a term that no query makes was recorded")
	}
}

func countOf(terms []LearnedTerm, term string) int {
	for _, lt := range terms {
		if lt.Term == term {
			return int(lt.Count)
		}
	}
	return 0
}

// One agent adds at most one unit to a term however many turns it makes;
// the agents of one user at most MaxUserUnits; more users add more, up to
// MaxLearnedCount.
func TestFoldUsageBoundsEachContributor(t *testing.T) {
	c := DefaultLearnConfig()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	agent := func(user string, turns int) UsageRecord {
		var r UsageRecord
		for i := range turns {
			r.Add([]string{"poison"}, 1, t0.Add(time.Duration(i)*time.Second), c)
		}
		r.User = user
		return r
	}
	one := FoldUsage([]UsageRecord{agent("mallory", 10_000)}, c)
	if n := countOf(one, "poison"); n < 1 || float64(n) > c.UnitCount {
		t.Errorf("one agent's 10,000 turns count %d; want at most one unit, %v", n, c.UnitCount)
	}
	var sybils []UsageRecord
	for range 500 {
		sybils = append(sybils, agent("mallory", 100))
	}
	if n := countOf(FoldUsage(sybils, c), "poison"); float64(n) > c.MaxUserUnits*c.UnitCount {
		t.Errorf("500 agents of one user count %d; want at most %v", n, c.MaxUserUnits*c.UnitCount)
	}
	var crowd []UsageRecord
	for i := range 500 {
		crowd = append(crowd, agent(fmt.Sprint("user", i), 100))
	}
	if n := countOf(FoldUsage(crowd, c), "poison"); n != MaxLearnedCount {
		t.Errorf("500 users count %d; want the cap %d", n, MaxLearnedCount)
	}
	// Records without a user are capped each on its own.
	var anonymous []UsageRecord
	for range 3 {
		anonymous = append(anonymous, agent("", 100))
	}
	if a, b := countOf(FoldUsage(anonymous, c), "poison"), countOf(FoldUsage(anonymous[:1], c), "poison"); a <= b {
		t.Errorf("three agents without users count %d, one %d", a, b)
	}
}

func TestFoldUsageKeepsTheStrongestTerms(t *testing.T) {
	c := DefaultLearnConfig()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var records []UsageRecord
	for a := range 3 {
		var r UsageRecord
		for i := range 2 * MaxLearnedTerms {
			// term i gets i+1 turns of this agent, capped by the record's size.
			for range i%c.MaxRecordTerms + 1 {
				r.Add([]string{fmt.Sprintf("term%02d", i)}, 1, t0, c)
			}
		}
		r.User = fmt.Sprint("u", a)
		records = append(records, r)
	}
	got := FoldUsage(records, c)
	if len(got) > MaxLearnedTerms {
		t.Fatalf("%d learned terms; want at most %d", len(got), MaxLearnedTerms)
	}
	if !slices.IsSortedFunc(got, func(a, b LearnedTerm) int { return strings.Compare(a.Term, b.Term) }) {
		t.Error("learned terms are not sorted")
	}
	ix := mustBuild(t, testCatalog())
	if _, err := ix.SetLearned(testCatalog()[0].ToolName(), got); err != nil {
		t.Errorf("SetLearned refuses what FoldUsage makes: %v", err)
	}
	if again := FoldUsage(records, c); !slices.Equal(again, got) {
		t.Error("folding the same records twice differs")
	}
}
