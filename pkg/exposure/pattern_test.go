package exposure

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern string
		tool    string
		want    bool
	}{
		{"catalog:lookup", "catalog-lookup", true},
		{"catalog/lookup", "catalog-lookup", true},
		{"catalog.lookup", "catalog-lookup", true},
		{"catalog-lookup", "catalog-lookup", true},
		{"catalog:lookup", "catalog-lookupAll", false},
		{"catalog:lookup", "catalogue-lookup", false},
		{"catalog", "catalog-lookup", true},
		{"catalog", "catalogue-lookup", false},
		{"catalog", "xcatalog-lookup", false},
		{"system/exec", "system-exec", true},
		{"system/exec", "system_executor-run", false},
		{"system/executor:run", "system_executor-run", true},
		{"system/os:*", "system_os-getenv", true},
		{"system/os:*", "system-os", false},
		{"a/b/c", "a_b-c", true},
		{"*:list", "files-list", true},
		{"*:list", "files-listAll", false},
		{"*-list", "files-list", true},
		{"*", "anything-goes", true},
		{"*:*", "anything-goes", true},
		{"catalog:look*", "catalog-lookupAll", true},
		{"catalog:look*", "catalog-lookup", true},
		{"catalog:look*", "catalog-outlook", false},
		{"catalog:*All", "catalog-lookupAll", true},
		{"catalog:*All", "catalog-lookup", false},
		{"catalog:l*k*p", "catalog-lookup", true},
		{"catalog:l*k*p", "catalog-lookupAll", false},
		{"catalog:a*a", "catalog-a", false},
		{"catalog:a*a", "catalog-aa", true},
		{"cat*:lookup", "catalogue-lookup", true},
		{"cat*:lookup", "dog-lookup", false},
		{"catalog:**", "catalog-x", true},
		{"ns:get-item", "ns-get-item", true},
		{"ns-get-item", "ns-get-item", true},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", c.pattern, err)
			continue
		}
		n, err := messages.ParseToolName(c.tool)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Match(n); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.tool, got, c.want)
		}
	}
}

func TestParsePatternErrors(t *testing.T) {
	cases := []struct{ pattern, want string }{
		{"", "empty"},
		{"   ", "empty"},
		{"catalog:", "method is empty"},
		{":lookup", "namespace is empty"},
		{"cat alog:x", "namespace"},
		{"catalog:lo okup", "method"},
		{"catalog:look?", "method"},
		{"ca-t:x", `namespace "ca-t" holds '-'; want letters, digits, '_' and '*'`},
		{"catalog:look.up", `method "look.up" holds '.'; want letters, digits, '_', '-' and '*'`},
	}
	for _, c := range cases {
		_, err := ParsePattern(c.pattern)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePattern(%q) = %v, want an error about %q", c.pattern, err, c.want)
		}
	}
	var zero Pattern
	if zero.Match(messages.ToolName{Namespace: "a", Method: "b"}) {
		t.Error("the zero Pattern matches")
	}
	if got := MustParsePattern(" a:b ").String(); got != " a:b " {
		t.Errorf("String() = %q, want the source", got)
	}
}
