package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A mistake in the command line is exit status 2 whatever the command,
// also a stray argument or an unknown flag of a command that takes none
// (README.md, docs/operations.md), and nothing is asked of Toolbus.
func TestStrayArgumentsAndUnknownFlagsAreUsage(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	for _, args := range [][]string{
		{"tools", "demo"},
		{"tools", "--namespace", "demo", "extra"},
		{"turns", "get", "--bogus"},
		{"turns", "get", "turn-1", "--bogus"},
		{"turns", "get", "turn-1", "turn-2"},
		{"turns", "list"},
	} {
		if stdout, stderr, status := cli(t, bin, url, args...); status != exitUsage {
			t.Errorf("toolbus %v: exit status %d, want %d\n%s%s", args, status, exitUsage, stdout, stderr)
		}
	}
}

// With --json every reply and every error is JSON on standard output
// (README.md): the switches' replies, a detached call's, and the mistakes
// in the command line that are reported with the usage.
func TestJSONRepliesAndUsageErrors(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	decode := func(args []string, wantStatus int, into any) {
		t.Helper()
		stdout, stderr, status := cli(t, bin, url, args...)
		if status != wantStatus {
			t.Fatalf("toolbus %v: exit status %d, want %d\n%s%s", args, status, wantStatus, stdout, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), into); err != nil {
			t.Fatalf("toolbus %v printed what is not JSON (%v):\n%s", args, err, stdout)
		}
	}
	type switched struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	var off, on switched
	decode([]string{"--json", "tools", "disable", "demo-echo", "--reason", "maintenance"}, exitOK, &off)
	decode([]string{"tools", "enable", "--json", "demo-echo"}, exitOK, &on)
	if off != (switched{"demo-echo", "disabled"}) || on != (switched{"demo-echo", "enabled"}) {
		t.Errorf("switches printed %+v and %+v", off, on)
	}

	var detached struct {
		CallID string `json:"call_id"`
		State  string `json:"state"`
	}
	decode([]string{"--json", "call", "--detach", "demo-echo", `{"text":"later"}`}, exitOK, &detached)
	if detached.CallID == "" || detached.State == "" {
		t.Errorf("a detached call printed %+v", detached)
	}

	for _, args := range [][]string{
		{"--json", "calls", "get"},
		{"--json", "tools", "extra"},
		{"--json", "turns", "get", "--bogus"},
		{"--json", "workers", "--bogus"},
		{"--json", "frobnicate"},
	} {
		var out struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			ExitCode int `json:"exit_code"`
		}
		decode(args, exitUsage, &out)
		if out.Error.Code != "usage" || out.Error.Message == "" || out.ExitCode != exitUsage {
			t.Errorf("toolbus %v printed %+v", args, out)
		}
	}
	if _, stderr, _ := cli(t, bin, url, "tools", "extra"); !strings.Contains(stderr, `"extra"`) {
		t.Errorf("the usage error does not name the stray argument: %q", stderr)
	}
}

// Exit status 1 is for the call that toolbus call or calls watch followed
// and that ended with an error; calls get of that call is a read that
// succeeded (README.md).
func TestFailedCallExitStatusByCommand(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	id, stderr, status := cli(t, bin, url, "call", "--detach", "broken-fail", `{"why":"no"}`)
	if status != exitOK {
		t.Fatalf("call --detach: exit status %d\n%s", status, stderr)
	}
	id = strings.TrimSpace(id)
	if _, stderr, status := cli(t, bin, url, "calls", "watch", id); status != exitCallFailed {
		t.Errorf("calls watch of a failed call: exit status %d, want %d\n%s", status, exitCallFailed, stderr)
	}
	if stdout, stderr, status := cli(t, bin, url, "calls", "get", id); status != exitOK || !strings.Contains(stdout, "tool_error") {
		t.Errorf("calls get of a failed call: exit status %d, want %d\n%s%s", status, exitOK, stdout, stderr)
	}
}
