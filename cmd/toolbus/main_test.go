package main

import (
	"strings"
	"testing"
)

// Measuring has a command of its own: the user's command neither lists
// nor runs it.
func TestMeasuringIsNotAUserCommand(t *testing.T) {
	t.Parallel()
	for _, word := range []string{"bench", "soak", "search-eval"} {
		if strings.Contains(usage, word) {
			t.Errorf("toolbus --help mentions %q", word)
		}
		if err := run([]string{word}); err != exitError(2) {
			t.Errorf("toolbus %s: %v, want an unknown command", word, err)
		}
	}
}
