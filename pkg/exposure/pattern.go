package exposure

import (
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Pattern is a compiled tool pattern of a match rule. It names the namespace
// and the method separately, in any of the spellings that
// messages.ParseToolName reads ("ns:method", "ns/method", "ns.method",
// "ns-method"; "a/b:method" is namespace "a_b"). Each part is compared
// exactly unless it holds '*', which matches any run of characters within
// that part. A pattern without a separator names a whole namespace: "catalog"
// matches every tool of namespace "catalog" and none of "catalogue".
//
// The zero Pattern matches nothing.
type Pattern struct {
	source    string
	namespace glob
	method    glob
}

// ParsePattern compiles a pattern. It fails when a part is empty or holds a
// character that no canonical tool name can hold.
func ParsePattern(s string) (Pattern, error) {
	src := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Pattern{}, fmt.Errorf("pattern is empty")
	}
	var ns, method string
	if i := strings.IndexByte(s, ':'); i >= 0 {
		ns, method = s[:i], s[i+1:]
		ns = strings.NewReplacer("/", "_", ".", "_").Replace(ns)
	} else if i := strings.LastIndexByte(s, '/'); i >= 0 {
		ns, method = strings.ReplaceAll(s[:i], "/", "_"), s[i+1:]
	} else if i := strings.IndexByte(s, '.'); i >= 0 {
		ns, method = s[:i], s[i+1:]
	} else if i := strings.IndexByte(s, '-'); i >= 0 {
		ns, method = s[:i], s[i+1:]
	} else {
		ns, method = s, "*"
	}
	if err := checkPart(ns, "namespace", false); err != nil {
		return Pattern{}, fmt.Errorf("pattern %q: %w", src, err)
	}
	if err := checkPart(method, "method", true); err != nil {
		return Pattern{}, fmt.Errorf("pattern %q: %w", src, err)
	}
	return Pattern{source: src, namespace: compileGlob(ns), method: compileGlob(method)}, nil
}

// MustParsePattern is ParsePattern that panics, for constant patterns.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

func checkPart(part, kind string, dashOK bool) error {
	if part == "" {
		return fmt.Errorf("%s is empty", kind)
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '*':
		case c == '-' && dashOK:
		default:
			return fmt.Errorf("%s %q holds %q; want letters, digits, '_' and '*'", kind, part, c)
		}
	}
	return nil
}

// String returns the pattern as it was written.
func (p Pattern) String() string { return p.source }

// Match reports whether the pattern matches the tool.
func (p Pattern) Match(name messages.ToolName) bool {
	return p.namespace.match(name.Namespace) && p.method.match(name.Method)
}

// glob matches one part of a tool name. Without '*' it is an exact
// comparison; with it, parts holds the literal runs between the stars.
type glob struct {
	exact string
	parts []string
	wild  bool
	any   bool
}

func compileGlob(s string) glob {
	if !strings.Contains(s, "*") {
		return glob{exact: s}
	}
	for strings.Contains(s, "**") {
		s = strings.ReplaceAll(s, "**", "*")
	}
	return glob{parts: strings.Split(s, "*"), wild: true, any: s == "*"}
}

func (g *glob) match(s string) bool {
	if !g.wild {
		return g.exact != "" && s == g.exact
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
