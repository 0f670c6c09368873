package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestHelpOnStandardOutput: --help (and -h, and toolbus help COMMAND) of
// every command prints its usage on standard output with exit status 0,
// without reaching Toolbus; a mistake in the flags prints it on standard
// error, exit status 2.
func TestHelpOnStandardOutput(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	nowhere := "nats://127.0.0.1:1"
	for _, command := range [][]string{
		{}, {"dev"}, {"mcp"}, {"console"}, {"tools"}, {"tools", "enable"}, {"tools", "disable"}, {"tools", "remove"},
		{"search"}, {"call"}, {"calls"}, {"calls", "get"}, {"calls", "watch"}, {"calls", "cancel"}, {"calls", "list"},
		{"turns"}, {"turns", "get"}, {"approvals"}, {"approvals", "list"}, {"approvals", "approve"}, {"approvals", "deny"},
		{"approvals", "answer"}, {"audit"}, {"workers"}, {"setup"}, {"namespace"}, {"namespace", "add"}, {"namespace", "list"},
		{"agent"}, {"agent", "add"}, {"agent", "revoke"}, {"up"}, {"learning"}, {"learning", "reset"},
	} {
		for _, help := range []string{"--help", "-h"} {
			args := append(append([]string{}, command...), help)
			stdout, stderr, status := cli(t, bin, nowhere, args...)
			if status != exitOK || stderr != "" || !strings.Contains(stdout, "usage:") && !strings.Contains(stdout, "Usage:") {
				t.Errorf("toolbus %v: exit status %d\nstdout:\n%s\nstderr:\n%s", args, status, stdout, stderr)
			}
		}
	}
	stdout, stderr, status := cli(t, bin, nowhere, "help", "calls", "list")
	if status != exitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: toolbus calls list") || !strings.Contains(stdout, "-since") {
		t.Errorf("toolbus help calls list: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, nowhere, "help"); status != exitOK || stderr != "" || !strings.Contains(stdout, "search QUERY") {
		t.Errorf("toolbus help: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, nowhere, "calls", "list", "--bogus"); status != exitUsage || stdout != "" || !strings.Contains(stderr, "-bogus") || !strings.Contains(stderr, "usage: toolbus calls list") {
		t.Errorf("a flag calls list does not take: exit status %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
}

// TestSearch: toolbus search finds the tools that best match a query,
// best first, with their scores (exact for a tool the query names), as a
// table or as the discovery reply in JSON; without a query it is a usage
// mistake.
func TestSearch(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	stdout, stderr, status := cli(t, bin, url, "search", "count", "the", "words")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if status != exitOK || len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "SCORE TOOL DESCRIPTION" {
		t.Fatalf("search: exit status %d\n%s%s", status, stdout, stderr)
	}
	if f := strings.Fields(lines[1]); len(f) < 3 || f[1] != "demo-word_count" || !strings.Contains(f[0], ".") {
		t.Fatalf("search for counting words, best first:\n%s", stdout)
	}
	var reply messages.DiscoverReply
	stdout, stderr, status = cli(t, bin, url, "--json", "search", "--limit", "2", "count words")
	if status != exitOK || json.Unmarshal([]byte(stdout), &reply) != nil || len(reply.Hits) == 0 || len(reply.Hits) > 2 ||
		reply.Hits[0].Name != "demo-word_count" || reply.Hits[0].Score <= 0 || len(reply.Tools) != len(reply.Hits) {
		t.Fatalf("search --json: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, "search", "demo-echo"); status != exitOK || !strings.HasPrefix(strings.Split(stdout, "\n")[1], "exact  demo-echo") {
		t.Fatalf("search for a tool by its name:\n%s", stdout)
	}
	if stdout, _, status = cli(t, bin, url, "search", "--namespace", "broken", "count words"); status != exitOK || strings.Contains(stdout, "demo-") {
		t.Fatalf("search in namespace broken:\n%s", stdout)
	}
	if _, stderr, status = cli(t, bin, url, "search"); status != exitUsage || !strings.Contains(stderr, "needs a query") {
		t.Fatalf("search without a query: exit status %d\n%s", status, stderr)
	}
}

// TestDisablingANamespaceWithoutToolsSaysSo: a namespace is switched off
// before its tools come too, so naming one with no tool (a typo, or one
// whose worker has not started) succeeds, with a note saying so; one with
// tools gets no note. A worker that then publishes the namespace's tools
// finds them disabled.
func TestDisablingANamespaceWithoutToolsSaysSo(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.NoBuiltinTools = true })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	bin := testenv.Binary(t, "./cmd/toolbus")
	url := srv.URL()
	stdout, stderr, status := cli(t, bin, url, "tools", "disable", "later", "--reason", "not yet reviewed")
	if status != exitOK || stdout != "later disabled\n" || !strings.Contains(stderr, "no tool of namespace later is in the catalog") {
		t.Fatalf("disable a namespace without tools: exit status %d\n%s%s", status, stdout, stderr)
	}
	c := testenv.Client(t, url, client.Options{})
	ctx := testenv.Context(t)
	for {
		reply, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: demo.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Tools) > 0 {
			break
		}
	}
	if stdout, stderr, status = cli(t, bin, url, "tools", "disable", demo.Name, "--reason", "maintenance"); status != exitOK || strings.Contains(stderr, "note:") {
		t.Fatalf("disable a namespace with tools: exit status %d\n%s%s", status, stdout, stderr)
	}
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: "later", Tools: demo.Tools()})
	for {
		reply, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "later"})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Tools) > 0 {
			for _, tool := range reply.Tools {
				if !tool.Disabled || !strings.Contains(tool.Reason, "not yet reviewed") {
					t.Fatalf("a tool of the namespace disabled before it came: %+v", tool)
				}
			}
			return
		}
	}
}

// TestToolsTable: the tools table keeps its columns whatever the names
// and descriptions: a long description is cut with …, a description's
// later lines and control characters are left out, and each row's
// columns start where the header's do.
func TestToolsTable(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.NoBuiltinTools = true })
	long := strings.Repeat("A description that goes on and on. ", 10)
	tools := []worker.Tool{
		worker.Func("with_a_rather_long_name_for_a_tool_of_this_kind", long, func(ctx context.Context, in struct{}) (string, error) { return "", nil }),
		worker.Func("short", "First line.\nSecond line\tand a tab.", func(ctx context.Context, in struct{}) (string, error) { return "", nil }),
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "wide", Tools: tools}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	bin := testenv.Binary(t, "./cmd/toolbus")
	url := srv.URL()
	if _, stderr, status := cli(t, bin, url, "tools", "disable", "demo-echo", "--reason", "being\nfixed"); status != exitOK {
		t.Fatalf("disable: exit status %d\n%s", status, stderr)
	}
	stdout, stderr, status := cli(t, bin, url, "tools")
	if status != exitOK {
		t.Fatalf("tools: exit status %d\n%s", status, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	header := lines[0]
	// Columns are counted in characters: … is one.
	runeIndex := func(s, sub string) int { return utf8.RuneCountInString(s[:max(0, strings.Index(s, sub))]) }
	descAt, stateAt := runeIndex(header, "DESCRIPTION"), runeIndex(header, "STATE")
	if !strings.HasPrefix(header, "TOOL ") || descAt == 0 || stateAt == 0 {
		t.Fatalf("no header:\n%s", stdout)
	}
	rows := map[string]string{}
	for _, line := range lines[1:] {
		name := strings.Fields(line)[0]
		rows[name] = line
		r := []rune(line)
		if len(r) <= stateAt || r[descAt-1] != ' ' || r[descAt] == ' ' || r[stateAt-1] != ' ' || r[stateAt] == ' ' {
			t.Errorf("a row whose columns are not the header's:\n%s\n%s", header, line)
		}
	}
	wide := rows["wide-with_a_rather_long_name_for_a_tool_of_this_kind"]
	if !strings.Contains(wide, "A description that goes on and on.") || !strings.Contains(wide, "…") || strings.Count(wide, "on and on") > 3 {
		t.Errorf("the long description is not cut:\n%s", wide)
	}
	if short := rows["wide-short"]; !strings.Contains(short, "First line.") || strings.Contains(short, "Second") {
		t.Errorf("the description's first line only:\n%s", short)
	}
	if echo := rows["demo-echo"]; !strings.HasSuffix(echo, "disabled: being?fixed") {
		t.Errorf("the disabled tool's state:\n%s", echo)
	}
}

// TestCallSaysItsID: toolbus call says the call's ID on standard error,
// which calls get then reads.
func TestCallSaysItsID(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	stdout, stderr, status := cli(t, bin, url, "call", "demo-echo", `{"text":"hi"}`)
	if status != exitOK || strings.TrimSpace(stdout) != "hi" || !strings.HasPrefix(stderr, "call ") {
		t.Fatalf("call: exit status %d\n%s%s", status, stdout, stderr)
	}
	id := strings.Fields(stderr)[1]
	if stdout, stderr, status = cli(t, bin, url, "calls", "get", id); status != exitOK || !strings.Contains(stdout, "state    completed") {
		t.Fatalf("calls get %s: exit status %d\n%s%s", id, status, stdout, stderr)
	}
}
