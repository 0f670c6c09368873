// Package synthetic makes tool catalogs for benchmarks and tests: tools
// made deterministically from word lists, with Zipf-distributed words, so
// that a few words are in many tools and most are in few, as in real
// catalogs, and a long tail of made-up rare words.
package synthetic

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

var (
	verbs = strings.Fields(`get list create update delete search find fetch send upload download sync
		query run start stop cancel schedule export import convert translate summarize analyze validate
		check compute calculate resolve lookup archive restore publish subscribe approve reject merge
		deploy rollback scale monitor render parse format compress encrypt sign verify notify book`)
	nouns = strings.Fields(`user account file folder document invoice payment order customer product
		issue ticket comment message channel email calendar event meeting task project repository branch
		commit release deployment cluster node container image volume secret key certificate domain
		record table row column database query report dashboard chart metric alert incident log trace
		span service endpoint webhook token session password profile team organization role permission
		policy budget expense transaction refund subscription plan price quote contract lead opportunity
		campaign audience segment survey response form field workflow pipeline job queue worker schedule
		backup snapshot region zone network subnet firewall route address location map weather forecast
		city country currency rate stock portfolio news article video song playlist album artist movie
		recipe ingredient flight hotel reservation trip car route traffic package shipment warehouse
		inventory supplier device sensor reading temperature humidity sample experiment dataset model
		prediction translation language summary note bookmark contact phone address photo album`)
	adjectives = strings.Fields(`new old active archived public private shared recent pending failed
		daily weekly monthly current previous next first last primary secondary default custom remote
		local external internal total average maximum minimum optional required unique available`)
	fillers = strings.Fields(`the a an of for to in on with by from and or that which this is are be
		given specified optional using when if all each its their into as at`)
)

// syllables make the long tail of rare words: product names, jargon.
var syllables = strings.Fields(`ka lo mi ne ru sa ti vo ze bra cle dri flo gra kri plo stra tre vy qua xen zor`)

type catalogGen struct {
	r      *rand.Rand
	common *rand.Zipf
	rare   *rand.Zipf
	tail   []string
}

func newCatalogGen(seed uint64) *catalogGen {
	r := rand.New(rand.NewPCG(seed, 1))
	g := &catalogGen{r: r}
	g.common = rand.NewZipf(r, 1.1, 1, uint64(len(nouns)+len(verbs)+len(adjectives)-1))
	tailLen := 50000
	for i := 0; i < tailLen; i++ {
		n := 2 + r.IntN(3)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		g.tail = append(g.tail, b.String())
	}
	g.rare = rand.NewZipf(r, 1.05, 1, uint64(tailLen-1))
	return g
}

func (g *catalogGen) word() string {
	switch p := g.r.IntN(10); {
	case p < 3:
		return fillers[g.r.IntN(len(fillers))]
	case p < 9:
		i := int(g.common.Uint64())
		switch {
		case i < len(nouns):
			return nouns[i]
		case i < len(nouns)+len(verbs):
			return verbs[i-len(nouns)]
		default:
			return adjectives[i-len(nouns)-len(verbs)]
		}
	default:
		return g.tail[g.rare.Uint64()]
	}
}

func (g *catalogGen) sentence(min, max int) string {
	n := min + g.r.IntN(max-min+1)
	words := make([]string, n)
	for i := range words {
		words[i] = g.word()
	}
	return strings.Join(words, " ") + "."
}

// Catalog returns n tools in about n/20 namespaces, each with a
// description of 8 to 40 words and 1 to 6 described parameters. The same n
// gives the same tools.
func Catalog(n int) []messages.ToolDefinition {
	g := newCatalogGen(uint64(n))
	namespaces := make([]string, max(1, n/20))
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("%s%d", g.tail[g.r.IntN(len(g.tail))], i)
	}
	seen := make(map[string]bool, n)
	defs := make([]messages.ToolDefinition, 0, n)
	for len(defs) < n {
		ns := namespaces[g.r.IntN(len(namespaces))]
		method := verbs[g.r.IntN(len(verbs))] + "_" + nouns[g.r.IntN(len(nouns))]
		if g.r.IntN(2) == 0 {
			method += "_" + adjectives[g.r.IntN(len(adjectives))]
		}
		if seen[ns+"-"+method] {
			method += fmt.Sprintf("_%d", len(defs))
		}
		seen[ns+"-"+method] = true
		props := map[string]any{}
		for p := 0; p < 1+g.r.IntN(6); p++ {
			props[nouns[g.r.IntN(len(nouns))]+"_"+adjectives[g.r.IntN(len(adjectives))]] = map[string]any{
				"type":        "string",
				"description": g.sentence(4, 14),
			}
		}
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
		def := messages.ToolDefinition{
			Namespace:   ns,
			Method:      method,
			Description: g.sentence(8, 40),
			InputSchema: schema,
		}
		if g.r.IntN(3) == 0 {
			def.Metadata.Tags = []string{messages.TagReadOnly}
		}
		def.Source = messages.ToolSource{Kind: messages.SourceGo}
		def.Name = def.ToolName().String()
		defs = append(defs, def)
	}
	return defs
}

// Queries returns n queries, each a few words of one tool of defs mixed
// with other words, as an agent would phrase a need.
func Queries(defs []messages.ToolDefinition, n int) []string {
	g := newCatalogGen(uint64(n) + 7)
	out := make([]string, n)
	for i := range out {
		d := defs[g.r.IntN(len(defs))]
		words := strings.Fields(strings.ReplaceAll(d.Method, "_", " ") + " " + d.Description)
		var q []string
		for j := 0; j < 3+g.r.IntN(5); j++ {
			q = append(q, words[g.r.IntN(len(words))])
		}
		q = append(q, g.word(), g.word())
		out[i] = strings.Join(q, " ")
	}
	return out
}

// CommonWords returns the nouns and verbs that the catalogs use most.
func CommonWords() []string {
	return append(append([]string{}, nouns...), verbs...)
}
