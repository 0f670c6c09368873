package search

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Learning from use: when an agent searched in a turn and then called a
// tool that a search of that turn returned, the terms of the turn's
// queries up to that search are evidence that they ask for the tool.
// Each principal (an agent, or the user behind agents it names by a
// pattern) keeps one UsageRecord per tool; FoldUsage turns the records of
// a tool into its learned field. The functions here are the whole of the
// rule, shared by the services that record and fold evidence and by the
// measurement that replays it.

// LearnConfig bounds and weighs evidence. The zero LearnConfig means
// DefaultLearnConfig.
type LearnConfig struct {
	// HalfLife is how fast a principal's old evidence fades as it adds
	// new: each weight halves over HalfLife between two uses.
	HalfLife time.Duration
	// MaxRecordTerms is how many terms one principal's record keeps for a
	// tool: the heaviest.
	MaxRecordTerms int
	// MaxTermWeight caps a term's weight in one record, in turns.
	MaxTermWeight float64
	// Saturation is the weight, in turns, at which a principal's term
	// counts half of the most one principal can add (one unit): a term
	// of weight w counts w/(w+Saturation) units.
	Saturation float64
	// UnitCount is the learned count (LearnedTerm.Count) of one unit.
	UnitCount float64
	// MaxUserUnits caps what the agents of one user (UsageRecord.User)
	// add to a term together, in units: a user that may act as any agent
	// matching a pattern cannot outweigh the others by naming more agents.
	MaxUserUnits float64
}

// DefaultLearnConfig returns the rule measured on the development halves
// of the public corpora (see internal/dev/searcheval).
func DefaultLearnConfig() LearnConfig {
	return LearnConfig{
		HalfLife:       14 * 24 * time.Hour,
		MaxRecordTerms: 24,
		MaxTermWeight:  8,
		Saturation:     1,
		UnitCount:      4,
		MaxUserUnits:   2,
	}
}

func (c LearnConfig) withDefaults() LearnConfig {
	if c == (LearnConfig{}) {
		return DefaultLearnConfig()
	}
	return c
}

// MaxUsageTerms bounds the terms a search keeps as evidence: a query
// pasted from a document keeps its first terms.
const MaxUsageTerms = 16

// UsageTerms returns what may be kept of a query as evidence: its terms
// as the index stores them (folded, stemmed, without stop words), each
// once, in order, without those holding a digit (numbers, dates and
// identifiers in a query are data, not what the tool does) and without
// the words of asking ("want", "need", "help", "tell"...), which say
// nothing of any tool, at most MaxUsageTerms. Nothing else of a query is
// kept.
func UsageTerms(query string) []string {
	var out []string
	for _, t := range Tokenize(query) {
		if len(out) == MaxUsageTerms {
			break
		}
		if strings.ContainsAny(t, "0123456789") || slices.Contains(out, t) || isUsageStopWord(t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// TurnSearch is one search of a turn as evidence keeps it: its usage terms
// and the tools of the page it returned.
type TurnSearch struct {
	Terms []string `json:"terms"`
	Tools []string `json:"tools"`
}

// EvidenceTerms returns the terms that calling tool in a turn whose
// searches were searches, in order, is evidence for: those of every search
// up to the last one whose page held the tool, the latest first, at most
// MaxUsageTerms; nil when no search of the turn found the tool.
func EvidenceTerms(searches []TurnSearch, tool string) []string {
	last := -1
	for i, s := range searches {
		if slices.Contains(s.Tools, tool) {
			last = i
		}
	}
	var out []string
	for i := last; i >= 0 && len(out) < MaxUsageTerms; i-- {
		for _, t := range searches[i].Terms {
			if len(out) == MaxUsageTerms {
				break
			}
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// UsageRecord is what one principal's use says of one tool: the weight of
// each term of the queries that found it, in turns, faded over time, and
// how many turns, faded alike.
type UsageRecord struct {
	Terms map[string]float64 `json:"terms"`
	Turns float64            `json:"turns"`
	// At is when the record last changed.
	At time.Time `json:"at"`
	// User names, as an opaque token, the authenticated user whose agent
	// made the record, when there is one: FoldUsage caps what the agents
	// of one user add together. Records without a user are capped alone.
	User string `json:"user,omitempty"`
}

// minWeight drops a term whose weight faded below it.
const minWeight = 0.01

// Add records one turn of evidence of the given weight (1 for a call that
// succeeded, less for weaker evidence) for terms at now: the record's
// weights first fade for the time since it last changed, then each term
// gains weight, up to MaxTermWeight, and only the MaxRecordTerms heaviest
// terms are kept. A weight of 0 or less, or no terms, changes nothing.
func (r *UsageRecord) Add(terms []string, weight float64, now time.Time, c LearnConfig) {
	c = c.withDefaults()
	if !(weight > 0) || len(terms) == 0 {
		return
	}
	weight = min(weight, 1)
	if r.Terms == nil {
		r.Terms = make(map[string]float64, len(terms))
	}
	if !r.At.IsZero() && now.After(r.At) && c.HalfLife > 0 {
		fade := math.Exp2(-float64(now.Sub(r.At)) / float64(c.HalfLife))
		r.Turns *= fade
		for t, w := range r.Terms {
			if w *= fade; w < minWeight {
				delete(r.Terms, t)
			} else {
				r.Terms[t] = w
			}
		}
	}
	seen := make(map[string]bool, len(terms))
	for _, t := range terms {
		if seen[t] || !normalisedTerm(t) {
			continue
		}
		seen[t] = true
		r.Terms[t] = min(r.Terms[t]+weight, c.MaxTermWeight)
	}
	r.Turns += weight
	if len(r.Terms) > c.MaxRecordTerms {
		for _, t := range r.lightest(len(r.Terms) - c.MaxRecordTerms) {
			delete(r.Terms, t)
		}
	}
	if now.After(r.At) {
		r.At = now
	}
}

// lightest returns the n lightest terms, the later term first among equals.
func (r *UsageRecord) lightest(n int) []string {
	terms := slices.Collect(maps.Keys(r.Terms))
	slices.SortFunc(terms, func(a, b string) int {
		if c := cmp.Compare(r.Terms[a], r.Terms[b]); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	return terms[:n]
}

// Learned is a tool's learned field as its evidence makes it: the terms
// (FoldUsage) and how many principals taught them (Teachers), which
// SetLearnedBy takes.
type Learned struct {
	Terms    []LearnedTerm
	Teachers int
}

// Fold returns the learned field the records of one tool make, with its
// teachers.
func Fold(records []UsageRecord, c LearnConfig) Learned {
	return Learned{Terms: FoldUsage(records, c), Teachers: Teachers(records)}
}

// Teachers returns how many principals the records of one tool hold
// evidence of, counted as FoldUsage groups them: the users that records
// name, and each record without one. It suits SetLearnedBy with the field
// FoldUsage makes of the same records.
func Teachers(records []UsageRecord) int {
	users := map[string]bool{}
	n := 0
	for _, r := range records {
		if !teaches(r) {
			continue
		}
		if r.User == "" {
			n++
		} else if !users[r.User] {
			users[r.User] = true
			n++
		}
	}
	return n
}

// teaches reports whether the record holds a term FoldUsage would count.
func teaches(r UsageRecord) bool {
	for t, w := range r.Terms {
		if w > 0 && normalisedTerm(t) {
			return true
		}
	}
	return false
}

// FoldUsage returns the learned field that the records of one tool, one
// per principal (an agent), make: each principal adds to a term at most
// one unit, w/(w+Saturation) of it for a weight of w turns, so a term
// gains strength with the turns that held it and, beyond what one
// principal can add, only with the number of principals; the agents of one
// user add at most MaxUserUnits together. A term's count is its units
// times UnitCount, rounded, at most MaxLearnedCount, and the field keeps
// the MaxLearnedTerms strongest terms. The records' order must not vary
// from one fold to the next (sums of floating-point numbers depend on it).
// The result suits SetLearned.
func FoldUsage(records []UsageRecord, c LearnConfig) []LearnedTerm {
	c = c.withDefaults()
	byUser := map[string]map[string]float64{} // user → term → units
	var users []string
	for i, r := range records {
		user := "\x00" + strconv.Itoa(i) // a record without a user is a group of its own
		if r.User != "" {
			user = r.User
		}
		units := byUser[user]
		if units == nil {
			units = map[string]float64{}
			byUser[user] = units
			users = append(users, user)
		}
		terms := slices.Collect(maps.Keys(r.Terms))
		slices.SortFunc(terms, func(a, b string) int {
			if c := cmp.Compare(r.Terms[b], r.Terms[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		// A record written by another rule counts as one of this rule.
		terms = terms[:min(len(terms), c.MaxRecordTerms)]
		for _, t := range terms {
			w := r.Terms[t]
			if !(w > 0) || !normalisedTerm(t) {
				continue
			}
			w = min(w, c.MaxTermWeight)
			units[t] += w / (w + c.Saturation)
		}
	}
	total := map[string]float64{}
	for _, user := range users {
		for t, u := range byUser[user] {
			total[t] += min(u, c.MaxUserUnits)
		}
	}
	var out []LearnedTerm
	for t, u := range total {
		count := math.Round(u * c.UnitCount)
		if count < 1 {
			continue
		}
		out = append(out, LearnedTerm{Term: t, Count: uint8(min(count, MaxLearnedCount))})
	}
	slices.SortFunc(out, func(a, b LearnedTerm) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Term, b.Term)
	})
	if len(out) > MaxLearnedTerms {
		out = out[:MaxLearnedTerms]
	}
	slices.SortFunc(out, func(a, b LearnedTerm) int { return strings.Compare(a.Term, b.Term) })
	return out
}
