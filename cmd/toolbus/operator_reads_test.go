package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/worker"
)

// policedStack runs NATS, a coordinator with a policy that denies
// demo-word_count (so the audit log has records), and a worker with ID
// cli-worker serving the demo tools on 3 slots; it returns the NATS URL
// and the toolbus binary.
func policedStack(t *testing.T) (string, string) {
	t.Helper()
	pol, err := policy.Parse([]byte(`
default: allow
rules:
  - id: no-words
    tool: "demo:word_count"
    effect: deny
    reason: no counting today
`), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol })
	testenv.Worker(t, srv.URL(), worker.Config{ID: "cli-worker"}, worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: 3})
	return srv.URL(), testenv.Binary(t, "./cmd/toolbus")
}

// TestAudit: toolbus audit prints the audit log as a table or JSON,
// newest record first, filtered by its flags, with the cursor of the
// next page; a mistake in a flag is named.
func TestAudit(t *testing.T) {
	t.Parallel()
	url, bin := policedStack(t)
	c := testenv.Client(t, url, client.Options{Agent: "auditee"})
	ctx := testenv.Context(t)
	allowed, err := c.Call(ctx, "demo-echo", map[string]string{"text": "fine"})
	if err != nil || allowed.IsError {
		t.Fatalf("%+v %v", allowed, err)
	}
	// The allowed call's record is copied into the audit log a moment
	// after the call is queued; the denial, written at once, comes after
	// it once it is there.
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(20 * time.Millisecond) {
		page, err := c.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditAllowed})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the allowed call's audit record never came")
		}
	}
	if _, err := c.Call(ctx, "demo-word_count", map[string]string{"text": "one two"}); !strings.Contains(err.Error(), "no counting today") {
		t.Fatalf("a denied call: %v", err)
	}

	var page messages.AuditListReply
	stdout, stderr, status := cli(t, bin, url, "--json", "audit")
	if status != exitOK || json.Unmarshal([]byte(stdout), &page) != nil {
		t.Fatalf("exit status %d\n%s%s", status, stdout, stderr)
	}
	decisions := []string{}
	for _, r := range page.Records {
		decisions = append(decisions, r.Decision+" "+r.Tool)
	}
	if want := []string{"denied demo-word_count", "allowed demo-echo"}; !slices.Equal(decisions, want) || page.Records[1].CallID != allowed.CallID {
		t.Fatalf("records %v, want %v (newest first)", decisions, want)
	}

	stdout, stderr, status = cli(t, bin, url, "audit", "--decision", "denied", "--agent", "auditee", "--tool", "demo-word_count", "--since", "1h")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if status != exitOK || len(lines) != 2 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("filtered: exit status %d\n%s%s", status, stdout, stderr)
	}
	for _, want := range []string{"denied", "demo-word_count", "auditee", "no-words", "no counting today"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the denied record's line has no %q:\n%s", want, lines[1])
		}
	}
	if stdout, _, status = cli(t, bin, url, "audit", "--decision", "allowed", "--until", time.Now().Add(-time.Hour).Format(time.RFC3339)); status != exitOK || !strings.Contains(stdout, "no records") {
		t.Fatalf("until an hour ago: exit status %d\n%s", status, stdout)
	}

	stdout, stderr, status = cli(t, bin, url, "audit", "--limit", "1")
	first, cursor, found := strings.Cut(strings.TrimSpace(stdout), "next page: --cursor ")
	if status != exitOK || !found || !strings.Contains(first, "denied") || strings.Contains(first, "allowed") {
		t.Fatalf("a page of one: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cli(t, bin, url, "audit", "--limit", "1", "--cursor", cursor)
	if status != exitOK || !strings.Contains(stdout, "allowed") || !strings.Contains(stdout, allowed.CallID) || strings.Contains(stdout, "next page") {
		t.Fatalf("the next page: exit status %d\n%s%s", status, stdout, stderr)
	}

	if _, stderr, status = cli(t, bin, url, "audit", "--decision", "maybe"); status != exitRequestFailed || !strings.Contains(stderr, `decision: "maybe" is not an audit decision`) {
		t.Fatalf("a bad decision: exit status %d\n%s", status, stderr)
	}
	if _, stderr, status = cli(t, bin, url, "audit", "--limit", "501"); status != exitRequestFailed || !strings.Contains(stderr, "limit") {
		t.Fatalf("a page too large: exit status %d\n%s", status, stderr)
	}
	if _, stderr, status = cli(t, bin, url, "audit", "--since", "yesterday"); status != exitUsage || !strings.Contains(stderr, `"yesterday" is neither a duration`) {
		t.Fatalf("a bad time: exit status %d, want %d\n%s", status, exitUsage, stderr)
	}
	if _, _, status = cli(t, bin, url, "audit", "denied"); status != exitUsage {
		t.Fatalf("a stray argument: exit status %d, want %d", status, exitUsage)
	}
}

// TestWorkers: toolbus workers prints the live workers with their busy
// and total slots, as a table or JSON, of every namespace or of one.
func TestWorkers(t *testing.T) {
	t.Parallel()
	url, bin := policedStack(t)
	stdout, stderr, status := cli(t, bin, url, "workers")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if status != exitOK || len(lines) < 2 || !strings.HasPrefix(lines[0], "NAMESPACE") {
		t.Fatalf("exit status %d\n%s%s", status, stdout, stderr)
	}
	// The demo worker's line, among the coordinator's own (llm_tools).
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, demo.Name+" ") })
	if i < 0 {
		t.Fatalf("no line of namespace %s:\n%s", demo.Name, stdout)
	}
	if fields := strings.Fields(lines[i]); len(fields) != 8 || fields[1] != "cli-worker" || fields[2] != "0" || fields[3] != "3" || fields[4] != "-" || !strings.HasSuffix(fields[5], "s") || fields[6] != "ago" || fields[7] != "-" {
		t.Fatalf("worker line %q: want namespace, ID, 0 busy of 3 slots, no version, the heartbeat's age, nothing down", lines[i])
	}
	var reply messages.WorkersListReply
	stdout, stderr, status = cli(t, bin, url, "--json", "workers", "--namespace", demo.Name)
	if status != exitOK || json.Unmarshal([]byte(stdout), &reply) != nil || len(reply.Workers) != 1 || reply.Workers[0].WorkerID != "cli-worker" || reply.Workers[0].Slots != 3 {
		t.Fatalf("--json: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, "workers", "--namespace", "elsewhere"); status != exitOK || !strings.Contains(stdout, "no live workers") {
		t.Fatalf("a namespace without workers: exit status %d\n%s", status, stdout)
	}
	if _, stderr, status = cli(t, bin, url, "workers", "--namespace", "no such"); status != exitRequestFailed || !strings.Contains(stderr, "namespace") {
		t.Fatalf("a bad namespace: exit status %d\n%s", status, stderr)
	}
}

// TestAuditAndWorkersAreForOperators: in an installation with identities,
// an agent's user is refused both with forbidden, which the command says;
// the operator's user reads them, the refusals among the audit records.
func TestAuditAndWorkersAreForOperators(t *testing.T) {
	t.Parallel()
	url, bin := deployedStack(t)
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret"}
	for _, cmd := range []string{"audit", "workers"} {
		_, stderr, status := cli(t, bin, url, append(agentA, cmd)...)
		if status != exitRequestFailed || !strings.Contains(stderr, "forbidden: "+cmd+".list is for operators; user agent_a is not one") || !strings.Contains(stderr, "operator's user") {
			t.Errorf("%s as agent_a: exit status %d\n%s", cmd, status, stderr)
		}
		stdout, _, status := cli(t, bin, url, append(agentA, "--json", cmd)...)
		var out struct {
			Error struct{ Code string } `json:"error"`
		}
		if status != exitRequestFailed || json.Unmarshal([]byte(stdout), &out) != nil || out.Error.Code != string(messages.CodeForbidden) {
			t.Errorf("%s --json as agent_a: exit status %d\n%s", cmd, status, stdout)
		}
	}
	operator := []string{"--user", "operator", "--password", "operator-secret"}
	stdout, stderr, status := cli(t, bin, url, append(operator, "workers")...)
	if status != exitOK || !strings.Contains(stdout, demo.Name+" ") {
		t.Fatalf("workers as the operator: exit status %d\n%s%s", status, stdout, stderr)
	}
	// The refusals are audited as the coordinator answers them: the
	// stream may store the last one just after the answer came.
	deadline := time.Now().Add(testenv.Patience)
	for {
		stdout, stderr, status = cli(t, bin, url, append(operator, "audit", "--decision", messages.AuditForbidden)...)
		refusals := 0
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Contains(line, " "+messages.AuditForbidden+" ") {
				refusals++
			}
		}
		if status == exitOK && refusals == 4 {
			break
		}
		if status != exitOK || refusals > 4 || time.Now().After(deadline) {
			t.Fatalf("audit as the operator: exit status %d, %d refusals, want the four\n%s%s", status, refusals, stdout, stderr)
		}
	}
}

// TestApprovalsAsADeployedOperator: an operator's user lists and decides
// approvals from the command line, the decision by the NATS user it
// connected as (not by whom $USER names) unless --by names someone; once
// decided, the approval is no longer listed as pending.
func TestApprovalsAsADeployedOperator(t *testing.T) {
	t.Parallel()
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
	url, bin := deployedStack(t, func(cfg *coordinator.Config) { cfg.Policy = pol })
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret", "--route", "agentAroute00000000001"}
	stdout, stderr, status := cli(t, bin, url, append(agentA, "call", "--detach", "demo-echo", `{"text":"nod"}`)...)
	callID := strings.TrimSpace(stdout)
	if status != exitOK || callID == "" {
		t.Fatalf("call as agent_a: exit status %d\n%s%s", status, stdout, stderr)
	}
	operator := []string{"--user", "operator", "--password", "operator-secret"}
	if stdout, stderr, status = cli(t, bin, url, append(operator, "approvals", "list")...); status != exitOK || !strings.Contains(stdout, callID) || !strings.Contains(stdout, "echo needs a nod") {
		t.Fatalf("approvals list as the operator: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cliWith(t, []string{"USER=alice"}, bin, url, append(operator, "approvals", "approve", callID, "--reason", "fine")...)
	if status != exitOK || !strings.Contains(stdout, "approved by operator;") {
		t.Fatalf("approve as the operator with USER=alice: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, append(agentA, "calls", "watch", callID)...); status != exitOK || strings.TrimSpace(stdout) != "nod" {
		t.Fatalf("the approved call: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, _, status = cli(t, bin, url, append(operator, "approvals", "list")...); status != exitOK || strings.TrimSpace(stdout) != "no pending approvals" {
		t.Fatalf("approvals list after the decision: exit status %d\n%s", status, stdout)
	}
}

// cliWith is cli with more environment variables.
func cliWith(t *testing.T, env []string, bin, url string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
	cmd.Env = append(os.Environ(), env...)
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
