package setup

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/nats-io/jwt/v2"
)

// grantsText is every role's grants, those of deploy/nats/users.inc,
// written for the default prefix: permissions, TOOLBUS's exports and each
// account's imports of them. It is data, not code: a file, so that what
// each role may do reads as users.inc does, and the subjects it names are
// grants, never requests this package sends.
//
//go:embed grants.txt
var grantsText string

// roleGrants are the sections of grants.txt, by title.
var roleGrants = mustParseGrants(grantsText)

// export is one export of TOOLBUS; restricted ones are for AGENTS only.
type export struct {
	subject    string
	stream     bool
	response   jwt.ResponseType
	restricted bool
}

// importOf is one import of TOOLBUS's exports.
type importOf struct {
	subject string
	stream  bool
	share   bool
}

// mustParseGrants reads grants.txt: sections "[title]" of one subject a
// line, or of "service|stream SUBJECT [options]" for exports and imports.
func mustParseGrants(text string) map[string][]string {
	out := map[string][]string{}
	title := ""
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			title = line[1 : len(line)-1]
			out[title] = []string{}
		case title == "":
			panic(fmt.Sprintf("grants.txt:%d: a line before the first section", n+1))
		default:
			out[title] = append(out[title], line)
		}
	}
	return out
}

// permissions are a role's publish or subscribe permissions; the worker's
// hold {ns}.
func permissions(title string) []string {
	list, ok := roleGrants[title]
	if !ok {
		panic("grants.txt has no section " + title)
	}
	return list
}

// exports are TOOLBUS's exports.
func exports() []export {
	var out []export
	for _, line := range permissions("TOOLBUS exports") {
		f := strings.Fields(line)
		e := export{subject: f[1], stream: f[0] == "stream"}
		for _, opt := range f[2:] {
			switch opt {
			case "singleton":
				e.response = jwt.ResponseTypeSingleton
			case "stream":
				e.response = jwt.ResponseTypeStream
			case "restricted":
				e.restricted = true
			default:
				panic("grants.txt: export option " + opt)
			}
		}
		out = append(out, e)
	}
	return out
}

// imports are the imports of TOOLBUS's exports a section lists.
func imports(title string) []importOf {
	var out []importOf
	for _, line := range permissions(title) {
		f := strings.Fields(line)
		i := importOf{subject: f[1], stream: f[0] == "stream"}
		for _, opt := range f[2:] {
			if opt != "share" {
				panic("grants.txt: import option " + opt)
			}
			i.share = true
		}
		out = append(out, i)
	}
	return out
}

// nsPlaceholder stands for the namespace in the worker's grants.
const nsPlaceholder = "{ns}"

// grants rewrites the subjects of grants.txt for an installation's prefix.
type grants struct {
	lower, upper string
}

func newGrants(prefix string) grants {
	return grants{lower: prefix, upper: strings.ToUpper(prefix)}
}

// subject is s for the installation's prefix, and namespace ns where s
// names {ns}: the prefix is applied first, so that a namespace holding
// "toolbus" keeps its name.
func (g grants) subject(s, ns string) string {
	if g.lower != "toolbus" {
		s = strings.ReplaceAll(strings.ReplaceAll(s, "toolbus", g.lower), "TOOLBUS", g.upper)
	}
	return strings.ReplaceAll(s, nsPlaceholder, ns)
}

func (g grants) subjects(list []string, ns string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = g.subject(s, ns)
	}
	return out
}
