package main

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestOutcomeUnknownIsShownPlainly: a call that failed with
// outcome_unknown shows its state, its code and what the code means, both
// as a result and as the last line of a watch.
func TestOutcomeUnknownIsShownPlainly(t *testing.T) {
	message := messages.OutcomeUnknownMessage + " (attempt 1, on worker w1); an at-most-once tool is not run again"
	res := &messages.CallResult{CallID: "c", Status: messages.StateFailed, IsError: true,
		Content: []messages.ContentBlock{messages.TextBlock(message)},
		Error:   &messages.ResultError{Code: messages.ResultOutcomeUnknown, Message: message}}
	var b strings.Builder
	writeContent(&b, res)
	if want := "failed (outcome_unknown):\n" + message + "\n"; b.String() != want {
		t.Errorf("result printed as %q, want %q", b.String(), want)
	}
	if line := eventLine(&messages.CallEvent{Kind: messages.EventResult, Result: res}); line != "failed (outcome_unknown)" {
		t.Errorf("watch line %q", line)
	}
}
