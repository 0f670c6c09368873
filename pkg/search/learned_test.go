package search

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/pkg/messages"
)

func toolName(t testing.TB, s string) messages.ToolName {
	t.Helper()
	n, err := messages.ParseToolName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func gapCatalog() []messages.ToolDefinition {
	return append(testCatalog(),
		tool("fs", "edit_file", "Edit a file: show the lines around a change and write it back.", map[string]string{"path": "File to edit."}),
		tool("media", "view_image", "Displays an image file (PNG, JPEG) to the user.", map[string]string{"path": "Image path."}),
		tool("pets", "listPets", "List all pets.", map[string]string{"limit": "How many."}),
		tool("pets", "createPet", "Create a pet.", map[string]string{"name": "The pet's name.", "kind": "Kind of pet, such as cat or dog."}),
	)
}

// learnFrom folds the evidence of agents that searched each query and
// then called tool, one turn each, as the indexer would.
func learnFrom(t testing.TB, ix *Index, tool string, agents int, queries ...string) {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var records []UsageRecord
	for a := range agents {
		var r UsageRecord
		for _, q := range queries {
			r.Add(EvidenceTerms([]TurnSearch{{Terms: UsageTerms(q), Tools: []string{tool}}}, tool), 1, now, LearnConfig{})
		}
		r.User = fmt.Sprint("user-", a)
		records = append(records, r)
	}
	learned := Fold(records, LearnConfig{})
	if _, err := ix.SetLearnedBy(toolName(t, tool), learned.Terms, learned.Teachers); err != nil {
		t.Fatal(err)
	}
}

// What agents searched before they called a tool finds the tool for
// words its definition lacks.
func TestLearnedFieldClosesTheVocabularyGap(t *testing.T) {
	ix := mustBuild(t, gapCatalog())
	for _, c := range []struct{ query, tool string }{
		{"show me a picture", "media-view_image"},
		{"find pets that are cats", "pets-listPets"},
	} {
		if first := names(search(t, ix, Query{Text: c.query}).Hits); len(first) > 0 && first[0] == c.tool {
			t.Fatalf("%q finds %s first before learning: the test shows nothing", c.query, c.tool)
		}
		learnFrom(t, ix, c.tool, 3, c.query, "a "+c.query+" please")
		if first := names(search(t, ix, Query{Text: c.query}).Hits); len(first) == 0 || first[0] != c.tool {
			t.Errorf("%q finds %v after learning; want %s first", c.query, first, c.tool)
		}
	}
}

// A learned term that the definition holds adds nothing: what use
// teaches is the words a definition lacks.
func TestLearnedFieldLeavesDefinitionTermsAlone(t *testing.T) {
	defs := gapCatalog()
	ix := mustBuild(t, defs)
	before := search(t, ix, Query{Text: "pet"})
	if _, err := ix.SetLearned(toolName(t, "pets-createPet"), []LearnedTerm{{Term: "pet", Count: MaxLearnedCount}}); err != nil {
		t.Fatal(err)
	}
	if after := search(t, ix, Query{Text: "pet"}); !sameResult(after, before) {
		t.Errorf("learning a term of the definition changed the ranking:\n%v\n%v", before.Hits, after.Hits)
	}
}

// Learned postings do not change the IDF of a definition's words, so
// that a tool nobody used scores as it did.
func TestLearnedFieldKeepsDefinitionIDF(t *testing.T) {
	defs := gapCatalog()
	ix := mustBuild(t, defs)
	q := Query{Text: "display image"}
	before := search(t, ix, q)
	for _, d := range defs {
		if d.Name == "media-view_image" {
			continue
		}
		// "display" is the stem the view_image description holds.
		if _, err := ix.SetLearned(d.ToolName(), []LearnedTerm{{Term: "displai", Count: 1}, {Term: "zzz", Count: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	after := search(t, ix, q)
	score := func(r Result, tool string) float64 {
		for _, h := range r.Hits {
			if h.Tool.String() == tool {
				return h.Score
			}
		}
		return -1
	}
	if b, a := score(before, "media-view_image"), score(after, "media-view_image"); b <= 0 || a != b {
		t.Errorf("view_image scored %v before and %v after other tools learned its word", b, a)
	}
}

// A query that shares one word with what led agents to a tool gets less
// of the learned boost than one made of those words.
func TestLearnedBoostFollowsCoverage(t *testing.T) {
	ix := mustBuild(t, gapCatalog())
	learnFrom(t, ix, "media-view_image", 2, "show me a picture of a sunset")
	boost := func(query string) float64 {
		with := search(t, ix, Query{Text: query, PageSize: MaxPageSize})
		plain := mustBuild(t, gapCatalog())
		without := search(t, plain, Query{Text: query, PageSize: MaxPageSize})
		score := func(r Result) float64 {
			for _, h := range r.Hits {
				if h.Tool.String() == "media-view_image" {
					return h.Score
				}
			}
			return 0
		}
		return score(with) - score(without)
	}
	full, partial := boost("picture sunset"), boost("sunset weather forecast in a city")
	if !(full > 0 && partial > 0 && partial < full/2) {
		t.Errorf("boost of a query of learned words %.3f, of one sharing a word %.3f", full, partial)
	}
}

// Of two tools with one definition, the one agents called for other words
// gives way, for a query those words do not reach, to the one no agent has
// called yet (whose name would win the tie), while a query in its agents'
// words still finds it first.
func TestUntaughtTwinKeepsItsPlace(t *testing.T) {
	params := map[string]string{"artist": "The artist.", "city": "City of the concert."}
	for _, principals := range []int{1, 2} {
		ix := mustBuild(t, append(testCatalog(),
			tool("concert", "book_ticket", "Book a ticket for a concert.", params),
			tool("venue", "book_ticket", "Book a ticket for a concert.", params),
		))
		query := "a ticket for Adele's concert"
		if first := names(search(t, ix, Query{Text: query}).Hits); len(first) < 2 || first[0] != "concert-book_ticket" || first[1] != "venue-book_ticket" {
			t.Fatalf("%q finds %v before learning; the test wants the twins first, concert-book_ticket by its name", query, first)
		}
		learnFrom(t, ix, "concert-book_ticket", principals, "seats at a rock show tonight")
		if first := names(search(t, ix, Query{Text: query}).Hits); len(first) < 2 || first[0] != "venue-book_ticket" {
			t.Errorf("taught by %d: %q finds %v; want the untaught venue-book_ticket first", principals, query, first)
		}
		if first := names(search(t, ix, Query{Text: "rock show seats"}).Hits); len(first) == 0 || first[0] != "concert-book_ticket" {
			t.Errorf("taught by %d: %q finds %v; want concert-book_ticket first", principals, "rock show seats", first)
		}
	}
}

// What is learned of a tool lowers its score for a query its learned
// field does not cover by at most an eleventh of its definition's part
// when one principal taught it, and a sixth when several did, however
// many: an agent, or a user's agents, that teach another's tool words of
// nothing cost it little.
func TestLearnedFieldLowersAToolByABoundedShare(t *testing.T) {
	query := "display an image file"
	for _, c := range []struct {
		principals int
		least      float64 // of the score before
	}{{1, 1 / 1.1}, {2, 1 / 1.2}, {5, 1 / 1.2}} {
		ix := mustBuild(t, gapCatalog())
		score := func() float64 {
			for _, h := range search(t, ix, Query{Text: query, PageSize: MaxPageSize}).Hits {
				if h.Tool.String() == "media-view_image" {
					return h.Score
				}
			}
			return 0
		}
		before := score()
		learnFrom(t, ix, "media-view_image", c.principals, "zebra quokka wombat")
		after := score()
		if !(before > 0 && after < before && math.Abs(after-before*c.least) <= 1e-5*before) {
			t.Errorf("%d principals: view_image scored %v before it learned words of nothing and %v after; want %v of it", c.principals, before, after, c.least)
		}
	}
}

// The agents of one user count as one principal, and records without a
// user each as one.
func TestTeachersCountsPrincipals(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(user string, terms ...string) UsageRecord {
		var r UsageRecord
		r.Add(terms, 1, now, LearnConfig{})
		r.User = user
		return r
	}
	for _, c := range []struct {
		records []UsageRecord
		want    int
	}{
		{nil, 0},
		{[]UsageRecord{rec("u1", "pictur"), rec("u1", "show")}, 1},
		{[]UsageRecord{rec("u1", "pictur"), rec("u2", "pictur")}, 2},
		{[]UsageRecord{rec("", "pictur"), rec("", "pictur"), rec("u1", "show")}, 3},
		{[]UsageRecord{rec("u1"), rec("u2", "pictur")}, 1}, // a record of no term teaches nothing
	} {
		if got := Teachers(c.records); got != c.want {
			t.Errorf("Teachers of %v = %d; want %d", c.records, got, c.want)
		}
	}
	ix := mustBuild(t, gapCatalog())
	name := toolName(t, "media-view_image")
	if _, err := ix.SetLearnedBy(name, []LearnedTerm{{Term: "pictur", Count: 2}}, 0); err == nil {
		t.Error("a learned field that no principal taught was set")
	}
	if changed, err := ix.SetLearnedBy(name, []LearnedTerm{{Term: "pictur", Count: 2}}, 7); err != nil || !changed || ix.Teachers(name) != MaxTeachers {
		t.Errorf("taught by 7: changed %v, %v, teachers %d; want %d", changed, err, ix.Teachers(name), MaxTeachers)
	}
	if changed, _ := ix.SetLearnedBy(name, []LearnedTerm{{Term: "pictur", Count: 2}}, 1); !changed || ix.Teachers(name) != 1 {
		t.Errorf("the same terms taught by fewer principals: changed %v, teachers %d", changed, ix.Teachers(name))
	}
	if changed, _ := ix.SetLearnedBy(name, nil, 0); !changed || ix.Teachers(name) != 0 {
		t.Errorf("the field cleared: changed %v, teachers %d", changed, ix.Teachers(name))
	}
}

func TestLearnedFieldSurvivesUpsertAndRemove(t *testing.T) {
	defs := gapCatalog()
	ix := mustBuild(t, defs)
	name := toolName(t, "media-view_image")
	learnFrom(t, ix, name.String(), 2, "show me a picture")
	want := ix.Learned(name)
	if len(want) == 0 {
		t.Fatal("nothing learned")
	}
	top := func() string { return names(search(t, ix, Query{Text: "show me a picture"}).Hits)[0] }
	if top() != name.String() {
		t.Fatalf("%s not first", name)
	}
	var def messages.ToolDefinition
	for _, d := range defs {
		if d.Name == name.String() {
			def = d
		}
	}
	def.Description = "Shows an image file to the user."
	if err := ix.Upsert(def); err != nil {
		t.Fatal(err)
	}
	if top() != name.String() || !slices.Equal(ix.Learned(name), want) {
		t.Errorf("an upsert lost the learned field: %v, %v", ix.Learned(name), top())
	}
	ix.Remove(name)
	if hits := search(t, ix, Query{Text: "show me a picture"}).Hits; slices.Contains(names(hits), name.String()) {
		t.Fatal("a removed tool is found")
	}
	if err := ix.Upsert(def); err != nil {
		t.Fatal(err)
	}
	if top() != name.String() {
		t.Errorf("a tool upserted after its removal lost its learned field")
	}
	// Clearing the field restores the index as built.
	if changed, err := ix.SetLearned(name, nil); err != nil || !changed {
		t.Fatalf("clear: %v %v", changed, err)
	}
	plain := mustBuild(t, defs)
	if err := plain.Upsert(def); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"show me a picture", "image", "pets", ""} {
		if got, want := search(t, ix, Query{Text: q}), search(t, plain, Query{Text: q}); !sameResult(got, want) {
			t.Errorf("%q after clearing: %v; want %v", q, got.Hits, want.Hits)
		}
	}
}

func TestSetLearnedRefuses(t *testing.T) {
	ix := mustBuild(t, gapCatalog())
	name := toolName(t, "media-view_image")
	many := make([]LearnedTerm, MaxLearnedTerms+1)
	for i := range many {
		many[i] = LearnedTerm{Term: fmt.Sprint("t", i), Count: 1}
	}
	for _, c := range []struct {
		terms []LearnedTerm
		want  string
	}{
		{[]LearnedTerm{{Term: "", Count: 1}}, "not a normalised term"},
		{[]LearnedTerm{{Term: "Picture", Count: 1}}, "not a normalised term"},
		{[]LearnedTerm{{Term: "two words", Count: 1}}, "not a normalised term"},
		{[]LearnedTerm{{Term: strings.Repeat("a", maxTokenBytes+1), Count: 1}}, "not a normalised term"},
		{[]LearnedTerm{{Term: "pictur", Count: MaxLearnedCount + 1}}, "at most"},
		{[]LearnedTerm{{Term: "pictur", Count: 1}, {Term: "pictur", Count: 2}}, "twice"},
		{many, "at most"},
	} {
		if _, err := ix.SetLearned(name, c.terms); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetLearned(%v) = %v; want an error saying %q", c.terms, err, c.want)
		}
	}
	if got := ix.Learned(name); len(got) != 0 {
		t.Errorf("a refused field was kept: %v", got)
	}
	if _, err := ix.SetLearned(messages.ToolName{Namespace: "bad ns", Method: "x"}, nil); err == nil {
		t.Error("an invalid tool name was taken")
	}
}

func TestLearnedEncodeRoundTrip(t *testing.T) {
	defs := append(gapCatalog(), cachedCatalog(500)...)
	ix := mustBuild(t, defs)
	learnFrom(t, ix, "media-view_image", 2, "show me a picture")
	learnFrom(t, ix, "pets-listPets", 1, "find pets that are cats")
	// A field of a tool that is not indexed is not part of the encoding.
	if _, err := ix.SetLearned(toolName(t, "gone-tool"), []LearnedTerm{{Term: "ghost", Count: 3}}); err != nil {
		t.Fatal(err)
	}
	data := ix.Encode()
	decoded, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if again := decoded.Encode(); !bytes.Equal(again, data) {
		t.Error("encoding the decoded index gives other bytes")
	}
	inEffect := func(ix *Index) map[string][]LearnedTerm {
		out := map[string][]LearnedTerm{}
		ix.EachLearned(func(name string, terms []LearnedTerm, _ int) { out[name] = slices.Clone(terms) })
		return out
	}
	for name, want := range map[string]int{"media-view_image": 2, "pets-listPets": 1, "fs-edit_file": 0} {
		if got := decoded.Teachers(toolName(t, name)); got != want {
			t.Errorf("%s was taught by %d principals after decoding; want %d", name, got, want)
		}
	}
	want := inEffect(ix)
	if got := inEffect(decoded); len(got) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("learned fields in effect after decoding %v; want %v", got, want)
	}
	for name, terms := range want {
		if got := decoded.Learned(toolName(t, name)); !slices.Equal(got, terms) {
			t.Errorf("%s learned %v after decoding; want the terms in effect %v", name, got, terms)
		}
	}
	if slices.ContainsFunc(want["pets-listPets"], func(lt LearnedTerm) bool { return lt.Term == "pet" }) {
		t.Error("a term of the definition is in effect as learned")
	}
	if got := decoded.Learned(toolName(t, "gone-tool")); got != nil {
		t.Errorf("an unindexed tool's field was encoded: %v", got)
	}
	for _, q := range append(synthetic.Queries(defs, 100), "show me a picture", "find pets that are cats") {
		if got, want := search(t, decoded, Query{Text: q}), search(t, ix, Query{Text: q}); !sameResult(got, want) {
			t.Fatalf("%q: decoded %v; want %v", q, got.Hits, want.Hits)
		}
	}
}

// The count of principals that taught a tool is the encoding's last byte
// here; a count the index never writes, or one missing, is damage.
func TestDecodeRefusesABadTeachersCount(t *testing.T) {
	ix := mustBuild(t, gapCatalog())
	learnFrom(t, ix, "media-view_image", 1, "show me a picture")
	data := ix.Encode()
	if data[len(data)-1] != 1 {
		t.Fatalf("the encoding ends with %d; the test wants the teachers count, 1", data[len(data)-1])
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"zero", append(slices.Clone(data[:len(data)-1]), 0)},
		{"above MaxTeachers", append(slices.Clone(data[:len(data)-1]), MaxTeachers+1)},
		{"missing", slices.Clone(data[:len(data)-1])},
	} {
		if _, err := Decode(c.data); !errors.Is(err, ErrCorruptIndex) {
			t.Errorf("%s: Decode = %v; want ErrCorruptIndex", c.name, err)
		}
	}
}

// Pruning stays exact with learned fields, whose part of a score depends
// on the whole query.
func TestRankMatchesBruteForceWithLearnedFields(t *testing.T) {
	defs := synthetic.Catalog(1500)
	ix := mustBuild(t, defs)
	queries := synthetic.Queries(defs, 120)
	for i := 0; i < 400; i++ {
		q := UsageTerms(queries[i%len(queries)] + " " + queries[(i*7)%len(queries)])
		var terms []LearnedTerm
		for j, term := range q {
			terms = append(terms, LearnedTerm{Term: term, Count: uint8(1 + (i+j)%MaxLearnedCount)})
		}
		if _, err := ix.SetLearned(defs[(i*13)%len(defs)].ToolName(), terms); err != nil {
			t.Fatal(err)
		}
	}
	for _, text := range queries {
		for _, q := range []Query{{Text: text, PageSize: 1}, {Text: text}, {Text: text, PageSize: 50, Page: 1}} {
			all := bruteForce(ix, q)
			size := q.PageSize
			if size == 0 {
				size = DefaultPageSize
			}
			start := min(q.Page*size, len(all))
			want := all[start:min(start+size, len(all))]
			if got := search(t, ix, q); !slices.Equal(got.Hits, want) && !(len(want) == 0 && len(got.Hits) == 0) {
				t.Fatalf("%q page %d size %d:\ngot  %v\nwant %v", text, q.Page, size, got.Hits, want)
			}
		}
	}
}

// A posting holds a term in the definition's fields or in the learned
// field, never both: a term's bound is the larger of the two parts'
// bounds. Counting both made every word that some tools learned (the
// common words of queries) bound far above what any tool scores for it,
// and the search scored most tools that hold it instead of pruning them.
func TestLearnedTermBoundIsTheLargerPart(t *testing.T) {
	ix := mustBuild(t, cachedCatalog(200))
	var definition, learned, both termFreqs
	definition[FieldDescription], definition[FieldName] = 3, 1
	learned[FieldLearned] = MaxLearnedCount
	both = definition
	both[FieldLearned] = learned[FieldLearned]
	d, l := ix.bound(2, &definition), ix.bound(2, &learned)
	if d <= 0 || l <= 0 {
		t.Fatalf("bounds %v and %v; want both above 0", d, l)
	}
	if got := ix.bound(2, &both); got != max(d, l) {
		t.Errorf("bound of a term held by definitions and learned fields = %v; want %v, the larger of %v and %v", got, max(d, l), d, l)
	}
	// Every posting's contribution stays within its term's bound.
	for id := range ix.terms {
		term := &ix.terms[id]
		for i := range term.postings {
			v, lv := ix.contribution(1, &term.postings[i])
			if b := ix.bound(1, &term.maxTF); float64(v)+float64(lv) > b {
				t.Fatalf("term %q: posting of tool %d adds %v, above its bound %v", term.text, term.postings[i].doc, float64(v)+float64(lv), b)
			}
		}
	}
}

// The pruning that follows from the tighter bound keeps rankings exact on
// a catalog where common words are learned by many tools, as agents'
// queries teach them.
func TestRankMatchesBruteForceWithCommonWordsLearned(t *testing.T) {
	defs := synthetic.Catalog(1000)
	ix := mustBuild(t, defs)
	queries := synthetic.Queries(defs, 400)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 300 {
		records := make([]UsageRecord, 3)
		for a := range records {
			records[a].Add(append(UsageTerms(queries[(2*i+a)%len(queries)]), fmt.Sprintf("zq%d", i)), 1, now, LearnConfig{})
			records[a].Add(UsageTerms(queries[(2*i+a+1)%len(queries)]), 1, now, LearnConfig{})
		}
		if _, err := ix.SetLearned(defs[(i*7)%len(defs)].ToolName(), FoldUsage(records, LearnConfig{})); err != nil {
			t.Fatal(err)
		}
	}
	for _, text := range queries[:150] {
		for _, q := range []Query{{Text: text, PageSize: 1}, {Text: text}, {Text: text, PageSize: 30, Page: 1}} {
			all := bruteForce(ix, q)
			size := q.PageSize
			if size == 0 {
				size = DefaultPageSize
			}
			start := min(q.Page*size, len(all))
			want := all[start:min(start+size, len(all))]
			if got := search(t, ix, q); !slices.Equal(got.Hits, want) && !(len(want) == 0 && len(got.Hits) == 0) {
				t.Fatalf("%q page %d size %d:\ngot  %v\nwant %v", text, q.Page, size, got.Hits, want)
			}
		}
	}
}
