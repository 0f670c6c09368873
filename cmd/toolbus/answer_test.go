package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// promptStack is deployedStack whose workspace holds demo-echo for the
// agent's user to approve (mode prompt) and whose policy asks an operator
// about demo-word_count (mode queue).
func promptStack(t *testing.T) (string, string) {
	t.Helper()
	workspace := t.TempDir()
	if err := os.MkdirAll(filepath.Join(workspace, "bundles"), 0o700); err != nil {
		t.Fatal(err)
	}
	bundle := `
id: demo
match:
  - name: "demo:*"
  - name: "demo:echo"
    approval: {mode: prompt, message: "Echoing needs the user's nod"}
`
	if err := os.WriteFile(filepath.Join(workspace, "bundles", "demo.yaml"), []byte(bundle), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte(`
default: allow
rules:
  - id: count-with-care
    tool: "demo:word_count"
    effect: ask
    reason: counting needs an operator
`), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return deployedStack(t, func(cfg *coordinator.Config) {
		cfg.WorkspaceDir = workspace
		cfg.Policy = pol
	})
}

// TestApprovalsAnswer: an agent's user answers its own prompt-mode
// approval from the command line, as text or JSON, and the call runs or
// ends denied; another agent's user is refused with forbidden, as every
// command is, and an approval that waits for an operator is not the
// agent's to answer.
func TestApprovalsAnswer(t *testing.T) {
	t.Parallel()
	url, bin := promptStack(t)
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret", "--route", "agentAroute00000000001"}
	agentB := []string{"--user", "agent_b", "--password", "agent-b-secret", "--agent", "billing-bot"}
	as := func(user []string, args ...string) []string { return append(append([]string{}, user...), args...) }

	// A call that waits for its user's answer says how to give it.
	waiting := testenv.Start(t, bin, as(append([]string{"--server", url}, agentA...), "call", "demo-echo", `{"text":"nod"}`)...)
	hint := waiting.WaitLine(t, "toolbus approvals answer ")
	approvalID := strings.Fields(strings.SplitN(hint, "toolbus approvals answer ", 2)[1])[0]
	if !strings.Contains(hint, "(the exposure rules ask for an approval of demo-echo: Echoing needs the user's nod): the agent's user decides") || !strings.Contains(hint, approvalID+" --approve|--deny; waiting for the answer") {
		t.Fatalf("the waiting call's hint: %q", hint)
	}

	// Mistakes in the command line.
	for _, args := range [][]string{
		{"approvals", "answer", approvalID},
		{"approvals", "answer", approvalID, "--approve", "--deny"},
		{"approvals", "answer", "--approve"},
		{"approvals", "approve", approvalID, "--approve"},
	} {
		if _, stderr, status := cli(t, bin, url, as(agentA, args...)...); status != exitUsage || !strings.Contains(stderr, "--approve") {
			t.Errorf("%v: exit status %d, want %d\n%s", args, status, exitUsage, stderr)
		}
	}

	// Another agent's user may not answer it, and learns nothing of whose it is.
	_, stderr, status := cli(t, bin, url, as(agentB, "approvals", "answer", approvalID, "--approve")...)
	if status != exitRequestFailed || !strings.Contains(stderr, "toolbus: forbidden: user agent_b may not act for the agent this concerns") || strings.Contains(stderr, "support-bot") {
		t.Fatalf("answer as agent_b: exit status %d\n%s", status, stderr)
	}
	stdout, _, status := cli(t, bin, url, as(agentB, "--json", "approvals", "answer", approvalID, "--approve")...)
	var refused struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		ExitCode int `json:"exit_code"`
	}
	if status != exitRequestFailed || json.Unmarshal([]byte(stdout), &refused) != nil || refused.Error.Code != string(messages.CodeForbidden) || refused.ExitCode != exitRequestFailed {
		t.Fatalf("answer --json as agent_b: exit status %d\n%s", status, stdout)
	}

	// The agent's own user answers, and the waiting call gets its result.
	stdout, stderr, status = cli(t, bin, url, as(agentA, "approvals", "answer", approvalID, "--approve", "--by", "the user", "--reason", "said yes")...)
	if status != exitOK || strings.TrimSpace(stdout) != approvalID+" approved by the user; the call is queued" {
		t.Fatalf("answer as agent_a: exit status %d\n%s%s", status, stdout, stderr)
	}
	waiting.WaitLine(t, "nod")
	if err := waiting.Wait(testenv.Context(t)); err != nil {
		t.Fatalf("the answered call: %v\n%s", err, waiting.Output())
	}
	if _, stderr, status = cli(t, bin, url, as(agentA, "approvals", "answer", approvalID, "--deny")...); status != exitRequestFailed || !strings.Contains(stderr, "approval_not_pending: approval "+approvalID+" is no longer pending: it was already approved by the user") {
		t.Fatalf("answering twice: exit status %d\n%s", status, stderr)
	}

	// A denial, as JSON, by the NATS user the command connected as, not
	// by whom $USER names.
	stdout, stderr, status = cli(t, bin, url, as(agentA, "call", "--detach", "demo-echo", `{"text":"no"}`)...)
	denied := strings.TrimSpace(stdout)
	if status != exitOK || denied == "" {
		t.Fatalf("call --detach: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cliWith(t, []string{"USER=carol"}, bin, url, as(agentA, "--json", "approvals", "answer", denied, "--deny", "--reason", "not now")...)
	var reply messages.DecideReply
	if status != exitOK || json.Unmarshal([]byte(stdout), &reply) != nil || reply.State != messages.StateDenied ||
		reply.Approval.State != messages.ApprovalDenied || reply.Approval.DecidedBy != "agent_a" || reply.Approval.DecisionReason != "not now" {
		t.Fatalf("answer --deny --json: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, as(agentA, "calls", "watch", denied)...); status != exitCallFailed || !strings.Contains(stdout+stderr, "denied") {
		t.Fatalf("the denied call: exit status %d\n%s%s", status, stdout, stderr)
	}

	// An approval in queue mode waits for an operator.
	stdout, stderr, status = cli(t, bin, url, as(agentA, "call", "--detach", "demo-word_count", `{"text":"one two"}`)...)
	queued := strings.TrimSpace(stdout)
	if status != exitOK || queued == "" {
		t.Fatalf("call --detach: exit status %d\n%s%s", status, stdout, stderr)
	}
	if _, stderr, status = cli(t, bin, url, as(agentA, "approvals", "answer", queued, "--approve")...); status != exitRequestFailed || !strings.Contains(stderr, "denied: approval "+queued+" waits for an operator (mode queue)") {
		t.Fatalf("answering an operator's approval: exit status %d\n%s", status, stderr)
	}
}
