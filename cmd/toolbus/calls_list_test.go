package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestCallsList: toolbus calls list prints the execution log as a table
// or JSON, newest call first, filtered by its flags, with the cursor of
// the next page.
func TestCallsList(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	c := testenv.Client(t, url, client.Options{Agent: "lister"})
	ctx := testenv.Context(t)
	var ids []string
	for _, call := range []struct{ tool, args string }{
		{"demo-echo", `{"text":"one"}`},
		{"broken-fail", `{"why":"on purpose"}`},
		{"demo-echo", `{"text":"three"}`},
	} {
		res, err := c.Call(ctx, call.tool, json.RawMessage(call.args))
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{res.CallID}, ids...)
	}

	var page messages.CallsListReply
	stdout, stderr, status := cli(t, bin, url, "--json", "calls", "list", "--limit", "2")
	if status != exitOK || json.Unmarshal([]byte(stdout), &page) != nil {
		t.Fatalf("exit status %d\n%s%s", status, stdout, stderr)
	}
	if got := []string{page.Calls[0].CallID, page.Calls[1].CallID}; len(page.Calls) != 2 || !slices.Equal(got, ids[:2]) || page.NextCursor == "" {
		t.Fatalf("first page %+v, want %v and a cursor", page, ids[:2])
	}
	stdout, stderr, status = cli(t, bin, url, "calls", "list", "--limit", "2", "--cursor", page.NextCursor)
	if status != exitOK {
		t.Fatalf("exit status %d\n%s", status, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "QUEUED") || !strings.Contains(lines[1], ids[2]) ||
		!strings.Contains(lines[1], "demo-echo") || !strings.Contains(lines[1], "lister") || !strings.Contains(lines[1], "completed") {
		t.Fatalf("second page:\n%s", stdout)
	}

	stdout, stderr, status = cli(t, bin, url, "calls", "list", "--tool", "broken-fail", "--since", "1h", "--state", "completed,failed")
	if status != exitOK || !strings.Contains(stdout, ids[1]) || strings.Contains(stdout, ids[0]) || strings.Contains(stdout, ids[2]) || strings.Contains(stdout, "next page") {
		t.Fatalf("filtered by tool: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, "calls", "list", "--namespace", "demo", "--limit", "1"); status != exitOK || !strings.Contains(stdout, "next page: --cursor ") {
		t.Fatalf("a page with more after it names the next cursor:\n%s", stdout)
	}
	if _, stderr, status = cli(t, bin, url, "calls", "list", "--state", "sleeping"); status != exitRequestFailed || !strings.Contains(stderr, "states") {
		t.Fatalf("a bad state: exit status %d\n%s", status, stderr)
	}
	if _, _, status = cli(t, bin, url, "calls", "list", "--since", "yesterday"); status != exitUsage {
		t.Fatalf("a bad time: exit status %d, want %d", status, exitUsage)
	}
}

// TestCallsListPrintsNoControlCharacters: the worker ID of a call is what
// the worker's result says, so the table prints it, as every text column,
// with control characters as '?': a worker cannot move the operator's
// cursor or break the table.
func TestCallsListPrintsNoControlCharacters(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	writeCallsList(&out, &messages.CallsListReply{Calls: []messages.CallLogEntry{{
		CallID: "PZ1EJQ8Ty4UhRr2X7bLr9m", Tool: "demo-echo", State: messages.StateCompleted, Attempts: 1,
		Worker: "host-a\x1b[2J\rforged\tcolumn\nline",
	}}})
	if strings.ContainsAny(out.String(), "\x1b\r") || !strings.Contains(out.String(), "host-a?[2J?forged?column?line") {
		t.Fatalf("the table:\n%q", out.String())
	}
}
