package glob

import "testing"

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "ab", true},
		{"a*", "ba", false},
		{"*b", "ab", true},
		{"a*c", "abc", true},
		{"a*c", "ac", true},
		{"a*c", "ab", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXcYb", false},
		{"ab*ba", "aba", false}, // prefix and suffix must not overlap
		{"a**b", "aXb", true},
	} {
		g := Compile(tc.pattern)
		if got := g.Match(tc.s); got != tc.want {
			t.Errorf("%q matching %q: %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
	if s := Compile("a**b*").String(); s != "a*b*" {
		t.Errorf("String: %q", s)
	}
}
