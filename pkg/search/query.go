package search

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Page sizes of a Query.
const (
	DefaultPageSize = 10
	MaxPageSize     = 100
)

// Query is one search of an index.
type Query struct {
	// Text is the request in natural language, or a tool's name: a tool
	// whose canonical name, method or original name equals Text, ignoring
	// case and in any spelling messages.ParseToolName accepts, ranks first.
	// An empty Text lists every tool that the filters admit, by name.
	Text string
	// Namespaces, when not empty, admits only tools of these namespaces.
	Namespaces []string
	// Tags, when not empty, admits only tools that carry at least one of them.
	Tags []string
	// Allow, when not nil, admits only the tools it returns true for: the
	// tools the agent may see. It is asked only about tools that would
	// make the requested page (as a rule the first few tools found, then
	// the best-ranked in order until the page is full), so it may be a map
	// lookup or a policy check. Its answers must not change during a
	// search.
	Allow func(messages.ToolName) bool
	// AllowCanonical is Allow for a caller that looks tools up by their
	// canonical name: it is given that name too, as the index holds it,
	// so that no string is built for each candidate. It is called under
	// the same terms as Allow, after it when both are set.
	AllowCanonical func(name messages.ToolName, canonical string) bool
	// Page is the zero-based page number.
	Page int
	// PageSize is the number of hits a page holds. Defaults to
	// DefaultPageSize; at most MaxPageSize.
	PageSize int
}

// Hit is one tool found.
type Hit struct {
	Tool messages.ToolName
	// Score is the tool's BM25F score for the query; 0 when the query has
	// no searchable words.
	Score float64
	// Exact is true when the query named the tool.
	Exact bool
}

// Result is one page of hits, best first: exact name matches, then by
// descending score, ties broken by canonical name.
type Result struct {
	Hits []Hit
	// More is true when a further page holds hits.
	More bool
}

// Search returns the page of tools that best match q.
func (ix *Index) Search(q Query) (Result, error) {
	if q.Page < 0 {
		return Result{}, fmt.Errorf("search: page %d is negative", q.Page)
	}
	if q.PageSize == 0 {
		q.PageSize = DefaultPageSize
	}
	if q.PageSize < 0 || q.PageSize > MaxPageSize {
		return Result{}, fmt.Errorf("search: page size %d is out of range 1..%d", q.PageSize, MaxPageSize)
	}
	const maxPage = 1 << 20
	if q.Page > maxPage {
		return Result{}, fmt.Errorf("search: page %d is beyond %d", q.Page, maxPage)
	}
	s := searcherPool.Get().(*searcher)
	defer searcherPool.Put(s)
	s.tokens = AppendTokens(s.tokens[:0], q.Text)

	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s.ix = ix
	defer func() { s.ix = nil }()
	return s.search(&q), nil
}

// searcher is one search of an index under its read lock: the query's
// terms resolved against it, the ranking by BM25F with pruning, the page
// of hits; with the memory it works in, reused across searches. The index
// building and holding the tools (Index's own methods) is the other side.
type searcher struct {
	ix      *Index
	tokens  []string
	terms   []queryTerm
	cursors []cursor
	bounds  []float64
	contrib []float32
	learned []float32 // the learned part of each query term's contribution
	idf     []float32 // each query term's IDF times its weight in the query
	exact   []uint32
	top     topK
	nsAllow []bool
	tagIDs  []uint32
}

type queryTerm struct {
	id     uint32
	weight float32 // how often the query holds the term
}

var searcherPool = sync.Pool{New: func() any { return new(searcher) }}

func (s *searcher) search(q *Query) Result {
	ix := s.ix
	f := s.filter(q)
	s.lookupTerms()
	s.exact = s.exactMatches(q.Text, s.exact[:0], &f)
	want := (q.Page+1)*q.PageSize + 1 // one more tells whether another page follows
	s.top.reset(ix, want)

	if strings.TrimSpace(q.Text) == "" {
		for slot := range ix.docs {
			if ix.docs[slot].live {
				s.top.offer(uint32(slot), 0, &f)
			}
		}
	} else if len(s.terms) > 0 {
		s.rankAdmitting(&f, want)
	}

	ranked := s.top.sorted()
	total := len(s.exact) + len(ranked)
	start := min(q.Page*q.PageSize, total)
	end := min(start+q.PageSize, total)
	res := Result{More: total > end}
	if end > start {
		res.Hits = make([]Hit, 0, end-start)
	}
	for i := start; i < end; i++ {
		if i < len(s.exact) {
			slot := s.exact[i]
			res.Hits = append(res.Hits, Hit{Tool: ix.docs[slot].name, Score: float64(s.scoreOf(slot)), Exact: true})
			continue
		}
		c := ranked[i-len(s.exact)]
		res.Hits = append(res.Hits, Hit{Tool: ix.docs[c.slot].name, Score: float64(c.score)})
	}
	return res
}

// Deferred admission. The caller's Allow (a catalog lookup, a policy
// check) costs more than scoring a tool, and asked of each tool as it
// enters the heap it is asked of some eighty tools for a page of ten at
// 10,000 tools, most of which leave the heap again. So it is asked of the
// first admissionProbes tools that enter; if it admits them all, the
// ranking goes on without it, keeping admissionSlack more tools than the
// page needs, and it is then asked of those in rank order until the page
// is full. That is the same page: every tool the ranking did not keep
// ranks below those it kept. A caller that refuses one of the probes (an
// agent that may see part of the catalog) is asked of each tool as
// before, and one that refuses more than the slack of the tools kept has
// the ranking done again, asking of each.
const (
	admissionProbes = 8
	admissionSlack  = 2
)

// rankAdmitting ranks the tools that hold a query term into s.top, keeping
// the want best that f admits (see "Deferred admission").
func (s *searcher) rankAdmitting(f *filter, want int) {
	if f.allow == nil && f.allowCanonical == nil {
		s.rank(f)
		return
	}
	f.probes, f.deferred, f.want = admissionProbes, false, want
	s.top.reset(s.ix, want+admissionSlack)
	s.rank(f)
	if !f.deferred {
		// Asked of each tool that entered: the best want are the page.
		f.probes = 0
		s.top.shrink(want)
		return
	}
	f.deferred = false
	found := len(s.top.items)
	admitted := s.top.sorted()[:0]
	for _, c := range s.top.items {
		if len(admitted) < want && f.allows(s.ix, c.slot) {
			admitted = append(admitted, c)
		}
	}
	if len(admitted) == want || found < want+admissionSlack {
		// Best first, which is also an order sorted() keeps.
		s.top.k, s.top.items = want, admitted
		return
	}
	s.top.reset(s.ix, want)
	s.rank(f)
}

// maxQueryTerms bounds the distinct terms a search scores: a query pasted
// from a document keeps its rarest terms, which decide its ranking anyway.
const maxQueryTerms = 64

// lookupTerms turns the query's tokens into the distinct indexed terms,
// sorted by text: the order in which every tool's score is summed, so that
// equal inputs give bit-equal scores.
func (s *searcher) lookupTerms() {
	ix := s.ix
	s.terms = s.terms[:0]
	slices.Sort(s.tokens)
	for i := 0; i < len(s.tokens); {
		j := i + 1
		for j < len(s.tokens) && s.tokens[j] == s.tokens[i] {
			j++
		}
		if id, ok := ix.termIDs[s.tokens[i]]; ok {
			s.terms = append(s.terms, queryTerm{id: id, weight: float32(j - i)})
		}
		i = j
	}
	if len(s.terms) > maxQueryTerms {
		df := func(t queryTerm) float64 { return ix.terms[t.id].df() }
		slices.SortStableFunc(s.terms, func(a, b queryTerm) int { return cmp.Compare(df(a), df(b)) })
		s.terms = s.terms[:maxQueryTerms]
		slices.SortFunc(s.terms, func(a, b queryTerm) int { return strings.Compare(ix.terms[a.id].text, ix.terms[b.id].text) })
	}
}

// cursor walks one query term's postings.
type cursor struct {
	postings []posting
	pos      int
	idf      float32 // the term's IDF times its weight in the query
	bound    float64 // the most the term can add to a score
	term     int     // index in searcher.terms
}

// advance moves the cursor to the first posting at or after doc, galloping
// so that a long list is probed rather than walked.
func (c *cursor) advance(doc uint32) {
	list, lo := c.postings, c.pos
	if lo >= len(list) || list[lo].doc >= doc {
		return
	}
	step := 1
	hi := lo + step
	for hi < len(list) && list[hi].doc < doc {
		lo = hi
		step *= 2
		hi = lo + step
	}
	hi = min(hi, len(list))
	c.pos = lo + 1 + sort.Search(hi-lo-1, func(i int) bool { return list[lo+1+i].doc >= doc })
}

// contribution is what posting p of a term with the given IDF adds to its
// tool's score: from the definition's fields, BM25 saturation of their
// weighted, length-normalised frequencies plus the BM25+ lower bound; and
// from the learned field, saturated on its own, which the tool's score
// then discounts by how little of the query its learned field covers
// (see toolScore).
func (ix *Index) contribution(idf float32, p *posting) (fromDefinition, learned float32) {
	c := &ix.codes[p.doc]
	norm := &ix.norm
	// Unrolled over the fields: a zero frequency costs less than a branch.
	t := float32(p.tf[0])*norm[0][c[0]] +
		float32(p.tf[1])*norm[1][c[1]] +
		float32(p.tf[2])*norm[2][c[2]] +
		float32(p.tf[3])*norm[3][c[3]] +
		float32(p.tf[4])*norm[4][c[4]] +
		float32(p.tf[5])*norm[5][c[5]] +
		float32(p.tf[6])*norm[6][c[6]]
	k1 := float32(ix.cfg.K1)
	if t > 0 {
		fromDefinition = idf * ((k1+1)*t/(k1+t) + float32(ix.cfg.Delta))
	}
	if p.tf[7] != 0 {
		l := float32(p.tf[7]) * norm[7][c[7]]
		learned = idf * (k1 + 1) * l / (k1 + l)
	}
	return fromDefinition, learned
}

// toolScore is a tool's score from its definition's part, def, and the
// learned contributions of its terms (learned, parallel to the query
// terms' idf, whose sum is mass), for a tool whose learned field
// teachers principals taught (0 for a tool without one, which scores def).
//
// The learned part is the learned contributions times the square root of
// the share of the query's IDF mass that they cover, cov: a query much
// like those that led agents to the tool gets most of it, a query that
// shares a word with them (a city, a name) less.
//
// A taught tool's definition part counts (1 + p × √cov) / (1 + p) of
// itself, p being untaughtPrior for a field that MaxTeachers principals
// taught and half of it for one principal's: a sixth less (an eleventh for
// one principal's field) when its learned field covers none of the query,
// whole when it covers all of it. Use says what agents call a tool for; a
// tool they called for other words is a little less likely to be the one
// asked for than a tool no one has called yet, whose definition is all
// there is to go by. Without this, a taught tool whose definition is
// nearly that of an untaught one (BFCL pools the functions of many test
// cases, so one job often has several tools) climbs above it on a word or
// two its agents shared with the query, and the queries for tools without
// usage lose what the others gain. What one principal can do to a tool's
// rank this way is half of what several can (docs/security.md). Measured
// on the development halves and folds (docs/BENCHMARKS.md). A score only
// falls by it, so the bounds of pruning hold.
func toolScore(teachers uint8, def float32, learned, idf []float32, mass float32) float32 {
	if teachers == 0 {
		return def
	}
	var sum, covered float32
	for i, v := range learned {
		if v != 0 {
			sum += v
			covered += idf[i]
		}
	}
	var root float32
	if mass > 0 {
		root = float32(math.Sqrt(float64(min(covered/mass, 1))))
	}
	p := untaughtPrior * float32(min(teachers, MaxTeachers)) / MaxTeachers
	return def*(1+p*root)/(1+p) + sum*root
}

// untaughtPrior is what a taught tool's definition part gives up, as a
// share of an untaught tool's, for the part of a query its learned field
// does not cover, when several principals taught it (see toolScore).
const untaughtPrior = 0.2

// rank offers the tools that hold a query term to s.top, best first as far
// as it can tell, with MaxScore pruning (Turtle and Flood, 1995): terms are
// ordered by the most they can add to a score; once the page is full, the
// terms whose bounds together cannot lift a tool past the page's worst
// score stop proposing tools and are only probed for the tools that the
// others propose, and a tool is dropped as soon as its bound falls short.
// Common terms thus cost a few probes instead of a walk of their postings.
func (s *searcher) rank(f *filter) {
	ix := s.ix
	n := float64(ix.live)
	s.cursors = s.cursors[:0]
	s.idf = s.idf[:0]
	var mass float32
	for i, qt := range s.terms {
		t := &ix.terms[qt.id]
		df := t.df()
		idf := float32(math.Log(1+(n-df+0.5)/(df+0.5))) * qt.weight
		s.idf = append(s.idf, idf)
		mass += idf
		s.cursors = append(s.cursors, cursor{postings: t.postings, idf: idf, bound: ix.bound(idf, &t.maxTF), term: i})
	}
	cs := s.cursors
	slices.SortStableFunc(cs, func(a, b cursor) int { return cmp.Compare(a.bound, b.bound) })
	// bounds[i] is the most that terms 0..i together add to a score.
	s.bounds = s.bounds[:0]
	sum := 0.0
	for _, c := range cs {
		sum += c.bound
		s.bounds = append(s.bounds, sum)
	}
	if cap(s.contrib) < len(cs) || cap(s.learned) < len(cs) {
		s.contrib = make([]float32, len(cs))
		s.learned = make([]float32, len(cs))
	}
	contrib, learned := s.contrib[:len(cs)], s.learned[:len(cs)]

	essential := 0 // cursors from here on propose tools
	threshold := math.Inf(-1)
	for {
		doc := uint32(math.MaxUint32)
		for i := essential; i < len(cs); i++ {
			if c := &cs[i]; c.pos < len(c.postings) && c.postings[c.pos].doc < doc {
				doc = c.postings[c.pos].doc
			}
		}
		if doc == math.MaxUint32 {
			return
		}
		clear(contrib)
		clear(learned)
		// score bounds the tool's score from above: it counts the learned
		// parts whole.
		score := 0.0
		for i := essential; i < len(cs); i++ {
			if c := &cs[i]; c.pos < len(c.postings) && c.postings[c.pos].doc == doc {
				v, l := ix.contribution(c.idf, &c.postings[c.pos])
				contrib[c.term], learned[c.term] = v, l
				score += float64(v) + float64(l)
				c.pos++
			}
		}
		pruned := false
		for i := essential - 1; i >= 0; i-- {
			if score+s.bounds[i] < threshold {
				pruned = true
				break
			}
			c := &cs[i]
			c.advance(doc)
			if c.pos < len(c.postings) && c.postings[c.pos].doc == doc {
				v, l := ix.contribution(c.idf, &c.postings[c.pos])
				contrib[c.term], learned[c.term] = v, l
				score += float64(v) + float64(l)
			}
		}
		if pruned || isIn(s.exact, doc) {
			continue
		}
		var def float32
		for _, v := range contrib {
			def += v
		}
		s.top.offer(doc, toolScore(ix.taughtBy.scored(doc, ix.codes[doc][FieldLearned]), def, learned, s.idf, mass), f)
		if len(s.top.items) >= s.top.k {
			// The slack covers float32 rounding: a tool whose bound equals
			// the worst score may still win the tie on its name.
			threshold = float64(s.top.items[0].score) * (1 - 1e-4)
			for essential < len(cs) && s.bounds[essential] < threshold {
				essential++
			}
		}
	}
}

// bound is the most a term can add to one tool's score: its frequencies
// can be no higher than maxTF, a field holding tf occurrences is at least
// tf long, and the learned part counts at most whole. A posting holds the
// term either in the definition's fields or in the learned field, never
// both (termEntry.learned), so the bound is the larger of the two parts'
// bounds, not their sum: a common word that some tools learned would
// otherwise count both, and stop pruning the tools that hold it.
func (ix *Index) bound(idf float32, maxTF *termFreqs) float64 {
	t := 0.0
	for f, tf := range maxTF[:FieldLearned] {
		if tf != 0 {
			t += float64(tf) * float64(ix.norm[f][lengthCode(uint32(tf))])
		}
	}
	k1 := ix.cfg.K1
	b := 0.0
	if t > 0 {
		b = (k1+1)*t/(k1+t) + ix.cfg.Delta
	}
	if tf := maxTF[FieldLearned]; tf != 0 {
		l := float64(tf) * float64(ix.norm[FieldLearned][lengthCode(uint32(tf))])
		b = max(b, (k1+1)*l/(k1+l))
	}
	return float64(idf) * b * (1 + 1e-4)
}

// scoreOf returns the score of one tool, probing each term's postings.
func (s *searcher) scoreOf(slot uint32) float32 {
	ix := s.ix
	n := float64(ix.live)
	var total, mass float32
	s.idf, s.learned = s.idf[:0], s.learned[:0]
	for _, qt := range s.terms {
		list := ix.terms[qt.id].postings
		df := ix.terms[qt.id].df()
		idf := float32(math.Log(1+(n-df+0.5)/(df+0.5))) * qt.weight
		mass += idf
		var l float32
		i := sort.Search(len(list), func(i int) bool { return list[i].doc >= slot })
		if i < len(list) && list[i].doc == slot {
			var v float32
			v, l = ix.contribution(idf, &list[i])
			total += v
		}
		s.idf, s.learned = append(s.idf, idf), append(s.learned, l)
	}
	return toolScore(ix.taughtBy.scored(slot, ix.codes[slot][FieldLearned]), total, s.learned, s.idf, mass)
}

func isIn(slots []uint32, slot uint32) bool {
	return slices.Contains(slots, slot)
}

// exactMatches appends the slots of the tools that text names and f admits,
// sorted by canonical name.
func (s *searcher) exactMatches(text string, dst []uint32, f *filter) []uint32 {
	ix := s.ix
	text = strings.TrimSpace(text)
	if text == "" || len(text) > 4*messages.MaxToolNameLength {
		return dst
	}
	keys := [2]string{strings.ToLower(text)}
	if name, err := messages.ParseToolName(text); err == nil {
		keys[1] = strings.ToLower(name.String())
	}
	for _, key := range keys {
		for _, slot := range ix.exact[key] {
			if !isIn(dst, slot) && f.admits(ix, slot) {
				dst = append(dst, slot)
			}
		}
	}
	sort.Slice(dst, func(i, j int) bool { return ix.docs[dst[i]].canonical < ix.docs[dst[j]].canonical })
	return dst
}

// filter is a Query's admission test, resolved against the index.
type filter struct {
	namespaces []bool // by namespace ID; nil admits all
	tags       []uint32
	anyTag     bool
	allow      func(messages.ToolName) bool
	// allowCanonical is Query.AllowCanonical.
	allowCanonical func(messages.ToolName, string) bool
	// probes counts the tools still to ask the caller about before its
	// answers may be deferred; deferred is set once they may be; want is
	// the page's size with the one more (see rankAdmitting).
	probes   int
	deferred bool
	want     int
}

func (s *searcher) filter(q *Query) filter {
	ix := s.ix
	f := filter{allow: q.Allow, allowCanonical: q.AllowCanonical}
	if len(q.Namespaces) > 0 {
		s.nsAllow = slices.Grow(s.nsAllow[:0], len(ix.namespaces))[:len(ix.namespaces)]
		clear(s.nsAllow)
		for _, ns := range q.Namespaces {
			if id, ok := ix.namespaceIDs[ns]; ok {
				s.nsAllow[id] = true
			}
		}
		f.namespaces = s.nsAllow
	}
	if len(q.Tags) > 0 {
		f.anyTag = true
		s.tagIDs = s.tagIDs[:0]
		for _, tag := range q.Tags {
			if id, ok := ix.tagIDs[tag]; ok {
				s.tagIDs = append(s.tagIDs, id)
			}
		}
		f.tags = s.tagIDs
	}
	return f
}

func (f *filter) admits(ix *Index, slot uint32) bool {
	return f.matches(ix, slot) && (f.deferred || f.allows(ix, slot))
}

// matches applies the query's own filters: its namespaces and tags.
func (f *filter) matches(ix *Index, slot uint32) bool {
	d := &ix.docs[slot]
	if f.namespaces != nil && !f.namespaces[d.namespace] {
		return false
	}
	if f.anyTag {
		found := false
		for _, want := range f.tags {
			if _, ok := slices.BinarySearch(d.tags, want); ok {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// allows asks the caller's Allow and AllowCanonical about a tool.
func (f *filter) allows(ix *Index, slot uint32) bool {
	d := &ix.docs[slot]
	if f.allow != nil && !f.allow(d.name) {
		return false
	}
	return f.allowCanonical == nil || f.allowCanonical(d.name, d.canonical)
}

// probed counts a probe of deferred admission (see rankAdmitting) that
// the caller's filter answered: after admissionProbes admitted tools in a
// row the ranking goes on without asking it; after a refusal it is asked
// of each tool.
func (f *filter) probed(admitted bool) {
	switch {
	case f.probes == 0:
	case !admitted:
		f.probes = 0
	default:
		f.probes--
		f.deferred = f.probes == 0
	}
}

// topK keeps the k best candidates in a min-heap whose root is the worst.
type topK struct {
	ix    *Index
	k     int
	items []candidate
}

type candidate struct {
	slot  uint32
	score float32
}

func (t *topK) reset(ix *Index, k int) {
	t.ix, t.k, t.items = ix, k, t.items[:0]
}

// worse orders candidates from worst to best: lower score, then later name.
func (t *topK) worse(a, b candidate) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	return t.ix.docs[a.slot].canonical > t.ix.docs[b.slot].canonical
}

// up restores the heap order from i towards the root.
func (t *topK) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !t.worse(t.items[i], t.items[parent]) {
			return
		}
		t.items[i], t.items[parent] = t.items[parent], t.items[i]
		i = parent
	}
}

// down restores the heap order from i towards the leaves.
func (t *topK) down(i int) {
	n := len(t.items)
	for {
		worst := i
		if l := 2*i + 1; l < n && t.worse(t.items[l], t.items[worst]) {
			worst = l
		}
		if r := 2*i + 2; r < n && t.worse(t.items[r], t.items[worst]) {
			worst = r
		}
		if worst == i {
			return
		}
		t.items[i], t.items[worst] = t.items[worst], t.items[i]
		i = worst
	}
}

// offer considers a tool; the filter runs only for tools that would enter
// the top k.
func (t *topK) offer(slot uint32, score float32, f *filter) {
	c := candidate{slot: slot, score: score}
	if len(t.items) >= t.k && !t.worse(t.items[0], c) {
		return
	}
	if !f.matches(t.ix, slot) {
		return
	}
	probing := f.probes > 0
	admitted := f.deferred || f.allows(t.ix, slot)
	if probing {
		f.probed(admitted)
		if !admitted {
			// Asked of each tool from now on: the page's size is enough.
			t.shrink(f.want)
		}
	}
	if !admitted {
		return
	}
	if len(t.items) < t.k {
		t.items = append(t.items, c)
		t.up(len(t.items) - 1)
		return
	}
	t.items[0] = c
	t.down(0)
}

// shrink keeps the k best candidates, and no more from now on.
func (t *topK) shrink(k int) {
	for len(t.items) > k {
		n := len(t.items) - 1
		t.items[0] = t.items[n]
		t.items = t.items[:n]
		t.down(0)
	}
	t.k = k
}

// sorted orders the kept candidates best first; the heap is spent.
func (t *topK) sorted() []candidate {
	out := t.items
	slices.SortFunc(out, func(a, b candidate) int {
		switch {
		case t.worse(b, a):
			return -1
		case t.worse(a, b):
			return 1
		}
		return 0
	})
	return out
}
