package search

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The encoding starts with encodingMagic, then the format version and the
// analyzer version as uvarints. A change of the layout bumps formatVersion;
// a change of Tokenize's output (stop words, stemming, splitting) bumps
// analyzerVersion, since an index whose terms were made by another analyzer
// would quietly miss matches.
const (
	encodingMagic = "TBSI"
	// formatVersion 2 added FieldLearned; 3 how many principals taught
	// each learned field.
	formatVersion   = 3
	analyzerVersion = 1
)

// ErrCorruptIndex is matched by every error Decode returns.
var ErrCorruptIndex = errors.New("corrupt search index")

// DecodeError says what Decode found wrong and where.
type DecodeError struct {
	// Offset is the byte offset at which decoding failed.
	Offset int
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode search index: at byte %d: %s", e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorruptIndex) true for every DecodeError.
func (e *DecodeError) Is(target error) bool { return target == ErrCorruptIndex }

// Encode returns the index in a compact binary form that Decode reads back
// into an index that answers every query identically: the parameters, the
// tools' names and tags, and the posting lists, with varints and
// prefix-compressed terms. Removed tools leave no trace.
func (ix *Index) Encode() []byte {
	ix.mu.RLock()
	defer ix.mu.RUnlock()

	// Live slots get dense IDs in slot order, which keeps posting lists sorted.
	ids := make([]uint32, len(ix.docs))
	var live []uint32
	nsUsed := map[uint32]bool{}
	tagsUsed := map[uint32]bool{}
	for slot := range ix.docs {
		d := &ix.docs[slot]
		if !d.live {
			continue
		}
		ids[slot] = uint32(len(live))
		live = append(live, uint32(slot))
		nsUsed[d.namespace] = true
		for _, t := range d.tags {
			tagsUsed[t] = true
		}
	}
	namespaces, nsID := dictionary(ix.namespaces, nsUsed)
	tags, tagID := dictionary(ix.tags, tagsUsed)

	b := make([]byte, 0, 1024)
	b = append(b, encodingMagic...)
	b = binary.AppendUvarint(b, formatVersion)
	b = binary.AppendUvarint(b, analyzerVersion)
	b = binary.AppendUvarint(b, NumFields)
	b = appendFloat(b, ix.cfg.K1)
	b = appendFloat(b, ix.cfg.Delta)
	for _, p := range ix.cfg.Fields {
		b = appendFloat(b, p.Weight)
		b = appendFloat(b, p.B)
	}
	b = appendStrings(b, namespaces)
	b = appendStrings(b, tags)

	b = binary.AppendUvarint(b, uint64(len(live)))
	docTags := make([]uint32, 0, 8)
	for _, slot := range live {
		d := &ix.docs[slot]
		b = binary.AppendUvarint(b, uint64(nsID[d.namespace]))
		b = appendString(b, d.name.Method)
		b = appendString(b, d.original)
		docTags = docTags[:0]
		for _, t := range d.tags {
			docTags = append(docTags, tagID[t])
		}
		slices.Sort(docTags)
		b = appendIDs(b, docTags)
	}

	terms := make([]uint32, 0, len(ix.termIDs))
	for _, id := range ix.termIDs {
		terms = append(terms, id)
	}
	slices.SortFunc(terms, func(a, c uint32) int { return strings.Compare(ix.terms[a].text, ix.terms[c].text) })
	b = binary.AppendUvarint(b, uint64(len(terms)))
	prev := ""
	for _, id := range terms {
		t := &ix.terms[id]
		shared := commonPrefix(prev, t.text)
		b = binary.AppendUvarint(b, uint64(shared))
		b = appendString(b, t.text[shared:])
		prev = t.text
		b = binary.AppendUvarint(b, uint64(len(t.postings)))
		last := uint32(0)
		for i, p := range t.postings {
			doc := ids[p.doc]
			if i == 0 {
				b = binary.AppendUvarint(b, uint64(doc))
			} else {
				b = binary.AppendUvarint(b, uint64(doc-last))
			}
			last = doc
			var mask byte
			for f, tf := range p.tf {
				if tf != 0 {
					mask |= 1 << f
				}
			}
			b = append(b, mask)
			for _, tf := range p.tf {
				if tf != 0 {
					b = append(b, tf)
				}
			}
		}
	}
	// How many principals taught each tool whose learned field is in
	// effect, one byte each, in the tools' order.
	for _, slot := range live {
		if ix.docs[slot].lens[FieldLearned] > 0 {
			b = append(b, max(ix.taughtBy.at(slot), 1))
		}
	}
	return b
}

// dictionary returns the used entries of list, sorted, and the new ID of
// each old one.
func dictionary(list []string, used map[uint32]bool) ([]string, map[uint32]uint32) {
	out := make([]string, 0, len(used))
	for id := range used {
		out = append(out, list[id])
	}
	slices.Sort(out)
	newID := make(map[uint32]uint32, len(used))
	for id := range used {
		i, _ := slices.BinarySearch(out, list[id])
		newID[id] = uint32(i)
	}
	return out, newID
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, list []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(list)))
	for _, s := range list {
		b = appendString(b, s)
	}
	return b
}

// appendIDs writes a strictly increasing list as a count and deltas.
func appendIDs(b []byte, ids []uint32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	prev := uint32(0)
	for i, id := range ids {
		if i == 0 {
			b = binary.AppendUvarint(b, uint64(id))
		} else {
			b = binary.AppendUvarint(b, uint64(id-prev))
		}
		prev = id
	}
	return b
}

// decoder reads an encoded index. Every count is checked against the bytes
// left before anything is allocated for it, so hostile input cannot make
// Decode allocate more than a small multiple of its own size.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &DecodeError{Offset: d.off, Reason: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint for %s", what)
		return 0
	}
	d.off += n
	return v
}

// count reads a number of items that each take at least minBytes.
func (d *decoder) count(what string, minBytes int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64((len(d.b)-d.off)/minBytes) {
		d.fail("%s count %d exceeds the %d bytes left", what, n, len(d.b)-d.off)
		return 0
	}
	return int(n)
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated before %s", what)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) float(what string) float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.fail("truncated before %s", what)
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off:]))
	d.off += 8
	return v
}

func (d *decoder) string(what string) string {
	n := d.count(what+" length", 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[d.off : d.off+n])
	if !utf8.ValidString(s) {
		d.fail("%s is not valid UTF-8", what)
		return ""
	}
	d.off += n
	return s
}

// sortedStrings reads a list of distinct strings in increasing order.
func (d *decoder) sortedStrings(what string) []string {
	n := d.count(what, 1)
	var out []string
	for i := 0; i < n && d.err == nil; i++ {
		s := d.string(what)
		if i > 0 && s <= out[i-1] {
			d.fail("%s %q is out of order", what, s)
		}
		out = append(out, s)
	}
	return out
}

// Decode reads an index written by Encode. Every error it returns matches
// ErrCorruptIndex; one that names a version means the index was written
// by another release and must be rebuilt.
func Decode(data []byte) (*Index, error) {
	d := &decoder{b: data}
	ix := d.header()
	if d.err != nil {
		return nil, d.err
	}
	namespaces, tags := d.dictionaries(ix)
	if d.err != nil {
		return nil, d.err
	}
	nDocs := d.count("tool", 4)
	for i := 0; i < nDocs && d.err == nil; i++ {
		d.tool(ix, i, namespaces, tags)
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.checkDictionariesUsed(ix, namespaces, tags); d.err != nil {
		return nil, d.err
	}
	ix.live = nDocs
	termCount, total := d.terms(ix, nDocs)
	d.teachers(ix)
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d bytes follow the index", len(d.b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	ix.indexDecodedTerms(termCount, total)
	return ix, nil
}

// header reads the magic, the versions and the parameters, and returns an
// empty index with those parameters.
func (d *decoder) header() *Index {
	if len(d.b) < len(encodingMagic) || string(d.b[:len(encodingMagic)]) != encodingMagic {
		d.fail("not a search index: missing %q header", encodingMagic)
		return nil
	}
	d.off = len(encodingMagic)
	if v := d.uvarint("format version"); d.err == nil && v != formatVersion {
		d.fail("format version %d is not supported; this release reads version %d", v, formatVersion)
	}
	if v := d.uvarint("analyzer version"); d.err == nil && v != analyzerVersion {
		d.fail("analyzer version %d is not supported; this release tokenizes as version %d", v, analyzerVersion)
	}
	if n := d.uvarint("field count"); d.err == nil && n != NumFields {
		d.fail("field count %d; want %d", n, NumFields)
	}
	var cfg Config
	cfg.K1 = d.float("k1")
	cfg.Delta = d.float("delta")
	for f := range cfg.Fields {
		cfg.Fields[f].Weight = d.float("field weight")
		cfg.Fields[f].B = d.float("field b")
	}
	if d.err != nil {
		return nil
	}
	if err := cfg.Validate(); err != nil {
		d.fail("%v", err)
		return nil
	}
	ix, _ := New(cfg)
	return ix
}

// dictionaries reads the namespaces and tags the tools refer to by ID.
func (d *decoder) dictionaries(ix *Index) (namespaces, tags []string) {
	namespaces = d.sortedStrings("namespace")
	for _, ns := range namespaces {
		if err := messages.ValidateNamespace(ns); err != nil && d.err == nil {
			d.fail("%v", err)
		}
	}
	tags = d.sortedStrings("tag")
	if d.err != nil {
		return nil, nil
	}
	for _, ns := range namespaces {
		intern(ns, ix.namespaceIDs, &ix.namespaces)
	}
	for _, tag := range tags {
		intern(tag, ix.tagIDs, &ix.tags)
	}
	return namespaces, tags
}

// tool reads tool i. Tools are appended as they are read rather than
// allocated from the count up front: a tool takes far more memory than its
// 4 bytes at least.
func (d *decoder) tool(ix *Index, i int, namespaces, tags []string) {
	ix.docs = append(ix.docs, docEntry{})
	ix.codes = append(ix.codes, [NumFields]uint8{})
	doc := &ix.docs[i]
	ns := d.uvarint("namespace ID")
	if d.err == nil && ns >= uint64(len(namespaces)) {
		d.fail("namespace ID %d of tool %d is out of range", ns, i)
	}
	if d.err != nil {
		return
	}
	doc.namespace = uint32(ns)
	doc.name = messages.ToolName{Namespace: namespaces[ns], Method: d.string("method")}
	doc.original = d.string("original name")
	nTags := d.count("tag", 1)
	for j := 0; j < nTags && d.err == nil; j++ {
		v := d.uvarint("tag ID")
		if j > 0 {
			if v == 0 {
				d.fail("tag IDs of tool %d are not increasing", i)
			}
			v += uint64(doc.tags[j-1])
		}
		if d.err == nil && v >= uint64(len(tags)) {
			d.fail("tag ID %d of tool %d is out of range", v, i)
		}
		doc.tags = append(doc.tags, uint32(v))
	}
	if d.err != nil {
		return
	}
	if err := doc.name.Validate(); err != nil {
		d.fail("tool %d: %v", i, err)
		return
	}
	doc.live = true
	doc.canonical = doc.name.String()
	if _, dup := ix.slotOf[doc.canonical]; dup {
		d.fail("tool %q appears twice", doc.canonical)
		return
	}
	ix.slotOf[doc.canonical] = uint32(i)
	for _, key := range exactKeys(doc) {
		ix.exact[key] = append(ix.exact[key], uint32(i))
	}
}

// checkDictionariesUsed refuses unused dictionary entries, which would not
// survive another encoding.
func (d *decoder) checkDictionariesUsed(ix *Index, namespaces, tags []string) {
	nsUsed := make([]bool, len(namespaces))
	tagUsed := make([]bool, len(tags))
	for i := range ix.docs {
		nsUsed[ix.docs[i].namespace] = true
		for _, t := range ix.docs[i].tags {
			tagUsed[t] = true
		}
	}
	if i := slices.Index(nsUsed, false); i >= 0 {
		d.fail("namespace %q belongs to no tool", namespaces[i])
		return
	}
	if i := slices.Index(tagUsed, false); i >= 0 {
		d.fail("tag %q belongs to no tool", tags[i])
	}
}

// terms reads the terms and their postings, and returns each tool's number
// of terms and their total.
func (d *decoder) terms(ix *Index, nDocs int) (termCount []int, total int) {
	nTerms := d.count("term", 4)
	termCount = make([]int, nDocs)
	prev := ""
	for i := 0; i < nTerms && d.err == nil; i++ {
		text := d.termText(i, prev)
		if d.err != nil {
			break
		}
		prev = text
		postings := d.postings(text, nDocs)
		if d.err != nil {
			break
		}
		id := uint32(len(ix.terms))
		entry := termEntry{text: text, postings: postings}
		ix.terms = append(ix.terms, entry)
		ix.termIDs[text] = id
		for _, p := range postings {
			entry.raiseMax(p.tf)
			doc := &ix.docs[p.doc]
			termCount[p.doc]++
			for f, tf := range p.tf {
				doc.lens[f] = min(doc.lens[f]+uint32(tf), math.MaxInt32)
			}
		}
		ix.terms[id].maxTF = entry.maxTF
		total += len(postings)
		d.learned(ix, id, postings)
	}
	return termCount, total
}

// termText reads term i, written as the length of the prefix it shares
// with the previous term, prev, and the rest.
func (d *decoder) termText(i int, prev string) string {
	shared := d.uvarint("term prefix length")
	if d.err == nil && shared > uint64(len(prev)) {
		d.fail("term prefix length %d exceeds the previous term", shared)
		return ""
	}
	suffix := d.string("term")
	if d.err != nil {
		return ""
	}
	if suffix != "" && int(shared) < len(prev) && prev[shared] == suffix[0] {
		d.fail("term prefix length %d is shorter than the prefix shared with the previous term", shared)
		return ""
	}
	text := prev[:shared] + suffix
	if text == "" || (i > 0 && text <= prev) {
		d.fail("term %q is empty or out of order", text)
		return ""
	}
	return text
}

// postings reads the postings of a term: the tools it is in and its
// frequency in each of their fields.
func (d *decoder) postings(text string, nDocs int) []posting {
	df := d.count("posting", 3)
	if d.err == nil && (df == 0 || df > nDocs) {
		d.fail("term %q has %d postings for %d tools", text, df, nDocs)
		return nil
	}
	postings := make([]posting, 0, df) // at most 4 bytes for every byte left
	doc := uint64(0)
	for j := 0; j < df && d.err == nil; j++ {
		v := d.uvarint("posting")
		if j > 0 {
			if v == 0 {
				d.fail("postings of term %q are not increasing", text)
				break
			}
			v += doc
		}
		if v >= uint64(nDocs) {
			d.fail("posting of term %q names tool %d of %d", text, v, nDocs)
			break
		}
		doc = v
		p := posting{doc: uint32(v)}
		mask := d.byte("field mask")
		if d.err == nil && (mask == 0 || uint(mask) >= 1<<NumFields) {
			d.fail("field mask %#x of term %q is invalid", mask, text)
			break
		}
		for f := range NumFields {
			if mask&(1<<f) != 0 {
				p.tf[f] = d.byte("term frequency")
				if d.err == nil && p.tf[f] == 0 {
					d.fail("zero term frequency of term %q", text)
				}
			}
		}
		postings = append(postings, p)
	}
	return postings
}

// learned records the learned terms among a term's postings: a learned
// term is in no other field of its tool.
func (d *decoder) learned(ix *Index, id uint32, postings []posting) {
	text := ix.terms[id].text
	for _, p := range postings {
		if c := p.tf[FieldLearned]; c != 0 {
			key := ix.docs[p.doc].canonical
			other := p.tf
			other[FieldLearned] = 0
			if other != (termFreqs{}) {
				d.fail("term %q of tool %q is learned and in its definition", text, key)
				break
			}
			ix.terms[id].learned++
			if c > MaxLearnedCount || len(ix.learned[key]) == MaxLearnedTerms {
				d.fail("learned field of tool %q exceeds %d terms of at most %d", key, MaxLearnedTerms, MaxLearnedCount)
				break
			}
			ix.learned[key] = append(ix.learned[key], LearnedTerm{Term: text, Count: c})
		}
	}
}

// teachers reads how many principals taught each tool that has a learned
// field, in the tools' order.
func (d *decoder) teachers(ix *Index) {
	for i := 0; i < len(ix.docs) && d.err == nil; i++ {
		doc := &ix.docs[i]
		if len(ix.learned[doc.canonical]) == 0 {
			continue
		}
		n := d.byte("teachers")
		if d.err == nil && (n == 0 || n > MaxTeachers) {
			d.fail("tool %q was taught by %d principals; want 1 to %d", doc.canonical, n, MaxTeachers)
			return
		}
		ix.taughtBy.set(uint32(i), n)
		ix.teachers[doc.canonical] = n
	}
}

// indexDecodedTerms fills in what a decoded index derives from its terms:
// each tool's term list, field length codes and the norms.
func (ix *Index) indexDecodedTerms(termCount []int, total int) {
	// Each tool's term list is a window of one array, sized by the counts.
	arena := make([]uint32, total)
	for i := range ix.docs {
		n := termCount[i]
		ix.docs[i].terms = arena[:0:n]
		arena = arena[n:]
	}
	for id := range ix.terms {
		for _, p := range ix.terms[id].postings {
			doc := &ix.docs[p.doc]
			doc.terms = append(doc.terms, uint32(id))
		}
	}
	for i := range ix.docs {
		doc := &ix.docs[i]
		for f := range doc.lens {
			ix.codes[i][f] = lengthCode(doc.lens[f])
			ix.totalLen[f] += uint64(doc.lens[f])
		}
	}
	ix.updateNorms()
}
