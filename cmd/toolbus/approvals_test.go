package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/worker"
)

// askingStack runs NATS, a coordinator whose policy asks an operator
// about demo-echo, and the demo worker; it returns the NATS URL and the
// toolbus binary.
func askingStack(t *testing.T) (string, string) {
	t.Helper()
	pol, err := policy.Parse([]byte(`
default: allow
rules:
  - id: nod
    tool: "demo:echo"
    effect: ask
    reason: echo needs a nod
`), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	return srv.URL(), testenv.Binary(t, "./cmd/toolbus")
}

// auditedBy waits until the audit log holds a record of the decision for
// the call, and returns it.
func auditedBy(t *testing.T, bin, url, decision, callID string) messages.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		stdout, stderr, status := cli(t, bin, url, "--json", "audit", "--decision", decision)
		var page messages.AuditListReply
		if status != exitOK || json.Unmarshal([]byte(stdout), &page) != nil {
			t.Fatalf("audit --decision %s: exit status %d\n%s%s", decision, status, stdout, stderr)
		}
		for _, r := range page.Records {
			if r.CallID == callID {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s record of call %s in the audit log:\n%s", decision, callID, stdout)
		}
		time.Sleep(100 * time.Millisecond) // audit records are written without waiting for them
	}
}

// TestCancelWithdrawsTheApproval: cancelling a call that waits for its
// approval withdraws the approval: it is no longer listed as pending, a
// decision on it is refused with approval_not_pending, and the
// withdrawal and the refusal are in the audit log.
func TestCancelWithdrawsTheApproval(t *testing.T) {
	t.Parallel()
	url, bin := askingStack(t)
	stdout, stderr, status := cli(t, bin, url, "--agent", "support-bot", "call", "--detach", "demo-echo", `{"text":"nod"}`)
	id := strings.TrimSpace(stdout)
	if status != exitOK || id == "" {
		t.Fatalf("call --detach: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, "--agent", "support-bot", "calls", "cancel", id, "--reason", "user pressed stop"); status != exitOK || strings.TrimSpace(stdout) != id+": cancelled" {
		t.Fatalf("calls cancel: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, "approvals", "list"); status != exitOK || strings.TrimSpace(stdout) != "no pending approvals" {
		t.Fatalf("approvals list after the cancel: exit status %d\n%s", status, stdout)
	}
	if stdout, _, status = cli(t, bin, url, "approvals", "list", "--state", "withdrawn"); status != exitOK || !strings.Contains(stdout, id) || !strings.Contains(stdout, "state=withdrawn") {
		t.Fatalf("approvals list --state withdrawn: exit status %d\n%s", status, stdout)
	}
	stdout, stderr, status = cli(t, bin, url, "approvals", "approve", id, "--by", "nb")
	if status != exitRequestFailed || stdout != "" || !strings.Contains(stderr, "toolbus: approval_not_pending: approval "+id+" is no longer pending: it was withdrawn: call "+id+" was cancelled by support-bot (user pressed stop)") {
		t.Fatalf("approving the withdrawn approval: exit status %d\n%s%s", status, stdout, stderr)
	}
	var refusal struct {
		Error    messages.Error `json:"error"`
		ExitCode int            `json:"exit_code"`
	}
	stdout, _, status = cli(t, bin, url, "--json", "approvals", "deny", id, "--by", "nb")
	if status != exitRequestFailed || json.Unmarshal([]byte(stdout), &refusal) != nil || refusal.Error.Code != messages.CodeApprovalNotPending {
		t.Fatalf("denying the withdrawn approval: exit status %d\n%s", status, stdout)
	}
	if stdout, stderr, status = cli(t, bin, url, "calls", "get", id); status != exitOK || !strings.Contains(stdout, "state    cancelled") {
		t.Fatalf("calls get of the cancelled call: exit status %d\n%s%s", status, stdout, stderr)
	}
	if r := auditedBy(t, bin, url, messages.AuditWithdrawn, id); r.By != "support-bot" || r.Tool != "demo-echo" || r.Reason != "user pressed stop" {
		t.Errorf("the withdrawal's record: %+v", r)
	}
	if r := auditedBy(t, bin, url, messages.AuditRefused, id); r.By != "nb" || !strings.Contains(r.Reason, "approval_not_pending") {
		t.Errorf("the refusal's record: %+v", r)
	}
}

// TestApprovedCallListedOnce: the execution log lists a call that waited
// for its approval once, with its approval's outcome.
func TestApprovedCallListedOnce(t *testing.T) {
	t.Parallel()
	url, bin := askingStack(t)
	stdout, stderr, status := cli(t, bin, url, "call", "--detach", "demo-echo", `{"text":"nod"}`)
	id := strings.TrimSpace(stdout)
	if status != exitOK || id == "" {
		t.Fatalf("call --detach: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, "approvals", "approve", id, "--by", "nb"); status != exitOK || strings.TrimSpace(stdout) != id+" approved by nb; the call is queued" {
		t.Fatalf("approve: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, "calls", "watch", id); status != exitOK || strings.TrimSpace(stdout) != "nod" {
		t.Fatalf("calls watch: exit status %d\n%s%s", status, stdout, stderr)
	}
	for _, limit := range []string{"1", "50"} {
		var ids []string
		cursor := ""
		for {
			args := []string{"--json", "calls", "list", "--limit", limit}
			if cursor != "" {
				args = append(args, "--cursor", cursor)
			}
			stdout, stderr, status = cli(t, bin, url, args...)
			var page messages.CallsListReply
			if status != exitOK || json.Unmarshal([]byte(stdout), &page) != nil {
				t.Fatalf("calls list: exit status %d\n%s%s", status, stdout, stderr)
			}
			for _, e := range page.Calls {
				if e.CallID == id {
					ids = append(ids, e.CallID)
					if e.State != messages.StateCompleted {
						t.Errorf("the approved call is listed %s", e.State)
					}
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if len(ids) != 1 {
			t.Errorf("calls list --limit %s lists the approved call %d times", limit, len(ids))
		}
	}
}

// TestHeldCallSaysWhoDecides: a call held for an operator's approval says
// so at once on standard error, with the call's and the approval's IDs and
// the command that decides it, then waits for the decision — a plain
// call, a watched one (without a terminal) and one watched as JSON,
// whose standard output stays JSON.
func TestHeldCallSaysWhoDecides(t *testing.T) {
	t.Parallel()
	url, bin := askingStack(t)
	for _, args := range [][]string{
		{"call", "demo-echo", `{"text":"nod"}`},
		{"call", "--watch", "demo-echo", `{"text":"nod"}`},
		{"--json", "call", "--watch", "demo-echo", `{"text":"nod"}`},
	} {
		waiting := testenv.Start(t, bin, append([]string{"--server", url}, args...)...)
		first := waiting.WaitLine(t, "call ")
		callID := strings.Fields(first)[1]
		hint := waiting.WaitLine(t, "toolbus approvals approve ")
		want := "call " + callID + " waits for approval " + callID + " (echo needs a nod): an operator decides with: toolbus approvals approve " + callID + " (or deny " + callID + "); waiting for the decision"
		if hint != want {
			t.Fatalf("%v: the hint\n%q\nwant\n%q", args, hint, want)
		}
		if stdout, stderr, status := cli(t, bin, url, "approvals", "approve", callID, "--by", "nb"); status != exitOK {
			t.Fatalf("approve: exit status %d\n%s%s", status, stdout, stderr)
		}
		if err := waiting.Wait(testenv.Context(t)); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, waiting.Output())
		}
		if out := waiting.Output(); !strings.Contains(out, "nod") {
			t.Fatalf("%v printed no result:\n%s", args, out)
		}
	}
	// Standard output holds only the result (or the JSON events).
	stdout, stderr, status := cli(t, bin, url, "call", "--detach", "demo-echo", `{"text":"quiet"}`)
	callID := strings.TrimSpace(stdout)
	if status != exitOK || !strings.Contains(stderr, "call "+callID+" waits for approval "+callID) {
		t.Fatalf("call --detach: exit status %d\n%s", status, stderr)
	}
	if _, _, status = cli(t, bin, url, "approvals", "approve", callID, "--by", "nb"); status != exitOK {
		t.Fatalf("approve: exit status %d", status)
	}
	// Watched while it waits, it is not said to be queued before the
	// approval.
	_, stderr, status = cli(t, bin, url, "call", "--detach", "demo-echo", `{"text":"held"}`)
	if status != exitOK || len(strings.Fields(stderr)) < 2 {
		t.Fatalf("call --detach: exit status %d\n%s", status, stderr)
	}
	heldID := strings.Fields(stderr)[1]
	watching := testenv.Start(t, bin, "--server", url, "calls", "watch", heldID)
	watching.WaitLine(t, "waits for approval "+heldID)
	if _, _, status = cli(t, bin, url, "approvals", "approve", heldID, "--by", "nb"); status != exitOK {
		t.Fatalf("approve: exit status %d", status)
	}
	if err := watching.Wait(testenv.Context(t)); err != nil {
		t.Fatalf("calls watch: %v\n%s", err, watching.Output())
	}
	lines := strings.Split(strings.TrimSpace(watching.Output()), "\n")
	if len(lines) < 3 || lines[0] != "call "+heldID || !strings.Contains(lines[1], "waits for approval") {
		t.Fatalf("calls watch of a held call:\n%s", watching.Output())
	}

	// A watch of a held call ends on SIGTERM, as on Ctrl-C, and leaves the
	// call waiting (only call --watch cancels the call it made).
	_, stderr, _ = cli(t, bin, url, "call", "--detach", "demo-echo", `{"text":"left"}`)
	leftID := strings.Fields(stderr)[1]
	for _, json := range []bool{false, true} {
		args := []string{"--server", url, "calls", "watch", leftID}
		if json {
			args = append([]string{"--json"}, args...)
		}
		watching := testenv.Start(t, bin, args...)
		watching.WaitLine(t, "waits for approval "+leftID)
		if err := watching.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(testenv.Context(t), testenv.Patience)
		err := watching.Wait(ctx)
		wentOn := ctx.Err() != nil
		cancel()
		if wentOn || err == nil || err.Error() != "exit status 130" || !strings.Contains(watching.Output(), "stopped watching call "+leftID+", which goes on") {
			t.Fatalf("calls watch %v after SIGTERM: %v\n%s", args, err, watching.Output())
		}
	}
	if stdout, _, status := cli(t, bin, url, "--json", "calls", "get", leftID); status != exitOK || !strings.Contains(stdout, `"awaiting_approval"`) {
		t.Fatalf("the watched call after the watches ended: exit status %d\n%s", status, stdout)
	}

	stdout, stderr, status = cli(t, bin, url, "--json", "calls", "watch", callID)
	if status != exitOK || !strings.Contains(stderr, "approval "+callID+" approved by nb") {
		t.Fatalf("calls watch --json: exit status %d\n%s", status, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("calls watch --json printed a line that is not JSON: %q", line)
		}
	}
}

// TestDecisionWithoutUserVariable: where $USER is not set (a container,
// CI, systemd) and no NATS user is given, a decision is by the system's
// name for the user running toolbus; mistakes in the command line that
// only the coordinator can tell (remembering the turn of a call made
// outside any) and a disable without a reason are usage errors, exit
// status 2.
func TestDecisionWithoutUserVariable(t *testing.T) {
	t.Parallel()
	url, bin := askingStack(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "USER=") {
			env = append(env, kv)
		}
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return stdout.String(), stderr.String(), 0
		case errors.As(err, &exit):
			return stdout.String(), stderr.String(), exit.ExitCode()
		}
		t.Fatalf("run toolbus %v: %v", args, err)
		return "", "", 0
	}
	stdout, stderr, status := run("call", "--detach", "demo-echo", `{"text":"nod"}`)
	id := strings.TrimSpace(stdout)
	if status != exitOK || id == "" {
		t.Fatalf("call --detach: exit status %d\n%s%s", status, stdout, stderr)
	}

	stdout, stderr, status = run("approvals", "approve", id, "--remember", "turn")
	if status != exitUsage || stdout != "" || !strings.Contains(stderr, "toolbus: bad_request: remember \"turn\" needs a turn") {
		t.Fatalf("--remember turn outside a turn: exit status %d\n%s%s", status, stdout, stderr)
	}
	var refusal struct {
		Error    messages.Error `json:"error"`
		ExitCode int            `json:"exit_code"`
	}
	stdout, _, status = run("--json", "approvals", "approve", id, "--remember", "turn")
	if status != exitUsage || json.Unmarshal([]byte(stdout), &refusal) != nil || refusal.Error.Code != messages.CodeBadRequest || refusal.ExitCode != exitUsage {
		t.Fatalf("--json --remember turn outside a turn: exit status %d\n%s", status, stdout)
	}
	if _, stderr, status = run("approvals", "approve", id, "--remember", "forever"); status != exitUsage || !strings.Contains(stderr, "--remember is call, turn or agent_tool") {
		t.Fatalf("--remember forever: exit status %d\n%s", status, stderr)
	}

	stdout, stderr, status = run("approvals", "approve", id)
	if me, err := user.Current(); err == nil && me.Username != "" {
		if status != exitOK || strings.TrimSpace(stdout) != id+" approved by "+me.Username+"; the call is queued" {
			t.Fatalf("approve without $USER: exit status %d\n%s%s", status, stdout, stderr)
		}
	} else if status != exitUsage || !strings.Contains(stderr, "pass --by NAME") {
		// This system has no name for the test's user either: the command
		// says how to name the decider.
		t.Fatalf("approve without $USER or a name: exit status %d\n%s%s", status, stdout, stderr)
	}

	if _, stderr, status = run("tools", "disable", "demo-sleep"); status != exitUsage || !strings.Contains(stderr, "--reason") {
		t.Fatalf("tools disable without --reason: exit status %d\n%s", status, stderr)
	}
	if stdout, _, _ = run("tools"); strings.Contains(stdout, "disabled") {
		t.Fatalf("a disable without a reason switched a tool off:\n%s", stdout)
	}
}
