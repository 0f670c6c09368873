package exposure

import (
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/internal/support/glob"
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
	namespace glob.Glob
	method    glob.Glob
}

// ParsePattern compiles a pattern. It fails when a part is empty or holds a
// character that no canonical tool name can hold.
func ParsePattern(s string) (Pattern, error) {
	src := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Pattern{}, fmt.Errorf("pattern is empty")
	}
	ns, method, ok := messages.SplitToolName(s)
	if !ok {
		method = "*" // a namespace alone: all its tools
	}
	if err := checkPart(ns, "namespace", false); err != nil {
		return Pattern{}, fmt.Errorf("pattern %q: %w", src, err)
	}
	if err := checkPart(method, "method", true); err != nil {
		return Pattern{}, fmt.Errorf("pattern %q: %w", src, err)
	}
	return Pattern{source: src, namespace: glob.Compile(ns), method: glob.Compile(method)}, nil
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
			if dashOK {
				return fmt.Errorf("%s %q holds %q; want letters, digits, '_', '-' and '*'", kind, part, c)
			}
			return fmt.Errorf("%s %q holds %q; want letters, digits, '_' and '*'", kind, part, c)
		}
	}
	return nil
}

// String returns the pattern as it was written.
func (p Pattern) String() string { return p.source }

// Match reports whether the pattern matches the tool.
func (p Pattern) Match(name messages.ToolName) bool {
	return p.namespace.Match(name.Namespace) && p.method.Match(name.Method)
}
