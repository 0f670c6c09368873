package messages_test

import (
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// RandomToken makes valid routes and routed call IDs, each unlike the
// last: no two of many share a prefix longer than chance allows, as a
// NUID's, whose later part counts up, would.
func TestRandomToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	prefixes := map[string]int{}
	for range 10000 {
		tok := messages.RandomToken()
		if err := messages.ValidateRoute(tok); err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
		if err := messages.ValidateRoutedCallID(tok, messages.RoutedCallID(tok, messages.RandomToken())); err != nil {
			t.Fatalf("call ID on route %q: %v", tok, err)
		}
		if seen[tok] {
			t.Fatalf("token %q drawn twice", tok)
		}
		seen[tok] = true
		prefixes[tok[:4]]++
	}
	// 10,000 draws over 62^4 (14.8 million) four-character prefixes:
	// a prefix drawn 4 times is beyond chance.
	for p, n := range prefixes {
		if n > 3 {
			t.Fatalf("prefix %q drawn %d times in 10,000 tokens", p, n)
		}
	}
}
