// Package glob matches names against patterns in which '*' stands for any
// run of characters, as exposure rules and policy rules write tool and
// agent names.
package glob

import "strings"

// Glob is a compiled pattern. Without '*' it is an exact comparison; with
// it, parts holds the literal runs between the stars.
type Glob struct {
	exact string
	parts []string
	wild  bool
	any   bool
}

// Compile compiles a pattern; every string is a valid one.
func Compile(pattern string) Glob {
	if !strings.Contains(pattern, "*") {
		return Glob{exact: pattern}
	}
	for strings.Contains(pattern, "**") {
		pattern = strings.ReplaceAll(pattern, "**", "*")
	}
	return Glob{parts: strings.Split(pattern, "*"), wild: true, any: pattern == "*"}
}

// Literal returns the pattern and true when it holds no '*', so that a
// caller can look the name up instead of matching.
func (g *Glob) Literal() (string, bool) { return g.exact, !g.wild }

// Match reports whether s matches the pattern.
func (g *Glob) Match(s string) bool {
	if !g.wild {
		return s == g.exact
	}
	if g.any {
		return true
	}
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, mid := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}

// String returns the pattern, runs of stars written as one.
func (g Glob) String() string {
	if !g.wild {
		return g.exact
	}
	return strings.Join(g.parts, "*")
}
