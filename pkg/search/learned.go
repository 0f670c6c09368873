package search

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

// LearnedTerm is one term of a tool's learned field (FieldLearned).
type LearnedTerm struct {
	// Term is a normalised term, as Tokenize makes them.
	Term string
	// Count is how often the field holds the term: how strong the evidence
	// that queries holding it ask for the tool (see FoldUsage).
	Count uint8
}

// Bounds of a learned field: what use can add to a tool's document is
// MaxLearnedTerms terms, each at most MaxLearnedCount times, however much
// evidence there is.
const (
	MaxLearnedTerms = 32
	MaxLearnedCount = 16
)

// SetLearned replaces the learned field of the named tool, indexed or not
// (a tool upserted later gets it), as one principal's teaching (see
// SetLearnedBy), and reports whether it changed. Terms with a zero count
// are left out; an empty list clears the field. Terms are kept sorted, and
// a term listed twice, one that is not a normalised term (empty, longer
// than a word the tokenizer keeps, holding a capital letter, a space or
// punctuation), more than MaxLearnedTerms terms or a count above
// MaxLearnedCount are refused, changing nothing.
func (ix *Index) SetLearned(name messages.ToolName, terms []LearnedTerm) (bool, error) {
	return ix.SetLearnedBy(name, terms, 1)
}

// SetLearnedBy is SetLearned for a field that teachers principals taught
// (Teachers counts them): a taught tool gives way to untaught ones on the
// part of a query its field does not cover, and more so when more than one
// principal taught it (see toolScore). The index keeps the count up to
// MaxTeachers, which is all the ranking tells apart. A count below 1 is
// refused for a field that holds terms.
func (ix *Index) SetLearnedBy(name messages.ToolName, terms []LearnedTerm, teachers int) (bool, error) {
	if err := name.Validate(); err != nil {
		return false, fmt.Errorf("set learned terms: %w", err)
	}
	clean, err := checkLearned(terms)
	if err != nil {
		return false, fmt.Errorf("set learned terms of %s: %w", name, err)
	}
	if len(clean) > 0 && teachers < 1 {
		return false, fmt.Errorf("set learned terms of %s: %d principals taught them; at least one did", name, teachers)
	}
	var by uint8
	if len(clean) > 0 {
		by = uint8(min(teachers, MaxTeachers))
	}
	key := name.String()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := ix.learned[key]
	if slices.Equal(old, clean) && ix.teachers[key] == by {
		return false, nil
	}
	if len(clean) == 0 {
		delete(ix.learned, key)
		delete(ix.teachers, key)
	} else {
		ix.learned[key] = clean
		ix.teachers[key] = by
	}
	if slot, ok := ix.slotOf[key]; ok {
		ix.relearn(slot, old, clean)
		ix.taughtBy.set(slot, by)
		ix.updateNorms()
	}
	return true, nil
}

// MaxTeachers is the most principals an index counts as having taught a
// tool (SetLearnedBy).
const MaxTeachers = 2

// slotTeachers holds, by slot, how many principals taught each tool's
// learned field (SetLearnedBy), for scoring; a slot past its end has 0.
type slotTeachers []uint8

// set records n for slot.
func (st *slotTeachers) set(slot uint32, n uint8) {
	if int(slot) >= len(*st) {
		if n == 0 {
			return
		}
		*st = append(*st, make([]uint8, int(slot)+1-len(*st))...)
	}
	(*st)[slot] = n
}

// at returns what set recorded for slot.
func (st slotTeachers) at(slot uint32) uint8 {
	if int(slot) < len(st) {
		return st[slot]
	}
	return 0
}

// scored returns how many principals taught the learned field in effect
// of the tool in slot, whose learned field's length code is code: 0 when
// none is in effect, at least 1 otherwise.
func (st slotTeachers) scored(slot uint32, code uint8) uint8 {
	if code == 0 {
		return 0
	}
	return max(st.at(slot), 1)
}

// Teachers returns how many principals taught the named tool's learned
// field, up to MaxTeachers; 0 for a tool without one.
func (ix *Index) Teachers(name messages.ToolName) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return int(ix.teachers[name.String()])
}

// Learned returns the learned field of the named tool as SetLearned set
// it, sorted by term; of an index read by Decode, the terms in effect.
func (ix *Index) Learned(name messages.ToolName) []LearnedTerm {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return slices.Clone(ix.learned[name.String()])
}

// EachLearned calls fn with the terms of the learned field in effect of
// every indexed tool that has any (those its definition does not hold),
// and how many principals taught them (Teachers), by canonical name in
// increasing order: what the index answers with, which a fingerprint of it
// must cover. fn must not use the index.
func (ix *Index) EachLearned(fn func(canonical string, terms []LearnedTerm, teachers int)) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var terms []LearnedTerm
	for _, key := range slices.Sorted(maps.Keys(ix.learned)) {
		slot, ok := ix.slotOf[key]
		if !ok {
			continue
		}
		terms = terms[:0]
		for _, lt := range ix.learned[key] {
			if id, ok := ix.termIDs[lt.Term]; ok {
				if i, ok := ix.posting(id, slot); ok && ix.terms[id].postings[i].tf[FieldLearned] != 0 {
					terms = append(terms, lt)
				}
			}
		}
		if len(terms) > 0 {
			fn(key, terms, int(ix.taughtBy.at(slot)))
		}
	}
}

// checkLearned returns terms sorted, without zero counts, or why they
// cannot be a learned field.
func checkLearned(terms []LearnedTerm) ([]LearnedTerm, error) {
	var out []LearnedTerm
	for _, t := range terms {
		if t.Count == 0 {
			continue
		}
		if t.Count > MaxLearnedCount {
			return nil, fmt.Errorf("term %q counts %d; at most %d", t.Term, t.Count, MaxLearnedCount)
		}
		if !normalisedTerm(t.Term) {
			return nil, fmt.Errorf("%q is not a normalised term", t.Term)
		}
		out = append(out, t)
	}
	if len(out) > MaxLearnedTerms {
		return nil, fmt.Errorf("%d terms; at most %d", len(out), MaxLearnedTerms)
	}
	slices.SortFunc(out, func(a, b LearnedTerm) int { return strings.Compare(a.Term, b.Term) })
	for i := 1; i < len(out); i++ {
		if out[i].Term == out[i-1].Term {
			return nil, fmt.Errorf("term %q is listed twice", out[i].Term)
		}
	}
	return out, nil
}

// normalisedTerm reports whether term could be one the tokenizer makes:
// letters in lower case or without case, and digits, within maxTokenBytes.
func normalisedTerm(term string) bool {
	if term == "" || len(term) > maxTokenBytes || !utf8.ValidString(term) {
		return false
	}
	for _, r := range term {
		switch classify(r) {
		case classLower, classCaseless, classDigit, classCJK:
		default:
			return false
		}
	}
	return true
}

// addLearned adds a tool's learned field to its analyzed definition.
func (a *analyzed) addLearned(terms []LearnedTerm) {
	for _, lt := range terms {
		if slices.Contains(a.terms, lt.Term) {
			continue // a term of the definition
		}
		a.terms = append(a.terms, lt.Term)
		var tf termFreqs
		tf[FieldLearned] = lt.Count
		a.freqs = append(a.freqs, tf)
		a.ids = nil // resolved again on insert
	}
}

// relearn edits the postings of the tool in slot from the learned field
// old to terms, leaving its other fields as they are.
func (ix *Index) relearn(slot uint32, old, terms []LearnedTerm) {
	d := &ix.docs[slot]
	var dropped []uint32
	for _, lt := range old {
		id, ok := ix.termIDs[lt.Term]
		if !ok {
			continue
		}
		if i, ok := ix.posting(id, slot); ok {
			tf := ix.terms[id].postings[i].tf
			tf[FieldLearned] = 0
			ix.terms[id].set(i, tf)
			if tf == (termFreqs{}) {
				dropped = append(dropped, id)
			}
		}
	}
	var length uint32
	for _, lt := range terms {
		id := ix.termID(lt.Term)
		var tf termFreqs
		tf[FieldLearned] = lt.Count
		if i, ok := ix.posting(id, slot); ok {
			if ix.terms[id].postings[i].tf != (termFreqs{}) {
				continue // a term of the definition
			}
			ix.terms[id].set(i, tf)
			if i := slices.Index(dropped, id); i >= 0 {
				dropped = slices.Delete(dropped, i, i+1)
			}
		} else {
			ix.terms[id].add(posting{doc: slot, tf: tf})
			d.terms = append(d.terms, id)
		}
		length += uint32(lt.Count)
	}
	for _, id := range dropped {
		ix.dropPosting(id, slot)
		if i := slices.Index(d.terms, id); i >= 0 {
			d.terms = slices.Delete(d.terms, i, i+1)
		}
	}
	ix.totalLen[FieldLearned] = ix.totalLen[FieldLearned] - uint64(d.lens[FieldLearned]) + uint64(length)
	d.lens[FieldLearned] = length
	ix.codes[slot][FieldLearned] = lengthCode(length)
}

// posting returns the index of the posting of term id for slot, and
// whether it has one.
func (ix *Index) posting(id, slot uint32) (int, bool) {
	return slices.BinarySearchFunc(ix.terms[id].postings, slot, func(p posting, slot uint32) int { return int(p.doc) - int(slot) })
}
