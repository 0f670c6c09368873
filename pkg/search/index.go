package search

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/pkg/messages"
)

// FieldParams tunes how one field contributes to a tool's score.
type FieldParams struct {
	// Weight multiplies the field's term frequencies; 0 ignores the field.
	Weight float64
	// B is the field's length normalisation, from 0 (a match counts the same
	// in a long field as in a short one) to 1 (fully relative to the
	// field's average length).
	B float64
}

// Config holds the BM25F parameters of an index. The zero Config means
// DefaultConfig.
type Config struct {
	// K1 is the term-frequency saturation: how quickly further occurrences
	// of a query term stop adding to the score.
	K1 float64
	// Delta is the BM25+ lower bound that every query term a tool holds adds,
	// however long its fields, in units of the term's IDF.
	Delta float64
	// Fields holds the parameters of each Field, indexed by it.
	Fields [NumFields]FieldParams
}

// DefaultConfig returns the parameters measured best on the public
// tool-retrieval corpora (see internal/dev/searcheval).
func DefaultConfig() Config {
	var c Config
	c.K1 = 1.5
	c.Delta = 0.5
	c.Fields[FieldName] = FieldParams{Weight: 3, B: 0.5}
	c.Fields[FieldNamespace] = FieldParams{Weight: 1, B: 0.5}
	c.Fields[FieldDescription] = FieldParams{Weight: 1, B: 0.75}
	c.Fields[FieldParamName] = FieldParams{Weight: 1, B: 0.75}
	c.Fields[FieldParamDescription] = FieldParams{Weight: 0.5, B: 0.75}
	c.Fields[FieldTag] = FieldParams{Weight: 1.5, B: 0.5}
	c.Fields[FieldHint] = FieldParams{Weight: 2, B: 0.5}
	// A learned count is a quarter of one principal's full evidence (see
	// LearnConfig.UnitCount); its length says nothing of the tool.
	c.Fields[FieldLearned] = FieldParams{Weight: 0.5, B: 0}
	return c
}

// Validate reports the first parameter out of range.
func (c Config) Validate() error {
	if !(c.K1 > 0) || math.IsInf(c.K1, 0) {
		return fmt.Errorf("search config: K1 is %v; want a finite number above 0", c.K1)
	}
	if !(c.Delta >= 0) || math.IsInf(c.Delta, 0) {
		return fmt.Errorf("search config: Delta is %v; want a finite number of at least 0", c.Delta)
	}
	any := false
	for f, p := range c.Fields {
		if !(p.Weight >= 0) || math.IsInf(p.Weight, 0) {
			return fmt.Errorf("search config: weight of field %s is %v; want a finite number of at least 0", Field(f), p.Weight)
		}
		if !(p.B >= 0 && p.B <= 1) {
			return fmt.Errorf("search config: B of field %s is %v; want a number from 0 to 1", Field(f), p.B)
		}
		any = any || p.Weight > 0
	}
	if !any {
		return errors.New("search config: every field weight is 0")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c == (Config{}) {
		return DefaultConfig()
	}
	return c
}

// Index is a BM25F index of tool definitions keyed by canonical name.
//
// An Index is safe for concurrent use. Searches share a read lock. Upsert
// tokenizes outside the lock and, like Remove, holds the write lock only
// while it edits posting lists in place, tens of microseconds per tool, so
// searches never wait on analysis. To replace a whole index (a rebuild, or
// a newer encoded index), build or decode the new one aside and swap a
// pointer to it (e.g. an atomic.Pointer[Index]): searches on the old one
// finish undisturbed.
//
// The zero Index is not usable; get one from New, Build or Decode.
type Index struct {
	mu  sync.RWMutex
	cfg Config

	termIDs   map[string]uint32
	terms     []termEntry
	freeTerms []uint32

	docs []docEntry // by slot; a slot of a removed tool is free for reuse
	// codes holds each slot's field length codes, apart from docs so that
	// scoring reads 8 bytes a tool.
	codes    [][NumFields]uint8
	freeDocs []uint32
	slotOf   map[string]uint32   // canonical name → slot
	exact    map[string][]uint32 // lower-cased canonical name, method or original name → slots
	live     int

	namespaceIDs map[string]uint32
	namespaces   []string
	tagIDs       map[string]uint32
	tags         []string

	// learned holds each tool's learned field by canonical name, for tools
	// not indexed too, so that a tool upserted again keeps what use taught.
	learned map[string][]LearnedTerm
	// teachers holds, by canonical name alike, how many principals taught
	// each learned field (SetLearnedBy).
	teachers map[string]uint8
	// taughtBy holds the same by slot, for scoring (apart from docs, as
	// codes is); a slot past its end, or a free one, has 0.
	taughtBy slotTeachers

	totalLen [NumFields]uint64
	// norm[f][code] is Weight/(1-B+B*length/average) of field f for a
	// length whose lengthCode is code; it changes with the averages.
	norm [NumFields][256]float32
}

type termEntry struct {
	text     string
	postings []posting // sorted by doc
	// maxTF bounds the term's frequency in each field over its postings; a
	// removal leaves it as it was, still a bound. Searches derive from it
	// the most a term can add to a score, to skip tools that cannot make
	// the page.
	maxTF termFreqs
	// learned counts the postings that hold the term in FieldLearned, and
	// so in no other field: a term of a definition is never learned.
	learned uint32
}

func (t *termEntry) add(p posting) {
	t.postings = insertPosting(t.postings, p)
	t.raiseMax(p.tf)
	if p.tf[FieldLearned] != 0 {
		t.learned++
	}
}

// set changes the frequencies of posting i.
func (t *termEntry) set(i int, tf termFreqs) {
	p := &t.postings[i]
	switch old, now := p.tf[FieldLearned] != 0, tf[FieldLearned] != 0; {
	case now && !old:
		t.learned++
	case old && !now:
		t.learned--
	}
	p.tf = tf
	t.raiseMax(tf)
}

// remove drops the posting of doc, if the term has one.
func (t *termEntry) remove(doc uint32) {
	i := sort.Search(len(t.postings), func(i int) bool { return t.postings[i].doc >= doc })
	if i < len(t.postings) && t.postings[i].doc == doc {
		if t.postings[i].tf[FieldLearned] != 0 {
			t.learned--
		}
		t.postings = append(t.postings[:i], t.postings[i+1:]...)
	}
}

// df is the term's document frequency for its IDF: the number of tools
// whose definitions hold it, so that learning leaves the weight of a
// definition's words as it was; for a term that only learned fields hold,
// the number of tools that learned it.
func (t *termEntry) df() float64 {
	if n := len(t.postings) - int(t.learned); n > 0 {
		return float64(n)
	}
	return float64(len(t.postings))
}

func (t *termEntry) raiseMax(tf termFreqs) {
	for f, n := range tf {
		t.maxTF[f] = max(t.maxTF[f], n)
	}
}

type posting struct {
	doc uint32
	tf  termFreqs
}

type docEntry struct {
	live      bool
	name      messages.ToolName
	canonical string
	original  string
	namespace uint32
	tags      []uint32 // sorted
	terms     []uint32
	lens      [NumFields]uint32
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ix := &Index{
		cfg:          cfg,
		termIDs:      make(map[string]uint32),
		slotOf:       make(map[string]uint32),
		exact:        make(map[string][]uint32),
		namespaceIDs: make(map[string]uint32),
		tagIDs:       make(map[string]uint32),
		learned:      make(map[string][]LearnedTerm),
		teachers:     make(map[string]uint8),
	}
	ix.updateNorms()
	return ix, nil
}

// Build returns an index of defs, tokenizing them on every CPU. Two
// definitions with one canonical name are an error.
func Build(cfg Config, defs []messages.ToolDefinition) (*Index, error) {
	ix, err := New(cfg)
	if err != nil {
		return nil, err
	}
	docs, err := analyzeAll(defs)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(docs, func(a, b analyzed) int { return strings.Compare(a.canonical, b.canonical) })
	for i := 1; i < len(docs); i++ {
		if docs[i].name == docs[i-1].name {
			return nil, fmt.Errorf("build search index: tool %q defined twice", docs[i].name)
		}
	}
	ix.docs = make([]docEntry, 0, len(docs))
	ix.codes = make([][NumFields]uint8, 0, len(docs))
	// Resolving every term first sizes each posting list once, instead of
	// growing it by copies.
	var df []int
	for i := range docs {
		a := &docs[i]
		a.ids = make([]uint32, len(a.terms))
		for j, term := range a.terms {
			id := ix.termID(term)
			a.ids[j] = id
			if int(id) >= len(df) {
				df = append(df, make([]int, int(id)+1-len(df))...)
			}
			df[id]++
		}
	}
	for id, n := range df {
		ix.terms[id].postings = make([]posting, 0, n)
	}
	for i := range docs {
		ix.insert(&docs[i])
	}
	ix.updateNorms()
	return ix, nil
}

func analyzeAll(defs []messages.ToolDefinition) ([]analyzed, error) {
	for i := range defs {
		if err := checkDefinition(&defs[i]); err != nil {
			return nil, err
		}
	}
	out := make([]analyzed, len(defs))
	workers := min(runtime.GOMAXPROCS(0), len(defs)/64+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			a := newAnalyzer()
			for i := w; i < len(defs); i += workers {
				out[i] = a.analyze(&defs[i])
			}
		})
	}
	wg.Wait()
	return out, nil
}

func checkDefinition(def *messages.ToolDefinition) error {
	name := def.ToolName()
	if err := name.Validate(); err != nil {
		return fmt.Errorf("index tool: %w", err)
	}
	if def.Name != "" && def.Name != name.String() {
		return fmt.Errorf("index tool: name %q does not match namespace %q and method %q", def.Name, def.Namespace, def.Method)
	}
	return nil
}

// Upsert adds the tools, replacing those already indexed under the same
// canonical names. It fails without changing the index when a definition
// has an invalid name. The tools are tokenized before any lock is taken and
// applied a few at a time, so a large batch does not hold up searches; a
// search meanwhile sees some of the batch.
func (ix *Index) Upsert(defs ...messages.ToolDefinition) error {
	docs := make([]analyzed, len(defs))
	a := newAnalyzer()
	for i := range defs {
		if err := checkDefinition(&defs[i]); err != nil {
			return err
		}
		docs[i] = a.analyze(&defs[i])
	}
	const chunk = 32
	for len(docs) > 0 {
		n := min(chunk, len(docs))
		ix.apply(docs[:n])
		docs = docs[n:]
	}
	return nil
}

func (ix *Index) apply(docs []analyzed) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range docs {
		if terms := ix.learned[docs[i].canonical]; terms != nil {
			docs[i].addLearned(terms)
		}
		if slot, ok := ix.slotOf[docs[i].canonical]; ok {
			ix.replace(slot, &docs[i])
		} else {
			ix.insert(&docs[i])
		}
		ix.taughtBy.set(ix.slotOf[docs[i].canonical], ix.teachers[docs[i].canonical])
	}
	ix.updateNorms()
}

// Remove deletes the named tools and returns how many of them were
// indexed. Their learned fields are kept for when they come back.
func (ix *Index) Remove(names ...messages.ToolName) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for _, name := range names {
		if slot, ok := ix.slotOf[name.String()]; ok {
			ix.remove(slot)
			n++
		}
	}
	if n > 0 {
		ix.updateNorms()
	}
	return n
}

// Len returns the number of indexed tools.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.live
}

// Config returns the index's parameters.
func (ix *Index) Config() Config { return ix.cfg }

// Contains reports whether the tool is indexed.
func (ix *Index) Contains(name messages.ToolName) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.slotOf[name.String()]
	return ok
}

func (ix *Index) insert(a *analyzed) {
	var slot uint32
	if n := len(ix.freeDocs); n > 0 {
		slot = ix.freeDocs[n-1]
		ix.freeDocs = ix.freeDocs[:n-1]
	} else {
		slot = uint32(len(ix.docs))
		ix.docs = append(ix.docs, docEntry{})
		ix.codes = append(ix.codes, [NumFields]uint8{})
	}
	d := &ix.docs[slot]
	*d = docEntry{
		live:      true,
		name:      a.name,
		canonical: a.canonical,
		original:  a.original,
		namespace: intern(a.name.Namespace, ix.namespaceIDs, &ix.namespaces),
		terms:     a.ids,
	}
	for _, tag := range a.tags {
		d.tags = append(d.tags, intern(tag, ix.tagIDs, &ix.tags))
	}
	sortIDs(d.tags)
	if d.terms == nil {
		d.terms = make([]uint32, len(a.terms))
		for i, term := range a.terms {
			d.terms[i] = ix.termID(term)
		}
	}
	for i, id := range d.terms {
		tf := a.freqs[i]
		ix.terms[id].add(posting{doc: slot, tf: tf})
		for f, n := range tf {
			d.lens[f] += uint32(n)
		}
	}
	for f := range d.lens {
		ix.codes[slot][f] = lengthCode(d.lens[f])
		ix.totalLen[f] += uint64(d.lens[f])
	}
	ix.slotOf[d.canonical] = slot
	for _, key := range exactKeys(d) {
		ix.exact[key] = append(ix.exact[key], slot)
	}
	ix.live++
}

// replace swaps the tool in slot for a, its new version, editing only the
// postings that changed: most updates touch a description or a schema and
// leave most terms in place, and a posting edited in place costs a binary
// search where removing and inserting it would move the list's tail twice.
func (ix *Index) replace(slot uint32, a *analyzed) {
	d := &ix.docs[slot]
	for _, key := range exactKeys(d) {
		ix.dropExact(key, slot)
	}
	old := d.terms
	d.terms = make([]uint32, len(a.terms))
	var lens [NumFields]uint32
	for i, term := range a.terms {
		id := ix.termID(term)
		d.terms[i] = id
		tf := a.freqs[i]
		list := ix.terms[id].postings
		j := sort.Search(len(list), func(j int) bool { return list[j].doc >= slot })
		if j < len(list) && list[j].doc == slot {
			ix.terms[id].set(j, tf)
		} else {
			ix.terms[id].add(posting{doc: slot, tf: tf})
		}
		for f, n := range tf {
			lens[f] += uint32(n)
		}
	}
	kept := slices.Clone(d.terms)
	slices.Sort(kept)
	for _, id := range old {
		if _, ok := slices.BinarySearch(kept, id); !ok {
			ix.dropPosting(id, slot)
		}
	}
	for f := range lens {
		ix.totalLen[f] = ix.totalLen[f] - uint64(d.lens[f]) + uint64(lens[f])
		ix.codes[slot][f] = lengthCode(lens[f])
	}
	d.lens = lens
	d.original = a.original
	d.tags = d.tags[:0]
	for _, tag := range a.tags {
		d.tags = append(d.tags, intern(tag, ix.tagIDs, &ix.tags))
	}
	sortIDs(d.tags)
	for _, key := range exactKeys(d) {
		ix.exact[key] = append(ix.exact[key], slot)
	}
}

func (ix *Index) dropPosting(id, slot uint32) {
	t := &ix.terms[id]
	t.remove(slot)
	if len(t.postings) == 0 {
		delete(ix.termIDs, t.text)
		*t = termEntry{}
		ix.freeTerms = append(ix.freeTerms, id)
	}
}

func (ix *Index) dropExact(key string, slot uint32) {
	slots := ix.exact[key]
	if i := slices.Index(slots, slot); i >= 0 {
		slots = slices.Delete(slots, i, i+1)
	}
	if len(slots) == 0 {
		delete(ix.exact, key)
	} else {
		ix.exact[key] = slots
	}
}

func (ix *Index) remove(slot uint32) {
	d := &ix.docs[slot]
	for _, id := range d.terms {
		ix.dropPosting(id, slot)
	}
	for f := range d.lens {
		ix.totalLen[f] -= uint64(d.lens[f])
	}
	delete(ix.slotOf, d.canonical)
	for _, key := range exactKeys(d) {
		ix.dropExact(key, slot)
	}
	*d = docEntry{}
	ix.codes[slot] = [NumFields]uint8{}
	ix.taughtBy.set(slot, 0)
	ix.freeDocs = append(ix.freeDocs, slot)
	ix.live--
}

// exactKeys are the query strings, lower-cased, that name the tool exactly.
func exactKeys(d *docEntry) []string {
	keys := []string{strings.ToLower(d.canonical)}
	if m := strings.ToLower(d.name.Method); m != keys[0] {
		keys = append(keys, m)
	}
	if o := strings.ToLower(d.original); o != "" && !contains(keys, o) {
		keys = append(keys, o)
	}
	return keys
}

func (ix *Index) termID(term string) uint32 {
	if id, ok := ix.termIDs[term]; ok {
		return id
	}
	var id uint32
	if n := len(ix.freeTerms); n > 0 {
		id = ix.freeTerms[n-1]
		ix.freeTerms = ix.freeTerms[:n-1]
		ix.terms[id] = termEntry{text: term}
	} else {
		id = uint32(len(ix.terms))
		ix.terms = append(ix.terms, termEntry{text: term})
	}
	ix.termIDs[term] = id
	return id
}

func intern(s string, ids map[string]uint32, list *[]string) uint32 {
	if id, ok := ids[s]; ok {
		return id
	}
	id := uint32(len(*list))
	*list = append(*list, s)
	ids[s] = id
	return id
}

func sortIDs(ids []uint32) {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
}

func insertPosting(list []posting, p posting) []posting {
	if n := len(list); n == 0 || list[n-1].doc < p.doc {
		return append(list, p)
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].doc >= p.doc })
	list = append(list, posting{})
	copy(list[i+1:], list[i:])
	list[i] = p
	return list
}

// updateNorms recomputes the normalisation tables after the average field
// lengths changed.
func (ix *Index) updateNorms() {
	for f := range NumFields {
		p := ix.cfg.Fields[f]
		avg := 1.0
		if ix.live > 0 && ix.totalLen[f] > 0 {
			avg = float64(ix.totalLen[f]) / float64(ix.live)
		}
		for code := range 256 {
			l := float64(codeLength(uint8(code)))
			ix.norm[f][code] = float32(p.Weight / (1 - p.B + p.B*l/avg))
		}
	}
}

// lengthCode maps a field length to one byte: exact up to 127, then 16
// steps per doubling (at most 4% apart) up to 32,768, which is plenty for
// length normalisation and keeps the norm tables at 256 entries a field.
func lengthCode(n uint32) uint8 {
	if n < 128 {
		return uint8(n)
	}
	e := bits.Len32(n) - 8 // n is in [128<<e, 256<<e)
	sub := (n>>e - 128) >> 3
	code := 128 + uint32(e)*16 + sub
	return uint8(min(code, 255))
}

// codeLength is the length that a lengthCode stands for: the middle of its
// range.
func codeLength(code uint8) uint32 {
	if code < 128 {
		return uint32(code)
	}
	e := uint32(code-128) / 16
	sub := uint32(code-128) % 16
	return (128 + sub*8 + 4) << e
}
