package main

import (
	"errors"
	"strings"
	"testing"
)

// TestDefaultDecider: without --by, a decision is by the NATS user the
// command connects as, else (with --creds alone) by whom the coordinator
// knows the caller to be, else by the system's name for the user, else,
// for an answer, by the agent --agent names; without any, the command
// line is wrong and says how to name the decider.
func TestDefaultDecider(t *testing.T) {
	t.Parallel()
	named := func() (string, error) { return "nb", nil }
	nameless := func() (string, error) { return "", errors.New("user: unknown userid 4242") }
	for _, tc := range []struct {
		name   string
		g      globals
		answer bool
		system func() (string, error)
		want   string
		usage  bool
	}{
		{"the NATS user", globals{user: "operator", agent: "bot"}, false, named, "operator", false},
		{"credentials: the coordinator names the caller", globals{creds: "op.creds"}, false, named, "", false},
		{"the system's user", globals{}, false, named, "nb", false},
		{"an answer by the agent", globals{agent: "bot"}, true, nameless, "", false},
		{"a decision is not the agent's", globals{agent: "bot"}, false, nameless, "", true},
		{"nobody", globals{}, false, nameless, "", true},
	} {
		got, err := defaultDecider(tc.g, tc.answer, tc.system)
		var usage usageError
		if got != tc.want || errors.As(err, &usage) != tc.usage || (err != nil) != tc.usage {
			t.Errorf("%s: %q, %v; want %q, usage error %v", tc.name, got, err, tc.want, tc.usage)
		}
		if tc.usage && err != nil && (!strings.Contains(err.Error(), "--by NAME") || !strings.Contains(err.Error(), "unknown userid 4242")) {
			t.Errorf("%s: the error does not say how to name the decider, or why: %v", tc.name, err)
		}
	}
}
