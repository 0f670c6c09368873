package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	usagekeys "github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestLearningCommand: toolbus learning says whether discovery learns
// from use and what it learned of a tool; off (with a reason) and on
// switch it; reset forgets a tool's evidence, or all of it.
func TestLearningCommand(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	ctx := testenv.Context(t)
	c := testenv.Client(t, url, client.Options{Agent: "counter"})
	if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: "how many words", Turn: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "demo-word_count", map[string]string{"text": "a b"}, client.WithTurn("t1")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, messages.MustNames("").UsageBucket())
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, usagekeys.EvidenceKey(messages.ToolName{Namespace: "demo", Method: "word_count"}, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e != nil {
			break
		}
	}

	stdout, stderr, status := cli(t, bin, url, "learning", "status", "demo:word_count")
	if status != exitOK || !strings.Contains(stdout, "learning from use: on") || !strings.Contains(stdout, "demo-word_count: evidence of 1 agents") || !strings.Contains(stdout, "mani×") {
		t.Fatalf("learning status: exit status %d\n%s%s", status, stdout, stderr)
	}
	if _, stderr, status = cli(t, bin, url, "learning", "off"); status != exitUsage || !strings.Contains(stderr, "--reason") {
		t.Errorf("learning off without a reason: exit status %d\n%s", status, stderr)
	}
	var st messages.LearningStatus
	stdout, stderr, status = cli(t, bin, url, "--json", "learning", "off", "--reason", "privacy review")
	if status != exitOK || json.Unmarshal([]byte(stdout), &st) != nil || st.Enabled || st.Reason != "privacy review" || st.Records != 1 {
		t.Fatalf("learning off: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, "learning"); status != exitOK || !strings.HasPrefix(stdout, "learning from use: off since") || !strings.Contains(stdout, "privacy review") {
		t.Errorf("learning while off: exit status %d\n%s", status, stdout)
	}
	if stdout, _, status = cli(t, bin, url, "learning", "on"); status != exitOK || !strings.HasPrefix(stdout, "learning from use: on") {
		t.Errorf("learning on: exit status %d\n%s", status, stdout)
	}
	if stdout, stderr, status = cli(t, bin, url, "learning", "reset", "demo-word_count"); status != exitOK || stdout != "deleted 1 records of evidence for demo-word_count\n" {
		t.Errorf("learning reset: exit status %d\n%s%s", status, stdout, stderr)
	}
	for _, args := range [][]string{{"learning", "reset"}, {"learning", "reset", "demo-echo", "--all"}, {"learning", "on", "x"}, {"learning", "maybe"}, {"learning", "on", "--all"}} {
		if _, stderr, status := cli(t, bin, url, args...); status != exitUsage {
			t.Errorf("toolbus %v: exit status %d; want %d\n%s", args, status, exitUsage, stderr)
		}
	}
	if _, stderr, status := cli(t, bin, url, "learning", "status", "no such tool"); status != exitUsage || !strings.Contains(stderr, "invalid_name") && !strings.Contains(stderr, "invalid") {
		t.Errorf("learning status of a bad name: exit status %d\n%s", status, stderr)
	}
}
